"""Regression tests of an adversarial pass (the findings of issue 25): content checked by
identity, not only by count; every size bounded; no input that blocks; one line for bad
input everywhere, before any output exists."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.analysis.tidy import tidy_run
from engine.caffe import generate, splitter, zoo
from engine.caffe.splitter import Description
from engine.cli import main
from engine.errors import EdgeprofError, ModelError
from engine.schedule.pipelines import Arrival, Pipeline, save_pipeline
from engine.units import MIB
from tests.fabricated import edit_meta
from tests.signals import default_signals

REPO = Path(__file__).resolve().parents[2]


def _cli(capsys, *argv: str) -> tuple[int, str]:
    rc = main(list(argv))
    err = capsys.readouterr().err
    return rc, err


def _run_agenet(capsys, models: Path, tmp_path: Path, *flags: str) -> tuple[int, str]:
    """``run`` of one AgeNet arriving at 0 s into tmp_path/run, with ``flags``."""
    pipe = tmp_path / "p.json"
    save_pipeline(Pipeline("p", [Arrival(0.0, ["AgeNet"])]), pipe)
    return _cli(capsys, "run", "--pipeline", str(pipe), "--split", str(models), "--out",
                str(tmp_path / "run"), *flags)


@pytest.fixture
def split_copy(zoo_split, tmp_path) -> Path:
    """AgeNet's and GenderNet's split files and models, copied: free to edit."""
    src = Path(zoo_split["AgeNet"].path).parent.parent
    dst = tmp_path / "zoo"
    (dst / "models").mkdir(parents=True)
    (dst / "split").mkdir()
    for stem in ("age_net", "gender_net"):  # only these two: the zoo is 0.9 GB
        for model_file in (src / "models").glob(f"{stem}.*"):
            shutil.copy(model_file, dst / "models")
        shutil.copy(src / "split" / f"{stem}.description.json", dst / "split")
        shutil.copytree(src / "split" / f"{stem}_partials", dst / "split" / f"{stem}_partials")
    return dst / "split"


def _edit(desc_path: Path, change) -> None:
    data = json.loads(desc_path.read_text())
    change(data)
    desc_path.write_text(json.dumps(data))


# --- 1. a replaced table with the same row count -------------------------------------------


@pytest.fixture(scope="module")
def two_runs(zoo_split, tmp_path_factory) -> tuple[Path, Path]:
    """Two finished runs with tasks of the same count: GenderNet x2 and GenderNet + AgeNet
    (both 20 layers), linear."""
    root = tmp_path_factory.mktemp("runs")
    models = Path(zoo_split["AgeNet"].path).parent
    out = []
    for name, nets in (("gg", ["GenderNet", "GenderNet"]), ("ga", ["GenderNet", "AgeNet"])):
        pipe = root / f"{name}.json"
        save_pipeline(Pipeline(name, [Arrival(0.0, nets)]), pipe)
        rc = main(["run", "--pipeline", str(pipe), "--split", str(models), "--policy",
                   "linear", "--out", str(root / name), "--batch", "1", "--backend", "none",
                   "--sample-hz", "0"])
        assert rc == 0
        out.append(root / name)
    return out[0], out[1]


def test_a_replaced_tasks_table_of_the_same_length_is_refused(two_runs, tmp_path):
    gg, ga = (Path(shutil.copytree(p, tmp_path / p.name)) for p in two_runs)
    assert len(pd.read_csv(gg / "tasks.csv")) == len(pd.read_csv(ga / "tasks.csv"))
    shutil.copy(ga / "tasks.csv", gg / "tasks.csv")
    with pytest.raises(EdgeprofError, match="tasks.csv is not the table this run wrote"):
        tidy_run(gg)
    # a record from before table digests: the rows' own content still says so
    edit_meta(gg, table_digests={})
    with pytest.raises(EdgeprofError, match="instance 1 is AgeNet, but this run's pipeline"):
        tidy_run(gg)


def test_a_tasks_table_with_more_workers_than_the_policy_is_refused(two_runs, tmp_path):
    gg = Path(shutil.copytree(two_runs[0], tmp_path / "gg"))
    tasks = pd.read_csv(gg / "tasks.csv")
    tasks.loc[tasks.index[::2], "worker"] = 1  # as a partial:2 run's
    tasks.to_csv(gg / "tasks.csv", index=False)
    edit_meta(gg, table_digests={})
    with pytest.raises(EdgeprofError, match="tasks on worker 1, but linear has 1"):
        tidy_run(gg)


# --- 2. hand-edited descriptions ------------------------------------------------------------

EDITS = {
    "a layer renamed": lambda d: d["layers"][3].__setitem__("name", "renamed"),
    "a type changed": lambda d: d["layers"][1].__setitem__("type", "Deconvolution"),
    "output shapes": lambda d: d["layers"][2].__setitem__("output_shapes", [[1, 2, 3, 4]]),
    "param_bytes 1e15": lambda d: d["layers"][1].__setitem__("param_bytes", 10**15),
    "param_count many": lambda d: d["layers"][1].__setitem__("param_count", "many"),
    "a layer removed": lambda d: d["layers"].pop(5),
    # held-out pass H2: DeepEye's split and the kinds drive the schedule and the tables
    "num_conv_layers 500": lambda d: d.update(num_conv_layers=500, num_fc_layers=20),
    "DeepEye's split moved": lambda d: d.update(num_conv_layers=d["num_conv_layers"] - 1,
                                                 num_fc_layers=d["num_fc_layers"] + 1),
    "every kind fc": lambda d: [layer.__setitem__("kind", "fc") for layer in d["layers"]],
    "macs 1e30": lambda d: d["layers"][1].__setitem__("macs", 10**30),
    # M21: a partial that is a device
    "a partial is /dev/zero": lambda d: d["layers"][1].update(partial="/dev/zero",
                                                              file_bytes=0),
}


@pytest.mark.parametrize("edit", EDITS, ids=list(EDITS))
def test_every_verb_refuses_a_description_that_contradicts_its_prototxt(split_copy, tmp_path,
                                                                       capsys, edit):
    desc = split_copy / "age_net.description.json"
    _edit(desc, EDITS[edit])
    pipe = tmp_path / "p.json"
    save_pipeline(Pipeline("p", [Arrival(0.0, ["AgeNet"])]), pipe)
    for argv in (["forward", str(desc), "--batch", "1"],
                 ["graph", "--policy", "linear", "--description", str(desc), "--out",
                  str(tmp_path / "g.dot")],
                 ["run", "--pipeline", str(pipe), "--split", str(split_copy), "--policy",
                  "linear", "--out", str(tmp_path / "run"), "--backend", "none"]):
        if argv[0] == "graph" and "partial" in edit:
            continue  # graph reads no model file
        rc, err = _cli(capsys, *argv)
        assert rc == 2 and err.count("\n") == 1, (argv[0], err)
        assert "age_net.description.json" in err and "re-run the split" in err
    assert not (tmp_path / "run").exists() and not (tmp_path / "g.dot").exists()


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(layer=st.integers(0, 19), field=st.sampled_from(["name", "type", "index",
                                                         "param_count", "param_bytes",
                                                         "output_shapes", "kind", "part",
                                                         "macs", "flops"]),
       value=st.one_of(st.integers(-3, 10**16), st.text(max_size=8),
                       st.lists(st.lists(st.integers(0, 9), max_size=4), max_size=2)))
def test_any_changed_layer_field_is_refused(zoo_split, layer, field, value):
    desc = copy.deepcopy(zoo_split["AgeNet"])
    info = desc.layers[layer]
    if getattr(info, field) == value:
        return
    setattr(info, field, value)
    with pytest.raises((ModelError, TypeError)):
        from engine.caffe.splitter import _check_types

        _check_types(desc)
        desc.check_prototxt()


# --- 3. 15. bounds ---------------------------------------------------------------------------


def _count_cases(split_copy: Path, tmp_path: Path) -> list[list[str]]:
    return [["pipelines", "--split", str(split_copy), "--out", str(tmp_path / "p"),
             "--count", "1000000000000"],
            ["pipelines", "--split", str(split_copy), "--out", str(tmp_path / "p"),
             "--count", "0"],
            ["graph", "--policy", "linear", "--description",
             str(split_copy / "age_net.description.json"), "--count", "100000000",
             "--out", str(tmp_path / "g.dot")]]


def test_counts_are_bounded_and_zero_pipelines_is_refused(split_copy, tmp_path, capsys):
    for argv in _count_cases(split_copy, tmp_path):
        rc, err = _cli(capsys, *argv)
        assert rc == 2 and "--count" in err, err
    assert not (tmp_path / "p").exists()


def test_the_config_bounds_repetitions():
    import yaml
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["run"]["repetitions"] = 10**9
    with pytest.raises(WorkflowError):
        validate(config, str(REPO / "workflow" / "schemas" / "config.schema.yaml"))


# --- 4. 14. a FIFO never blocks ----------------------------------------------------------


def test_a_fifo_as_any_input_is_one_line_not_a_hang(split_copy, tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    pipe = tmp_path / "p.json"
    save_pipeline(Pipeline("p", [Arrival(0.0, ["AgeNet"])]), pipe)
    for argv in (["graph", "--policy", "linear", "--description", str(fifo), "--out",
                  str(tmp_path / "g.dot")],
                 ["forward", str(fifo)],
                 ["advise", "--pipeline", str(pipe), "--split", str(split_copy),
                  "--model", str(fifo)],
                 ["child", str(fifo)], ["supervise", str(fifo)],
                 ["split", str(fifo), "--out", str(tmp_path / "s")]):
        res = subprocess.run([sys.executable, "-m", "engine", *argv], cwd=REPO, timeout=60,
                             capture_output=True, text=True)
        assert res.returncode == 2, (argv, res.stderr)
        assert "FIFO" in res.stderr and res.stderr.count("\n") == 1, (argv, res.stderr)


# --- 5. internal verbs ---------------------------------------------------------------------


def test_the_child_answers_a_bad_spec_with_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    for text in ('{"x": 1}', "[]", "{", '{"out": 1}'):
        bad.write_text(text)
        rc, err = _cli(capsys, "child", str(bad))
        assert rc == 2 and err.count("\n") == 1 and "not a child spec" in err, err


# --- 9. 12. 13. 16. 17. outputs and names -------------------------------------------------


def _output_cases(split_copy: Path, tmp_path: Path) -> list[tuple[list[str], str]]:
    desc = str(split_copy / "age_net.description.json")
    (tmp_path / "adir").mkdir(exist_ok=True)
    return [(["models", "--out", "", "AgeNet"], "--out is empty"),
            (["forward", desc, "--out", str(tmp_path / "adir")], "is a folder"),
            (["graph", "--policy", "linear", "--description", desc, "--out",
              str(tmp_path / "adir")], "is a folder"),
            (["graph", "--policy", "linear", "--description", desc, "--out",
              str(tmp_path / "g.png")], "DOT (.dot, .gv) or SVG"),
            (["fit-model", "--tables", str(tmp_path), "--split", str(split_copy),
              "--out", str(tmp_path / "adir")], "is a folder")]


def test_empty_or_wrong_outputs_are_refused_before_the_work(split_copy, tmp_path, capsys):
    for argv, expected in _output_cases(split_copy, tmp_path):
        rc, err = _cli(capsys, *argv)
        assert rc == 2 and expected in err and ".tmp" not in err, (argv, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "zoo"]


@pytest.mark.timing
def test_bad_counts_and_outputs_are_refused_at_once(split_copy, tmp_path, capsys):
    """Each refusal comes before the work (a billion pipelines, a forward pass, a fit),
    not after it: in seconds, where the work would take minutes."""
    cases = [*_count_cases(split_copy, tmp_path),
             *(argv for argv, _ in _output_cases(split_copy, tmp_path))]
    for argv in cases:
        t0 = time.monotonic()
        rc, _ = _cli(capsys, *argv)
        assert rc == 2 and time.monotonic() - t0 < 5, argv


def test_a_failed_split_leaves_no_empty_out(tmp_path, capsys):
    model = tmp_path / "x.caffemodel"
    model.write_bytes(b"\x00\x01garbage")
    model.with_suffix(".prototxt").write_text('name: "x"\n')
    rc, _ = _cli(capsys, "split", str(model), "--out", str(tmp_path / "out"))
    assert rc == 2 and not (tmp_path / "out").exists()


def test_a_pipeline_name_that_is_a_path_is_refused(split_copy, tmp_path, capsys):
    pipe = tmp_path / "p.json"
    save_pipeline(Pipeline("ok", [Arrival(0.0, ["AgeNet"])]), pipe)
    data = json.loads(pipe.read_text())
    data["name"] = "../../evil"
    pipe.write_text(json.dumps(data))
    rc, err = _cli(capsys, "run", "--pipeline", str(pipe), "--split", str(split_copy),
                   "--policy", "linear", "--out", str(tmp_path / "run"), "--backend", "none")
    assert rc == 2 and "letters, digits" in err


def test_a_budget_for_a_policy_without_admission_is_refused(split_copy, tmp_path, capsys):
    pipe = tmp_path / "p.json"
    save_pipeline(Pipeline("p", [Arrival(0.0, ["AgeNet"])]), pipe)
    rc, err = _cli(capsys, "run", "--pipeline", str(pipe), "--split", str(split_copy),
                   "--policy", "linear", "--out", str(tmp_path / "run"), "--budget", "1G")
    assert rc == 2 and "linear admits every network" in err


# --- 10. a guest is built only when asked ------------------------------------------------


def test_a_missing_guest_cache_is_an_error_not_a_build(split_copy, tmp_path, capsys,
                                                       monkeypatch):
    monkeypatch.setenv("EDGEPROF_VM_CACHE", str(tmp_path / "nonexistent"))
    rc, err = _run_agenet(capsys, split_copy, tmp_path, "--policy", "linear", "--backend",
                          "vm", "--limit", "256M")
    assert rc == 2 and "python -m engine.sandbox build" in err
    assert not (tmp_path / "nonexistent").exists() and not (tmp_path / "run").exists()


# --- 11. configs that pass a dry run but cannot work -------------------------------------


@pytest.mark.parametrize("change, message", [
    ({"pipelines": {"arrival": {"mode": "poisson"}}}, "needs rate"),
    ({"plots": {"palette": "nosuchcmap"}}, "not a matplotlib colormap"),
    ({"results": "/proc/edgeprof"}, "pseudo filesystem"),
    ({"results": "README.md"}, "is a file"),
    # held-out pass M17: arrivals no run accepts, a sampler off by nine orders
    ({"pipelines": {"arrival": {"mode": "normal", "mean": 1e300, "sd": 0}}},
     "would arrive later than"),
    ({"pipelines": {"arrival": {"mode": "poisson", "rate": 1e-9}}}, "would arrive later than"),
    ({"run": {"sample_hz": 1e-300}}, "0 \\(no sampler\\) or from 0.01"),
    # L14: outputs spread over the repository
    ({"results": "."}, "spread outputs over the repository"),
    ({"results": "config"}, "spread outputs over the repository"),
    ({"run": {"swap": "0.5"}}, "run.swap '0.5'"),  # second pass MN5
    ({"seed": 4294967296}, "must stay at most 4294967295"),  # third pass NM2
    ({"run": {"limits": ["none", "99999999999999G"]}}, "at most 1 PiB"),  # NM1
])
def test_configs_that_cannot_work_are_refused(change, message):
    import yaml

    from engine.workflow.checks import check_config

    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    for key, value in change.items():
        if isinstance(value, dict):
            for k, v in value.items():
                config[key][k] = v
        else:
            config[key] = value
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        with pytest.raises(ValueError, match=message):
            check_config(config)
    finally:
        os.chdir(cwd)


def test_description_of_a_wrong_kind_is_named(zoo_split, tmp_path):
    with pytest.raises(ModelError, match="is a folder, not a regular file"):
        Description.load(tmp_path)


# --- the held-out pass of 2026-11-25 (/work/notes/adversarial-25.md: H1-H4, M1-M23) ------


@pytest.mark.parametrize("fields, says", [
    ({"param_bytes": 1, "size_bin": "9000-10000 MiB"}, "does not hold its param_bytes 1"),
    ({"param_bytes": 1, "size_bin": "0-100 MiB"}, "says its networks hold 1 bytes"),
    ({"size_bin": "small"}, "'small' is no bin label"),
    # second pass HN4: a bin without a byte count is checked against the networks
    ({"size_bin": "0-1 MiB"}, "is in size bin '0-1 MiB', but its networks hold"),
    ({"arrival_mode": "poisson2"}, "arrival_mode 'poisson2' is not one of"),
    ({"seed": "abc"}, "seed 'abc' is not an integer"),
    ({"param_bytes": -5}, "param_bytes -5 is not a byte count"),
    ({"size_bin": {"a": 1}}, "is not a bin label"),
    ({"generator": 7}, "generator is not a JSON object"),
])
def test_a_pipeline_files_generator_fields_are_checked(split_copy, tmp_path, capsys, fields,
                                                       says):
    pipe = tmp_path / "p.json"
    save_pipeline(Pipeline("p", [Arrival(0.0, ["AgeNet"])]), pipe)
    pipe.write_text(json.dumps(json.loads(pipe.read_text()) | fields))
    rc, err = _cli(capsys, "run", "--pipeline", str(pipe), "--split", str(split_copy),
                   "--policy", "linear", "--out", str(tmp_path / "run"), "--backend", "none")
    assert rc == 2 and says in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists()


def test_a_batch_pipeline_whose_networks_arrive_later_is_refused(tmp_path):
    from engine.schedule.pipelines import PipelineError, load_pipeline

    pipe = tmp_path / "p.json"
    save_pipeline(Pipeline("p", [Arrival(0.0, ["AgeNet"]), Arrival(3.0, ["AgeNet"])]), pipe)
    with pytest.raises(PipelineError, match="arrival_mode batch, but not every network"):
        load_pipeline(pipe)
    pipe.write_text(json.dumps(json.loads(pipe.read_text()) | {"arrival_mode": "poisson"}))
    assert load_pipeline(pipe).arrival_mode == "poisson"
    # a hand-written file that names no mode: its times are given
    pipe.write_text(json.dumps({"name": "h", "arrivals": [
        {"time_s": 0, "networks": ["AgeNet"]}, {"time_s": 1.5, "networks": ["AgeNet"]}]}))
    assert load_pipeline(pipe).arrival_mode == "given"


def test_generated_pipelines_pass_their_own_checks(split_copy, tmp_path, capsys):
    from engine.schedule.pipelines import load_pipeline

    rc, err = _cli(capsys, "pipelines", "--split", str(split_copy), "--out",
                   str(tmp_path / "p"), "--count", "4", "--length", "1", "3", "--bins",
                   "0.00001", "50", "100")  # MN4: an edge written as 1e-05
    assert rc == 0, err
    for path in sorted((tmp_path / "p").glob("p*.json")):
        pipe = load_pipeline(path)
        assert pipe.size_bin and pipe.param_bytes > 0


def _schema_refuses(change: dict) -> str:
    """The config schema's message for config.yaml with ``change`` (section -> keys)."""
    import yaml
    from snakemake.utils import validate

    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    for key, value in change.items():
        config[key].update(value)
    with pytest.raises(Exception) as exc:  # snakemake's WorkflowError
        validate(config, str(REPO / "workflow" / "schemas" / "config.schema.yaml"))
    return str(exc.value)


@pytest.mark.parametrize("change", [{"run": {"sample_hz": 1e9}},
                                    {"run": {"blas_threads": 100_000}},
                                    {"run": {"batch": 100_000}},
                                    {"pipelines": {"length": [1, 100_000_000]}}])
def test_the_schema_bounds_what_the_verbs_bound(change):
    assert "is greater than the maximum" in _schema_refuses(change)


def _tables(tmp_path: Path, two_runs) -> Path:
    """Aggregate tables of the two runs, as the workflow writes them."""
    from engine.analysis.aggregate import aggregate
    from engine.analysis.tablefiles import write_tables
    from engine.analysis.tidy import tidy_run

    write_tables(aggregate([tidy_run(run) for run in two_runs], None), tmp_path / "tables")
    return tmp_path / "tables"


def test_damaged_tables_are_one_line_for_every_verb_that_reads_them(two_runs, zoo_split,
                                                                    tmp_path, capsys):
    tables = _tables(tmp_path, two_runs)
    models = str(Path(zoo_split["AgeNet"].path).parent)
    model = str(tmp_path / "m.json")
    rc, err = _cli(capsys, "fit-model", "--tables", str(tables), "--split", models, "--out",
                   model)
    assert rc == 0, err
    # M13: a finished run's task without a duration, or with a negative one
    tasks = pd.read_parquet(tables / "tasks.parquet")
    broken = tmp_path / "broken"
    shutil.copytree(tables, broken)
    tasks.assign(duration_ns=tasks["duration_ns"].where(tasks.index % 3 > 0, -1)).to_parquet(
        broken / "tasks.parquet")
    rc, err = _cli(capsys, "fit-model", "--tables", str(broken), "--split", models, "--out",
                   str(tmp_path / "m2.json"))
    assert rc == 2 and "no or a negative duration_ns" in err
    # eleventh held-out pass M1: a start without a time was a pandas traceback
    tasks.assign(start_ns=tasks["start_ns"].where(tasks.index % 3 > 0)).to_parquet(
        broken / "tasks.parquet")
    rc, err = _cli(capsys, "fit-model", "--tables", str(broken), "--split", models, "--out",
                   str(tmp_path / "m2.json"))
    assert rc == 2 and "no or a negative start_ns" in err and len(err.splitlines()) == 1
    # M6: a column gone
    tasks.drop(columns=["duration_ns"]).to_parquet(broken / "tasks.parquet")
    rc, err = _cli(capsys, "fit-model", "--tables", str(broken), "--split", models, "--out",
                   str(tmp_path / "m2.json"))
    assert rc == 2 and "has no duration_ns column" in err
    assert not (tmp_path / "m2.json").exists()
    # M7, M14, L4: results-report on junk, on a FIFO, and for a mode the tables lack
    (broken / "summary.parquet").write_text("junk")
    rc, err = _cli(capsys, "results-report", "--tables", str(broken))
    assert rc == 2 and "is not a readable table" in err and err.count("\n") == 1
    (broken / "summary.parquet").unlink()
    os.mkfifo(broken / "summary.parquet")
    rc, err = _cli(capsys, "results-report", "--tables", str(broken))
    assert rc == 2 and "is a FIFO, not a table" in err
    rc, err = _cli(capsys, "results-report", "--tables", str(tables), "--mode", "bogus")
    assert rc == 2 and "--mode bogus: the tables hold runs of native only" in err
    # M10, M11: a folder that is not there is an error, not a quiet machine
    rc, err = _cli(capsys, "doctor", "--tables", str(tmp_path / "nothere"))
    assert rc == 2 and "runs.parquet is missing, not a table" in err
    rc, err = _cli(capsys, "model-report", "--dir", str(tmp_path / "nothere"))
    assert rc == 2 and "is missing, not the model's results folder" in err
    rc, err = _cli(capsys, "model-report", "--dir", str(broken))
    assert rc == 2 and "no model tables in" in err
    # M23: orderings out of range
    for bad in ("0", "-5", "100000000"):
        rc, err = _cli(capsys, "evaluate-model", "--tables", str(tables), "--split", models,
                       "--model", model, "--out", str(tmp_path / "ev"), "--orderings", bad)
        assert rc == 2 and "--orderings" in err
    assert not (tmp_path / "ev").exists()
    # M12: a swap cost no device has
    rc, err = _cli(capsys, "advise", "--model", model, "--split", models, "--pipeline",
                   str(two_runs[0] / "spec.json"), "--limit", "64M", "--swap-cost", "1e308")
    assert rc == 2 and "more than 1 s per page is no device" in err


def test_tidy_names_a_run_by_its_folder_even_through_dot_dot(two_runs, tmp_path, capsys):
    """M8: x/.. is the run folder itself: its tables go to --out/<its name>, not to
    --out's parent."""
    run = Path(shutil.copytree(two_runs[0], tmp_path / "runs" / "rep0"))
    (run / "x").mkdir()
    out = tmp_path / "t" / "inner"
    rc, err = _cli(capsys, "tidy", "--out", str(out), str(run / "x" / ".."))
    assert rc == 0, err
    assert (out / "rep0" / "runs.parquet").is_file()
    assert not list((tmp_path / "t").glob("*.parquet"))


@pytest.mark.parametrize("argv, says", [
    (["forward", "{desc}", "--seed", "-3"], "--seed -3"),                   # M3
    (["forward", "{desc}", "--batch", "100000"], "--batch 100000"),         # M15
    (["forward", "{desc}", "--batch", "0"], "--batch 0"),                   # L5
    (["run", "--sample-hz", "1e-300"], "--sample-hz 1e-300"),               # M5
    (["run", "--policy", "masa:2", "--estimates", "{est_inf}"], "not a whole number"),  # M4
    (["run", "--policy", "masa:2", "--estimates", "{est_true}"], "not a whole number"),  # L8
    (["run", "--pipeline", "{bigint}"], "is not a number of seconds"),      # M1
    (["run", "--out", "{loop}"], "choose another --out"),                   # M2
    (["pipelines", "--length", "1", "20000"], "max <= 10000"),               # M16
    (["pipelines", "--arrival", "normal", "--mean", "1e300", "--sd", "0"],
     "would arrive later than"),                                            # M16
])
def test_bad_numbers_and_paths_are_one_line(split_copy, tmp_path, capsys, argv, says):
    desc = split_copy / "age_net.description.json"
    pipe = tmp_path / "p.json"
    save_pipeline(Pipeline("p", [Arrival(0.0, ["AgeNet"])]), pipe)
    files = {"desc": desc, "est_inf": tmp_path / "e1.json", "est_true": tmp_path / "e2.json",
             "bigint": tmp_path / "big.json", "loop": tmp_path / "loopA"}
    files["est_inf"].write_text('{"AgeNet": 1e400}')
    files["est_true"].write_text('{"AgeNet": true}')
    files["bigint"].write_text('{"name": "b", "arrivals": [{"time_s": 1' + "0" * 400
                               + ', "networks": ["AgeNet"]}]}')
    (tmp_path / "loopA").symlink_to(tmp_path / "loopB")
    (tmp_path / "loopB").symlink_to(tmp_path / "loopA")
    argv = [a.format(**files) for a in argv]
    defaults = {"run": ["--pipeline", str(pipe), "--split", str(split_copy), "--policy",
                        "linear", "--out", str(tmp_path / "run"), "--backend", "none"],
                "pipelines": ["--split", str(split_copy), "--out", str(tmp_path / "p")]}
    given = set(argv[1::2])
    extra = defaults.get(argv[0], [])
    extra = [x for i, x in enumerate(extra) if extra[i - i % 2] not in given]
    rc, err = _cli(capsys, *argv, *extra)
    assert rc == 2 and says in err and err.count("\n") == 1, err
    assert not (tmp_path / "run").exists() and not (tmp_path / "p").exists()


def test_pipelines_and_models_check_every_output_before_writing_one(split_copy, tmp_path,
                                                                   capsys):
    """M18: no half a pipeline set or half a zoo."""
    out = tmp_path / "p"
    (out / "p001.json").mkdir(parents=True)
    rc, err = _cli(capsys, "pipelines", "--split", str(split_copy), "--out", str(out),
                   "--count", "3", "--length", "1", "2")
    assert rc == 2 and "p001.json is a folder" in err
    assert sorted(x.name for x in out.iterdir()) == ["p001.json"]
    models = tmp_path / "m"
    (models / "age_net.caffemodel").mkdir(parents=True)
    rc, err = _cli(capsys, "models", "--out", str(models), "GenderNet", "AgeNet")
    assert rc == 2 and "age_net.caffemodel is a folder" in err
    assert sorted(x.name for x in models.iterdir()) == ["age_net.caffemodel"]


def test_a_huge_prototxt_is_refused_by_its_size(split_copy, tmp_path, capsys):
    """M19: read whole, a 100 MB prototxt cost 550 MB and echoed itself as the error."""
    big = tmp_path / "big"
    big.mkdir()
    with open(big / "age_net.prototxt", "wb") as f:
        f.truncate(100 * 2**20)
    model = next((split_copy.parent / "models").glob("age_net.caffemodel"))
    (big / "age_net.caffemodel").symlink_to(model)
    rc, err = _cli(capsys, "split", str(big / "age_net.caffemodel"), "--out", str(big / "o"))
    assert rc == 2 and "larger than 16 MiB" in err and len(err) < 1000


def test_one_run_through_two_folders_is_aggregated_once(two_runs, tmp_path):
    """L11: a copy of rep0 as rep3 would count the run twice."""
    from engine.analysis.aggregate import aggregate
    from engine.analysis.tidy import tidy_run

    copy = Path(shutil.copytree(two_runs[0], tmp_path / "rep3"))
    with pytest.raises(EdgeprofError, match="are one run"):
        aggregate([tidy_run(run) for run in (two_runs[0], copy)], None)


def test_internal_verbs_answer_bad_settings_with_one_line(tmp_path):
    """L6, L16."""
    env = {**os.environ, "EDGEPROF_SUPERVISOR_PID": "abc"}
    r = subprocess.run([sys.executable, "-m", "engine", "child", str(tmp_path / "s.json")],
                       cwd=REPO, capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 2 and "is not a process id" in r.stderr
    assert "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "engine", "reconstruct-model", "--tables", ".",
                        "--split", ".", "--model", "m.json", "--out", str(tmp_path / "o"),
                        "--resamples", "1000000000"], cwd=REPO, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "--resamples" in r.stderr and not (tmp_path / "o").exists()


# --- the second held-out pass (/work/notes/adversarial-25b.md: HN1-HN8, MN1-MN7) ---------


def test_a_record_of_an_older_schema_still_has_typed_fields(tmp_path):
    """HN1: a record lowered to schema 4 (no digest) still cannot carry a wrong type."""
    from engine.runner.meta import RunMeta, record_digest

    meta = RunMeta(policy="linear", termination="ok")
    meta.write(tmp_path)
    data = json.loads((tmp_path / "meta.json").read_text())
    data.update(schema_version=4, wall_s="fast")
    del data["record_digest"]
    (tmp_path / "meta.json").write_text(json.dumps(data))
    with pytest.raises(EdgeprofError, match="carries no record_digest"):
        RunMeta.read(tmp_path)  # third pass RH1: no digest, whatever the schema
    data["record_digest"] = record_digest(data)  # a digest renewed: the types still count
    (tmp_path / "meta.json").write_text(json.dumps(data))
    with pytest.raises(EdgeprofError, match="wall_s is 'fast', not float | None"):
        RunMeta.read(tmp_path)


def test_what_tidy_and_the_reconciliation_read_is_the_runs_own(two_runs, tmp_path):
    """HN2, HN3, HN5, MN1: a planted samples.csv, an edited table read by the
    reconciliation, a FIFO or a huge meta.json."""
    from engine.analysis.aggregate import aggregate
    from engine.analysis.reconcile import reconcile_run

    planted = Path(shutil.copytree(two_runs[0], tmp_path / "planted"))  # no sampler ran
    pd.DataFrame({"t_ns": [1], "rss_bytes": [1]}).to_csv(planted / "samples.csv")
    with pytest.raises(EdgeprofError, match="samples.csv is no table this run wrote"):
        tidy_run(planted)
    edited = Path(shutil.copytree(two_runs[0], tmp_path / "edited"))
    tasks = pd.read_csv(edited / "tasks.csv")
    tasks.assign(proc_hwm_bytes=1).to_csv(edited / "tasks.csv", index=False)
    with pytest.raises(EdgeprofError, match="tasks.csv is not the table this run wrote"):
        reconcile_run(edited)
    with pytest.raises(EdgeprofError, match="holds no meta.json"):
        aggregate([], tmp_path / "nothing")
    fifo = Path(shutil.copytree(two_runs[0], tmp_path / "fifo"))
    (fifo / "meta.json").unlink()
    os.mkfifo(fifo / "meta.json")
    with pytest.raises(EdgeprofError, match="is a FIFO, not a regular file"):
        tidy_run(fifo)
    huge = Path(shutil.copytree(two_runs[0], tmp_path / "huge"))
    with open(huge / "meta.json", "r+b") as f:
        f.truncate(300 * 2**20)
    with pytest.raises(EdgeprofError, match="larger than 16 MiB"):
        tidy_run(huge)


def test_force_keeps_files_a_run_never_writes_in_its_heap_folder(two_runs, tmp_path):
    """HN6."""
    from engine.runner.outdir import OutClaim

    run = Path(shutil.copytree(two_runs[0], tmp_path / "run"))
    (run / "heap").mkdir(exist_ok=True)
    (run / "heap" / "notes.txt").write_text("precious")
    with pytest.raises(EdgeprofError, match="heap/notes.txt"):
        OutClaim(run, force=True)
    assert (run / "heap" / "notes.txt").read_text() == "precious"


@pytest.mark.parametrize("edit, says", [
    # HN7: another network's partial, of the right size
    (lambda d: d["layers"][1].update(partial="../elsewhere/x.partial.caffemodel"),
     "outside"),
    # HN8: no prototxt digest turns no check off
    (lambda d: d.update(prototxt_sha256=None), "records no prototxt_sha256"),
])
def test_a_description_reads_only_its_own_checked_files(split_copy, tmp_path, capsys, edit,
                                                        says):
    desc = split_copy / "age_net.description.json"
    _edit(desc, edit)
    pipe = tmp_path / "p.json"
    save_pipeline(Pipeline("p", [Arrival(0.0, ["AgeNet"])]), pipe)
    rc, err = _cli(capsys, "run", "--pipeline", str(pipe), "--split", str(split_copy),
                   "--policy", "linear", "--out", str(tmp_path / "run"), "--backend", "none")
    assert rc == 2 and says in err and not (tmp_path / "run").exists()


def test_bulk_without_its_caffemodel_is_refused_before_the_run(split_copy, tmp_path, capsys):
    """MN7."""
    (split_copy.parent / "models" / "age_net.caffemodel").unlink()
    pipe = tmp_path / "p.json"
    save_pipeline(Pipeline("p", [Arrival(0.0, ["AgeNet"])]), pipe)
    rc, err = _cli(capsys, "run", "--pipeline", str(pipe), "--split", str(split_copy),
                   "--policy", "bulk", "--out", str(tmp_path / "run"), "--backend", "none")
    assert rc == 2 and "the caffemodel bulk reads for AgeNet, is missing" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("arrivals, says", [
    ([(0.5, ["AgeNet"]), (0.0, ["GenderNet"])], "arrivals out of time order"),   # MN2
    ([(0.0, ["AgeNet"] * 10_001)], "at most 10000 per pipeline"),                # MN3
])
def test_pipelines_are_in_time_order_and_bounded(tmp_path, arrivals, says):
    from engine.schedule.pipelines import PipelineError, load_pipeline

    pipe = tmp_path / "p.json"
    save_pipeline(Pipeline("p", [Arrival(t, n) for t, n in arrivals], arrival_mode="normal"),
                  pipe)
    with pytest.raises(PipelineError, match=says):
        load_pipeline(pipe)


def test_outputs_are_checked_before_the_work_and_never_half_written(tmp_path):
    """MN6."""
    from engine.analysis.tablefiles import write_tables

    out = tmp_path / "out"
    (out / "b.parquet").mkdir(parents=True)
    with pytest.raises(EdgeprofError, match="b.parquet is a folder"):
        write_tables({"a": pd.DataFrame({"x": [1]}), "b": pd.DataFrame({"x": [2]})}, out)
    assert sorted(p.name for p in out.iterdir()) == ["b.parquet"]
    (tmp_path / "file").write_text("x")
    r = subprocess.run([sys.executable, "-m", "engine", "evaluate-model", "--tables", ".",
                        "--split", ".", "--model", "m.json", "--out", str(tmp_path / "file")],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "is a regular file; name a folder" in r.stderr


def test_low_findings_of_the_second_pass(two_runs, split_copy, tmp_path, capsys):
    """LN1, LN6, LN9, LN10, LN12, LN17, LN21."""
    from engine.runner.outdir import OutClaim
    from engine.schedule.pipelines import PipelineError, load_pipeline

    gone = Path(shutil.copytree(two_runs[0], tmp_path / "gone"))
    (gone / "tasks.csv").unlink()
    with pytest.raises(EdgeprofError, match="tasks.csv, a table this run wrote, is missing"):
        tidy_run(gone)
    rc, err = _cli(capsys, "reconstruct-model", "--tables", ".", "--split", ".", "--model",
                   "m.json", "--out", str(tmp_path / "o"), "--resamples", "5")
    assert rc == 2 and "at least 20" in err
    rc, err = _cli(capsys, "models", "--out", str(tmp_path / "m"), "AgeNet", "AgeNet")
    assert rc == 0 and err.count("AgeNet: wrote") == 1
    with pytest.raises(EdgeprofError, match="lies inside .*, which this run reads"):
        OutClaim(split_copy / "age_net_partials" / "run", inputs=(tmp_path / "p.json",
                                                                  split_copy))
    env = {**os.environ, "EDGEPROF_SUPERVISOR_PID": "²"}
    r = subprocess.run([sys.executable, "-m", "engine", "child", "s.json"], cwd=REPO,
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 2 and "is not a process id" in r.stderr
    pipe = tmp_path / "big.json"
    pipe.write_text('{"name": "b", "arrivals": [{"time_s": 1' + "0" * 400
                    + ', "networks": ["AgeNet"]}]}')
    with pytest.raises(PipelineError, match="arrival time 10000000000000000000... is not"):
        load_pipeline(pipe)


def test_the_reconciliation_policy_is_one_of_the_runs_policies():
    """LN21: config/README.md says so."""
    import yaml

    from engine.workflow.checks import check_config

    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["run"]["reconcile"]["policy"] = "masa:3"
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        with pytest.raises(ValueError, match="run.reconcile.policy 'masa:3' is not one of"):
            check_config(config)
    finally:
        os.chdir(cwd)


def test_the_internal_verbs_check_a_request_file_as_run_checks_its_flags(split_copy,
                                                                         tmp_path):
    """LN15: supervise ran a request with batch -3; --help showed ==SUPPRESS==."""
    from engine.runner.request import RunOptions, RunRequest

    pipe = tmp_path / "p.json"
    save_pipeline(Pipeline("p", [Arrival(0.0, ["AgeNet"])]), pipe)
    req = RunRequest(str(pipe), "linear", str(split_copy), str(tmp_path / "run"),
                     RunOptions(batch=-3))
    (tmp_path / "req.json").write_text(req.to_json())
    r = subprocess.run([sys.executable, "-m", "engine", "supervise", str(tmp_path / "req.json")],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--batch -3" in r.stderr and not (tmp_path / "run").exists()
    r = subprocess.run([sys.executable, "-m", "engine", "--help"], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert "SUPPRESS" not in r.stdout and "internal: the measured process" in r.stdout


# --- the third held-out pass (/work/notes/adversarial-25c.md: RH2, NH1-NH2, NM1-NM3) -----


def test_force_refuses_a_run_file_name_that_is_a_folder(two_runs, tmp_path):
    """RH2: user files under progress.jsonl/ would go with the folder."""
    from engine.runner.outdir import OutClaim

    run = Path(shutil.copytree(two_runs[0], tmp_path / "run"))
    (run / "progress.jsonl").unlink()
    (run / "progress.jsonl").mkdir()
    (run / "progress.jsonl" / "notes").write_text("keep")
    with pytest.raises(EdgeprofError, match="progress.jsonl"):
        OutClaim(run, force=True)
    assert (run / "progress.jsonl" / "notes").read_text() == "keep"


def test_forward_never_writes_over_what_it_reads(split_copy, two_runs, tmp_path, capsys):
    """NH1."""
    desc = split_copy / "age_net.description.json"
    before = desc.read_bytes()
    for out in (split_copy / "x.npz", split_copy / "age_net_partials" / "x.npz",
                two_runs[0] / "x.npz"):
        rc, err = _cli(capsys, "forward", str(desc), "--batch", "1", "--out", str(out))
        assert rc == 2 and "elsewhere" in err, out
    # anything but an .npz archive (a description, a table) is refused by its name
    for out in (desc, tmp_path / "runs.parquet"):
        rc, err = _cli(capsys, "forward", str(desc), "--batch", "1", "--out", str(out))
        assert rc == 2 and "writes an .npz archive" in err, out
    assert desc.read_bytes() == before


def test_bulk_refuses_a_caffemodel_regenerated_after_the_split(split_copy, tmp_path, capsys):
    """NH2: another seed, the same size: bulk would compute other weights than the
    partials give every other policy."""
    models = split_copy.parent / "models"
    rc, err = _cli(capsys, "split", str(models / "age_net.caffemodel"), "--out",
                   str(tmp_path / "s"))
    assert rc == 0, err
    rc, err = _cli(capsys, "models", "--out", str(models), "AgeNet", "--seed", "8",
                   "--force")  # the fixture's are seed 7
    assert rc == 0, err
    pipe = tmp_path / "p.json"
    save_pipeline(Pipeline("p", [Arrival(0.0, ["AgeNet"])]), pipe)
    rc, err = _cli(capsys, "run", "--pipeline", str(pipe), "--split", str(tmp_path / "s"),
                   "--policy", "bulk", "--out", str(tmp_path / "run"), "--backend", "none")
    assert rc == 2 and "(the file changed after AgeNet was split, or the description" in err
    assert not (tmp_path / "run").exists()


def test_limits_and_seeds_are_bounded_and_a_stale_set_is_named(split_copy, tmp_path, capsys):
    """NM1, NM2, NM3."""
    rc, err = _run_agenet(capsys, split_copy, tmp_path, "--policy", "linear", "--backend",
                          "none", "--limit", "99999999999999G")
    assert rc == 2 and "at most 1 PiB" in err
    rc, err = _cli(capsys, "pipelines", "--split", str(split_copy), "--out",
                   str(tmp_path / "pl"), "--seed", str(2**64))
    assert rc == 2 and "--seed" in err
    out = tmp_path / "g"
    rc, _ = _cli(capsys, "pipelines", "--split", str(split_copy), "--out", str(out),
                 "--count", "3", "--length", "1", "2")
    assert rc == 0
    rc, err = _cli(capsys, "pipelines", "--split", str(split_copy), "--out", str(out),
                   "--count", "1", "--length", "1", "1", "--seed", "9")
    assert rc == 2 and "p001.json, p002.json of an earlier set" in err


# --- the fourth held-out pass (/work/notes/adversarial-25d.md: H1-H2, M1-M6) ---------------


def test_no_verb_writes_over_what_it_reads_or_into_a_run(two_runs, split_copy, tmp_path,
                                                         capsys):
    """H1 (fit-model over its own table or description), and the low ones: graph into a
    run folder, tidy into one through a link."""
    tables = _tables(tmp_path, two_runs)
    for out in (tables / "runs.parquet", split_copy / "age_net.description.json"):
        before = out.read_bytes()
        rc, err = _cli(capsys, "fit-model", "--tables", str(tables), "--split",
                       str(split_copy), "--out", str(out))
        assert rc == 2 and "would overwrite the tables or descriptions" in err, err
        assert out.read_bytes() == before
    run = Path(shutil.copytree(two_runs[0], tmp_path / "run"))
    rc, err = _cli(capsys, "graph", "--description", str(split_copy / "age_net.description.json"),
                   "--policy", "linear", "--out", str(run / "g.dot"))
    assert rc == 2 and "lies in the run folder" in err and not (run / "g.dot").exists()
    (tmp_path / "link").symlink_to(run)
    rc, err = _cli(capsys, "tidy", "--out", str(tmp_path / "link" / "t"), str(two_runs[1]))
    assert rc == 2 and "lies in the run folder" in err and not (run / "t").exists()


def _other_seed_split(tmp_path: Path, capsys) -> Path:
    """AgeNet generated with seed 8 (the fixture's: 7) and split: files of the same sizes
    and other bytes."""
    rc, err = _cli(capsys, "models", "--out", str(tmp_path / "m8"), "AgeNet", "--seed", "8")
    assert rc == 0, err
    rc, err = _cli(capsys, "split", str(tmp_path / "m8" / "age_net.caffemodel"), "--out",
                   str(tmp_path / "s8"))
    assert rc == 0, err
    return tmp_path / "s8"


def test_every_model_file_a_run_reads_is_the_one_split(split_copy, tmp_path, capsys):
    """H2: a description without the caffemodel's digest is refused (bulk could read
    another model unseen); M1: a partial swapped for another seed's of the same size is
    refused by every policy that reads partials, and by forward, before any output."""
    s8 = _other_seed_split(tmp_path, capsys)
    desc = split_copy / "age_net.description.json"
    original = desc.read_text()
    _edit(desc, lambda d: d.update(caffemodel_sha256=None))
    for policy in ("bulk", "linear"):
        rc, err = _run_agenet(capsys, split_copy, tmp_path, "--policy", policy, "--backend",
                              "none")
        assert rc == 2 and "records no caffemodel_sha256" in err, err
    desc.write_text(original)
    _edit(desc, lambda d: d["layers"][1].pop("partial_sha256"))
    rc, err = _run_agenet(capsys, split_copy, tmp_path, "--policy", "linear", "--backend", "none")
    assert rc == 2 and "records no partial_sha256" in err, err
    desc.write_text(original)
    partial = json.loads(original)["layers"][1]["partial"]
    assert (s8 / partial).stat().st_size == (split_copy / partial).stat().st_size
    assert (s8 / partial).read_bytes() != (split_copy / partial).read_bytes()
    shutil.copy(s8 / partial, split_copy / partial)
    for policy in ("linear", "partial:2", "deepeye"):
        rc, err = _run_agenet(capsys, split_copy, tmp_path, "--policy", policy, "--backend",
                              "none")
        assert rc == 2 and f"{partial} does not match" in err, (policy, err)
        assert not (tmp_path / "run").exists()
    rc, err = _cli(capsys, "forward", str(desc), "--batch", "1")
    assert rc == 2 and "(the file changed after AgeNet was split, or the description" in err
    rc, err = _run_agenet(capsys, split_copy, tmp_path, "--policy", "bulk", "--backend",
                          "none", "--sample-hz", "0")
    assert rc == 0, err  # bulk reads the whole caffemodel, which is the one split


def test_two_pipelines_at_once_into_one_folder_never_mix(split_copy, tmp_path, capsys):
    """M2: the second is refused while the first writes (its lock, held here)."""
    from engine.commands.options import folder_lock

    out = tmp_path / "pl"
    out.mkdir()
    with folder_lock(out, "--out", "pipelines", "pNNN.json"):
        rc, err = _cli(capsys, "pipelines", "--split", str(split_copy), "--out", str(out),
                       "--count", "2", "--length", "1", "2")
        assert rc == 2 and "another pipelines is writing pNNN.json into it" in err
        # another set (prefix) in the same folder at the same time is not held up
        rc, err = _cli(capsys, "pipelines", "--split", str(split_copy), "--out", str(out),
                       "--count", "1", "--length", "1", "2", "--prefix", "v")
        assert rc == 0, err
    assert sorted(f.name for f in out.glob("p*.json")) == []
    rc, err = _cli(capsys, "pipelines", "--split", str(split_copy), "--out", str(out),
                   "--count", "2", "--length", "1", "2")
    assert rc == 0 and sorted(f.name for f in out.glob("p*.json")) == ["p000.json", "p001.json"]
    # a writer that ended leaves no lock file behind (eleventh held-out pass L6)
    assert sorted(f.name for f in out.glob(".*")) == []
    # and a lock taken anew still refuses a second writer
    with folder_lock(out, "--out", "pipelines", "pNNN.json"):
        rc, err = _cli(capsys, "pipelines", "--split", str(split_copy), "--out", str(out),
                       "--count", "2", "--length", "1", "2")
        assert rc == 2 and "another pipelines is writing" in err


def test_another_table_in_a_tables_place_is_one_line(tmp_path, capsys):
    """M3 (results-report), and doctor --tables (low)."""
    tables = tmp_path / "t"
    tables.mkdir()
    other = pd.DataFrame({"run_id": ["r"], "layer": [1]})
    for name in ("summary", "runs", "noise_floor"):
        other.to_parquet(tables / f"{name}.parquet")
    rc, err = _cli(capsys, "results-report", "--tables", str(tables))
    assert rc == 2 and "summary.parquet has no column 'level'" in err, err
    rc, err = _cli(capsys, "doctor", "--tables", str(tables))
    assert rc == 2 and "runs.parquet has no column 'termination'" in err, err


def test_a_config_key_given_twice_is_refused(tmp_path):
    """M4: YAML keeps the second `run:` block and drops the first unseen."""
    from engine.workflow.checks import check_config_files

    twice = tmp_path / "twice.yaml"
    twice.write_text("run:\n  policies: [bulk]\nseed: 1\nrun:\n  repetitions: 1\n")
    with pytest.raises(ValueError, match=r"gives 'run' twice \(line 4\)"):
        check_config_files([twice])
    nested = tmp_path / "nested.yaml"
    nested.write_text("run:\n  repetitions: 1\n  repetitions: 2\n")
    with pytest.raises(ValueError, match="gives 'repetitions' twice"):
        check_config_files([nested])
    fine = tmp_path / "fine.yaml"
    fine.write_text("run:\n  repetitions: 1\nvm:\n  repetitions: 1\n")
    check_config_files([fine])  # the same key in two mappings is no repetition
    r = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--configfile", str(twice)],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "gives 'run' twice" in r.stdout + r.stderr


def test_models_never_replace_a_different_model_unasked(tmp_path, capsys):
    """M5: a user's own file (here another seed's) in --out stays unless --force; an
    identical one is left as it is."""
    out = tmp_path / "m"
    rc, err = _cli(capsys, "models", "--out", str(out), "AgeNet", "--seed", "3")
    assert rc == 0, err
    mine = (out / "age_net.caffemodel").read_bytes()
    rc, err = _cli(capsys, "models", "--out", str(out), "AgeNet", "--seed", "3")
    assert rc == 0, err  # the same model again
    rc, err = _cli(capsys, "models", "--out", str(out), "AgeNet", "--seed", "4")
    assert rc == 2 and "age_net.caffemodel exists and is not AgeNet at seed 4" in err, err
    assert (out / "age_net.caffemodel").read_bytes() == mine
    assert sorted(p.name for p in out.iterdir()) == ["age_net.caffemodel", "age_net.prototxt"]
    rc, err = _cli(capsys, "models", "--out", str(out), "AgeNet", "--seed", "4", "--force")
    assert rc == 0 and (out / "age_net.caffemodel").read_bytes() != mine


def test_a_batch_past_the_machines_memory_is_refused_up_front(split_copy, tmp_path, capsys,
                                                              monkeypatch):
    """M6: on a machine of 1 GiB available, AgeNet at batch 1,000 (about 6 MB of outputs per image)
    is refused at once, by forward and by run, and batch 1 is not."""
    import psutil

    real, swap = psutil.virtual_memory(), psutil.swap_memory()
    monkeypatch.setattr(psutil, "virtual_memory", lambda: real._replace(available=2**30))
    monkeypatch.setattr(psutil, "swap_memory", lambda: swap._replace(free=0))
    desc = split_copy / "age_net.description.json"
    t0 = time.monotonic()
    rc, err = _cli(capsys, "forward", str(desc), "--batch", "1000")
    assert rc == 2 and "AgeNet alone needs about" in err, err
    assert "the 1.0 GiB of RAM and swap available now" in err, err
    rc, err = _run_agenet(capsys, split_copy, tmp_path, "--policy", "linear", "--backend",
                          "none", "--batch", "1000")
    assert rc == 2 and "AgeNet alone needs about" in err, err
    assert time.monotonic() - t0 < 30 and not (tmp_path / "run").exists()
    rc, err = _cli(capsys, "forward", str(desc), "--batch", "1")
    assert rc == 0, err


def test_the_batch_check_counts_the_networks_in_memory_at_once_against_available_ram(
        split_copy, tmp_path, capsys, monkeypatch):
    """On a host of 1 TiB with 1 GiB available, AgeNet and GenderNet at batch 100 (each
    11.4 M float weights, 43.5 MiB, and about 6 MiB of outputs per image: 0.63 GiB) are
    refused under partial:2, where both can be in memory at once, naming both and what is
    available; linear, which runs one after the other, passes the check."""
    import psutil

    from engine.runner.request import RunOptions, RunRequest
    from engine.runner.supervise import check_inputs

    real, swap = psutil.virtual_memory(), psutil.swap_memory()
    monkeypatch.setattr(psutil, "virtual_memory",
                        lambda: real._replace(total=2**40, available=2**30))
    monkeypatch.setattr(psutil, "swap_memory", lambda: swap._replace(free=0))
    pipe = tmp_path / "p.json"
    save_pipeline(Pipeline("p", [Arrival(0.0, ["AgeNet", "GenderNet"])]), pipe)
    rc, err = _cli(capsys, "run", "--pipeline", str(pipe), "--split", str(split_copy),
                   "--out", str(tmp_path / "run"), "--policy", "partial:2", "--backend",
                   "none", "--batch", "100")
    assert rc == 2 and not (tmp_path / "run").exists(), err
    assert ("--batch 100: the 2 networks that can be in memory at once (AgeNet, GenderNet) "
            "need about 1.3 GiB") in err, err
    assert "the 1.0 GiB of RAM and swap available now" in err, err
    check_inputs(RunRequest(str(pipe), "linear", str(split_copy), str(tmp_path / "run"),
                            RunOptions(batch=100)))
    # a sandbox's guest holds its RAM at the limit and the rest in its swap: 1 GiB of RAM
    # with 1 GiB of swap free holds both (a DeepEye run of a 1.6 GB pipeline at 512M was
    # refused in the guest)
    monkeypatch.setattr(psutil, "swap_memory", lambda: swap._replace(free=2**30))
    check_inputs(RunRequest(str(pipe), "partial:2", str(split_copy), str(tmp_path / "run"),
                            RunOptions(batch=100)))
    monkeypatch.setattr(psutil, "swap_memory", lambda: swap._replace(free=2**27))
    rc, err = _cli(capsys, "run", "--pipeline", str(pipe), "--split", str(split_copy),
                   "--out", str(tmp_path / "run"), "--policy", "partial:2", "--backend",
                   "none", "--batch", "100")
    assert rc == 2 and "the 1.1 GiB of RAM and swap available now" in err, err


def test_low_findings_of_the_fourth_pass(split_copy, tmp_path, capsys):
    """Bounds printed as integers, a display name that is a path, a zero swap cost, an
    input shape that is not the prototxt's, no size bins."""
    from engine.model.devices import parse_swap_cost
    from tests.unit.test_workflow_args import SCHEMA, load_config

    rc, err = _cli(capsys, "pipelines", "--split", str(split_copy), "--out",
                   str(tmp_path / "pl"), "--seed", str(2**40))
    assert rc == 2 and "at most 4,294,967,295" in err
    model = split_copy.parent / "models" / "age_net.caffemodel"
    for name in ("../x", " AgeNet", "a\nb"):
        rc, err = _cli(capsys, "split", str(model), "--network", name, "--out",
                       str(tmp_path / "s"))
        assert rc == 2 and "without slashes" in err and not (tmp_path / "s").exists()
    with pytest.raises(EdgeprofError, match="must be above 0"):
        parse_swap_cost("0us")
    desc = split_copy / "age_net.description.json"
    _edit(desc, lambda d: d.update(input_shape=[1, 3, 200, 200]))
    with pytest.raises(ModelError, match="input_shape"):
        Description.load_checked(desc)
    import jsonschema

    cfg = load_config("config.yaml")
    cfg["pipelines"]["bins"] = []
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(cfg, SCHEMA)


# --- the fifth held-out pass (/work/notes/adversarial-25e.md: HA-HB, MA-MH) ---------------


def test_calibrate_checks_its_out_limit_and_backend_before_measuring(split_copy, tmp_path,
                                                                     capsys):
    """HA, HB, MC: --out over a description, empty, or the root; a limit past 1 PiB; a
    backend that sets no limit: one line, before any run, and no work folder left."""
    desc = split_copy / "age_net.description.json"
    before = desc.read_bytes()
    cases = [(str(desc), "would overwrite the descriptions it runs"),
             ("", "--out is empty"), ("/", "--out / is a folder"),
             (str(tmp_path / "dev.json"), "at most 1 PiB")]
    for out, says in cases:
        limit = "99999999999G" if "PiB" in says else "48M"
        rc, err = _cli(capsys, "calibrate", "--limit", limit, "--backend", "none",
                       "--split", str(split_copy), "--out", out, "--repetitions", "1")
        assert rc == 2 and says in err, (out, err)
    rc, err = _cli(capsys, "calibrate", "--limit", "48M", "--backend", "none", "--split",
                   str(split_copy), "--out", str(tmp_path / "dev.json"), "--repetitions", "1")
    assert rc == 2 and "sets no limit of its own" in err
    assert desc.read_bytes() == before and list(tmp_path.iterdir()) == [split_copy.parent]


def test_tidy_never_writes_into_a_run_through_its_parent(two_runs, tmp_path, capsys):
    """MA: --out the run's own parent folder would put the tables inside the run."""
    parent = tmp_path / "r"
    run = Path(shutil.copytree(two_runs[0], parent / "t1"))
    listing = sorted(p.name for p in run.iterdir())
    (tmp_path / "link").symlink_to(parent)
    for out in (parent, tmp_path / "link"):
        rc, err = _cli(capsys, "tidy", "--out", str(out), str(run))
        assert rc == 2 and "would overwrite a run it tidies" in err, err
    assert sorted(p.name for p in run.iterdir()) == listing


def test_pipelines_never_replace_a_different_file_unasked(split_copy, tmp_path, capsys):
    """MB: a hand-written p000.json (or another seed's) stays unless --force; the same set
    again is fine. MG: the descriptions are checked against their prototxt."""
    out = tmp_path / "pl"
    args = ["pipelines", "--split", str(split_copy), "--out", str(out), "--count", "1",
            "--length", "1", "1"]
    rc, err = _cli(capsys, *args)
    assert rc == 0, err
    rc, err = _cli(capsys, *args)
    assert rc == 0, err  # the same set again
    mine = '{"name": "p000", "arrivals": []}'
    (out / "p000.json").write_text(mine)
    rc, err = _cli(capsys, *args)
    assert rc == 2 and "p000.json exists and is not the pipeline this set writes" in err
    assert (out / "p000.json").read_text() == mine
    rc, err = _cli(capsys, *args, "--force")
    assert rc == 0 and (out / "p000.json").read_text() != mine
    _edit(split_copy / "age_net.description.json", lambda d: d.update(param_bytes=1))
    rc, err = _cli(capsys, *args[:4], str(tmp_path / "p2"), *args[5:])
    assert rc == 2 and "re-run the split stage" in err and not (tmp_path / "p2").exists()


def test_the_models_verb_loads_numpy_random_before_its_signals_unwind():
    """numpy.random, which numpy loads on first use, is loaded when the models verb's
    generator is: a SIGTERM whose exception interrupted that import mid-write was lost
    (its handler's stack in numpy.random._generator's module init; the verb wrote its whole
    set and exited 0, about once in 15 runs of the test below under load)."""
    probe = ("import sys, engine.caffe.generate; "
             "print('numpy.random' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "True"


def test_models_and_split_clean_up_after_a_signal_and_a_kill(split_copy, tmp_path):
    """MD: SIGTERM mid-write removes the hidden folder at once (exit 130); one left by a
    SIGKILL is removed by the next models or split in that folder."""
    import signal

    from engine.procs import stamped_tempdir

    out = tmp_path / "m"

    def writing() -> bool:
        """The caffemodel less than half written (of 217 MiB) in the hidden folder, nothing
        else: far from the set's publication, where signals are held back."""
        found = list(out.glob(".models.*/*"))
        try:
            return (len(found) == 1 and found[0].name.startswith(".alexnet_sos.caffemodel.")
                    and found[0].stat().st_size < 100 * MIB)
        except FileNotFoundError:  # renamed between the listing and the stat
            return False

    def stopped(pid: int) -> bool:
        """The process is stopped, not only sent SIGSTOP (one in a long write stops when
        the write returns)."""
        import psutil

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if psutil.Process(pid).status() == psutil.STATUS_STOPPED:
                return True
            time.sleep(0.001)
        return False

    # stopped where it stands, so the SIGTERM lands mid-write however loaded the machine;
    # caught later (its set done, being published: signals held back, exit 0 by design),
    # it is let finish and started again
    for _ in range(5):
        shutil.rmtree(out, ignore_errors=True)
        proc = subprocess.Popen([sys.executable, "-m", "engine", "models", "--out", str(out),
                                 "SoS-AlexNet"], stderr=subprocess.PIPE, text=True, cwd=REPO,
                                preexec_fn=default_signals)
        deadline = time.monotonic() + 60
        while not writing() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGSTOP)
        if proc.poll() is None and stopped(proc.pid) and writing():
            break
        proc.send_signal(signal.SIGCONT)
        proc.communicate(timeout=60)
    else:
        pytest.fail("models was never caught writing its caffemodel")
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGCONT)
    err = proc.communicate(timeout=60)[1]
    assert proc.returncode == 130 and "interrupted by SIGTERM" in err, err
    assert not out.exists()  # nor the --out it made (M5 of the new-user pass)
    out.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    for folder, prefix in ((out, ".models."), (split_copy, ".age_net_partials.")):
        left = stamped_tempdir(prefix, folder)
        left.rename(folder / f"{prefix}{dead}.x")  # as a SIGKILLed process leaves it
    rc = subprocess.run([sys.executable, "-m", "engine", "models", "--out", str(out),
                         "AgeNet"], cwd=REPO, capture_output=True).returncode
    model = split_copy.parent / "models" / "age_net.caffemodel"
    rc2 = subprocess.run([sys.executable, "-m", "engine", "split", str(model), "--out",
                          str(split_copy)], cwd=REPO, capture_output=True).returncode
    assert rc == rc2 == 0
    assert not list(out.glob(".models.*")) and not list(split_copy.glob(".age_net_partials.*"))


def test_older_or_other_tables_are_one_line_in_the_reports(two_runs, tmp_path, capsys):
    """ME: a summary from before the sandbox column, another table as cv_targets."""
    tables = _tables(tmp_path, two_runs)
    summary = pd.read_parquet(tables / "summary.parquet")
    summary.drop(columns=["sandbox"]).to_parquet(tables / "summary.parquet")
    rc, err = _cli(capsys, "results-report", "--tables", str(tables))
    assert rc == 2 and "has no column 'sandbox'" in err, err
    model = tmp_path / "model"
    model.mkdir()
    summary.to_parquet(model / "cv_targets.parquet")
    rc, err = _cli(capsys, "model-report", "--dir", str(model))
    assert rc == 2 and "cv_targets.parquet has no column" in err, err


def test_a_weighted_layer_without_its_partial_is_refused(split_copy, tmp_path, capsys):
    """MF: its weights would never load; refused with the description's other checks."""
    def drop(d):
        d["layers"][1].update(partial=None, partial_sha256=None, file_bytes=0,
                              model_index=None)

    _edit(split_copy / "age_net.description.json", drop)
    rc, err = _run_agenet(capsys, split_copy, tmp_path, "--policy", "linear", "--backend",
                          "none")
    assert rc == 2 and "but no partial file" in err and not (tmp_path / "run").exists()


def test_the_held_out_seed_is_bounded_as_the_verbs_bound_it():
    """MH: the pipelines verb refuses a seed past MAX_SEED; so does the config."""
    assert "is greater than the maximum" in _schema_refuses({"model": {"holdout": {"seed": 2**32}}})


def test_low_findings_of_the_fifth_pass(two_runs, split_copy, tmp_path, capsys):
    """Outputs never go into a run folder, whichever verb writes them; the same campaign
    given twice to the model is refused; pipelines are bounded as the config bounds them."""
    run = Path(shutil.copytree(two_runs[0], tmp_path / "run"))
    listing = sorted(p.name for p in run.iterdir())
    model = split_copy.parent / "models" / "age_net.caffemodel"
    for argv in (["pipelines", "--split", str(split_copy), "--out", str(run), "--count", "1",
                  "--length", "1", "1"],
                 ["split", str(model), "--out", str(run / "s")],
                 ["models", "--out", str(run), "AgeNet"]):
        rc, err = _cli(capsys, *argv)
        assert rc == 2 and "lies in the run folder" in err, (argv, err)
    assert sorted(p.name for p in run.iterdir()) == listing
    tables = _tables(tmp_path, two_runs)
    copy_of = Path(shutil.copytree(tables, tmp_path / "again" / "tables"))
    rc, err = _cli(capsys, "fit-model", "--tables", str(tables), str(copy_of), "--split",
                   str(split_copy), "--out", str(tmp_path / "m.json"))
    assert rc == 2 and "hold the same run" in err, err
    rc, err = _cli(capsys, "pipelines", "--split", str(split_copy), "--out",
                   str(tmp_path / "pl"), "--count", "10001")
    assert rc == 2 and "at most 10,000" in err


# --- the sixth held-out pass (/work/notes/adversarial-25f.md: M1-M6, L1) -------------------


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_an_interrupted_pipelines_or_tidy_leaves_none_of_its_set(split_copy, two_runs,
                                                                 tmp_path, sig):
    """M1: a signal mid-set leaves no file of the set (exit 130); the set is written
    aside and moved into place at once."""
    import signal

    runs = [shutil.copytree(two_runs[i % 2], tmp_path / "many" / f"r{i:03d}")
            for i in range(40)]
    jobs = {"pipelines": ["pipelines", "--split", str(split_copy), "--out",
                          str(tmp_path / "pl"), "--count", "10000", "--length", "1", "3"],
            "tidy": ["tidy", "--out", str(tmp_path / "td"), *map(str, runs)]}
    for verb, argv in jobs.items():
        out = Path(argv[argv.index("--out") + 1])

        def writing(out: Path = out) -> bool:  # its hidden folder (not a lock file)
            return bool([p for p in out.glob(".*") if p.is_dir()])

        # a loaded machine may let the command finish its set between the look that saw
        # it writing and the stop: that try did not test the signal, so try again
        for _ in range(5):
            # a suite under nohup (SIGHUP ignored) or in a background job (SIGINT) would
            # pass that on, and the engine honours an inherited SIG_IGN
            proc = subprocess.Popen([sys.executable, "-m", "engine", *argv], cwd=REPO,
                                    stderr=subprocess.PIPE, text=True,
                                    preexec_fn=default_signals)
            deadline = time.monotonic() + 60
            while not writing() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            # stopped where it stands, so the signal lands mid-set however loaded the
            # machine: held while it is stopped, delivered as it continues
            proc.send_signal(signal.SIGSTOP)
            if writing():
                break
            proc.send_signal(signal.SIGCONT)
            proc.communicate(timeout=120)
            shutil.rmtree(out, ignore_errors=True)
        assert writing(), f"{verb} was not caught writing its set in 5 tries"
        proc.send_signal(getattr(signal, sig))
        proc.send_signal(signal.SIGCONT)
        err = proc.communicate(timeout=120)[1]
        assert proc.returncode == 130, (verb, proc.returncode, err[-500:])
        if verb == "tidy":  # eighteenth pass L2: nor the --out it made ("nothing written")
            assert not out.exists(), list(out.iterdir())[:5]
            continue
        left = [p.name for p in out.iterdir() if not p.name.endswith(".lock")]
        assert left == [], (verb, left[:5])


def test_calibrate_interrupted_ends_its_run_and_leaves_nothing(split_copy, tmp_path):
    """M2: the run under way (here waiting for a network that arrives at 60 s) gets
    SIGTERM too, removes what it wrote, and nothing outlives calibrate."""
    import signal

    pipe = tmp_path / "late.json"
    save_pipeline(Pipeline("late", [Arrival(60.0, ["AgeNet"])], arrival_mode="given"), pipe)
    code = ("import sys; from engine.model.calibrate import _run; "
            "from engine.signals import signals_unwind\n"
            "with signals_unwind(): _run(sys.argv[1:])")
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", code, "--pipeline", str(pipe), "--policy",
                             "linear", "--split", str(split_copy), "--out", str(out),
                             "--backend", "none", "--sample-hz", "0"], cwd=REPO,
                            stderr=subprocess.PIPE, text=True, preexec_fn=default_signals)
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".run.[0-9]*")) and time.monotonic() < deadline:
        time.sleep(0.05)  # the run has started (its hidden folder)
    children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                              text=True).stdout.split()
    assert children, "the run did not start"
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    time.sleep(0.5)
    assert not any(Path(f"/proc/{pid}").exists() for pid in children)
    assert not out.exists() and not list(tmp_path.glob(".run.[0-9]*"))


def test_a_description_whose_model_index_is_not_its_partial_is_refused(split_copy, tmp_path,
                                                                       capsys):
    """M4: bulk reads the caffemodel entry model_index names, the others the partial."""
    _edit(split_copy / "age_net.description.json",
          lambda d: d["layers"][2].__setitem__("model_index", 7))
    rc, err = _run_agenet(capsys, split_copy, tmp_path, "--policy", "bulk", "--backend",
                          "none")
    assert rc == 2 and "has model_index 7 but partial" in err and not (tmp_path / "run").exists()


def test_older_tables_and_big_batches_are_refused_up_front(two_runs, tmp_path, capsys):
    """M5: a summary without its CI columns; M6: a config batch past this machine's RAM
    (as every run job would refuse it), not under inherit; L1: --out a run folder itself."""
    import psutil

    from engine.workflow.checks import check_config_batch
    from tests.unit.test_workflow_args import load_config

    tables = _tables(tmp_path, two_runs)
    summary = pd.read_parquet(tables / "summary.parquet")
    # one cell of the report, two policies apart (these runs sampled no RSS)
    summary = summary.assign(level="size_bin", size_bin="0-100 MiB",
                             peak_rss_bytes_median=100e6)
    summary = pd.concat([summary, summary.assign(policy="bulk", peak_rss_bytes_median=200e6)],
                        ignore_index=True)
    summary.drop(columns=[c for c in summary if c.endswith("_ci_low")]).to_parquet(
        tables / "summary.parquet")
    rc, err = _cli(capsys, "results-report", "--tables", str(tables))
    assert rc == 2 and "summary.parquet has no column" in err and "ci_low" in err, err
    cfg = load_config("config.yaml")
    per_image = 6 * 2**20  # AgeNet's outputs per image, about 6 MiB
    cfg["run"]["batch"] = int(psutil.virtual_memory().total / per_image * 1.2)
    with pytest.raises(ValueError, match="AgeNet alone needs about"):
        check_config_batch(cfg)
    cfg["run"]["backend"] = "inherit"
    check_config_batch(cfg)  # a cluster node's RAM is not this machine's
    cfg["run"]["batch"] = 1
    check_config_batch(load_config("config.yaml"))
    run = Path(shutil.copytree(two_runs[0], tmp_path / "r"))
    rc, err = _cli(capsys, "evaluate-model", "--tables", str(tables), "--out", str(run))
    assert rc == 2 and "is or lies in the run folder" in err, err


# --- the seventh held-out pass (/work/notes/adversarial-25g.md: H1-H2, M1, M3-M4) ----------


def test_tidy_never_deletes_what_it_did_not_write(two_runs, tmp_path, capsys):
    """H1: a folder in --out with a run's name keeps its other files; M3: a file or a
    link in that place is refused up front, naming the user's path."""
    out = tmp_path / "td"
    (out / "gg").mkdir(parents=True)
    (out / "gg" / "notes.txt").write_text("mine")
    rc, err = _cli(capsys, "tidy", "--out", str(out), str(two_runs[0]))
    assert rc == 0, err
    assert (out / "gg" / "notes.txt").read_text() == "mine"
    assert (out / "gg" / "runs.parquet").is_file()
    for make in (lambda p: p.write_text("x"), lambda p: p.symlink_to(tmp_path)):
        other = tmp_path / "td2"
        shutil.rmtree(other, ignore_errors=True)
        other.mkdir()
        make(other / "gg")
        rc, err = _cli(capsys, "tidy", "--out", str(other), str(two_runs[0]))
        assert rc == 2 and f"{other / 'gg'}, where this run's tables go, is" in err, err
        assert ".tidy." not in err


def test_an_interrupted_table_writer_leaves_none_of_its_set(two_runs, tmp_path):
    """M1: write_tables (aggregate, evaluate-model, reconstruct-model ...) moves its set
    into place at once; a signal while writing leaves none of it."""
    import signal

    code = ("import sys, pandas as pd\n"
            "from engine.analysis.tablefiles import write_tables\n"
            "big = pd.DataFrame({'x': range(3_000_000)})\n"
            "write_tables({f't{i}': big for i in range(20)}, sys.argv[1])\n")
    out = tmp_path / "tables"
    proc = subprocess.Popen([sys.executable, "-c", code, str(out)], cwd=REPO,
                            stderr=subprocess.PIPE, text=True, preexec_fn=default_signals)
    deadline = time.monotonic() + 60
    while not list(out.glob(".tables.*/*")) and time.monotonic() < deadline:
        time.sleep(0.02)  # writing into its hidden folder
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    # none of the set, nor the --out folder it made (second held-out pass M2)
    assert proc.returncode != 0 and not out.exists()


def test_a_summary_of_the_wrong_types_is_one_line(two_runs, tmp_path, capsys):
    """M4: a metric column saved as strings."""
    tables = _tables(tmp_path, two_runs)
    summary = pd.read_parquet(tables / "summary.parquet")
    summary = summary.assign(level="size_bin", size_bin="0-100 MiB", peak_rss_bytes_median=1e8)
    summary = pd.concat([summary, summary.assign(policy="bulk", peak_rss_bytes_median=2e8)],
                        ignore_index=True)
    summary.astype({"peak_rss_bytes_median": str}).to_parquet(tables / "summary.parquet")
    rc, err = _cli(capsys, "results-report", "--tables", str(tables))
    assert rc == 2 and "summary.parquet" in err and err.count("\n") == 1, err


def test_swapped_layers_with_their_digests_are_refused(split_copy, tmp_path, capsys):
    """M2 (seventh pass): layers 1 and 2 swap model_index, partial, digest and size, each
    consistent on its own: every policy reads the other layer's weights, so each refuses
    before any folder exists."""
    def swap(d):
        a, b = d["layers"][1], d["layers"][2]
        for key in ("model_index", "partial", "partial_sha256", "file_bytes"):
            a[key], b[key] = b[key], a[key]

    _edit(split_copy / "age_net.description.json", swap)
    for policy, says in (("bulk", "which is 'relu1'"), ("linear", "which holds")):
        rc, err = _run_agenet(capsys, split_copy, tmp_path, "--policy", policy, "--backend",
                              "none")
        assert rc == 2 and says in err and not (tmp_path / "run").exists(), (policy, err)


# --- the eighth held-out pass (/work/notes/adversarial-25h.md: H1-H3, M1-M6) ---------------


def test_the_aggregate_reads_exactly_the_planned_runs_each_in_its_place(two_runs, tmp_path):
    """H2, H3: a run set is rep0 .. rep<n-1>, each the run its path names: a deleted
    run, or another's run moved into its place, is refused, naming it and what to remove,
    where the aggregate silently dropped or misplaced it; a folder beyond the set's
    repetitions (left by a config of more) is not read."""
    from engine.analysis.provenance import set_runs

    for src in two_runs:  # runs/<pipeline>/linear/none/rep<i>, as the workflow lays out
        for rep in (0, 1):
            shutil.copytree(src, tmp_path / "runs" / src.name / "linear" / "none" / f"rep{rep}")
    gg = tmp_path / "runs" / "gg" / "linear" / "none"
    shutil.copytree(gg / "rep0", gg / "rep2")
    assert [t["runs"]["run_id"].iloc[0] for t in set_runs(gg, 2)] == [
        "gg/linear/none/rep0", "gg/linear/none/rep1"]
    # a repetition moved into another's slot: its seed is not the slot's (every run here is
    # a copy of one, made with one seed: rep0's slot holds it, rep1's does not)
    seed = int(set_runs(gg, 1)[0]["runs"]["seed"].iloc[0])
    assert len(set_runs(gg, 1, settings={"seed": seed})) == 1
    with pytest.raises(EdgeprofError, match=rf"rep1 was made with seed {seed}, not the "
                                            rf"config's {seed + 1} .*remove .*gg/linear/none/"
                                            rf"rep1 and run the workflow"):
        set_runs(gg, 2, settings={"seed": seed})
    with pytest.raises(EdgeprofError, match=r"rep3 holds no run \(no meta.json\); remove "
                                            r".*gg/linear/none/rep3 and run the workflow"):
        set_runs(gg, 4)
    # a probed run in an unprobed twin's place: a redo with other flags (thirteenth M1)
    with pytest.raises(EdgeprofError, match=r"made with its probes, where the config's is "
                                            r"the unprobed twin \(redone by hand\?\); "
                                            r"remove .*gg/linear/none/rep0 and run"):
        set_runs(gg, 2, probed=False)
    shutil.rmtree(gg / "rep1")
    shutil.copytree(tmp_path / "runs" / "ga" / "linear" / "none" / "rep1", gg / "rep1")
    # (ninth pass M7) another pipeline's run in the slot
    with pytest.raises(EdgeprofError, match=r"rep1 holds a run of ga/linear/none, not "
                                            r"gg/linear/none \(moved or copied into its "
                                            r"place\?\); remove .*gg/linear/none/rep1 and"):
        set_runs(gg, 2)


def test_a_folder_where_a_table_goes_refuses_the_whole_set_naming_it(two_runs, tmp_path,
                                                                     capsys):
    """M1: tidy checks each table's place up front; a writer's staged set checks every
    place before its first move, so nothing of the set is committed."""
    from engine.files import staged

    out = tmp_path / "td"
    (out / "gg" / "tasks.parquet").mkdir(parents=True)
    rc, err = _cli(capsys, "tidy", "--out", str(out), *map(str, two_runs))
    assert rc == 2 and f"{out / 'gg' / 'tasks.parquet'}, where a table" in err, err
    assert ".tidy." not in err and sorted(p.name for p in out.iterdir()) == ["gg"]
    (tmp_path / "s" / "b").mkdir(parents=True)
    (tmp_path / "s" / "a.txt").write_text("old")
    with pytest.raises(EdgeprofError, match=r"s/b: it is a folder, where a file goes"):
        with staged(tmp_path / "s", ".t.") as tmp:
            (tmp / "a.txt").write_text("new")
            (tmp / "b").write_text("new")
    assert (tmp_path / "s" / "a.txt").read_text() == "old"


def test_split_checks_where_its_set_goes_before_the_work(split_copy, tmp_path, capsys):
    """M2: a linked partials folder, or a folder where the description goes."""
    model = split_copy.parent / "models" / "age_net.caffemodel"
    (tmp_path / "a").mkdir()
    (tmp_path / "mine").mkdir()
    (tmp_path / "a" / "age_net_partials").symlink_to(tmp_path / "mine")
    rc, err = _cli(capsys, "split", str(model), "--out", str(tmp_path / "a"))
    assert rc == 2 and "age_net_partials, where the split writes its partials, is a link" in err
    (tmp_path / "b" / "age_net.description.json").mkdir(parents=True)
    rc, err = _cli(capsys, "split", str(model), "--out", str(tmp_path / "b"))
    assert rc == 2 and "where the split writes its description, is a folder" in err, err
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["age_net.description.json"]


def test_text_in_a_measured_column_and_a_campaign_with_no_finished_run(two_runs, split_copy,
                                                                       tmp_path, capsys):
    """M3: fit-model, evaluate-model, reconstruct-model and doctor name the column; M4: a
    campaign where no run finished gives no model file, and says why."""
    tables = _tables(tmp_path, two_runs)
    tasks = pd.read_parquet(tables / "tasks.parquet")
    tasks.astype({"duration_ns": str}).to_parquet(tables / "tasks.parquet")
    out = tmp_path / "m.json"
    rc, err = _cli(capsys, "fit-model", "--tables", str(tables), "--split", str(split_copy),
                   "--out", str(out))
    assert rc == 2 and "column 'duration_ns' holds" in err and err.count("\n") == 1, err
    tasks.to_parquet(tables / "tasks.parquet")
    runs = pd.read_parquet(tables / "runs.parquet")
    runs.assign(host_load1_start="high").to_parquet(tables / "runs.parquet")
    rc, err = _cli(capsys, "doctor", "--tables", str(tables))
    assert rc == 2 and "column 'host_load1_start' holds 'high'" in err, err
    runs.assign(termination="error").to_parquet(tables / "runs.parquet")
    rc, err = _cli(capsys, "fit-model", "--tables", str(tables), "--split", str(split_copy),
                   "--out", str(out))
    assert rc == 2 and "no mode could be fitted" in err and "'error': 2" in err, err
    assert not out.exists()


def test_a_project_meta_json_is_not_a_run_and_uml_refuses_a_space_up_front(
        split_copy, tmp_path, capsys):
    """M6: only a run record makes a run folder; M5: the uml sandbox's share path goes on
    its kernel's command line, so a space in it is refused before anything starts."""
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "meta.json").write_text('{"author": "me"}')
    model = split_copy.parent / "models" / "age_net.caffemodel"
    rc, err = _cli(capsys, "split", str(model), "--out", str(tmp_path / "proj" / "s"))
    assert rc == 0, err
    spaced = tmp_path / "sp ace"
    rc, err = _run_agenet(capsys, split_copy, spaced, "--policy", "linear", "--backend", "uml",
                          "--limit", "48M")
    assert rc == 2 and "has a space" in err and not (spaced / "run").exists(), err


def test_outputs_over_the_model_stages_inputs_and_messages_that_blame_the_right_file(
        two_runs, split_copy, tmp_path, capsys):
    """L2: pipelines into the split folder, the model stages into their own inputs."""
    rc, err = _cli(capsys, "pipelines", "--split", str(split_copy), "--out",
                   str(split_copy / "age_net_partials"), "--count", "1", "--length", "1", "1")
    assert rc == 2 and "would overwrite the split models it draws from" in err, err
    tables = _tables(tmp_path, two_runs)
    for verb in ("evaluate-model", "reconstruct-model"):
        rc, err = _cli(capsys, verb, "--tables", str(tables), "--split", str(split_copy),
                       "--model", str(tmp_path / "m.json"), "--out", str(tables))
        assert rc == 2 and "would overwrite the tables, descriptions or model" in err, err


# --- the ninth held-out pass (/work/notes/adversarial-25i.md: H1, M1-M9) -------------------


def test_split_never_replaces_a_partials_folder_holding_files_of_the_users(split_copy,
                                                                            tmp_path, capsys):
    """H1: the partials folder is replaced whole, so it may hold only a split's partials."""
    model = split_copy.parent / "models" / "age_net.caffemodel"
    partials = tmp_path / "age_net_partials"
    (partials / "sub").mkdir(parents=True)
    (partials / "my_notes.txt").write_text("mine")
    rc, err = _cli(capsys, "split", str(model), "--out", str(tmp_path))
    assert rc == 2 and "holds 'my_notes.txt' and 1 more" in err, err
    assert (partials / "my_notes.txt").read_text() == "mine"
    shutil.rmtree(partials)
    for _ in range(2):  # its own partials: replaced, as a re-split does
        rc, err = _cli(capsys, "split", str(model), "--out", str(tmp_path))
        assert rc == 0, err


def test_configs_that_would_fail_after_their_runs_are_refused_up_front(tmp_path):
    """M1: a limit not in its shortest spelling (folders and tables name it so); M4: a
    results path with '~' (not expanded); L: results in a run folder, or /."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from test_workflow_args import load_config, with_

    from engine.workflow.checks import check_config

    for changes, says in ((dict(run__limits=["none", "1024M"]), "'1024M' is '1G'"),
                          (dict(run__reconcile__limit="1024M"), "'1024M' is '1G'"),
                          (dict(results="~/x"), "'~' is not expanded"),
                          (dict(results="/"), "results is /"),
                          (dict(results=str(tmp_path / "r{x}")), "braces"),
                          (dict(results=str(tmp_path / "a\nb")), "control characters")):
        with pytest.raises(ValueError, match=re.escape(says)):
            check_config(with_(load_config(), **changes))


def test_a_fit_without_layer_by_layer_tasks_says_so_and_the_config_check_first(
        two_runs, split_copy, tmp_path, capsys):
    """Twentieth held-out pass D1: a campaign of bulk and partial:2 ran whole before
    fit-model refused with "needs unconstrained runs that finished" beside 14 of them;
    the reason (no layer's tasks ran alone) and its fix were never printed."""
    from engine.workflow.checks import check_config
    from tests.unit.test_workflow_args import load_config, with_

    tables = _tables(tmp_path, two_runs)
    tasks = pd.read_parquet(tables / "tasks.parquet")
    whole = tasks[~((tasks["task_type"] == "LOAD") & (tasks["layer"] >= 0))]
    whole.to_parquet(tables / "tasks.parquet")  # as bulk's: every model loaded whole
    out = tmp_path / "m.json"
    rc, err = _cli(capsys, "fit-model", "--tables", str(tables), "--split", str(split_copy),
                   "--out", str(out))
    assert rc == 2 and "no layer-by-layer tasks that ran alone" in err, err
    assert "add a single-worker policy such as linear" in err and not out.exists()
    with pytest.raises(ValueError, match=r"no policy of the native unconstrained runs "
                                         r"\(bulk, partial:2\) runs layer by layer on one "
                                         r"worker.*add linear \(or partial:1\) to "
                                         r"run.policies"):
        check_config(with_(load_config(), run__policies=["bulk", "partial:2"],
                           sandbox__policies=["bulk", "partial:2"], sandbox__also=[],
                           run__probe_overhead_policy="bulk",
                           run__reconcile__policy="bulk"))
    # twenty-first pass D1: a mode the fit could not make (here one run of the pair in
    # the caffe runtime, its layers loaded whole) is said, not only kept in the file
    runs = pd.read_parquet(tables / "runs.parquet")
    caffe = runs["run_id"].iloc[1]
    runs.assign(runtime=["lean", "caffe"]).to_parquet(tables / "runs.parquet")
    tasks.loc[tasks["run_id"] != caffe].pipe(
        lambda lean: pd.concat([lean, whole[whole["run_id"] == caffe]])).to_parquet(
            tables / "tasks.parquet")
    rc, err = _cli(capsys, "fit-model", "--tables", str(tables), "--split", str(split_copy),
                   "--out", str(out))
    assert rc == 0 and "warning: native/caffe: not fitted: the native runs have no " \
        "layer-by-layer tasks that ran alone" in err, err
    # twenty-first pass D1: each mode is fitted on its own runs: the sandbox's too
    with pytest.raises(ValueError, match=r"no policy of the sandbox's unconstrained runs "
                                         r"\(bulk\).*to sandbox.policies"):
        check_config(with_(load_config(), sandbox__policies=["bulk"], sandbox__also=[]))
    check_config(with_(load_config(), run__policies=["bulk", "partial:1"],  # partial:1 does
                       sandbox__policies=["bulk", "partial:1"], sandbox__also=[],
                       run__probe_overhead_policy="bulk", run__reconcile__policy="bulk"))


def test_names_of_the_wrong_type_and_a_fit_on_limited_runs_only(two_runs, split_copy,
                                                                tmp_path, capsys):
    """M8: a number in the policy column; M9: the refusal names what the runs were."""
    tables = _tables(tmp_path, two_runs)
    runs = pd.read_parquet(tables / "runs.parquet")
    runs.assign(policy=3.0).to_parquet(tables / "runs.parquet")
    out = tmp_path / "m.json"
    rc, err = _cli(capsys, "fit-model", "--tables", str(tables), "--split", str(split_copy),
                   "--out", str(out))
    assert rc == 2 and "column 'policy' holds 3.0" in err, err
    runs.assign(limit="512M", limit_enforced=True).to_parquet(tables / "runs.parquet")
    rc, err = _cli(capsys, "fit-model", "--tables", str(tables), "--split", str(split_copy),
                   "--out", str(out))
    assert rc == 2 and "no mode could be fitted" in err and "'512M': 2" in err, err
    assert not out.exists()


def test_evaluate_model_checks_every_output_before_the_work(two_runs, split_copy, tmp_path,
                                                            capsys):
    """M6: cv.json a folder: refused up front, none of the tables written."""
    tables = _tables(tmp_path, two_runs)
    out = tmp_path / "ev"
    (out / "cv.json").mkdir(parents=True)
    rc, err = _cli(capsys, "evaluate-model", "--tables", str(tables), "--split",
                   str(split_copy), "--model", str(tmp_path / "m.json"), "--out", str(out))
    assert rc == 2 and "cv.json is a folder" in err, err
    assert [p.name for p in out.iterdir()] == ["cv.json"]


def test_uml_refuses_a_space_in_the_share_path_however_it_gets_there(split_copy, tmp_path,
                                                                     capsys):
    """M5: a space in --out's own name, or behind a link in its parent."""
    (tmp_path / "s p").mkdir()
    (tmp_path / "lnk").symlink_to(tmp_path / "s p")
    for out in (tmp_path / "r 1", tmp_path / "lnk" / "r1"):
        pipe = tmp_path / "p.json"
        save_pipeline(Pipeline("p", [Arrival(0.0, ["AgeNet"])]), pipe)
        rc, err = _cli(capsys, "run", "--pipeline", str(pipe), "--split", str(split_copy),
                       "--policy", "linear", "--out", str(out), "--backend", "uml",
                       "--limit", "48M")
        assert rc == 2 and "has a space" in err and not out.exists(), err


def test_a_run_folder_is_told_by_its_record(two_runs, tmp_path):
    """L8: a project's meta.json with a run's keys is not a run; a run whose meta.json was
    cut short still is (its tables beside it)."""
    from engine.commands.options import is_run

    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "meta.json").write_text(
        '{"pipeline": "mine", "policy": "fast", "termination": "never"}')
    assert not is_run(tmp_path / "proj")
    run = Path(shutil.copytree(two_runs[0], tmp_path / "run"))
    assert is_run(run)
    (run / "meta.json").write_text((run / "meta.json").read_text()[:100])
    assert is_run(run)


# --- the tenth held-out pass (/work/notes/adversarial-25j.md: M1-M6) ----------------------


def test_a_run_folder_gone_is_said_so(two_runs, tmp_path, capsys):
    """M1: the aggregate names a deleted run folder as gone, not as another campaign's."""
    from engine.analysis.provenance import set_runs

    run = tmp_path / "runs" / "gg" / "linear" / "none" / "rep0"
    shutil.copytree(two_runs[0], run)
    shutil.rmtree(run)
    with pytest.raises(EdgeprofError, match=r"rep0 holds no run \(no meta.json\)"):
        set_runs(run.parent, 1)


def test_campaign_names_and_the_repositorys_folders_are_checked_up_front(tmp_path):
    """M2: two campaigns of one folder name; M6: results in resources/ or .venv/."""
    sys.path.insert(0, str(Path(__file__).parent))
    from test_workflow_args import load_config, with_

    from engine.workflow.checks import check_config

    (tmp_path / "other" / "res1").mkdir(parents=True)
    for changes, says in ((dict(results=str(tmp_path / "res1"),
                                model__campaigns=[str(tmp_path / "other" / "res1")]),
                           "name two campaigns 'res1'"),
                          (dict(results="resources/x"), "repository's own files"),
                          (dict(results=".venv/r"), "repository's own files")):
        with pytest.raises(ValueError, match=re.escape(says)):
            check_config(with_(load_config(), **changes))


def test_snakemakes_marker_is_the_workflows_not_the_users(split_copy, two_runs, tmp_path,
                                                          capsys):
    """M3: split and run --force accept the .snakemake_timestamp Snakemake leaves in a
    directory output."""
    from engine.files import SNAKEMAKE_MARKER
    from engine.runner.outdir import OutClaim

    model = split_copy.parent / "models" / "age_net.caffemodel"
    rc, err = _cli(capsys, "split", str(model), "--out", str(tmp_path / "s"))
    assert rc == 0, err
    (tmp_path / "s" / "age_net_partials" / SNAKEMAKE_MARKER).write_text("")
    rc, err = _cli(capsys, "split", str(model), "--out", str(tmp_path / "s"))
    assert rc == 0, err
    run = Path(shutil.copytree(two_runs[0], tmp_path / "run"))
    (run / SNAKEMAKE_MARKER).write_text("")
    OutClaim(run, force=True)._check()  # no refusal


def test_a_categorical_name_column_reads_and_an_odd_cpu_count_is_ignored(two_runs, tmp_path,
                                                                          capsys):
    """M4: a categorical of valid names is names; M5: host_cpus inf is not a count."""
    from engine.files import read_table

    tables = _tables(tmp_path, two_runs)
    runs = pd.read_parquet(tables / "runs.parquet")
    runs.assign(policy=runs["policy"].astype("category")).to_parquet(tables / "runs.parquet")
    assert len(read_table(tables / "runs.parquet")) == len(runs)
    runs.assign(host_cpus=float("inf")).to_parquet(tables / "runs.parquet")
    rc, err = _cli(capsys, "doctor", "--tables", str(tables))
    assert rc in (0, 1) and "Traceback" not in err, err


# --- the eleventh held-out pass (/work/notes/adversarial-25k.md: M1-M5) -------------------


def _blank_cell_is_one_line(capsys, tables: Path, split_copy: Path, table: str,
                            column: str) -> None:
    """A key name column of ``table`` with one cell blanked: fit-model says so in one
    line and writes no model."""
    df = pd.read_parquet(tables / f"{table}.parquet")
    df.loc[df.index[0], column] = None
    df.to_parquet(tables / f"{table}.parquet")
    out = tables.parent / "blank.json"
    rc, err = _cli(capsys, "fit-model", "--tables", str(tables), "--split", str(split_copy),
                   "--out", str(out))
    assert rc == 2 and f"column '{column}' has a row without a value" in err, err
    assert not out.exists()


def test_eleventh_pass_names_records_and_campaigns(two_runs, split_copy, tmp_path, capsys):
    """M3: a name column with a missing value; M4: a run's meta.json cut short; M1: a
    campaign reached through a link named like the results folder."""
    from engine.analysis.provenance import set_runs

    _blank_cell_is_one_line(capsys, _tables(tmp_path, two_runs), split_copy, "runs", "policy")
    run = tmp_path / "runs" / "gg" / "linear" / "none" / "rep0"
    shutil.copytree(two_runs[0], run)
    (run / "meta.json").write_text((run / "meta.json").read_text()[:100])
    with pytest.raises(EdgeprofError, match=r"cannot read the run record .*rep0/meta.json: "
                                            r".*; in the workflow, remove .*rep0 and run"):
        set_runs(run.parent, 1)
    sys.path.insert(0, str(Path(__file__).parent))
    from test_workflow_args import load_config, with_

    from engine.workflow.checks import check_config

    (tmp_path / "other" / "res1").mkdir(parents=True)
    (tmp_path / "alias").symlink_to(tmp_path / "other" / "res1")
    with pytest.raises(ValueError, match="name two campaigns 'res1'"):
        check_config(with_(load_config(), results=str(tmp_path / "res1"),
                           model__campaigns=[str(tmp_path / "alias")]))


def test_a_re_split_swaps_its_set_whole(split_copy, tmp_path, capsys):
    """M2: the old partials go aside and the new ones in together; nothing is left aside."""
    model = split_copy.parent / "models" / "age_net.caffemodel"
    out = tmp_path / "s"
    for _ in range(2):
        rc, err = _cli(capsys, "split", str(model), "--out", str(out))
        assert rc == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["age_net.description.json",
                                                    "age_net_partials"]
    rc, err = _run_agenet(capsys, out, tmp_path / "r", "--policy", "linear",
                          "--backend", "none")
    assert rc == 0, err


def test_a_run_redone_by_hand_with_other_settings_is_refused(two_runs, tmp_path):
    """H1 (eleventh pass): the aggregate compares each run's settings with the config's."""
    from engine.analysis.provenance import check_settings

    tables = _tables(tmp_path, two_runs)
    runs = pd.read_parquet(tables / "runs.parquet").assign(rep=0)
    seed = int(runs["seed"].iloc[0])
    settings = {"batch": 1, "blas_threads": 1, "sample_hz": 0, "seed": seed}
    check_settings(runs, settings, "fix")
    for col, other in (("batch", 2), ("blas_threads", 2), ("sample_hz", 1000),
                       ("seed", seed + 1)):
        with pytest.raises(EdgeprofError, match=f"was made with {col} .*; fix$"):
            check_settings(runs, {**settings, col: other}, "fix")


# --- the twelfth held-out pass (/work/notes/adversarial-25l.md: M1, M3) --------------------


def test_an_unset_batch_is_the_configs_unset_batch_and_a_network_name_is_never_missing(
        two_runs, split_copy, tmp_path, capsys):
    """M1: run.batch null (paper.yaml) against runs whose batch reads back as pd.NA; M3: a
    task without its network is one line."""
    from engine.analysis.provenance import check_settings

    tables = _tables(tmp_path, two_runs)
    runs = pd.read_parquet(tables / "runs.parquet").assign(rep=0)
    settings = {"blas_threads": 1, "sample_hz": 0, "seed": int(runs["seed"].iloc[0])}
    unset = runs.assign(batch=pd.array([pd.NA] * len(runs), dtype="Int64"))
    check_settings(unset, {**settings, "batch": None}, "fix")
    with pytest.raises(EdgeprofError, match="was made with batch"):
        check_settings(unset, {**settings, "batch": 1}, "fix")
    with pytest.raises(EdgeprofError, match="was made with batch"):
        check_settings(runs, {**settings, "batch": None}, "fix")
    _blank_cell_is_one_line(capsys, tables, split_copy, "tasks", "network")


# --- the twelfth held-out pass, continued (H1, H2, M2) -----------------------------------


def _workflow_run(config: dict, models: Path, pipe: Path, out: Path, limit: str,
                  drop: tuple[str, ...] = (), extra: tuple[str, ...] = ()) -> Path:
    """A linear run of ``pipe`` with the flags the workflow's rules give it
    (engine.workflow.args) under ``config``; ``drop``: flags left out, ``extra``: flags
    added (a redo by hand)."""
    import shlex

    from engine.workflow.args import batch_args, limit_args, run_options

    flags = shlex.split(" ".join([limit_args(config, limit, False), run_options(config["run"]),
                                  batch_args(config["run"]["batch"]),
                                  f"--runtime {config['run']['runtime']}"]))
    argv = ["run", "--pipeline", str(pipe), "--split", str(models), "--policy", "linear",
            "--out", str(out), "--seed", str(config["seed"]),
            *[f for f in flags if f not in drop], *extra]
    assert main(argv) == 0
    return out


def test_a_run_redone_by_hand_with_other_flags_than_the_workflows_is_refused(
        zoo_split, tmp_path, capsys, monkeypatch):
    """H1: the run's runtime, sandbox and backend, CPU pinning asked, swap, time limits,
    extra probes and its pipeline file are checked against what the workflow's flags and
    pipelines make a run record (not only batch, BLAS threads, sampling rate and seed);
    the message names the run and what to remove (M2). Thirteenth pass: H1 (heap profile,
    USS, timeout), H2 (another pipeline of the same name), M1 (probes off: a redo, not a
    copy)."""
    from engine.analysis.provenance import set_runs
    from engine.workflow.args import run_settings
    from tests.unit.test_workflow_args import load_config, with_

    models = Path(zoo_split["GenderNet"].path).parent
    config = with_(load_config(), run__backend="none", run__swap="0", run__sample_hz=0)
    assert config["run"]["pin_cpu"] is True and config["run"]["runtime"] == "lean"
    pipe = tmp_path / "pipelines" / "p000.json"
    pipe.parent.mkdir()
    save_pipeline(Pipeline("p000", [Arrival(0.0, ["GenderNet"])]), pipe)
    other = tmp_path / "elsewhere" / "p000.json"  # another campaign's p000
    other.parent.mkdir()
    save_pipeline(Pipeline("p000", [Arrival(0.0, ["GenderNet", "GenderNet"])]), other)

    # another split of GenderNet (another seed's weights), as a hand redo might read
    other_split = tmp_path / "other_split"
    prototxt, caffemodel = generate.write_zoo_model("GenderNet", tmp_path / "other_models", 8)
    splitter.split_model(caffemodel, prototxt, other_split, network="GenderNet",
                         fc_start=zoo.ZOO["GenderNet"].fc_start)

    def check(limit: str, run_pipe: Path = pipe, run_models: Path = models,
              env: dict | None = None, **redo) -> None:
        runs = tmp_path / f"runs{len(list(tmp_path.iterdir()))}" / "p000" / "linear" / limit
        with monkeypatch.context() as m:
            for name, value in (env or {}).items():
                m.setenv(name, value)
            _workflow_run(config, run_models, run_pipe, runs / "rep0", limit, **redo)
        settings = run_settings(config, limit, False, config["run"]["runtime"],
                                config["run"]["batch"])
        set_runs(runs, 1, settings=settings, pipeline_file=pipe, split_dir=models)

    check("none")
    check("1G")  # a limit with swap 0 (unenforced here: backend none)
    made = "was made with {} , not the config's"
    redos = [("none", {"extra": ("--runtime", "caffe")}, made.format("runtime 'caffe'")),
             ("none", {"drop": ("--pin-cpu",)}, made.format("cpu_pin_asked False")),
             ("none", {"extra": ("--backend", "inherit")}, made.format("backend 'inherit'")),
             ("1G", {"extra": ("--swap", "max")}, made.format("swap_bytes unset")),
             ("none", {"extra": ("--heap-profile",)}, made.format("heap_profile True")),
             ("none", {"extra": ("--sample-uss", "--sample-hz", "100")},
              made.format("sample_hz 100.0")),
             ("none", {"extra": ("--timeout", "5")}, made.format("timeout_s 5.0")),
             ("none", {"extra": ("--no-probes",)}, "was made without its probes, where the "
                                                   "config's has them"),
             ("none", {"run_pipe": other}, f"ran another pipeline than {pipe}"),
             # the fourteenth pass: another split's weights (H1), the environment (M2)
             ("none", {"run_models": other_split},
              f"read another gender_net.description.json than {models}'s"),
             ("none", {"env": {"NUMPY_MADVISE_HUGEPAGE": "1"}},
              r"was made with numpy_hugepages True, not the config's False "
              r"\(NUMPY_MADVISE_HUGEPAGE in the workflow's environment\?\); unset it, then"),
             ("none", {"env": {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=4096"}},
              made.format("mmap_threshold 4096"))]
    for limit, redo, said in redos:
        said = said if "\\(" in said else re.escape(said).replace(" ,", ".*,")
        with pytest.raises(EdgeprofError, match=rf"run p000/linear/{limit}(/caffe)?/rep0 "
                                                rf"{said}.*remove .*p000/linear/{limit}/rep0 "
                                                rf"and run the workflow again"):
            check(limit, **redo)
    # another policy's run in this slot (M1): the run folder holds it
    with pytest.raises(EdgeprofError, match=r"rep0 holds a run of p000/bulk/none, not "
                                            r"p000/linear/none \(moved or copied into its "
                                            r"place\?\); remove "):
        check("none", extra=("--policy", "bulk"))


def test_the_reconciliation_run_is_checked_as_the_workflow_asks_for_it(two_runs, tmp_path):
    """H2: the reconciliation run is the one the config names, made with the heap profile."""
    from engine.analysis.aggregate import aggregate
    from engine.analysis.tidy import tidy_run

    run = two_runs[0]
    settings = {"pipeline": "gg", "policy": "linear", "limit": "none", **{
        col: tidy_run(run)["runs"][col].iloc[0]
        for col in ("batch", "blas_threads", "sample_hz", "seed", "runtime", "sandbox")}}
    with pytest.raises(EdgeprofError, match=r"was made with heap_profile False, not the "
                                            r"config's True .*; remove "):
        aggregate([], run, reconcile_settings={**settings, "heap_profile": True})
    with pytest.raises(EdgeprofError, match=r"made with policy 'linear', not the config's "
                                            r"'bulk'.*; remove .*gg and run the workflow"):
        aggregate([], run, reconcile_settings={**settings, "policy": "bulk"})


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_during_a_re_splits_commit_says_the_set_was_written_whole(
        split_copy, tmp_path, capsys, sig):
    """M4: a signal that arrives while a re-split commits (held back) is delivered after
    it: exit 130 saying the outputs were written whole (not "nothing written"), the new
    set in place and usable, nothing hidden left behind."""
    model = split_copy.parent / "models" / "age_net.caffemodel"
    out = tmp_path / "s"
    assert _cli(capsys, "split", str(model), "--out", str(out))[0] == 0
    # the signal sent from inside the commit, as a Ctrl-C landing there
    script = ("import os, signal, sys\n"
              "import engine.caffe.splitter as s\n"
              "write = s.write_text_atomic\n"
              "def signalled(*a):\n"
              f"    os.kill(os.getpid(), signal.{sig})\n"
              "    write(*a)\n"
              "s.write_text_atomic = signalled\n"
              "from engine.cli import main\n"
              "sys.exit(main(sys.argv[1:]))\n")
    r = subprocess.run([sys.executable, "-c", script, "split", str(model), "--out", str(out)],
                       capture_output=True, text=True, timeout=120, cwd=REPO,
                       preexec_fn=default_signals)
    assert r.returncode == 130, r.stderr
    assert r.stderr.strip().splitlines()[-1] == (f"error: interrupted by {sig}; its outputs "
                                                 f"were written whole before it")
    assert sorted(p.name for p in out.iterdir()) == ["age_net.description.json",
                                                    "age_net_partials"]
    rc, err = _run_agenet(capsys, out, tmp_path / "r", "--policy", "linear",
                          "--backend", "none")
    assert rc == 0, err


def test_a_tidy_into_a_used_out_never_mixes_two_sets(two_runs, tmp_path, capsys):
    """M3 (thirteenth pass): a run another tidy left in --out would read as one of the new
    set's; refused up front, naming it, and nothing written. The same set again is fine."""
    gg, ga = two_runs
    out = tmp_path / "t"
    rc, err = _cli(capsys, "tidy", "--out", str(out), str(gg), str(ga))
    assert rc == 0, err
    rc, err = _cli(capsys, "tidy", "--out", str(out), str(gg), str(ga))
    assert rc == 0, err
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    rc, err = _cli(capsys, "tidy", "--out", str(out), str(gg))
    assert rc == 2 and f"--out {out} holds 'ga', which this tidy does not write" in err, err
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before


def test_an_infinite_rate_and_other_tunables_of_the_callers(split_copy, tmp_path, capsys,
                                                            monkeypatch):
    """Fourteenth pass M3: `pipelines --rate inf` wrote Infinity, which `run` refuses (and
    `rate: .inf` in a config passed the dry run); M2: a caller's own GLIBC_TUNABLES kept
    its other tunables but lost the engine's mmap threshold."""
    from engine.runner.meta import MMAP_THRESHOLD, mmap_threshold
    from engine.runner.supervise import child_env
    from engine.workflow.checks import check_config
    from tests.unit.test_workflow_args import load_config, with_

    for rate in ("inf", "nan"):
        rc, err = _cli(capsys, "pipelines", "--split", str(split_copy), "--out",
                       str(tmp_path / "p"), "--arrival", "poisson", "--rate", rate)
        assert rc == 2 and "positive, finite 'rate'" in err, err
        assert not (tmp_path / "p").exists() or not any((tmp_path / "p").iterdir())
    with pytest.raises(ValueError, match="positive, finite 'rate'"):
        check_config(with_(load_config(), pipelines__arrival={"mode": "poisson",
                                                              "rate": float("inf")}))
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")
    tunables = child_env()["GLIBC_TUNABLES"]
    assert tunables.startswith("glibc.malloc.arena_max=2:")
    assert mmap_threshold(tunables) == MMAP_THRESHOLD == 131072
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=4096")
    assert mmap_threshold(child_env()["GLIBC_TUNABLES"]) == 4096  # the caller's, recorded


# --- the seventeenth held-out pass (/work/notes/adversarial-25q.md) ----------------------


def test_a_run_whose_child_was_killed_passes_the_settings_it_could_not_report(
        split_copy, tmp_path, capsys):
    """M1: a timed-out (or OOM-killed) run is a result: its child wrote no summary, so
    the hugepage advice and malloc settings it would have reported are unknown, and the
    aggregate must not refuse it for them; a finished run that reports other ones still
    is refused."""
    from engine.analysis.provenance import check_settings
    from engine.analysis.tidy import tidy_run
    from engine.runner.meta import MMAP_THRESHOLD

    pipe = tmp_path / "p.json"
    save_pipeline(Pipeline("p", [Arrival(0.0, ["AgeNet"]), Arrival(30.0, ["GenderNet"])],
                           arrival_mode="given"), pipe)
    rc, err = _cli(capsys, "run", "--pipeline", str(pipe), "--split", str(split_copy),
                   "--out", str(tmp_path / "run"), "--policy", "linear", "--backend", "none",
                   "--timeout", "3", "--sample-hz", "0")
    assert rc == 0, err  # a timeout is a result
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert (meta["termination"], meta["child"]) == ("timeout", None), err
    runs = tidy_run(tmp_path / "run")["runs"].assign(rep=0)
    wanted = {"numpy_hugepages": False, "mmap_threshold": MMAP_THRESHOLD}  # run_settings'
    check_settings(runs, wanted, "fix")
    with pytest.raises(EdgeprofError, match="was made with numpy_hugepages True"):
        check_settings(runs.assign(numpy_hugepages=True), wanted, "fix")


def test_a_split_sweeps_what_a_killed_split_of_another_network_left(split_copy, tmp_path,
                                                                     capsys):
    """L1: the hidden folder of a SIGKILLed split (its owner gone) goes with the next split
    into that --out, whichever network it splits; a live owner's stays."""
    import subprocess

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a PID whose process is gone
    out = tmp_path / "s"
    dead = out / f".face_full_conv_partials.{gone.pid}.x1y2"
    live = out / ".face_full_conv_partials.1.x3y4"  # PID 1 is alive
    for folder in (dead, live):
        (folder / "x").mkdir(parents=True)
    model = split_copy.parent / "models" / "age_net.caffemodel"
    rc, err = _cli(capsys, "split", str(model), "--out", str(out))
    assert rc == 0, err
    assert not dead.exists() and live.exists()


def test_tidy_and_pipelines_name_what_their_input_is_and_the_fix(tmp_path, capsys):
    """L5: a FIFO given to tidy is a FIFO (not "does not exist"); an empty --split folder
    says to split first."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    rc, err = _cli(capsys, "tidy", "--out", str(tmp_path / "t"), str(fifo))
    assert (rc, err.strip()) == (2, f"error: {fifo} is a FIFO, not a run folder; give the "
                                    f"folders python -m engine run wrote")
    (tmp_path / "empty").mkdir()
    rc, err = _cli(capsys, "pipelines", "--split", str(tmp_path / "empty"), "--out",
                   str(tmp_path / "p"))
    assert rc == 2 and "holds no network descriptions; split the models first" in err, err
    assert not (tmp_path / "t").exists() and not (tmp_path / "p").exists()


def test_pipelines_refuses_an_arrival_parameter_of_another_mode(zoo_split, tmp_path, capsys):
    """L4: --rate with batch arrivals was silently ignored."""
    models = str(Path(zoo_split["AgeNet"].path).parent)
    rc, err = _cli(capsys, "pipelines", "--split", models, "--out", str(tmp_path / "p"),
                   "--arrival", "batch", "--rate", "5")
    assert (rc, err.strip()) == (2, "error: --rate is for poisson arrivals, not batch; drop "
                                    "it or give --arrival poisson")
    rc, err = _cli(capsys, "pipelines", "--split", models, "--out", str(tmp_path / "p"),
                   "--arrival", "normal", "--mean", "2")
    assert rc == 0, err
    drawn = json.loads((tmp_path / "p" / "p000.json").read_text())["generator"]["arrival"]
    assert drawn == {"mode": "normal", "mean": 2.0, "sd": 0.5}  # the --help default


def test_a_run_ended_before_any_network_did_is_tidied_and_aggregated(split_copy, tmp_path,
                                                                     capsys):
    """Eighteenth pass M1: a run timed out (or killed) before its first network finished
    wrote networks.csv's header alone; tidy ended in a KeyError traceback, so nothing of
    the campaign could be aggregated. It is a result: its makespan is unknown."""
    from engine.analysis.aggregate import aggregate
    from engine.analysis.tidy import tidy_run

    rc, err = _run_agenet(capsys, split_copy, tmp_path, "--policy", "linear", "--backend",
                          "none", "--timeout", "0.001", "--sample-hz", "0")
    assert rc == 0, err
    assert (tmp_path / "run" / "networks.csv").read_text().count("\n") == 1  # header only
    rc, err = _cli(capsys, "tidy", "--out", str(tmp_path / "t"), str(tmp_path / "run"))
    assert rc == 0, err
    runs = aggregate([tidy_run(tmp_path / "run")], None)["runs"]
    assert runs["termination"].tolist() == ["timeout"]
    assert runs["makespan_s"].isna().all() and runs["tasks_finished"].tolist() == [0]


def test_a_description_named_as_another_zoo_network_is_refused(split_copy, tmp_path, capsys):
    """Twentieth pass M1: AgeNet's description relabelled GenderNet was measured and
    tabled as GenderNet; its stem changed too, it no longer names its own file. split
    refuses the same label up front."""
    desc = split_copy / "age_net.description.json"
    _edit(desc, lambda d: d.update(network="GenderNet"))
    for argv in (["graph", "--policy", "linear", "--description", str(desc), "--out",
                  str(tmp_path / "g.dot")],
                 ["forward", str(desc), "--out", str(tmp_path / "o.npz")]):
        rc, err = _cli(capsys, *argv)
        assert rc == 2 and "named GenderNet, the zoo's network of gender_net files, but " \
                           "these are age_net's" in err, err
    _edit(desc, lambda d: d.update(stem="gender_net"))
    rc, err = _cli(capsys, "graph", "--policy", "linear", "--description", str(desc), "--out",
                   str(tmp_path / "g.dot"))
    assert rc == 2 and "describes stem 'gender_net', not its own file's" in err, err
    model = split_copy.parent / "models" / "age_net.caffemodel"
    rc, err = _cli(capsys, "split", str(model), "--network", "GenderNet", "--out",
                   str(tmp_path / "s"))
    assert rc == 2 and "named GenderNet" in err and not (tmp_path / "s").exists(), err

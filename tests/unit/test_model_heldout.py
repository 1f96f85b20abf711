"""The model half of the campaign against the held-out report's findings (report 36):
a sandbox run that never started (F1), a held-out pipeline that is a training
pipeline's twin (F3), a model file edited by hand (F9)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from engine.analysis.tablefiles import write_tables
from engine.analysis.tidy import tidy_run
from engine.caffe import splitter
from engine.cli import build_parser, main
from engine.commands.run import run_request
from engine.model.params import Model
from engine.sandbox import run as vmrun
from engine.sandbox import run_in_sandbox
from engine.schedule.pipelines import Arrival, Pipeline, save_pipeline
from tests.model_fixtures import TINY, campaign, write_network
from tests.unit.test_sandbox_failures import boot_timeout


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> splitter.Description:
    return write_network(tmp_path_factory.mktemp("tiny"), TINY)


def never_started(tiny: splitter.Description, root: Path, name: str) -> dict[str, pd.DataFrame]:
    """The tidy tables of a uml run of pipeline ``name`` ([Tiny, Tiny]) whose guest
    never came up (the boot faked as timed out, as test_sandbox_failures does)."""
    save_pipeline(Pipeline(name, [Arrival(0.0, ["Tiny", "Tiny"])]), root / f"{name}.json")
    request = run_request(build_parser().parse_args(
        ["run", "--pipeline", str(root / f"{name}.json"), "--split",
         str(Path(tiny.path).parent), "--policy", "linear", "--out", str(root / "failed"),
         "--backend", "vm", "--limit", "256M", "--batch", "1"]))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(vmrun, "boot_job", boot_timeout)
        assert run_in_sandbox(request).termination == "error"
    return tidy_run(root / "failed")


def _tables(folder: Path, parts: list[tuple[pd.DataFrame, ...]]) -> str:
    runs, tasks, networks = (pd.concat(t, ignore_index=True) for t in zip(*parts))
    write_tables({"runs": runs, "tasks": tasks, "networks": networks}, folder)
    return str(folder)


def test_a_run_that_never_started_never_stops_the_model(tiny, tmp_path, capsys):
    """F1: its networks rows have no arrival; listed first, fit-model and score-holdout
    rebuilt its pipeline from it (int(NaN): a traceback, exit 1). Skipped, the fit is the
    one without it, held-out pipelines are scored as without it, and the summary still
    counts it not ok."""
    split = str(Path(tiny.path).parent)
    failed = never_started(tiny, tmp_path, "p001")
    nets = failed["networks"]
    assert nets["arrival"].isna().all() and len(nets) == 2  # what the tester saw
    train = campaign({"Tiny": tiny}, {"p000": ["Tiny"], "p001": ["Tiny", "Tiny"]})
    held = campaign({"Tiny": tiny}, {"hp000": ["Tiny", "Tiny", "Tiny"]})
    # in the synthetic tables' columns (they lack the tidy identity columns); no tasks
    bad = (failed["runs"][train[0].columns], train[1].iloc[:0],
           failed["networks"][train[2].columns])
    clean = _tables(tmp_path / "clean", [train])
    dirty = _tables(tmp_path / "dirty", [bad, train])  # the failed run comes first
    # and a native held-out pipeline whose one run was killed before it wrote arrivals
    native = bad[0].assign(pipeline="hp001", run_id="hp001/x", backend="none",
                           emulated=False, limit="none", limit_bytes=float("nan"),
                           termination="memory", networks="Tiny Tiny Tiny", record_digest="x")
    native_nets = pd.concat([bad[2].iloc[:1]] * 3, ignore_index=True).assign(
        pipeline="hp001", run_id="hp001/x", instance=[0, 1, 2])
    held_dirty = _tables(tmp_path / "held", [
        (bad[0].assign(pipeline="hp000"), bad[1], bad[2].assign(pipeline="hp000")),
        (native, bad[1], native_nets), held])
    kept = pd.read_parquet(Path(dirty) / "runs.parquet")
    assert kept["termination"].tolist().count("error") == 1  # the tables still hold it

    for tables, out in ((clean, "clean.json"), (dirty, "dirty.json")):
        code = main(["fit-model", "--tables", tables, "--split", split, "--out",
                     str(tmp_path / out)])
        assert code == 0, capsys.readouterr().err
    with_failed, without = (Model.read(tmp_path / f) for f in ("dirty.json", "clean.json"))
    assert with_failed.modes == without.modes  # the native fit: none of the failed run

    def score(tables: str, out: str) -> pd.DataFrame:
        code = main(["score-holdout", "--tables", tables, "--split", split, "--model",
                     str(tmp_path / "clean.json"), "--out", str(tmp_path / out),
                     "--orderings", "1"])
        err = capsys.readouterr().err
        assert code == 0, err
        return pd.read_parquet(tmp_path / out / "holdout_predictions.parquet"), err

    (scored, err), (alone, _) = score(held_dirty, "s_dirty"), score(
        _tables(tmp_path / "held_clean", [held]), "s_clean")
    assert "left out hp001: no run of it recorded its arrivals" in err, err
    assert set(scored["pipeline"]) == {"hp000"} and len(scored) == len(alone) == 2
    pd.testing.assert_series_equal(scored["predicted_makespan_s"],
                                   alone["predicted_makespan_s"])
    code = main(["evaluate-model", "--tables", dirty, "--split", split, "--model",
                 str(tmp_path / "dirty.json"), "--out", str(tmp_path / "cv"),
                 "--orderings", "1"])
    assert code == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "cv" / "cv.json").read_text())["native/lean"]


def test_a_held_out_twin_of_a_training_pipeline_is_left_out_and_named(tiny, tmp_path,
                                                                      capsys):
    """F3: hp000 is [Tiny, Tiny] as the training p001 is, in another file (its SHA-256
    and name differ): it was scored as held out. Left out and named; hp001 [Tiny x3],
    which no training pipeline is, is scored."""
    split = str(Path(tiny.path).parent)
    train = _tables(tmp_path / "train", [campaign({"Tiny": tiny},
                                                  {"p000": ["Tiny"], "p001": ["Tiny"] * 2})])
    runs, tasks, networks = campaign({"Tiny": tiny}, {"hp000": ["Tiny"] * 2,
                                                      "hp001": ["Tiny"] * 3})
    held = _tables(tmp_path / "held", [(runs.assign(record_digest=runs["run_id"] + " held"),
                                        tasks, networks)])
    assert main(["fit-model", "--tables", train, "--split", split, "--out",
                 str(tmp_path / "m.json")]) == 0
    capsys.readouterr()
    code = main(["score-holdout", "--tables", held, "--split", split, "--model",
                 str(tmp_path / "m.json"), "--out", str(tmp_path / "s"), "--orderings", "1"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "left out hp000: twin(s) of a training pipeline" in err, err
    scored = pd.read_parquet(tmp_path / "s" / "holdout_predictions.parquet")
    assert sorted(scored["pipeline"]) == ["hp001", "hp001"]  # linear and partial:2
    notes = pd.read_parquet(tmp_path / "s" / "holdout_scores.parquet")["note"]
    assert notes.str.contains("hp000").any()


@pytest.mark.parametrize("edit", ["empty trained_on", "no digest"])
def test_a_model_file_edited_by_hand_is_refused(tiny, tmp_path, capsys, edit):
    """F9: with trained_on's lists emptied by hand, score-holdout scored the training
    runs themselves as held out (exit 0). The file is sealed: refused, naming the fix."""
    split = str(Path(tiny.path).parent)
    train = _tables(tmp_path / "train", [campaign({"Tiny": tiny},
                                                  {"p000": ["Tiny"], "p001": ["Tiny"] * 2})])
    model = tmp_path / "m.json"
    assert main(["fit-model", "--tables", train, "--split", split, "--out", str(model)]) == 0
    data = json.loads(model.read_text())
    if edit == "no digest":
        del data["model_digest"]
    else:
        data["trained_on"].update(record_digests=[], pipeline_sha256s=[],
                                  pipeline_contents={})
    model.write_text(json.dumps(data, indent=1))
    capsys.readouterr()
    code = main(["score-holdout", "--tables", train, "--split", split, "--model",
                 str(model), "--out", str(tmp_path / "s"), "--orderings", "1"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert str(model) in err and "refit it with fit-model" in err, err
    assert not (tmp_path / "s").exists()


# report 36b


@pytest.mark.parametrize("verb", ["fit-model", "evaluate-model", "score-holdout"])
def test_a_finished_run_without_an_arrival_is_a_damaged_table(tiny, tmp_path, capsys, verb):
    """M1: NaN arrival_ns in a finished run's networks rows was skipped as if the run
    never started, and the fitted baseline moved. Refused in one line naming the table,
    the column, a run and the fix, by every verb that reads the tables."""
    split = str(Path(tiny.path).parent)
    runs, tasks, networks = campaign({"Tiny": tiny}, {"p000": ["Tiny"], "p001": ["Tiny"] * 2})
    good = _tables(tmp_path / "good", [(runs, tasks, networks)])
    assert main(["fit-model", "--tables", good, "--split", split, "--out",
                 str(tmp_path / "m.json")]) == 0
    capsys.readouterr()
    hit = networks["run_id"] == "p001/linear/none/rep1"  # finished (termination ok)
    assert hit.sum() == 2 and set(runs.loc[runs["run_id"] == "p001/linear/none/rep1",
                                           "termination"]) == {"ok"}
    bad = _tables(tmp_path / "bad", [(runs, tasks,
                                      networks.assign(arrival_ns=networks["arrival_ns"]
                                                      .where(~hit)))])
    args = {"fit-model": ["--out", str(tmp_path / "x.json")],
            "evaluate-model": ["--model", str(tmp_path / "m.json"), "--out",
                               str(tmp_path / "ev")],
            "score-holdout": ["--model", str(tmp_path / "m.json"), "--out",
                              str(tmp_path / "sh")]}[verb]
    code = main([verb, "--tables", bad, "--split", split, *args])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert f"{bad}/networks.parquet" in err and "arrival_ns" in err, err
    assert "p001/linear/none/rep1" in err and "1 finished run(s)" in err, err
    assert "rerun the tidy and aggregate stages" in err, err
    assert not (tmp_path / "x.json").exists()


def test_a_fold_of_twins_holding_every_pipeline_says_why_in_words(tiny, tmp_path, capsys):
    """M3: p000 and p001 are both [Tiny, Tiny]: one leave-pipeline-out fold holds both,
    nothing is left to train on, and the note read "fold p000+p001: None"; stderr
    printed the summary as a Python dict, and advise repeated the None."""
    split = str(Path(tiny.path).parent)
    tables = _tables(tmp_path / "t", [campaign({"Tiny": tiny}, {"p000": ["Tiny"] * 2,
                                                                "p001": ["Tiny"] * 2})])
    model = tmp_path / "model" / "m.json"
    model.parent.mkdir()
    assert main(["fit-model", "--tables", tables, "--split", split, "--out", str(model)]) == 0
    capsys.readouterr()
    code = main(["evaluate-model", "--tables", tables, "--split", split, "--model",
                 str(model), "--out", str(model.parent), "--orderings", "1"])
    err = capsys.readouterr().err
    assert code == 0, err
    scores = pd.read_csv(model.parent / "cv_scores.csv")
    lpo = scores[(scores["scheme"] == "leave-pipeline-out")
                 & (scores["metric"] == "cross-validation")]["note"].tolist()
    assert lpo == ["fold p000+p001: not cross-validated: every pipeline is a twin of this "
                   "fold's (the same networks): nothing left to train on; two pipelines "
                   "of other networks are needed"], lpo
    assert "None" not in scores["note"].astype(str).str.cat(sep=" ")
    assert "{" not in err and "None" not in err, err  # text lines, not a dict's repr
    assert "native/lean leave-pipeline-out: fold p000+p001: not cross-validated" in err, err
    save_pipeline(Pipeline("q", [Arrival(0.0, ["Tiny", "Tiny"])]), tmp_path / "q.json")
    assert main(["advise", "--pipeline", str(tmp_path / "q.json"), "--model", str(model),
                 "--split", split]) == 0
    out = capsys.readouterr().out
    assert "leave-pipeline-out: unknown (fold p000+p001: not cross-validated" in out, out
    assert "None" not in out, out


@pytest.mark.parametrize("verb", ["score-holdout", "evaluate-model"])
def test_tables_that_cannot_be_written_name_the_file_and_leave_no_out(tiny, tmp_path, verb):
    """M2 (report 36b): under a file size limit (a full disk would do the same) both said
    "cannot write: Error writing bytes to file..." without a file, and left the empty
    --out they had created. Exit 1 naming the table being written; no --out, nor the
    parent it created."""
    import re
    import subprocess
    import sys

    from tests.unit.test_faults import REPO, _file_size_limit

    split = str(Path(tiny.path).parent)
    train = _tables(tmp_path / "train", [campaign({"Tiny": tiny},
                                                  {"p000": ["Tiny"], "p001": ["Tiny"] * 2})])
    held = _tables(tmp_path / "held", [campaign({"Tiny": tiny}, {"hp000": ["Tiny"] * 3})])
    assert main(["fit-model", "--tables", train, "--split", split, "--out",
                 str(tmp_path / "m.json")]) == 0
    before = sorted(p.name for p in tmp_path.iterdir())
    out = tmp_path / "new" / "out"
    # 1 KiB: below every table either verb writes (a parquet file's footer alone is more)
    r = subprocess.run([sys.executable, "-m", "engine", verb, "--tables",
                        held if verb == "score-holdout" else train, "--split", split,
                        "--model", str(tmp_path / "m.json"), "--out", str(out),
                        "--orderings", "1"], cwd=REPO, capture_output=True, text=True,
                       timeout=300, preexec_fn=_file_size_limit(1024))
    assert r.returncode == 1, r.stderr
    table = rf"{re.escape(str(out))}/\w+\.(csv|parquet)"
    assert re.search(rf"^error: cannot write {table}: File too large \(EFBIG\)$", r.stderr,
                     re.M), r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no "new", no "out"


def test_a_parquet_table_that_cannot_be_written_is_named(tmp_path):
    """M2: pyarrow's write error has an errno but neither file name nor strerror. A table
    whose CSV (a few bytes) fits under the limit and whose Parquet file does not: the
    Parquet file is named, in the errno's words."""
    import subprocess
    import sys

    from tests.unit.test_faults import REPO, _file_size_limit

    code = ("import sys, pandas as pd\n"
            "from engine.analysis.tablefiles import write_tables\n"
            "from engine.files import write_failure\n"
            "try:\n"
            "    write_tables({'t': pd.DataFrame({'x': [1]})}, sys.argv[1])\n"
            "except OSError as exc:\n"
            "    print(write_failure(exc))\n")
    out = tmp_path / "new" / "out"
    r = subprocess.run([sys.executable, "-c", code, str(out)], cwd=REPO, capture_output=True,
                       text=True, timeout=120, preexec_fn=_file_size_limit(512))
    assert r.stdout == f"cannot write {out}/t.parquet: File too large (EFBIG)\n", r.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_model_file_that_cannot_be_written_leaves_no_folder(tiny, tmp_path):
    """Eleventh held-out pass L5: fit-model under a file size limit said so and left the
    empty folder it had made for the model file."""
    import subprocess
    import sys

    from tests.unit.test_faults import REPO, _file_size_limit

    train = _tables(tmp_path / "train", [campaign({"Tiny": tiny},
                                                  {"p000": ["Tiny"], "p001": ["Tiny"] * 2})])
    before = sorted(p.name for p in tmp_path.iterdir())
    out = tmp_path / "new" / "deeper" / "model.json"
    r = subprocess.run([sys.executable, "-m", "engine", "fit-model", "--tables", train,
                        "--split", str(Path(tiny.path).parent), "--out", str(out)],
                       cwd=REPO, capture_output=True, text=True, timeout=300,
                       preexec_fn=_file_size_limit(1024))
    assert r.returncode == 1 and "File too large (EFBIG)" in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no "new"


def test_a_target_without_cells_says_why():
    """Fifteenth held-out pass, a low: score-holdout on tables of a mode the model has no
    fit of marked every target "no cells" with an empty note."""
    from engine.model.evaluate import HELD_OUT_SEED, scores, target_table

    why = "the model has no uml/lean fit"
    targets = target_table(scores(pd.DataFrame(), [("uml/lean", HELD_OUT_SEED, why)]))
    assert len(targets) > 0 and (targets["met"] == "no cells").all()
    assert (targets["note"] == why).all()

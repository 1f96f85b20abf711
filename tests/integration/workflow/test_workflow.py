"""The whole workflow on a tiny config, for real: every table and figure, then dry runs
proving that a change reruns only the jobs it affects."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from tests.integration.snakemake_output import job_counts

REPO = Path(__file__).resolve().parents[3]
FIGURES = ["speedup", "memory", "partial_workers", "layer_times", "reconciliation",
           "memory_over_time", "attribution"]
TABLES = ["runs", "tasks", "networks", "samples", "reconcile", "speedup", "summary",
          "speedup_summary", "noise_floor", "probe_overhead"]
RECORD_IMPORTS = REPO / "tests" / "record_imports"
MODEL_FIGURES = ["model_predictions", "model_residuals", "swap_cost"]
# what follows a change to the aggregate tables: the model refit, evaluated, rebuilt at
# native speed and drawn
MODEL_JOBS = {"fit_model": 1, "evaluate_model": 1, "reconstruct_model": 1,
              "model_plot": len(MODEL_FIGURES)}

pytestmark = pytest.mark.slow


def tiny_config(results: Path) -> dict:
    return {
        "seed": 0, "results": str(results),
        "models": {"zoo": ["AgeNet", "GenderNet"], "user": [], "user_dir": "resources/models"},
        "pipelines": {"count": 1, "length": [2, 2], "arrival": {"mode": "batch"},
                      "bins": [150, 400]},
        "run": {"policies": ["bulk", "linear"], "limits": ["none", "256M"], "swap": "max",
                "backend": "none", "repetitions": 3, "batch": 1, "blas_threads": 1,
                "timeout_s": 300, "sample_hz": 50, "pin_cpu": True,
                "probe_overhead_policy": "linear",
                "reconcile": {"pipeline": "p000", "policy": "linear", "limit": "none",
                              "sandbox": False}},
        # merged into config/config.yaml, whose sandbox block is enabled: run the limits natively
        "sandbox": {"enabled": False},
        # config/config.yaml holds out two pipelines for the model: none here
        "model": {"holdout": {"seed": 1000, "pipelines": 0, "sandbox_pipelines": 0}},
        "plots": {"dpi": 80, "font_size": 9, "palette": "tab10"},
    }


class Workflow:
    """A private copy of the workflow and engine, so a test may edit its code."""

    def __init__(self, root: Path) -> None:
        self.root = root / "repo"
        for part in ("engine", "workflow", "config", "profiles", "envs"):
            shutil.copytree(REPO / part, self.root / part,
                            ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(REPO / "Snakefile", self.root / "Snakefile")
        self.results = root / "results"
        self.config = root / "tiny.yaml"
        self.write_config(tiny_config(self.results))

    def write_config(self, cfg: dict) -> None:
        self.config.write_text(yaml.safe_dump(cfg))

    def snakemake(self, *args: str, **env: str) -> subprocess.CompletedProcess:
        # the copy's engine, not the repo's
        env = dict(os.environ, PYTHONPATH=str(self.root)) | env
        return subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", *args,
                               "--configfile", str(self.config)],
                              cwd=self.root, env=env, capture_output=True, text=True,
                              timeout=900)

    def planned_jobs(self) -> Counter:
        """Rule -> job count of a dry run."""
        r = self.snakemake("--dry-run", "--quiet", "rules")
        assert r.returncode == 0, r.stderr[-3000:]
        return job_counts(r.stdout + r.stderr)


@pytest.fixture(scope="module")
def workflow(tmp_path_factory) -> Workflow:
    wf = Workflow(tmp_path_factory.mktemp("wf"))
    # every job's processes record the engine modules they import (record_imports/)
    wf.imports = tmp_path_factory.mktemp("imports")
    r = wf.snakemake(PYTHONPATH=f"{wf.root}{os.pathsep}{RECORD_IMPORTS}",
                     EDGEPROF_TEST_IMPORTS=str(wf.imports))
    assert r.returncode == 0, r.stderr[-5000:]
    return wf


def test_every_table_and_figure_is_written_and_plausible(workflow):
    tables = workflow.results / "tables"
    for name in TABLES:
        csv = pd.read_csv(tables / f"{name}.csv")
        parquet = pd.read_parquet(tables / f"{name}.parquet")
        assert len(csv) == len(parquet) > 0, name
    runs = pd.read_parquet(tables / "runs.parquet")
    assert len(runs) == 12
    assert set(runs.policy) == {"bulk", "linear"} and set(runs["limit"]) == {"none", "256M"}
    assert set(runs.rep) == {0, 1, 2} and runs.cpu_pin_asked.all()
    # pinned, unless another edgeprof run beside the suite (a developer's) held the CPUs:
    # the record then says so
    why = {json.loads(m.read_text())["cpu_affinity"]["why_not"]
           for m in (workflow.results / "runs").rglob("meta.json")} - {""}
    assert runs.cpu_pinned.all() or why == {"other runs' pinned children hold the CPUs"}, why
    assert (runs.cpu_s > 0).all() and (runs.host_busy_cpus > 0).all()
    # the run's own CPU time (its child's among it) is not counted as other work's
    assert (runs.host_other_cpus <= runs.host_busy_cpus - 0.8 * runs.cpu_s / runs.wall_s).all()
    assert (runs.termination == "ok").all()
    # backend none cannot enforce 256M: it must say so, never pass as limited
    assert not runs.limit_enforced.any()
    assert (runs.makespan_s > 0).all() and (runs.makespan_s < 60).all()
    # GNU time saw at least the interpreter and numpy (its max RSS is what follows the
    # last window's VmHWM reset, so it is small: 41-55 MiB here)
    assert (runs.gt_max_rss_bytes > 30 * 2**20).all()
    assert (runs.hwm_rss_bytes >= runs.gt_max_rss_bytes).all()
    tasks = pd.read_parquet(tables / "tasks.parquet")
    loads = tasks[(tasks.task_type == "LOAD") & (tasks.policy == "linear")]
    # linear loads every weight of the pipeline exactly once, at every limit
    pipeline_bytes = runs.loc[runs.policy == "linear"].set_index(["limit", "rep"]).param_bytes
    loaded = loads.groupby(["limit", "rep"]).bytes_loaded.sum()
    assert (loaded == pipeline_bytes[loaded.index]).all() and len(loaded) == 6
    assert set(pipeline_bytes) <= {4 * n for n in (2 * 11_415_048, 2 * 11_411_970,
                                                   11_415_048 + 11_411_970)}
    speed = pd.read_parquet(tables / "speedup.parquet")
    assert (speed[speed.policy == "bulk"].speedup == 1.0).all()
    # one speed-up per repetition, summarized with a CI and a significance flag per cell
    summary = pd.read_parquet(tables / "speedup_summary.parquet")
    cell = summary[(summary.level == "pipeline") & (summary.policy == "linear")]
    assert len(cell) == 2 and (cell.speedup_n == 3).all()
    assert (cell.speedup_ci_low <= cell.speedup_median).all()
    assert (cell.speedup_median <= cell.speedup_ci_high).all()
    # three pairs never carry a claim (stats.MIN_N_SIGNIFICANT): flagged as such
    assert set(cell.speedup_significance) == {"too few runs"}
    assert {"speedup_ci_scope", "pairs_missing", "missing_why"} <= set(summary.columns)
    limited = summary[(summary.level == "pipeline") & (summary["limit"] == "256M")]
    assert limited.slowdown_n.eq(3).all() and limited.slowdown_median.notna().all()
    times = pd.read_parquet(tables / "summary.parquet")
    assert {"makespan_s_median", "makespan_s_ci_low", "makespan_s_ci_high",
            "peak_rss_bytes_median", "hwm_rss_bytes_ci_high"} <= set(times.columns)
    assert set(times.level) == {"pipeline", "size_bin"} and (times.runs == 3).all()
    floor = pd.read_parquet(tables / "noise_floor.parquet").set_index(["mode", "metric"])
    assert floor.loc[("native", "makespan"), "cells"] == 4
    assert 0 < floor.loc[("native", "makespan"), "cv_median"] < 1
    overhead = pd.read_parquet(tables / "probe_overhead.parquet").set_index("pipeline")
    assert overhead.loc["p000", "pairs"] == 3 and overhead.loc["all", "pairs"] == 3
    assert np.isfinite(overhead.loc["p000", "overhead_pct_median"])
    samples = pd.read_parquet(tables / "samples.parquet")
    assert samples.rss_bytes.max() > 50 * 2**20
    rec = pd.read_parquet(tables / "reconcile.parquet")
    load = rec[(rec.task_type == "LOAD") & (rec.param_bytes > 0)]
    assert (load.heap_inuse_delta - load.param_bytes).abs().max() <= 0.01 * load.param_bytes.max()
    for folder, figures in (("plots", FIGURES), ("model", MODEL_FIGURES)):
        for fig in figures:
            for ext in ("png", "pdf"):
                assert (workflow.results / folder / f"{fig}.{ext}").stat().st_size > 5000, fig


def test_the_workflow_leaves_every_engine_module_compiled_for_its_jobs(workflow):
    # checked-hash pycs of the very sources (PEP 552: flags 3, then the source's hash),
    # which an interpreter with PYTHONDONTWRITEBYTECODE reads instead of compiling
    for source in (workflow.root / "engine").rglob("*.py"):
        head = Path(importlib.util.cache_from_source(str(source))).read_bytes()[:16]
        assert head[:4] == importlib.util.MAGIC_NUMBER, source
        assert int.from_bytes(head[4:8], "little") == 3, source
        assert head[8:16] == importlib.util.source_hash(source.read_bytes()), source


def test_the_model_is_fitted_on_the_runs_and_predicts_them(workflow):
    """One pipeline: the native mode is fitted (on the unconstrained runs: 256M was not
    enforced) but cannot be cross-validated, and says so; in-sample, its makespans are
    those of the runs within the noise of three repetitions of sub-second runs."""
    from engine.model.params import Model
    from engine.model.predict import Networks, predict
    from engine.model.train import pipelines_from_networks, read_tables

    model_dir = workflow.results / "model"
    model = Model.read(model_dir / "model.json")
    native = model.mode("native")
    assert native.runs == 6 and native.pipelines == ["p000"] and native.swap is None
    assert 20 * 2**20 < native.baseline_bytes < 200 * 2**20 and native.cpus == 1
    cv = json.loads((model_dir / "cv.json").read_text())
    assert "not cross-validated" in " ".join(cv["native/lean"]["leave-pipeline-out"]["notes"])
    assert "cannot be held out" in " ".join(cv["native/lean"]["leave-network-out"]["notes"])
    assert pd.read_parquet(model_dir / "cv_predictions.parquet").empty
    resid = pd.read_parquet(model_dir / "layer_residuals.parquet")
    assert set(resid.task_type) == {"INIT", "LOAD", "EXEC"} and (resid.measured_s > 0).all()
    runs, _, networks, descs = read_tables(workflow.results / "tables",
                                           workflow.results / "split")
    pipe = pipelines_from_networks(networks)["p000"]
    free = runs[runs["limit"] == "none"]
    for policy in ("bulk", "linear"):
        pred, _ = predict(native, pipe, Networks(descs, native.batches[0]), policy)
        measured = free[free.policy == policy]
        # within the noise of the runs it was fitted on, however loaded the machine was
        assert (0.7 * measured.makespan_s.min() <= pred.makespan_s
                <= 1.3 * measured.makespan_s.max()), (pred.makespan_s, measured.makespan_s)
        assert pred.peak_ram_bytes == pytest.approx(measured.hwm_rss_bytes.median(), rel=0.1)


def test_the_runs_started_interleaved_in_the_planned_order(workflow):
    """With one core every run is ready at once, and the priorities make the scheduler
    start them exactly in engine.workflow.plan.run_order: repetition by repetition, each
    block (pipeline x limit) with its policies and unprobed twin in a seeded order."""
    from snakemake.utils import update_config

    from engine.workflow.plan import run_order

    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    update_config(cfg, tiny_config(workflow.results))
    planned = [(kind, pipeline, policy, limit, rep)
               for kind, pipeline, policy, limit, rep in run_order(cfg)]
    started = []
    for kind in ("runs", "unprobed"):
        for meta in (workflow.results / kind).glob("*/*/*/rep*/meta.json"):
            record = yaml.safe_load(meta.read_text())  # JSON is YAML
            pipeline, policy, limit, rep = meta.parent.relative_to(
                workflow.results / kind).parts
            started.append((record["started_at"], (kind, pipeline, record["policy"], limit,
                                                   int(rep.removeprefix("rep")))))
    assert [run for _, run in sorted(started)] == planned
    # every block holds both policies (and linear's twin where unconstrained)
    assert len(planned) == 15 and planned[0][4] == 0 and planned[-1][4] == 2


# which job kind (engine.workflow.fingerprint.JOB_ENTRIES) a process of a job belongs to:
# by the verb of its `python -m engine`, its module, or its Snakemake script
PROCESS_JOBS = {
    "models": "models", "split": "split", "pipelines": "pipelines", "run": "run",
    "supervise": "run", "child": "run", "engine.probes.sampler": "run",
    "fit-model": "fit_model", "evaluate-model": "evaluate_model",
    "reconstruct-model": "reconstruct_model", "score-holdout": "score_holdout",
    "aggregate.py": "tables", "aggregate_holdout.py": "tables", "look.py": "look",
    "model_plot.py": "model_plots", "plot.py": "plots"}


def _process_job(argv: list[str]) -> str | None:
    if argv[1:3] == ["-m", "snakemake"]:
        return None  # the planner, not a job
    if argv[1] == "-m":
        key = argv[3] if argv[2] == "engine" else argv[2]
    else:  # Snakemake's copy of a script: .snakemake/scripts/tmpXXXX.<name>.py
        key = ".".join(Path(argv[1]).name.split(".")[1:])
    return PROCESS_JOBS[key]


def imports_covered(imports: Path, root: Path) -> dict[str, set[str]]:
    """Each kind of job's imported engine modules, as its processes recorded them in
    ``imports`` (tests/record_imports), checked to be among the modules its fingerprint
    covers (computed from the source in ``root`` before a job runs), or an edit to one
    would leave its results stale."""
    from engine.workflow.fingerprint import JOB_ENTRIES, job_modules

    seen: dict[str, set[str]] = {}
    for log in imports.iterdir():
        argv, *modules = log.read_text().splitlines()
        job = _process_job(argv.split("\0"))
        if job is not None:
            seen.setdefault(job, set()).update(m for m in modules if m != "numpy")
    for job, imported in seen.items():
        covered = set(job_modules(JOB_ENTRIES[job], root))
        assert imported <= covered, (job, sorted(imported - covered))
    return seen


def test_each_jobs_fingerprint_covers_every_engine_module_its_processes_imported(workflow):
    from engine.workflow.fingerprint import JOB_ENTRIES

    seen = imports_covered(workflow.imports, workflow.root)
    # every kind of job ran, but score_holdout (the tiny config holds no pipeline out) and
    # look (run.sequential's: tests/integration/workflow/test_sequential_workflow.py)
    assert set(seen) == set(JOB_ENTRIES) - {"score_holdout", "look"}
    # the runtimes' code is run by the run jobs, and never imported by a split or models job
    assert "engine.runtime.lean" in seen["run"]
    assert not {"engine.runtime.lean", "engine.runtime.caffe"} & (seen["models"] | seen["split"])


def test_a_runs_supervisor_never_imports_numpy(workflow):
    """Issue 39: a run's supervisor (``engine run``) needs no numpy, its child does: numpy's
    import is 0.08 s of a native run's start and 0.37 s of a user-mode Linux guest's
    (docs/performance.md). Recorded as the workflow's processes ran."""
    numpy_in: dict[str, list[bool]] = {"run": [], "child": []}
    for log in workflow.imports.iterdir():
        argv, *modules = log.read_text().splitlines()
        words = argv.split("\0")
        if words[1:3] == ["-m", "engine"] and words[3] in numpy_in:
            numpy_in[words[3]].append("numpy" in modules)
    assert numpy_in["run"] and not any(numpy_in["run"])
    assert numpy_in["child"] and all(numpy_in["child"])


def test_a_finished_workflow_has_nothing_to_do(workflow):
    assert workflow.planned_jobs() == Counter()


@pytest.mark.parametrize("folder", ["runs/p000/linear/256M/rep1", "reconcile"])
def test_a_run_folder_an_interrupted_rerun_removed_is_made_again(workflow, tmp_path, folder):
    """Tenth held-out pass M4: Snakemake removes a job's old run folder before it reruns
    it; interrupted, the folder stayed gone and, what it fed still on disk, the next
    run of the workflow had nothing to do."""
    gone = workflow.results / folder
    if folder == "reconcile":  # the reconciliation run's folder, whatever its id
        [gone] = (workflow.results / "reconcile").glob("*/*/*")
    gone.rename(tmp_path / "kept")
    try:
        planned = workflow.planned_jobs()
    finally:
        (tmp_path / "kept").rename(gone)  # as it was (its mtime too), for the next tests
    made = "run" if folder != "reconcile" else "reconcile_run"
    assert planned[made] == 1 and planned["aggregate"] == 1, planned


def test_plot_style_change_reruns_only_plots(workflow):
    cfg = tiny_config(workflow.results)
    cfg["plots"]["dpi"] = 90
    workflow.write_config(cfg)
    try:
        assert workflow.planned_jobs() == Counter({"plot": len(FIGURES),
                                                   "model_plot": len(MODEL_FIGURES), "all": 1})
    finally:
        workflow.write_config(tiny_config(workflow.results))


def _reversed(value):
    """``value`` with every mapping's keys in reverse order, at any depth."""
    if isinstance(value, dict):
        return {k: _reversed(value[k]) for k in reversed(list(value))}
    return value


def test_the_same_config_with_its_keys_in_another_order_or_floats_reruns_nothing(workflow):
    """Twenty-second pass L4: the plots' params held a mapping of the config (its text is
    what Snakemake compares), so reordering config/config.yaml's keys redrew them."""
    default = workflow.root / "config" / "config.yaml"
    source = default.read_text()
    default.write_text(yaml.safe_dump(_reversed(yaml.safe_load(source)), sort_keys=False))
    # ... and its number keys written as floats (fifth held-out pass M1: '--timeout 300.0')
    cfg = tiny_config(workflow.results)
    cfg["run"] |= {"timeout_s": 300.0, "sample_hz": 50.0}
    workflow.config.write_text(yaml.safe_dump(_reversed(cfg), sort_keys=False))
    try:
        assert workflow.planned_jobs() == Counter()
    finally:
        default.write_text(source)
        workflow.write_config(tiny_config(workflow.results))


def test_a_new_limit_reruns_only_its_runs_and_what_aggregates_them(workflow):
    cfg = tiny_config(workflow.results)
    cfg["run"]["limits"].append("512M")
    workflow.write_config(cfg)
    try:
        assert workflow.planned_jobs() == Counter(
            {"run": 6, "aggregate": 1, "plot": len(FIGURES), "all": 1,
             **MODEL_JOBS})
    finally:
        workflow.write_config(tiny_config(workflow.results))


def _edited(workflow: Workflow, edits: dict[str, tuple[str, str]]) -> Counter:
    """The jobs a dry run plans with each file (relative to the copy) edited, old -> new."""
    sources = {}
    try:
        for path, (old, new) in edits.items():
            target = workflow.root / path
            sources[target] = source = target.read_text()
            assert old in source, (path, old)
            target.write_text(source.replace(old, new, 1))
        return workflow.planned_jobs()
    finally:
        for target, source in sources.items():
            target.write_text(source)


def test_editing_one_policy_reruns_only_that_policys_runs(workflow):
    linear = "def _build_linear(instances: list[Instance]) -> TaskGraph:\n"
    planned = _edited(workflow, {"engine/schedule/policies.py": (
        linear, linear + "    assert instances\n")})
    # linear's runs at both limits and their unprobed twins, and the reconciliation run
    # (it uses linear), and what aggregates them
    assert planned == Counter({"run": 9, "reconcile_run": 1, "aggregate": 1,
                               "plot": len(FIGURES), "all": 1, **MODEL_JOBS})


def test_editing_shared_code_reruns_every_run(workflow):
    """units.py is imported by every stage: models, split, pipelines and every run."""
    planned = _edited(workflow, {"engine/units.py": ("\n\ndef ", "\n\nEDITED = 1\n\n\ndef ")})
    # 1 pipeline x 2 policies x 2 limits x 3 repetitions, the 3 unprobed twins, and the
    # reconciliation run
    assert planned["run"] == 15 and planned["reconcile_run"] == 1
    assert planned["split"] == planned["zoo_model"] == 2 and planned["pipelines"] == 1


def test_editing_the_lean_runtime_reruns_the_runs_and_never_the_models_or_their_split(
        workflow):
    planned = _edited(workflow, {"engine/runtime/lean.py": (
        "\nclass LeanRuntime", "\nEDITED = 1\n\n\nclass LeanRuntime")})
    assert planned["run"] == 15 and planned["reconcile_run"] == 1
    assert planned["fit_model"] == 1 and planned["plot"] == len(FIGURES)
    assert not {"zoo_model", "split", "pipelines"} & set(planned)


def test_a_comment_or_docstring_anywhere_in_the_engine_reruns_nothing(workflow):
    """Every engine module gets a comment line after its imports' first line and an edited
    module docstring: no job's code changed."""
    edits = {}
    for path in sorted((workflow.root / "engine").rglob("*.py")):
        source = path.read_text()
        name = str(path.relative_to(workflow.root))
        if source.startswith('"""'):
            edits[name] = ('"""', '"""Edited. ')
        elif source.strip():
            first = source.splitlines(keepends=True)[0]
            edits[name] = (first, first + "# a comment\n")
    assert len(edits) > 100
    assert _edited(workflow, edits) == Counter()


def test_a_run_redone_by_hand_is_refused_and_the_printed_fix_recovers(workflow):
    """A run redone by hand with another runtime is refused by the aggregate, naming the
    folder to remove; removing it and running again measures it anew, as the config
    says."""
    results = workflow.results
    run = results / "runs" / "p000" / "bulk" / "none" / "rep1"
    redo = subprocess.run(
        [sys.executable, "-m", "engine", "run", "--pipeline", str(results / "pipelines" /
                                                                  "p000.json"),
         "--split", str(results / "split"), "--policy", "bulk", "--out", str(run), "--force",
         "--backend", "none", "--batch", "1", "--seed", "1", "--sample-hz", "50",
         "--pin-cpu", "--runtime", "caffe"],
        cwd=workflow.root, env=dict(os.environ, PYTHONPATH=str(workflow.root)),
        capture_output=True, text=True, timeout=300)
    assert redo.returncode == 0, redo.stderr[-2000:]
    r = workflow.snakemake()
    assert r.returncode != 0
    assert "was made with runtime 'caffe'" in r.stdout + r.stderr  # said on the console too
    log = (results / "logs" / "aggregate.log").read_text()
    said = re.search(r"run p000/bulk/none/caffe/rep1 was made with runtime 'caffe', not the "
                     r"config's 'lean' \(redone by hand\?\); remove (\S+) and run the "
                     r"workflow again", log)
    assert said, log[-2000:]
    assert Path(said[1]) == run
    shutil.rmtree(said[1])
    r = workflow.snakemake()
    assert r.returncode == 0, r.stderr[-3000:]
    runs = pd.read_parquet(results / "tables" / "runs.parquet")
    assert set(runs["runtime"]) == {"lean"} and len(runs) == 12


def test_a_held_out_run_removed_as_the_aggregate_says_is_measured_anew(tmp_path):
    """A failed aggregate_holdout deletes the held-out tables; with them among the targets,
    removing a held-out run (as the refusal says) redoes them, where only
    the scores were targets and Snakemake found nothing to do (fifteenth pass, M1)."""
    wf = Workflow(tmp_path)
    cfg = tiny_config(wf.results)
    cfg["run"].update(policies=["linear"], limits=["none"], repetitions=1,
                      probe_overhead_policy=None)
    cfg["model"]["holdout"]["pipelines"] = 1
    wf.write_config(cfg)
    r = wf.snakemake()
    assert r.returncode == 0, r.stderr[-3000:]
    shutil.rmtree(wf.results / "runs" / "hp000" / "linear" / "none" / "rep0")
    shutil.rmtree(wf.results / "holdout" / "tables")  # as the failed aggregate left it
    planned = wf.planned_jobs()
    assert {"run", "aggregate_holdout", "score_holdout"} <= set(planned), planned
    assert planned["run"] == 1


def test_a_batch_added_to_the_list_reruns_only_its_runs(tmp_path):
    """Issue 38: run.batch [1, 2] runs every run at each batch, in folders of their own,
    the tables carrying each run's batch; [1, 2, 4] then plans only the batch-4 runs and
    what aggregates them (the tables, the model and the batch figure are
    the targets: the other figures and model jobs follow the tables alike)."""
    wf = Workflow(tmp_path)
    cfg = tiny_config(wf.results)
    cfg["run"].update(limits=["none"], repetitions=1, probe_overhead_policy=None, batch=[1, 2])
    wf.write_config(cfg)
    targets = [str(wf.results / "tables" / "runs.parquet"),
               str(wf.results / "model" / "model.json"),
               str(wf.results / "plots" / "batch.png")]
    r = wf.snakemake(*targets)
    assert r.returncode == 0, r.stderr[-3000:]
    runs = pd.read_parquet(wf.results / "tables" / "runs.parquet")
    assert sorted(Counter(runs["batch"].astype(int)).items()) == [(1, 2), (2, 2)]
    assert {p.name for p in wf.results.glob("runs*")} == {"runs_b1", "runs_b2"}
    model = json.loads((wf.results / "model" / "model.json").read_text())
    assert [m["batches"] for m in model["modes"].values()] == [[1, 2]]
    cfg["run"]["batch"] = [1, 2, 4]
    wf.write_config(cfg)
    r = wf.snakemake(*targets, "--dry-run", "--quiet", "rules")  # --quiet takes what follows
    assert job_counts(r.stdout + r.stderr) == Counter(
        {"run": 2, "aggregate": 1, "fit_model": 1, "plot": 1}), r.stdout
    planned = wf.snakemake(*targets, "--dry-run")
    folders = set(re.findall(r"--out \S+/(runs\w*)/p000/", planned.stdout))
    assert folders == {"runs_b4"}, planned.stdout[-3000:]


def test_a_guest_setting_the_sandbox_cannot_honour_is_refused_when_planning(tmp_path):
    """Tenth held-out pass H3: EDGEPROF_VM_SD_CARD=1 under sandbox.kernel uml passed the
    planning; each sandbox job then failed after Snakemake had removed its finished run."""
    wf = Workflow(tmp_path)
    cfg = tiny_config(wf.results)
    cfg["sandbox"] = {"enabled": True, "kernel": "uml"}
    wf.write_config(cfg)
    r = wf.snakemake("--dry-run", EDGEPROF_VM_SD_CARD="1")
    said = r.stdout + r.stderr  # Snakemake prints an error of its planning on stdout
    assert r.returncode != 0
    assert "EDGEPROF_VM_SD_CARD: the uml backend cannot throttle its swap device" in said
    assert "Traceback" not in said and not wf.results.exists()


def test_jobs_run_the_venvs_python_and_the_checkouts_engine_without_either_on_path(tmp_path):
    """`python -m engine` in a rule is the interpreter running Snakemake and the engine of
    the checkout the workflow runs from, with neither the venv on PATH nor any PYTHONPATH
    (as `.venv/bin/snakemake --cores 1` without activating the venv)."""
    wf = Workflow(tmp_path)
    main = wf.root / "engine" / "__main__.py"
    main.write_text("import sys\nprint('engine at', __file__, file=sys.stderr)\n"
                    + main.read_text())
    bare_path = os.pathsep.join(p for p in ("/usr/bin", "/bin") if os.path.isdir(p))
    target = str(wf.results / "models" / "age_net.caffemodel")
    r = wf.snakemake(target, PATH=bare_path, PYTHONPATH="")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Shell command: python -m engine models" in r.stdout + r.stderr
    log = (wf.results / "logs" / "models" / "age_net.log").read_text()
    assert f"engine at {main}" in log and "AgeNet: wrote" in log


def test_the_report_bundles_every_figure(workflow, tmp_path):
    report = tmp_path / "report.zip"
    r = workflow.snakemake("--report", str(report))
    assert r.returncode == 0, r.stderr[-3000:]
    import zipfile

    names = zipfile.ZipFile(report).namelist()
    assert sum(name.endswith(".png") for name in names) >= len(FIGURES) + len(MODEL_FIGURES)


def test_a_results_path_with_spaces_and_shell_characters_is_only_a_path(tmp_path):
    """Every path a rule's shell gets is quoted: a `results:` with a space and a `;`
    neither overwrites the file its first word names nor runs what follows the `;`."""
    wf = Workflow(tmp_path)
    (tmp_path / "my").write_text("data\n")
    results = tmp_path / f"my res;touch {tmp_path}/INJECTED;x"
    cfg = tiny_config(results)
    cfg["models"]["zoo"] = ["AgeNet"]
    cfg["pipelines"]["length"] = [1, 1]
    cfg["run"].update(limits=["none"], repetitions=1)
    wf.write_config(cfg)
    r = wf.snakemake(str(results / "tables" / "summary.parquet"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "my").read_text() == "data\n"
    assert not (tmp_path / "INJECTED").exists()
    assert len(list((results / "runs" / "p000").glob("*/none/rep0/meta.json"))) == 2


def test_every_path_a_rule_puts_in_a_shell_is_quoted():
    """The rules' shell lines: a placeholder is quoted (`:q`) unless it is an argument
    string the workflow builds and quotes itself (engine.workflow.args)."""
    built = {"params.command", "params.runs", "params.vm_env", "params.limit",
             "params.batch", "params.runtime", "params.options", "params.args",
             "params.seed", "params.resamples", "params.policies"}
    for smk in (REPO / "workflow" / "rules").glob("*.smk"):
        text = smk.read_text()
        for shell in re.findall(r"shell:\n((?:\s+\".*\"\n)+)", text):
            for name in re.findall(r"\{([\w.]+)(?::q)?\}", shell):
                quoted = "{" + name + ":q}" in shell
                assert quoted or name in built, (smk.name, name)

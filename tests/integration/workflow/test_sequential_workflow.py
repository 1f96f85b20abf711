"""run.sequential in a real Snakemake (issue 39): the look, the repetitions it adds and
the reruns a change of its width makes. A file of its own, so that the suite's workers
run it beside tests/integration/workflow/test_workflow.py."""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter

import pandas as pd
import pytest

from tests.integration.snakemake_output import job_counts
from tests.integration.workflow.test_workflow import (
    RECORD_IMPORTS,
    Workflow,
    imports_covered,
    tiny_config,
)

pytestmark = pytest.mark.slow


def test_sequential_repetitions_add_what_the_look_decides_and_nothing_else(tmp_path):
    """Issue 39: with run.sequential a pipeline runs its first six repetitions, a look, and
    the repetitions the look decides: none where every CI is already as narrow as asked
    (width 10), up to max_repetitions where none can be (width 1e-6), the probe-overhead
    twin with its pipeline; a narrower width reruns the look and adds only the new
    repetition's runs."""
    wf = Workflow(tmp_path)
    cfg = tiny_config(wf.results)
    cfg["run"].update(limits=["none"], repetitions=6,
                      sequential={"width": 10, "max_repetitions": 7})
    wf.write_config(cfg)
    tables = str(wf.results / "tables" / "runs.parquet")
    imports = tmp_path / "imports"  # what the look imports, for its fingerprint
    imports.mkdir()
    r = wf.snakemake(tables, PYTHONPATH=f"{wf.root}{os.pathsep}{RECORD_IMPORTS}",
                     EDGEPROF_TEST_IMPORTS=str(imports))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "engine.analysis.sequential" in imports_covered(imports, wf.root)["look"]
    look = json.loads((wf.results / "looks" / "p000.json").read_text())
    assert look["repetitions"] == 6 and look["first"] == 6
    assert [c["policy"] for c in look["cells"]] == ["linear"]
    runs = pd.read_parquet(tables)
    assert sorted(Counter(runs["rep"]).items()) == [(r, 2) for r in range(6)]
    assert not list(wf.results.rglob("rep6"))

    made = {m: m.stat().st_mtime_ns for m in wf.results.rglob("meta.json")}
    cfg["run"]["sequential"]["width"] = 1e-6
    wf.write_config(cfg)
    # the runs the look adds are planned once it is taken
    r = wf.snakemake(tables, "--dry-run", "--quiet", "rules")  # --quiet takes what follows
    assert job_counts(r.stdout + r.stderr) == Counter({"look": 1, "aggregate": 1}), r.stdout
    r = wf.snakemake(tables)
    assert r.returncode == 0, r.stderr[-3000:]
    assert {m: m.stat().st_mtime_ns for m in made} == made  # no run made again
    assert json.loads((wf.results / "looks" / "p000.json").read_text())["repetitions"] == 7
    runs = pd.read_parquet(tables)
    assert sorted(Counter(runs["rep"]).items()) == [(r, 2) for r in range(7)]
    assert sorted(p.relative_to(wf.results).as_posix() for p in wf.results.rglob("rep6")) == [
        "runs/p000/bulk/none/rep6", "runs/p000/linear/none/rep6",
        "unprobed/p000/linear/none/rep6"]
    probe = pd.read_parquet(wf.results / "tables" / "probe_overhead.parquet")
    assert set(probe["pairs"]) == {7}, probe
    r = wf.snakemake(tables, "--dry-run")
    assert "Nothing to be done" in r.stdout + r.stderr, r.stdout[-3000:]

    # the default target makes a removed look or added run again (TARGETS holds the first
    # repetitions' runs; rule all asks for the looks and the rest)
    look_file = wf.results / "looks" / "p000.json"
    added = wf.results / "runs" / "p000" / "linear" / "none" / "rep6"
    shutil.rmtree(added)
    r = wf.snakemake("--dry-run", "--quiet", "rules")
    assert job_counts(r.stdout + r.stderr)["run"] == 1, r.stdout[-3000:]
    r = wf.snakemake(str(added))
    assert r.returncode == 0 and added.is_dir(), r.stderr[-3000:]
    kept = look_file.read_text()
    look_file.unlink()
    r = wf.snakemake("--dry-run", "--quiet", "rules")
    assert job_counts(r.stdout + r.stderr)["look"] == 1, r.stdout[-3000:]
    # a look edited by hand is refused by the aggregate, in one line naming the fix
    look_file.write_text(kept.replace('"repetitions": 7', '"repetitions": 20'))
    r = wf.snakemake(tables)
    assert r.returncode != 0
    assert f"{look_file} says 20 repetitions, not a whole number from 6 to 7 (edited by " \
           f"hand?); remove {look_file} and run the workflow again" in r.stderr, r.stderr[-3000:]

"""Workflow overhead per run job (issue: workflow), measured on the default config.

A private copy of the workflow runs the default config's run jobs for one pipeline and
the unconstrained limit (all policies). The wall time of that Snakemake invocation, minus
its dry-run start-up (DAG building), minus the engine's own run time (child.json
``wall_s`` summed over the runs), divided by the number of jobs, is the overhead per job:
Snakemake's job handling plus the supervisor's and the child's interpreter start. Target:
under 10 % of the job's own run time.

Usage: python benchmarks/bench_workflow.py [--pipelines 1]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def snakemake(root: Path, config: Path, *args: str) -> float:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "--configfile",
                        str(config), *args], cwd=root, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"snakemake {' '.join(args)} failed:\n{r.stderr[-3000:]}")
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pipelines", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "repo"
        for part in ("engine", "workflow", "config", "profiles", "envs"):
            shutil.copytree(REPO / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(REPO / "Snakefile", root / "Snakefile")
        cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
        cfg["results"] = str(Path(tmp) / "results")
        cfg["pipelines"]["count"] = args.pipelines
        cfg["run"]["limits"] = ["none"]
        config = Path(tmp) / "bench.yaml"
        config.write_text(yaml.safe_dump(cfg))
        snakemake(root, config, "--until", "pipelines")  # models, split: not measured
        dry = snakemake(root, config, "--until", "run", "--dry-run")
        total = snakemake(root, config, "--until", "run")
        metas = [json.loads(p.read_text())
                 for p in (Path(tmp) / "results" / "runs").rglob("meta.json")]
        child = [m["child"]["wall_s"] for m in metas]
        supervised = [m["wall_s"] for m in metas]
        jobs = len(metas)
        per_job = (total - dry - sum(child)) / jobs
        fraction = per_job / statistics.mean(child)
        print(f"default config, {args.pipelines} pipeline(s) x {len(cfg['run']['policies'])} "
              f"policies, limit none: {jobs} run jobs")
        print(f"  snakemake wall {total:.1f} s, of which start-up (dry run) {dry:.1f} s")
        print(f"  engine run time per job: median {statistics.median(child):.2f} s (child "
              f"process; with its start-up {statistics.median(supervised):.2f} s)")
        print(f"  overhead per job {per_job:.2f} s = {fraction * 100:.0f} % of the job's own run "
              f"time (target < 10 %) {'PASS' if fraction < 0.10 else 'FAIL'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

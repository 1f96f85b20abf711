"""Probe overhead (issue: measurement), as ratios measured side by side in one run.

The same pipeline is run through ``python -m engine run`` three ways, interleaved round by
round: no probes, all probes except heap profiling (process windows, cgroup windows when
the backend has a cgroup, GNU time, 100 Hz sampler), and with heap profiling. The figure
compared is the child's own run time (child.json ``wall_s``: the pipeline, without
interpreter start-up). Targets: all probes except heap profiling < 5 % of run time and
< 1 ms per task boundary.

Usage: python benchmarks/bench_probes.py [--models DIR] [--rounds 5] [--policy linear]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import zoo_split

from engine.schedule.pipelines import Arrival, Pipeline, save_pipeline

NETWORKS = ["AgeNet", "GenderNet", "AlexNet", "GoogLeNet"]
MODES = {
    "no probes": ["--no-probes"],
    "probes": [],
    "probes + heap profile": ["--heap-profile"],
}


def run_once(pipeline: Path, models: Path, policy: str, out: Path, extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "engine", "run", "--pipeline", str(pipeline), "--models",
           str(models), "--policy", policy, "--out", str(out), "--backend", "none",
           "--batch", "1", "--force", *extra]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"run failed: {' '.join(cmd)}\n{r.stderr}")
    return json.loads((out / "meta.json").read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", help="split folder (default: generated into a temp folder)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--policy", default="linear")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        models = Path(args.models) if args.models else zoo_split(NETWORKS, root)
        pipeline = root / "p.json"
        save_pipeline(Pipeline("bench", [Arrival(0.0, NETWORKS)]), pipeline)
        walls: dict[str, list[float]] = {m: [] for m in MODES}
        meta = {}
        run_once(pipeline, models, args.policy, root / "warm", [])  # page cache, pyc files
        for _ in range(args.rounds):
            for mode, extra in MODES.items():
                meta[mode] = run_once(pipeline, models, args.policy, root / "run", extra)
                walls[mode].append(meta[mode]["child"]["wall_s"])
        boundaries = 2 * meta["probes"]["child"]["tasks"]
        base = statistics.median(walls["no probes"])
        print(f"{args.policy} run of {', '.join(NETWORKS)} (batch 1), {boundaries} task "
              f"boundaries, median of {args.rounds} interleaved rounds")
        print(f"{'mode':<24}{'run s':>9}{'ratio':>9}{'per boundary':>15}")
        for mode in MODES:
            med = statistics.median(walls[mode])
            per = (med - base) / boundaries * 1e3
            print(f"{mode:<24}{med:9.3f}{med / base:9.3f}{per:12.3f} ms")
        ratio = statistics.median(walls["probes"]) / base
        per = (statistics.median(walls["probes"]) - base) / boundaries * 1e3
        ok = ratio < 1.05 and per < 1.0
        print(f"all probes except heap profiling: +{(ratio - 1) * 100:.1f} % of run time, "
              f"{per:.3f} ms per boundary (targets < 5 %, < 1 ms) {'PASS' if ok else 'FAIL'}")
        sampler = meta["probes"].get("sampler") or {}
        if sampler:
            print(f"sampler (separate process): {sampler}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Probe overhead (issue: measurement), as paired ratios of runs side by side.

The same pipeline runs through ``python -m engine run`` in rounds. Each round runs it with
no probes (``--no-probes``) twice, with the window probes and GNU time but no sampler
(``--sample-hz 0``) and with all probes except heap profiling (process windows, cgroup
windows when the backend has a cgroup, GNU time, the 100 Hz sampler), the order rotated
from round to round so that neither the position in a round nor what ran just before
favours a mode. The figure compared is the child's own run time (child.json ``wall_s``:
the pipeline, without interpreter start-up); its CPU time (``cpu_s``) is shown too. The
second unprobed run is the noise floor: the same configuration twice, whose ratio would
be 1 on a quiet machine (on this project's 2-CPU VM it is not: other jobs, and the host
taking back memory the guest left free, which makes page faults up to 20x dearer).

Per round the overhead is the paired ratio probed / unprobed of that round's runs, and
per task boundary (probed - unprobed) / boundaries. Printed: their median over the rounds
with a 95 % bootstrap interval of the median, and their range; the host's 1-minute load
average before each run, and the commit. The verdict is INCONCLUSIVE when the noise
floor's interval is wider than the target. Heap-profiled runs (information only: their
times are never compared) come after the paired rounds, whose runs they would otherwise
disturb with the writeback of their ~900 dumps. Targets: all probes except heap
profiling < 5 % of run time (median) and < 1 ms per task boundary.

Usage: python benchmarks/bench_probes.py [--split DIR] [--rounds 15] [--heap-rounds 3]
       [--policy linear] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from _common import zoo_split

from engine.schedule.pipelines import Arrival, Pipeline, save_pipeline

NETWORKS = ["AgeNet", "GenderNet", "AlexNet", "GoogLeNet"]
BASE = "no probes"
FLOOR = "no probes again (noise floor)"
PAIRED = {
    BASE: ["--no-probes"],
    FLOOR: ["--no-probes"],
    "probes, no sampler": ["--sample-hz", "0"],
    "probes": [],
}
HEAP = ("probes + heap profile", ["--heap-profile"])
TARGET = "probes"


def run_once(pipeline: Path, models: Path, policy: str, out: Path, extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "engine", "run", "--pipeline", str(pipeline), "--split",
           str(models), "--policy", policy, "--out", str(out), "--backend", "none",
           "--batch", "1", "--force", *extra]
    load = os.getloadavg()[0]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"run failed: {' '.join(cmd)}\n{r.stderr}")
    meta = json.loads((out / "meta.json").read_text())
    return {"wall_s": meta["child"]["wall_s"], "cpu_s": meta["child"].get("cpu_s"),
            "load1": load, "tasks": meta["child"]["tasks"], "sampler": meta.get("sampler")}


def bootstrap_median(values: list[float], n: int = 10_000, seed: int = 0) -> tuple[float,
                                                                                      float]:
    """95 % percentile bootstrap interval of the median."""
    if len(values) < 2:
        return float("nan"), float("nan")
    data = np.asarray(values, dtype=float)
    draws = np.random.default_rng(seed).choice(data, size=(n, len(data)), replace=True)
    lo, hi = np.percentile(np.median(draws, axis=1), [2.5, 97.5])
    return float(lo), float(hi)


def summary(values: list[float], scale: float = 1.0, fmt: str = "{:.3f}") -> str:
    lo, hi = bootstrap_median(values)
    f = fmt.format
    return (f"{f(statistics.median(values) * scale)} [{f(lo * scale)}, {f(hi * scale)}] "
            f"(range {f(min(values) * scale)}..{f(max(values) * scale)})")


def commit() -> str:
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root,
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=root, capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" plus uncommitted changes" if dirty else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", help="split folder (default: generated into a temp folder)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--heap-rounds", type=int, default=3, help="0 skips heap profiling")
    ap.add_argument("--policy", default="linear")
    ap.add_argument("--json", help="also write every run's figures to this file")
    args = ap.parse_args()
    if args.rounds < 2:
        ap.error("--rounds must be at least 2")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        models = Path(args.models) if args.models else zoo_split(NETWORKS, root)
        pipeline = root / "p.json"
        save_pipeline(Pipeline("bench", [Arrival(0.0, NETWORKS)]), pipeline)
        runs: dict[str, list[dict]] = {m: [] for m in PAIRED}
        run_once(pipeline, models, args.policy, root / "warm", [])  # page cache
        modes = list(PAIRED)
        for i in range(args.rounds):
            k = i % len(modes)
            for mode in modes[k:] + modes[:k]:
                runs[mode].append(run_once(pipeline, models, args.policy, root / "run",
                                           PAIRED[mode]))
        heap = [run_once(pipeline, models, args.policy, root / "run", HEAP[1])
                for _ in range(args.heap_rounds)]
    boundaries = 2 * runs[BASE][0]["tasks"]
    loads = [r["load1"] for rs in runs.values() for r in rs]
    print(f"{args.policy} run of {', '.join(NETWORKS)} (batch 1), {boundaries} task "
          f"boundaries, {args.rounds} rounds, order rotated; commit {commit()}")
    print(f"host load average (1 min) before each run: median {statistics.median(loads):.2f}, "
          f"range {min(loads):.2f}..{max(loads):.2f} ({os.cpu_count()} CPUs)")
    base = runs[BASE]
    print(f"{BASE}: child run {summary([r['wall_s'] for r in base])} s")
    for mode in modes[1:]:
        pairs = list(zip(runs[mode], base))
        ratio = [a["wall_s"] / b["wall_s"] for a, b in pairs]
        per = [(a["wall_s"] - b["wall_s"]) / boundaries for a, b in pairs]
        print(f"{mode}: child run {summary([r['wall_s'] for r in runs[mode]])} s")
        print(f"  overhead per run: ratio {summary(ratio)}")
        print(f"  per task boundary: {summary(per, 1e3)} ms")
        if all(a["cpu_s"] is not None and b["cpu_s"] for a, b in pairs):
            cpu = [a["cpu_s"] / b["cpu_s"] for a, b in pairs]
            print(f"  CPU time ratio: {summary(cpu)}")
    ratio = [a["wall_s"] / b["wall_s"] for a, b in zip(runs[TARGET], base)]
    per = [(a["wall_s"] - b["wall_s"]) / boundaries for a, b in zip(runs[TARGET], base)]
    med, med_per = statistics.median(ratio), statistics.median(per) * 1e3
    verdict = "PASS" if med < 1.05 and med_per < 1.0 else "FAIL"
    lo, hi = bootstrap_median([a["wall_s"] / b["wall_s"] for a, b in zip(runs[FLOOR], base)])
    if not 0.95 <= lo <= hi <= 1.05:  # identical runs differ by more than the target
        verdict = (f"INCONCLUSIVE: the noise floor's interval is {lo:.3f}..{hi:.3f}, the host "
                   f"is too busy to resolve 5 %; rerun when it is quiet")
    print(f"all probes except heap profiling: {(med - 1) * 100:+.1f} % of run time (median; "
          f"range {(min(ratio) - 1) * 100:+.1f}..{(max(ratio) - 1) * 100:+.1f} %), "
          f"{med_per:.3f} ms per boundary (targets < 5 %, < 1 ms) {verdict}")
    if heap:
        h = statistics.median(r["wall_s"] for r in heap)
        b = statistics.median(r["wall_s"] for r in base)
        print(f"{HEAP[0]} (information; {len(heap)} runs after the rounds): {h:.3f} s, "
              f"{h / b:.1f}x, {(h - b) / boundaries * 1e3:.2f} ms per boundary")
    sampler = runs[TARGET][-1]["sampler"] or {}
    if sampler:
        print(f"sampler (separate process), last run: {sampler}")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "heap": heap,
                                               "boundaries": boundaries}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

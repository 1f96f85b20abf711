"""The paper's memory effect in a real kernel, per runtime: a SoS-AlexNet + FaceNet
pipeline (batch arrival) under a limit with swap, in the vm backend's guest.

First each runtime x policy runs natively and unconstrained once, for its peak resident
set; the limit (``--limit``, default 800M) must lie between the caffe runtime's Linear
and Bulk peaks, else the script stops. Then every runtime x policy runs ``--reps`` times
in the guest under the limit with swap allowed (``--swap max``), the cells in a rotated
order per repetition. Prints, per runtime and policy, the median [range] of the peak
resident set (the run's VmHWM), the guest's pages swapped out (pswpout), the cgroup's
swap peak (the largest task window's ``memory.swap.peak``) and the makespan (emulated
seconds: memory behaviour, not a timing claim), with the load average before and after.

Usage: python benchmarks/bench_caffe_limit.py [--limit 800M] [--reps 3] [--out DIR]
The guest must be built (python -m engine.sandbox build); each emulated run takes 1-3 min.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import zoo_split

from engine.analysis.tidy import tidy_run
from engine.units import MIB, parse_size

NETWORKS = ["SoS-AlexNet", "FaceNet"]
CELLS = [(rt, pol) for rt in ("caffe", "lean") for pol in ("bulk", "linear")]


def _run(pipeline: Path, models: Path, out: Path, runtime: str, policy: str,
         limit: str | None) -> dict:
    cmd = [sys.executable, "-m", "engine", "run", "--pipeline", str(pipeline),
           "--policy", policy, "--split", str(models), "--out", str(out),
           "--runtime", runtime, "--force"]
    if limit is not None:
        cmd += ["--backend", "vm", "--limit", limit, "--swap", "max", "--sample-hz", "20"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return tidy_run(out)["runs"].iloc[0].to_dict()


def _cell(values: list[float], fmt: str) -> str:
    return (f"{statistics.median(values):{fmt}} [{min(values):{fmt}}, {max(values):{fmt}}]"
            if len(values) > 1 else f"{values[0]:{fmt}}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", default="800M")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", help="keep the run folders here (default: a temporary one)")
    args = parser.parse_args()
    limit_bytes = parse_size(args.limit)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.out or tmp)
        models = zoo_split(NETWORKS, root)
        subprocess.run([sys.executable, "-m", "engine", "pipelines", "--split", str(models),
                        "--out", str(root / "p"), "--count", "1", "--length", "2", "2",
                        "--networks", *NETWORKS, "--seed", "3"], check=True,
                       capture_output=True)
        pipeline = root / "p" / "p000.json"
        native = {cell: _run(pipeline, models, root / "native" / "-".join(cell), *cell, None)
                  for cell in CELLS}
        peaks = {cell: row["hwm_rss_bytes"] for cell, row in native.items()}
        print("native, unconstrained peak resident set (MiB): " + ", ".join(
            f"{rt} {pol} {peaks[rt, pol] / MIB:.0f}" for rt, pol in CELLS))
        if not peaks["caffe", "linear"] < limit_bytes < peaks["caffe", "bulk"]:
            print(f"--limit {args.limit} is not between the caffe runtime's Linear and Bulk "
                  "peaks", file=sys.stderr)
            return 2
        load0 = os.getloadavg()[0]
        t0 = time.perf_counter()
        rows: dict[tuple[str, str], list[dict]] = {cell: [] for cell in CELLS}
        for rep in range(args.reps):
            for cell in CELLS[rep % len(CELLS):] + CELLS[:rep % len(CELLS)]:
                out = root / "vm" / f"{'-'.join(cell)}-rep{rep}"
                rows[cell].append(_run(pipeline, models, out, *cell, args.limit))
                print(f"  {cell[0]} {cell[1]} rep {rep}: done", file=sys.stderr)
        print(f"vm backend, --limit {args.limit} --swap max, {args.reps} repetitions; load "
              f"average {load0:.2f} before, {os.getloadavg()[0]:.2f} after; "
              f"{(time.perf_counter() - t0) / 60:.1f} min")
        print("| runtime | policy | peak RSS (MiB) | pages swapped out (guest pswpout) | "
              "cgroup swap peak (MiB) | makespan (s, emulated) |\n|---|---|---|---|---|---|")
        for rt, pol in CELLS:
            r = rows[rt, pol]
            bad = [x["termination"] for x in r if x["termination"] != "ok"]
            if bad:
                print(f"| {rt} | {pol} | runs ended {', '.join(bad)} | | | |")
                continue
            print(f"| {rt} | {pol} | {_cell([x['hwm_rss_bytes'] / MIB for x in r], '.0f')} | "
                  f"{_cell([x['guest_pswpout'] for x in r], '.0f')} | "
                  f"{_cell([x['cg_window_swap_peak_bytes'] / MIB for x in r], '.0f')} | "
                  f"{_cell([x['makespan_s'] for x in r], '.1f')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Planning the paper sweep (issue 27): the CPU time (user + sys) of `snakemake -n
--configfile config/paper.yaml`, which builds the whole DAG on the submit host. Target:
under 30 CPU s. Runs it ``--rounds`` times into a fresh results folder each, and prints
the median and range, the jobs planned and the host's load before and after.

Usage: python benchmarks/bench_plan.py [--rounds 5] [--config config/paper.yaml]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_CPU_S = 30.0


def plan_once(config: str, results: Path) -> tuple[float, int]:
    """(user + sys seconds of one dry run, jobs it planned)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--configfile", config,
                        "--config", f"results={results}"], cwd=REPO, capture_output=True,
                       text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"the dry run failed:\n{r.stderr[-3000:]}")
    total = re.search(r"^total\s+(\d+)", r.stdout + r.stderr, re.M)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, int(total.group(1)) if total else -1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--config", default="config/paper.yaml")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        rounds = [plan_once(args.config, Path(tmp) / f"r{i}") for i in range(args.rounds)]
    cpu = [c for c, _ in rounds]
    print(f"{args.config}: {rounds[0][1]} jobs planned; user + sys {statistics.median(cpu):.1f}"
          f" CPU s median, range {min(cpu):.1f}-{max(cpu):.1f} over {len(cpu)} rounds "
          f"(target < {TARGET_CPU_S:g}); load {load:.2f} before, {os.getloadavg()[0]:.2f} "
          f"after, {os.cpu_count()} CPUs")
    return 0 if statistics.median(cpu) < TARGET_CPU_S else 1


if __name__ == "__main__":
    sys.exit(main())

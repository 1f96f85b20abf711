"""The same native runs under two checkouts of edgeprof, interleaved: does a change to the
code around a run (its imports, its start and end) change what the run measures?

Each round runs every (pipeline, policy) cell once under each checkout, the checkouts in
turn going first (``_common.alternate``), all with this interpreter and one split and
pipelines folder (a finished workflow's results). Prints, per cell, each checkout's
median [range] and their ratio with a bootstrap 95 % CI (``*`` where it excludes 1) for
the makespan, the child's wall beyond it, its peak RSS and minor faults; then each
checkout's paired speed-up of the first policy over the second, round by round.

Usage: python benchmarks/bench_checkouts.py --results results --pipelines p001
           --policies bulk linear --before /tmp/wt_old --after . [--rounds 8]
(``git worktree add /tmp/wt_old <commit>`` makes the other checkout.)
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import alternate, print_ratios  # noqa: E402

METRICS = {"makespan_s": "makespan (s)", "beyond_s": "wall beyond makespan (s)",
           "max_rss_mib": "GNU time max RSS (MiB)", "minor_faults": "minor faults"}


def one_run(checkout: Path, results: Path, pipeline: str, policy: str, seed: int,
            out: Path) -> dict:
    """One unconstrained native run as the workflow's (pinned, 100 Hz, batch 1), made by
    ``checkout``'s engine; its makespan, wall beyond it, peak RSS and minor faults."""
    subprocess.run([sys.executable, "-m", "engine", "run", "--pipeline",
                    str(results / "pipelines" / f"{pipeline}.json"), "--policy", policy,
                    "--split", str(results / "split"), "--out", str(out), "--backend", "none",
                    "--batch", "1", "--runtime", "lean", "--seed", str(seed),
                    "--blas-threads", "1", "--sample-hz", "100", "--pin-cpu", "-q"],
                   cwd=checkout, check=True)  # the checkout's engine: its folder first on sys.path
    with open(out / "networks.csv") as f:
        nets = list(csv.DictReader(f))
    makespan = (max(int(n["end_ns"]) for n in nets)
                - min(int(n["arrival_ns"]) for n in nets)) / 1e9
    meta = json.loads((out / "meta.json").read_text())
    return {"policy": policy, "round": seed, "makespan_s": makespan,
            "beyond_s": meta["wall_s"] - makespan,
            "max_rss_mib": meta["gnu_time"]["gt_max_rss_bytes"] / 2**20,
            "minor_faults": float(meta["gnu_time"]["gt_minor_faults"])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, required=True,
                    help="a finished workflow's results (its split/ and pipelines/)")
    ap.add_argument("--pipelines", nargs="+", required=True)
    ap.add_argument("--policies", nargs=2, required=True, metavar=("A", "B"))
    ap.add_argument("--before", type=Path, required=True, help="a checkout of the old code")
    ap.add_argument("--after", type=Path, required=True, help="a checkout of the new code")
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    for name, folder in (("--before", args.before), ("--after", args.after)):
        if not (folder / "engine" / "cli.py").is_file():
            ap.error(f"{name} {folder} is not a checkout of edgeprof (no engine/cli.py)")
    with tempfile.TemporaryDirectory() as tmp:
        def way(checkout: Path, label: str):
            def runs(r: int, group: str) -> list[dict]:
                return [one_run(checkout.resolve(), args.results.resolve(), group, policy, r,
                                Path(tmp) / f"{label}-{group}-{policy}-{r}")
                        for policy in args.policies]
            return runs

        rows, loads = alternate(args.rounds, args.pipelines,
                                {"before": way(args.before, "before"),
                                 "after": way(args.after, "after")})
    for policy in args.policies:
        cells = {k: [x for x in v if x["policy"] == policy] for k, v in rows.items()}
        print_ratios(f"{policy}, {args.rounds} interleaved rounds", cells, loads,
                     args.pipelines, METRICS, "before", "after")
    a, b = args.policies
    for group in args.pipelines:
        for label in ("before", "after"):
            by = {(x["policy"], x["round"]): x["makespan_s"] for x in rows[(group, label)]}
            ratios = [by[(a, r)] / by[(b, r)] for r in range(args.rounds)]
            print(f"  {group} {label}: {a}/{b} makespan per round "
                  f"{[round(x, 3) for x in ratios]}, median {statistics.median(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

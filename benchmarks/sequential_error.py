"""The sequential repetitions' error rates on synthetic pairs of a known ratio, over more
cells than tests/unit/test_sequential.py runs (same simulation): the share of CIs that
exclude 1 where the ratio is 1 (a false claim) and that cover the ratio, and the mean
repetitions, of each rule. With --runs, instead what the looks would decide on a campaign's
runs table (its first --first repetitions of each pipeline but the held-out ones).
Usage: python benchmarks/sequential_error.py [--cells 8000]
       python benchmarks/sequential_error.py --runs results/tables/runs.parquet [--width 0.1]"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import tests.unit.test_sequential as sim  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=8000)
    parser.add_argument("--runs", type=Path, help="a campaign's tables/runs.parquet")
    parser.add_argument("--width", type=float, default=sim.WIDTH)
    parser.add_argument("--first", type=int, default=sim.FIRST)
    parser.add_argument("--max", type=int, default=sim.LAST)
    args = parser.parse_args()
    if args.runs:
        return looks(args.runs, args.width, args.first, args.max)
    sim.CELLS = args.cells
    print(f"{args.cells} cells, log speed-ups normal (sd 0.05), repetitions {sim.FIRST} to "
          f"{sim.LAST}, width {sim.WIDTH}")
    print("| rule | ratio | CIs excluding 1 | CIs covering the ratio | mean repetitions |")
    print("|---|---|---|---|---|")
    for ratio, seed in ((1.0, 11), (1.03, 12)):
        result = sim._simulate(ratio, seed)
        for rule, ci in result.items():
            lo, hi = sim._claims(ci), sim._covers(ci, ratio)
            print(f"| {rule} | {ratio:g} | {100 * lo:.1f} % | {100 * hi:.1f} % | "
                  f"{np.mean(ci[:, 2]):.2f} |")
    print("\nPipelines of several cells (one look sizes them all), ratio 1:")
    print("| cells per pipeline | rule | CIs excluding 1 | mean repetitions |")
    print("|---|---|---|---|")
    for cells, seed in ((4, 13), (9, 14)):
        result = sim._simulate_pipelines(cells, args.cells // cells, seed)
        for rule, ci in result.items():
            print(f"| {cells} | {rule} | {100 * sim._claims(ci):.1f} % | "
                  f"{np.mean(ci[:, 2]):.2f} |")


def looks(table: Path, width: float, first: int, last: int) -> None:
    from engine.analysis.sequential import look
    from engine.analysis.summaries import speedup_table

    runs = pd.read_parquet(table)
    runs = runs[runs["rep"] < first]
    print(f"{table}: width {width}, repetitions {first} to {last}")
    print("| pipeline | repetitions | widest cell | its CI | ci_high / ci_low |")
    print("|---|---|---|---|---|")
    for pipeline, own in runs.groupby("pipeline"):
        if str(pipeline).startswith("h"):  # held out: fixed repetitions
            continue
        result = look(speedup_table(own), width, first, last)
        if not result["cells"]:
            print(f"| {pipeline} | {result['repetitions']} | | | |")
            continue
        cell = result["cells"][0]
        lo, hi = cell["speedup_ci_low"], cell["speedup_ci_high"]
        print(f"| {pipeline} | {result['repetitions']} | {cell['policy']} under "
              f"{cell['limit']} | [{lo:.3f}, {hi:.3f}] | {hi / lo:.3f} |")


if __name__ == "__main__":
    main()

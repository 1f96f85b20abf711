"""Do two runs of a workflow say the same (issue 39: a faster default run must keep its
findings and its measurements)? Reads two results folders' tables and prints:

- every size-bin comparison of the speed-up over Bulk and of the slowdown under a limit,
  with its significance in each run, marking the ones that differ;
- each cell's makespan median and 95 % CI in each run (the summary table, per pipeline),
  marking a cell whose CIs do not overlap;
- the noise floor and the probe overhead of each.

Usage: python benchmarks/compare_findings.py BEFORE_RESULTS AFTER_RESULTS
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

CELL = ["emulated", "limit", "size_bin", "policy"]


def findings(results: Path) -> pd.DataFrame:
    """Size-bin comparisons: (emulated, limit, size bin, policy) -> speed-up and slowdown
    significance."""
    s = pd.read_csv(results / "tables" / "speedup_summary.csv")
    s = s[(s.level == "size_bin") & (s.policy != "bulk")]
    return s.set_index(CELL)[["speedup_median", "speedup_significance", "slowdown_median",
                              "slowdown_significance"]]


def makespans(results: Path) -> pd.DataFrame:
    """Per pipeline cell: the makespan's median and CI."""
    s = pd.read_csv(results / "tables" / "summary.csv")
    s = s[s.level == "pipeline"]
    return s.set_index(["emulated", "limit", "pipeline", "policy"])[
        ["makespan_s_median", "makespan_s_ci_low", "makespan_s_ci_high"]]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    args = ap.parse_args()
    a, b = findings(args.before), findings(args.after)
    both = a.merge(b, left_index=True, right_index=True, how="outer",
                   suffixes=("_before", "_after"))
    print("## Findings (size bins): significance before -> after\n")
    differ = 0
    for cell, row in both.iterrows():
        for what in ("speedup", "slowdown"):
            x, y = row[f"{what}_significance_before"], row[f"{what}_significance_after"]
            if pd.isna(x) and pd.isna(y):
                continue
            mark = "" if x == y else "   <-- differs"
            differ += bool(mark)
            print(f"{'/'.join(map(str, cell)):52} {what:8} {x} ({row[f'{what}_median_before']:.3f})"
                  f" -> {y} ({row[f'{what}_median_after']:.3f}){mark}")
    print(f"\n{differ} of the comparisons differ\n")
    m = makespans(args.before).merge(makespans(args.after), left_index=True,
                                     right_index=True, suffixes=("_b", "_a"))
    apart = m[(m.makespan_s_ci_high_b < m.makespan_s_ci_low_a)
              | (m.makespan_s_ci_high_a < m.makespan_s_ci_low_b)]
    print(f"## Makespans: {len(apart)} of {len(m)} pipeline cells with CIs apart")
    for cell, row in apart.iterrows():
        print(f"  {'/'.join(map(str, cell))}: {row.makespan_s_median_b:.3f} "
              f"[{row.makespan_s_ci_low_b:.3f}, {row.makespan_s_ci_high_b:.3f}] -> "
              f"{row.makespan_s_median_a:.3f} [{row.makespan_s_ci_low_a:.3f}, "
              f"{row.makespan_s_ci_high_a:.3f}]")
    for table in ("noise_floor", "probe_overhead"):
        for label, results in (("before", args.before), ("after", args.after)):
            print(f"\n## {table}, {label}\n")
            print(pd.read_csv(results / "tables" / f"{table}.csv").to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())

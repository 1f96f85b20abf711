"""Snakemake script: every run's tidy tables + the reconciliation run -> tables/."""

# ruff: noqa: F821  (`snakemake` is injected by Snakemake's script directive)

import sys
from pathlib import Path

from engine.analysis.tables import aggregate, write_tables

sys.stderr = open(snakemake.log[0], "w")  # pandas/pyarrow warnings go to the rule's log
def runs_of(sets: list[str]) -> list[Path]:
    """The per-run tidy folders (rep<N>) of each run set's tidy folder."""
    return [run for folder in sets for run in sorted(Path(folder).glob("rep*"))]


tables = aggregate(runs_of(snakemake.input.tidy), snakemake.input.reconcile,
                   runs_of(snakemake.input.unprobed))
write_tables(tables, Path(snakemake.output[0]).parent)
for name, df in tables.items():
    print(f"{name}: {len(df)} rows, {df.shape[1]} columns", file=sys.stderr)

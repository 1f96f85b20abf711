"""Snakemake script: every run's tidy tables + the reconciliation run -> tables/."""

# ruff: noqa: F821  (`snakemake` is injected by Snakemake's script directive)

import sys
from pathlib import Path

from engine.analysis.tables import aggregate, check_settings, set_folders, write_tables
from engine.errors import EdgeprofError

sys.stderr = open(snakemake.log[0], "w")  # pandas/pyarrow warnings go to the rule's log
def runs_of(sets: list[str], probed: bool = True) -> list[Path]:
    """The per-run tidy folders (rep<N>) of each run set's tidy folder, as planned."""
    out = []
    for folder in sets:
        reps, runs_dir = snakemake.params.reps[folder]
        out += set_folders(folder, reps, probed, runs_dir)
    return out


run = snakemake.config["run"]
try:
    tables = aggregate(runs_of(snakemake.input.tidy), snakemake.input.reconcile,
                       runs_of(snakemake.input.unprobed, probed=False))
    check_settings(tables["runs"], {"batch": run.get("batch"),
                                    "blas_threads": run["blas_threads"],
                                    "sample_hz": run["sample_hz"]}, snakemake.config["seed"])
except EdgeprofError as exc:
    sys.exit(f"error: {exc}")
write_tables(tables, Path(snakemake.output[0]).parent)
for name, df in tables.items():
    print(f"{name}: {len(df)} rows, {df.shape[1]} columns", file=sys.stderr)

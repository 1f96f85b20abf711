"""Snakemake script: every run's tidy tables + the reconciliation run -> tables/."""

# ruff: noqa: F821  (`snakemake` is injected by Snakemake's script directive)

import sys
from pathlib import Path

from engine.analysis.aggregate import aggregate
from engine.analysis.provenance import set_folders
from engine.analysis.tablefiles import write_tables
from engine.files import script_errors

sys.stderr = open(snakemake.log[0], "w")  # pandas/pyarrow warnings go to the rule's log


def runs_of(sets: list[str], probed: bool = True) -> list[Path]:
    """The per-run tidy folders (rep<N>) of each run set's tidy folder, as planned and
    made with the set's settings."""
    out = []
    for folder in sets:
        reps, runs_dir, settings = snakemake.params.reps[folder]
        pipeline = Path(snakemake.params.pipelines, f"{Path(folder).parts[-3]}.json")
        out += set_folders(folder, reps, probed, runs_dir, settings, pipeline,
                           snakemake.params.split)
    return out


with script_errors():  # one line on the console, as the engine's verbs
    reconcile = snakemake.params.reconcile
    tables = aggregate(runs_of(snakemake.input.tidy), snakemake.input.reconcile,
                       runs_of(snakemake.input.unprobed, probed=False), reconcile,
                       (Path(snakemake.params.pipelines, f"{reconcile['pipeline']}.json"),
                        snakemake.params.split))
    write_tables(tables, Path(snakemake.output[0]).parent)
for name, df in tables.items():
    print(f"{name}: {len(df)} rows, {df.shape[1]} columns", file=sys.stderr)

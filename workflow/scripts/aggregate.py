"""Snakemake script: every run folder's tidy tables + the reconciliation run -> tables/."""

# ruff: noqa: F821  (`snakemake` is injected by Snakemake's script directive)

import sys
from pathlib import Path

from engine.analysis.aggregate import aggregate
from engine.analysis.provenance import set_runs
from engine.analysis.tablefiles import write_tables
from engine.files import script_errors

sys.stderr = open(snakemake.log[0], "w")  # pandas/pyarrow warnings go to the rule's log


def runs_of(probed: bool) -> list[dict]:
    """The tidy tables of every run of the probed (or the unprobed) run sets, each set's
    runs as planned and made with its settings."""
    out = []
    for folder, (reps, set_probed, settings) in snakemake.params.sets.items():
        if set_probed == probed:
            pipeline = Path(snakemake.params.pipelines, f"{Path(folder).parts[-3]}.json")
            out += set_runs(folder, reps, probed, settings, pipeline, snakemake.params.split)
    return out


with script_errors():  # one line on the console, as the engine's verbs
    reconcile = snakemake.params.reconcile
    tables = aggregate(runs_of(probed=True), snakemake.input.reconcile,
                       runs_of(probed=False), reconcile,
                       (Path(snakemake.params.pipelines, f"{reconcile['pipeline']}.json"),
                        snakemake.params.split))
    write_tables(tables, Path(snakemake.output[0]).parent)
for name, df in tables.items():
    print(f"{name}: {len(df)} rows, {df.shape[1]} columns", file=sys.stderr)

"""Snakemake script: every run folder's tidy tables + the reconciliation run -> tables/."""

# ruff: noqa: F821  (`snakemake` is injected by Snakemake's script directive)

import sys
from pathlib import Path

from engine.analysis.aggregate import aggregate
from engine.analysis.provenance import planned_runs
from engine.analysis.sequential import read_look
from engine.analysis.tablefiles import write_tables
from engine.files import script_errors

sys.stderr = open(snakemake.log[0], "w")  # pandas/pyarrow warnings go to the rule's log

with script_errors():  # one line on the console, as the engine's verbs
    params = snakemake.params
    # run.sequential: each pipeline's repetitions, as its look decided
    reps = {Path(f).stem: read_look(f, params.first, params.sequential)
            for f in snakemake.input.get("looks", [])}
    probed, unprobed = (planned_runs(params.sets, params.pipelines, params.split, p, reps)
                        for p in (True, False))
    reconcile = params.reconcile
    tables = aggregate(probed, snakemake.input.reconcile, unprobed, reconcile,
                       (Path(params.pipelines, f"{reconcile['pipeline']}.json"), params.split))
    write_tables(tables, Path(snakemake.output[0]).parent)
for name, df in tables.items():
    print(f"{name}: {len(df)} rows, {df.shape[1]} columns", file=sys.stderr)

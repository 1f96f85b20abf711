"""Snakemake script: the model's held-out runs -> runs, tasks and networks, aggregated
apart from the campaign the model is fitted on."""

# ruff: noqa: F821  (`snakemake` is injected by Snakemake's script directive)

import sys
from pathlib import Path

from engine.analysis.provenance import planned_runs
from engine.analysis.tablefiles import stack, write_tables
from engine.files import script_errors

sys.stderr = open(snakemake.log[0], "w")  # pandas/pyarrow warnings go to the rule's log
with script_errors():  # one line on the console, as the engine's verbs
    # each set as planned, made with its settings (as the campaign's own runs)
    params = snakemake.params
    tables = stack(planned_runs(params.sets, params.pipelines, params.split))
    write_tables({name: tables[name] for name in ("runs", "tasks", "networks")},
                 Path(snakemake.output[0]).parent)
print(f"{len(tables['runs'])} held-out runs", file=sys.stderr)

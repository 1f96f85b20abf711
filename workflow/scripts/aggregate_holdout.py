"""Snakemake script: the model's held-out runs' tidy tables -> runs, tasks and networks,
aggregated apart from the campaign the model is fitted on."""

# ruff: noqa: F821  (`snakemake` is injected by Snakemake's script directive)

import sys
from pathlib import Path

from engine.analysis.provenance import set_folders
from engine.analysis.tablefiles import read_tidy, write_tables
from engine.files import script_errors

sys.stderr = open(snakemake.log[0], "w")  # pandas/pyarrow warnings go to the rule's log
with script_errors():  # one line on the console, as the engine's verbs
    # each set as planned, made with its settings (as the campaign's own runs)
    runs = [run for folder in snakemake.input.tidy
            for run in set_folders(folder, snakemake.params.reps[folder][0],
                                   runs_dir=snakemake.params.reps[folder][1],
                                   settings=snakemake.params.reps[folder][2],
                                   pipeline_file=Path(snakemake.params.pipelines,
                                                      f"{Path(folder).parts[-3]}.json"),
                                   split_dir=snakemake.params.split)]
    tables = read_tidy(runs)
    write_tables({name: tables[name] for name in ("runs", "tasks", "networks")},
                 Path(snakemake.output[0]).parent)
print(f"{len(tables['runs'])} held-out runs", file=sys.stderr)

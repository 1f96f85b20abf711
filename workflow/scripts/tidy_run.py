"""Snakemake script: one run folder -> its tidy tables (a folder of Parquet files)."""

# ruff: noqa: F821  (`snakemake` is injected by Snakemake's script directive)

import sys

from engine.analysis.tables import tidy_run, write_tidy

sys.stderr = open(snakemake.log[0], "w")  # pandas/pyarrow warnings go to the rule's log
write_tidy(tidy_run(snakemake.input.run), snakemake.output.tidy)

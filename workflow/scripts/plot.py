"""Snakemake script: the aggregate tables -> one figure as PNG and PDF."""

# ruff: noqa: F821  (`snakemake` is injected by Snakemake's script directive)

import sys
from pathlib import Path

import pandas as pd

from engine.analysis.figures.common import save_figure
from engine.analysis.plots import make_figure
from engine.files import script_errors

sys.stderr = open(snakemake.log[0], "w")  # matplotlib/pandas warnings go to the rule's log
with script_errors():  # one line on the console, as the engine's verbs
    tables = {Path(path).stem: pd.read_parquet(path) for path in snakemake.input}
    style = snakemake.params.style
    fig = make_figure(snakemake.wildcards.fig, tables, style, {"run": snakemake.params.run})
    save_figure(fig, snakemake.output.png, snakemake.output.pdf, style["dpi"])

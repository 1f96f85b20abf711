"""Snakemake script: the model's tables -> one of its figures as PNG and PDF."""

# ruff: noqa: F821  (`snakemake` is injected by Snakemake's script directive)

import sys
from pathlib import Path

import pandas as pd

from engine.analysis.figures.common import save_figure
from engine.files import script_errors
from engine.model.figures import FIGURES

sys.stderr = open(snakemake.log[0], "w")  # matplotlib/pandas warnings go to the rule's log
with script_errors():  # one line on the console, as the engine's verbs
    tables = {Path(path).stem: pd.read_parquet(path) for path in snakemake.input}
    style = snakemake.params.style
    fig = FIGURES[snakemake.wildcards.model_fig](tables, style)
    save_figure(fig, snakemake.output.png, snakemake.output.pdf, style["dpi"])

"""The campaign's figures, registered by name; each is drawn from the aggregate tables by
the ``draw`` function of its own module in engine/analysis/figures/ (their shared helpers:
engine/analysis/figures/common.py).

Every ``draw`` takes (tables, style, context) and returns a matplotlib Figure:
``tables`` maps table names (runs, tasks, networks, samples, reconcile, speedup) to
DataFrames, ``style`` is the config's ``plots`` section (dpi, font_size, palette) and
``context`` carries the config's ``run`` section under ``"run"`` (policies, limits, the
reconciliation run). Figures are built on ``matplotlib.figure.Figure`` directly (no pyplot,
so no GUI backend and no global figure registry).

Conventions shared by all figures: one panel per memory-limit setting, where a limit the
backend could not enforce is its own panel labelled "(not enforced)" and runs measured
under VM emulation get their own panels too (their times are not comparable with native
ones); a run that did not finish (OOM, timeout, error) is drawn as a hatched mark named
after its termination, never dropped; an instrument that was not measured is named as
such instead of silently missing.
"""

from __future__ import annotations

from collections.abc import Callable

import matplotlib
from matplotlib.figure import Figure

from engine.analysis.figures import (
    attribution,
    batch,
    layer_times,
    memory,
    memory_over_time,
    partial_workers,
    reconciliation,
    speedup,
)
from engine.analysis.figures.common import Tables

FIGURES: dict[str, Callable[[Tables, dict, dict], Figure]] = {
    "speedup": speedup.draw,
    "memory": memory.draw,
    "partial_workers": partial_workers.draw,
    "layer_times": layer_times.draw,
    "reconciliation": reconciliation.draw,
    "attribution": attribution.draw,
    "memory_over_time": memory_over_time.draw,
    "batch": batch.draw,  # drawn where run.batch is a list (workflow/rules/common.smk)
}


def make_figure(name: str, tables: Tables, style: dict, context: dict) -> Figure:
    """Figure ``name`` drawn under the config's font size."""
    with matplotlib.rc_context({"font.size": style.get("font_size", 9)}):
        return FIGURES[name](tables, style, context)

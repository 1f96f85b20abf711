"""Figure ``layer_times``: each layer's task times under every limit."""

from __future__ import annotations

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from engine.analysis.figures.common import (
    Tables,
    add_legend,
    ci_handles,
    colors_for,
    grid,
    no_data,
    panel_names,
    with_panel,
)
from engine.units import MIB

LAYER_KEY = ["network", "layer", "task_type", "panel", "emulated"]


def _layer_medians(tasks: pd.DataFrame) -> pd.DataFrame:
    """Per layer, task type and limit: the median duration over every run (pipelines,
    policies, repetitions) that executed it, with its 95 % CI (clustered by run: a
    network twice in one pipeline is not two independent runs)."""
    from engine.analysis.stats import cell_seed, cluster_bootstrap_ci

    rows = []
    for key, group in tasks.groupby(LAYER_KEY, sort=False):
        ms = group["duration_ns"].to_numpy(dtype=float) / 1e6
        est = cluster_bootstrap_ci(ms, group["run_id"].to_numpy(), seed=cell_seed(key))
        rows.append([*key, group["param_bytes"].iloc[0], *est, len(ms),
                     bool((group["termination"] != "ok").any())])
    return pd.DataFrame(rows, columns=[*LAYER_KEY, "param_bytes", "ms", "lo", "hi", "n",
                                       "some_failed"])


def draw(tables: Tables, style: dict, context: dict) -> Figure:
    """(d) Per-layer LOAD and EXEC time against the layer's parameter bytes: the median
    over every run of the layer with its 95 % CI, coloured by limit (layers without
    weights and Bulk's whole-network tasks are left out)."""
    tasks = tables.get("tasks", pd.DataFrame())
    if not tasks.empty:
        tasks = tasks[(tasks["layer"] >= 0) & (tasks["param_bytes"] > 0)
                      & tasks["task_type"].isin(["LOAD", "EXEC"])]
    if tasks.empty:
        return no_data("Layer times", "no per-layer LOAD/EXEC task with weights")
    layers = _layer_medians(with_panel(tasks))
    # Emulated times are another clock: they get their own row, never the same axes.
    clocks = sorted(layers["emulated"].unique())
    limits = panel_names(with_panel(tasks))
    colors = colors_for(limits, style)
    fig, axes = grid(len(clocks), 2, sharey=False)
    for r, emulated in enumerate(clocks):
        for c, kind in enumerate(["LOAD", "EXEC"]):
            ax = axes[r, c]
            sub = layers[(layers["task_type"] == kind) & (layers["emulated"] == emulated)]
            for panel in limits:
                _layer_points(ax, sub[sub["panel"] == panel], colors[panel])
            ax.set(xscale="log", yscale="log", xlabel="layer weights (MiB)",
                   ylabel=f"{kind} time (ms)",
                   title=f"{kind}" + (" (emulated: VM clock)" if emulated else ""))
    handles = [Line2D([], [], color=colors[p], marker="o", linestyle="none", label=p)
               for p in limits]
    handles += [ci_handles()[0], Line2D([], [], color="0.3", marker="x", linestyle="none",
                                         label="some run of the layer did not finish")]
    add_legend(fig, handles, ncols=3)
    return fig


def _layer_points(ax: Axes, layers: pd.DataFrame, color) -> None:
    for failed, marker in ((False, "o"), (True, "x")):
        part = layers[layers["some_failed"] == failed]
        if part.empty:
            continue
        x = part["param_bytes"] / MIB
        lo = (part["ms"] - part["lo"]).fillna(0).clip(lower=0)
        hi = (part["hi"] - part["ms"]).fillna(0).clip(lower=0)
        ax.errorbar(x, part["ms"], yerr=[lo, hi], fmt=marker, markersize=3, color=color,
                    alpha=0.7, elinewidth=0.6, linewidth=0, rasterized=True)

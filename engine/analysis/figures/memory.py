"""Figure (b), ``memory``: RAM and swap per size bin and policy."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from engine.analysis.figures.common import (
    Tables,
    add_legend,
    bin_rows,
    campaign_policies,
    ci_handles,
    colors_for,
    failed_legend,
    grid,
    grouped_bars,
    instrument_note,
    no_data,
    panel_names,
    policy_handles,
    summary_bin_order,
    summary_cells,
)
from engine.units import MIB


def draw(tables: Tables, style: dict, context: dict) -> Figure:
    """(b) Mean and peak RAM (process RSS) and swap per size bin and policy, medians over
    pipelines and repetitions with 95 % CIs, one column per limit and execution mode."""
    summary = bin_rows(tables.get("summary", pd.DataFrame()))
    runs = tables.get("runs", pd.DataFrame())
    if summary.empty:
        return no_data("RAM and swap per policy", "no runs")
    policies = campaign_policies(tables, context)
    colors = colors_for(policies, style)
    bins = summary_bin_order(summary, runs)
    panels = panel_names(summary)
    fig, axes = grid(2, len(panels), sharey=False)
    rows = [("rss", "RAM: process RSS (MiB)"), ("swap", "swap: process VmSwap (MiB)")]
    for c, panel in enumerate(panels):
        sub = summary[summary["panel"] == panel]
        panel_bins = [b for b in bins if b in set(sub["size_bin"])]
        for r, (quantity, ylabel) in enumerate(rows):
            ax = axes[r, c]
            grouped_bars(ax, panel_bins, policies, colors,
                          summary_cells(sub, f"peak_{quantity}_bytes", MIB), alpha=0.4)
            grouped_bars(ax, panel_bins, policies, colors,
                          summary_cells(sub, f"mean_{quantity}_bytes", MIB),
                          width_scale=0.5)
            axes[r, 0].set_ylabel(ylabel)
            ax.set_ylim(bottom=0)
            if sub[[f"peak_{quantity}_bytes_median"]].isna().all().all():
                instrument_note(ax, "sampler not run: no RSS/swap series")
        limit = runs.loc[(runs["limit"] == sub["limit"].iloc[0])
                         & (runs["emulated"] == sub["emulated"].iloc[0]), "limit_bytes"]
        if limit.notna().any():
            axes[0, c].axhline(limit.dropna().iloc[0] / MIB, color="firebrick",
                               linewidth=0.9, linestyle="--")
        axes[0, c].set_title(panel)
        axes[-1, c].set_xlabel("pipeline size (total weights)")
    handles = [Patch(color="0.35", label="mean over the run (narrow)"),
               Patch(color="0.35", alpha=0.4, label="peak (wide)"),
               ci_handles()[0],
               Line2D([], [], color="firebrick", linestyle="--", label="memory limit"),
               failed_legend()]
    add_legend(fig, policy_handles(policies, colors) + handles, ncols=6)
    return fig

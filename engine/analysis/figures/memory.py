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
    counted_failed_legend,
    drop_if_empty,
    failed_legend,
    grouped_bars,
    instrument_note,
    label_lowest,
    no_data,
    panel_grid,
    panel_names,
    panel_title,
    policy_handles,
    size_axis_label,
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
    fig, axes = panel_grid(2, len(panels))
    rows = [("rss", "RAM: RSS (MiB)"), ("swap", "swap: VmSwap (MiB)")]
    for c, panel in enumerate(panels):
        sub = summary[summary["panel"] == panel]
        panel_bins = [b for b in bins if b in set(sub["size_bin"])]
        for r, (quantity, ylabel) in enumerate(rows):
            ax = axes[r, c]
            grouped_bars(ax, panel_bins, policies, colors,
                          summary_cells(sub, f"peak_{quantity}_bytes", MIB), alpha=0.4,
                          counts_failed=True)
            grouped_bars(ax, panel_bins, policies, colors,
                          summary_cells(sub, f"mean_{quantity}_bytes", MIB),
                          width_scale=0.5, notes=False, counts_failed=True)
            if drop_if_empty(ax, "sampler not run: no RSS/swap series"):
                continue
            ax.set_ylabel(ylabel, fontsize="small")
            ax.set_ylim(bottom=0)
            peaks = sub[f"peak_{quantity}_bytes_median"]
            if quantity == "swap" and not (peaks.fillna(0) > 0).any():
                instrument_note(ax, "no run swapped")
                ax.set_ylim(0, 1)
        limit = runs.loc[(runs["limit"] == sub["limit"].iloc[0])
                         & (runs["emulated"] == sub["emulated"].iloc[0]), "limit_bytes"]
        if limit.notna().any() and axes[0, c].axison:
            axes[0, c].axhline(limit.dropna().iloc[0] / MIB, color="firebrick",
                               linewidth=0.9, linestyle="--")
        panel_title(axes[0, c], panel)
        label_lowest(list(axes[:, c]), size_axis_label(panel_bins))
    handles = [Patch(color="0.35", label="mean over the run (narrow)"),
               Patch(color="0.35", alpha=0.4, label="peak (wide)"),
               ci_handles()[0],
               Line2D([], [], color="firebrick", linestyle="--", label="memory limit"),
               failed_legend()]
    if (summary.get("runs_not_ok", pd.Series(dtype=float)).fillna(0) > 0).any():
        handles.append(counted_failed_legend())
    add_legend(fig, policy_handles(policies, colors) + handles, ncols=6)
    return fig

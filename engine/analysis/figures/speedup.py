"""Figure (a), ``speedup``: inference time and the paired speed-up over Bulk."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from engine.analysis.figures.common import (
    Tables,
    add_legend,
    bin_rows,
    campaign_policies,
    ci_handles,
    colors_for,
    drop_if_empty,
    failed_legend,
    grouped_bars,
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


def draw(tables: Tables, style: dict, context: dict) -> Figure:
    """(a) Median inference time and the paired speed-up over Bulk per pipeline-size bin
    with 95 % CIs, one column of panels per memory limit and execution mode."""
    summary = bin_rows(tables.get("summary", pd.DataFrame()))
    ratios = bin_rows(tables.get("speedup_summary", pd.DataFrame()))
    runs = tables.get("runs", pd.DataFrame())
    if summary.empty:
        return no_data("Inference time and speed-up", "no runs")
    # Without Bulk runs there is nothing to take a speed-up over: times only.
    with_speedup = bool((summary["policy"] == "bulk").any()) and not ratios.empty
    policies = campaign_policies(tables, context)
    colors = colors_for(policies, style)
    bins = summary_bin_order(summary, runs)
    panels = panel_names(summary)
    # a third row where some panel is limited: the slowdown against the same policy
    # unconstrained, in the same repetition and execution mode
    with_slowdown = with_speedup and bool((ratios["limit"] != "none").any())
    # native and emulated times differ 15-60x: every panel gets its own y axis
    fig, axes = panel_grid(1 + with_speedup + with_slowdown, len(panels))
    for c, panel in enumerate(panels):
        # Every panel keeps a slot per policy, so a policy sits at the same place in each;
        # it shows the size bins its runs fall in.
        panel_bins = [b for b in bins if b in set(summary.loc[summary["panel"] == panel,
                                                              "size_bin"])]
        grouped_bars(axes[0, c], panel_bins, policies, colors,
                      summary_cells(summary[summary["panel"] == panel], "makespan_s"))
        panel_title(axes[0, c], panel)
        if with_speedup:
            # Bulk over itself is 1 by definition: its slot stays empty
            cells = summary_cells(ratios[ratios["panel"] == panel], "speedup",
                                   significance="speedup_significance")
            grouped_bars(axes[1, c], panel_bins, policies, colors,
                          lambda group, policy, cells=cells: None if policy == "bulk"
                          else cells(group, policy))
            if not drop_if_empty(axes[1, c], "no speed-up: no Bulk run here"):
                axes[1, c].axhline(1.0, color="0.3", linewidth=0.8, linestyle="--")
        if with_slowdown:
            limited = ratios[(ratios["panel"] == panel) & (ratios["limit"] != "none")]
            # an unconstrained column is the baseline: it has no slowdown panel
            if not limited.empty:
                grouped_bars(axes[2, c], panel_bins, policies, colors,
                              summary_cells(limited, "slowdown",
                                             significance="slowdown_significance"))
            if not drop_if_empty(axes[2, c], "no slowdown: the unconstrained baseline"):
                axes[2, c].axhline(1.0, color="0.3", linewidth=0.8, linestyle="--")
        label_lowest(list(axes[:, c]), size_axis_label(panel_bins))
    for c in range(len(panels)):
        axes[0, c].set_ylabel("median inference time (s)", fontsize="small")
        if with_speedup and axes[1, c].axison:
            axes[1, c].set_ylabel("speed-up over Bulk (×)", fontsize="small")
        if with_slowdown and axes[2, c].axison:
            axes[2, c].set_ylabel("slowdown vs\nunconstrained (×)", fontsize="small")
    note = None if with_speedup else ("no speed-up panel: the config runs no Bulk policy "
                                      "to compare with")
    add_legend(fig, policy_handles(policies, colors) + ci_handles() + [failed_legend()],
               title=note)
    return fig

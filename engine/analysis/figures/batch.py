"""Figure ``batch`` (issue 38), drawn where ``run.batch`` is a list: peak RAM and makespan
against the batch, one line per policy."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from engine.analysis.figures.common import (
    Tables,
    add_legend,
    campaign_policies,
    colors_for,
    no_data,
    panel_grid,
    panel_names,
    panel_title,
    policy_handles,
    short_end,
    with_panel,
)
from engine.units import MIB

# the kernel's high-water mark of the run's RSS (VmHWM): a short run's peak the sampler
# may miss between two rows
ROWS = [("hwm_rss_bytes", MIB, "peak RAM: VmHWM (MiB)"), ("makespan_s", 1.0, "makespan (s)")]


def batch_cells(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary's per-pipeline cells at a set batch, each with its ``panel`` (its limit
    and execution mode, the batch left out: it is the x axis) and ``column`` (the panel
    and the pipeline)."""
    if summary.empty or "batch" not in summary:
        return pd.DataFrame()
    rows = summary[(summary["level"] == "pipeline") & summary["batch"].notna()]
    if rows.empty:
        return rows
    rows = with_panel(rows.drop(columns="batch")).assign(batch=rows["batch"].astype(int))
    return rows.assign(column=rows["panel"] + ", " + rows["pipeline"].astype(str))


def draw(tables: Tables, style: dict, context: dict) -> Figure:
    """Per pipeline and per limit and execution mode (a column each): the peak RAM (top)
    and the makespan (bottom) of each policy against the batch on a log axis, medians over
    the repetitions with their 95 % CIs; a batch at which a policy's runs did not all
    finish is named in its panel; the limit as a dashed line."""
    cells = batch_cells(tables.get("summary", pd.DataFrame()))
    if cells.empty or cells["batch"].nunique() < 2:
        return no_data("Memory and time against the batch",
                       "the runs ran at one batch (run.batch: a list of two or more)")
    runs = tables.get("runs", pd.DataFrame())
    policies = campaign_policies(tables, context)
    colors = colors_for(policies, style)
    panels = panel_names(cells)
    columns = [c for p in panels for c in dict.fromkeys(
        cells.loc[cells["panel"] == p].sort_values("pipeline")["column"])]
    batches = sorted(cells["batch"].unique())
    fig, axes = panel_grid(len(ROWS), len(columns))
    for c, column in enumerate(columns):
        part = cells[cells["column"] == column]
        for r, (metric, scale, ylabel) in enumerate(ROWS):
            ax = axes[r, c]
            for policy in [p for p in policies if p in set(part["policy"])]:
                g = part[part["policy"] == policy].sort_values("batch")
                mid = g[f"{metric}_median"].to_numpy(dtype=float) / scale
                lo = g[f"{metric}_ci_low"].to_numpy(dtype=float) / scale
                hi = g[f"{metric}_ci_high"].to_numpy(dtype=float) / scale
                ax.errorbar(g["batch"], mid, yerr=[np.clip(mid - lo, 0, None),
                                                   np.clip(hi - mid, 0, None)],
                            color=colors[policy], marker="o", markersize=3, linewidth=1.2,
                            capsize=2, label=policy)
            ax.set_xscale("log", base=2)
            ax.set_xticks(batches, [str(b) for b in batches])
            ax.minorticks_off()
            ax.set_ylabel(ylabel, fontsize="small")
            ax.set_ylim(bottom=0)
            ax.set_xlabel("batch (images per forward pass)")
        lost = part[part["runs_not_ok"].fillna(0) > 0]
        if not lost.empty:  # a median of the finished runs only, or none: said where
            axes[1, c].text(0.02, 0.98, "\n".join(
                f"{r.policy} at {r.batch}: {int(r.runs_not_ok)} of {int(r.runs)} did not "
                f"finish ({short_end(str(r.ended))})" for r in lost.itertuples()),
                transform=axes[1, c].transAxes, fontsize="x-small", va="top", color="0.2")
        first = part.iloc[0]
        limit = runs.loc[runs["limit"] == first["limit"], "limit_bytes"] if not runs.empty \
            else pd.Series(dtype=float)
        if first["limit"] != "none" and limit.notna().any():
            axes[0, c].axhline(limit.dropna().iloc[0] / MIB, color="firebrick",
                               linewidth=0.9, linestyle="--")
        panel_title(axes[0, c], column)
    handles = [Line2D([], [], color="0.3", marker="o", markersize=3,
                      label="median, 95 % CI over repetitions"),
               Line2D([], [], color="firebrick", linestyle="--", label="memory limit")]
    add_legend(fig, policy_handles(policies, colors) + handles, ncols=6)
    return fig

"""Figure (c), ``partial_workers``: Linear against Partial with k workers."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from engine.analysis.figures.common import (
    Tables,
    add_legend,
    ci_handles,
    colors_for,
    failed_mark,
    grid,
    instrument_note,
    no_data,
    panel_names,
    policy_key,
    short_end,
    with_panel,
)
from engine.analysis.terminations import endings
from engine.units import MIB


def draw(tables: Tables, style: dict, context: dict) -> Figure:
    """(c) Linear against Partial with k workers: median inference time and peak RAM with
    95 % CIs (over pipelines and repetitions), one line per limit and execution mode."""
    from engine.analysis.stats import cluster_bootstrap_ci

    runs = tables.get("runs", pd.DataFrame())
    if "policy_family" in runs:
        runs = runs[runs["policy_family"].isin(["linear", "partial"])]
    if runs.empty or not (runs["policy_family"] == "partial").any():
        return no_data("Linear and Partial with k workers",
                        "no partial:k policy in run.policies (add partial:1, partial:2, ...)")
    runs = with_panel(runs)
    panels = panel_names(runs)
    colors = colors_for(panels, style)
    fig, axes = grid(1, 2, sharey=False)
    order = sorted(runs["policy"].unique(), key=policy_key)
    quantities = [("makespan_s", 1.0, "median inference time (s)"),
                  ("peak_rss_bytes", MIB, "peak RAM, process RSS (MiB)")]
    for ax, (col, scale, ylabel) in zip(axes[0], quantities):
        for j, panel in enumerate(panels):
            sub = runs[runs["panel"] == panel]
            ok = sub[sub["termination"] == "ok"]
            xs, est = [], []
            for x, policy in enumerate(order):
                part = ok[ok["policy"] == policy]
                if part[col].notna().any():
                    xs.append(x + (j - (len(panels) - 1) / 2) * 0.06)  # side by side
                    est.append(cluster_bootstrap_ci(part[col] / scale, part["pipeline"]))
            if est:
                med, lo, hi = (np.array(v) for v in zip(*est))
                ax.errorbar(xs, med, yerr=[med - np.nan_to_num(lo, nan=med),
                                           np.nan_to_num(hi, nan=med) - med],
                            marker="o", color=colors[panel], label=panel, capsize=2,
                            linewidth=1)
            _mark_failed_points(ax, sub, order, colors[panel])
        ax.set_xticks(range(len(order)), order)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("policy (partial:k = k workers)")
        ax.set_ylabel(ylabel)
        if runs[col].isna().all() and (runs["termination"] == "ok").any():
            instrument_note(ax, "not measured (sampler not run)")
    handles = [Line2D([], [], color=colors[p], marker="o", label=p) for p in panels]
    handles += [ci_handles()[0], Line2D([], [], color="0.3", marker="x", linestyle="none",
                                         label="a run did not finish (OOM / timeout / error)")]
    add_legend(fig, handles, ncols=3)
    return fig


def _mark_failed_points(ax: Axes, runs: pd.DataFrame, order: list[str], color) -> None:
    """An x on the axis at a policy where some run did not finish, named by its end."""
    failed = runs[runs["termination"] != "ok"]
    for policy, group in failed.groupby("policy"):
        x = order.index(policy)
        ax.plot(x, 0.02, marker="x", color=color, transform=ax.get_xaxis_transform(),
                clip_on=False)
        # every way they ended, counted where more than one (not the most frequent alone)
        ax.annotate(failed_mark(len(group), short_end(endings(group["termination"]))),
                    (x, 0.02),
                    xycoords=ax.get_xaxis_transform(), xytext=(4, 0),
                    textcoords="offset points", fontsize="x-small", color=color)

"""Figure ``memory_over_time``: the sampler's memory series of one pipeline and limit."""

from __future__ import annotations

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from engine.analysis.figures.common import (
    Tables,
    add_legend,
    colors_for,
    grid,
    limit_order,
    no_data,
    policy_key,
    short_end,
    with_panel,
)
from engine.units import MIB, parse_size


def _pick_series(samples: pd.DataFrame, context: dict) -> tuple[str, str]:
    """Which pipeline and limit memory_over_time shows: the tightest sampled limit (most
    memory pressure; enforced limits first), and of its pipelines the reconciliation
    pipeline if it ran there, else the first."""
    wanted = context.get("run", {}).get("reconcile", {}).get("pipeline")
    enforced = samples[samples["limit_enforced"].astype(bool)]
    pool = samples if enforced.empty else enforced
    limit = min(pool["limit"].unique(), key=limit_order)
    pipelines = sorted(pool.loc[pool["limit"] == limit, "pipeline"].unique())
    return (wanted if wanted in pipelines else pipelines[0]), limit


SERIES = [("rss_bytes", "process RSS"), ("swap_bytes", "process swap"),
          ("cg_current_bytes", "cgroup memory.current"), ("cg_swap_current_bytes", "cgroup swap")]


def draw(tables: Tables, style: dict, context: dict) -> Figure:
    """The sampler's memory series per policy for one pipeline and limit (and, where the
    runs ran at several batches, the smallest), layer boundaries (EXEC ends) marked as
    ticks on the time axis."""
    samples = tables.get("samples", pd.DataFrame())
    if samples.empty:
        return no_data("Memory over time", "no samples (the sampler was off: sample_hz 0)")
    pipeline, limit = _pick_series(samples, context)
    samples = with_panel(samples[(samples["pipeline"] == pipeline)
                                  & (samples["limit"] == limit)])
    # one batch, its first (the panel label names it): another batch's run is another run,
    # not a panel beside this one's (held-out pass 29, M4)
    if "batch" in samples and samples["batch"].nunique() > 1:
        samples = samples[samples["batch"] == samples["batch"].min()]
    samples = samples[samples["rep"].fillna(0) == samples["rep"].fillna(0).min()]
    tasks = tables.get("tasks", pd.DataFrame())
    keys = samples[["run_id", "policy", "emulated", "termination", "panel"]].drop_duplicates()
    keys = keys.assign(k=keys["policy"].map(policy_key)).sort_values(["emulated", "k"])
    n = len(keys)
    cols = min(n, 3)
    # Shared axes: the policies' durations and levels compare at a glance.
    fig, axes = grid((n + cols - 1) // cols, cols, sharey=True, sharex=True)
    colors = colors_for([c for c, _ in SERIES], style)
    for ax, key in zip(axes.flat, keys.itertuples()):
        run = samples[samples["run_id"] == key.run_id]
        for col, label in SERIES:
            if run[col].notna().any():
                ax.plot(run["t_s"], run[col] / MIB, color=colors[col], linewidth=1, label=label)
        _layer_ticks(ax, tasks, key.run_id)
        end = "" if key.termination == "ok" else f" — {short_end(key.termination)}"
        ax.set_title(f"{key.policy}{' (emulated)' if key.emulated else ''}{end}",
                     color="firebrick" if end else "black")
        if limit != "none":
            ax.axhline(parse_size(limit) / MIB, color="firebrick", linestyle="--",
                       linewidth=0.9)
    for ax in axes.flat[n:]:
        ax.set_axis_off()
    for ax in axes.flat[max(n - cols, 0):n]:  # the lowest panel of each column
        ax.xaxis.set_tick_params(labelbottom=True)
        ax.set_xlabel("time since run start (s)")
    for ax in axes[:, 0]:
        ax.set_ylabel("memory (MiB)")
    handles = [Line2D([], [], color=colors[c], label=label) for c, label in SERIES
               if samples[c].notna().any()]
    handles += [Line2D([], [], color="0.4", marker="|", linestyle="none",
                       label="layer boundary (EXEC end)")]
    if limit != "none":
        handles.append(Line2D([], [], color="firebrick", linestyle="--", label="memory limit"))
    add_legend(fig, handles, loc="outside lower center")
    fig.suptitle(f"Memory over time: {pipeline}, limit {keys['panel'].iloc[0]}")
    return fig


def _layer_ticks(ax: Axes, tasks: pd.DataFrame, run_id: str) -> None:
    if tasks.empty:
        return
    ends = tasks.loc[(tasks["run_id"] == run_id) & (tasks["task_type"] == "EXEC"), "end_ns"]
    ax.vlines(ends / 1e9, 0, 0.04, transform=ax.get_xaxis_transform(), color="0.4",
              linewidth=0.5)

"""The campaign's figures, one function per figure, drawn from the aggregate tables.

Every function takes (tables, style, context) and returns a matplotlib Figure:
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

import os
from collections.abc import Callable
from dataclasses import dataclass

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from engine.files import atomic_path
from engine.schedule.policies import FAMILIES, PolicyError, parse_policy
from engine.units import MIB, parse_size

SHORT_END = {"memory": "OOM", "timeout": "timeout", "error": "error"}
FAILED_HATCH = "////"
PANEL_W, PANEL_H = 3.4, 2.6  # inches per panel

Tables = dict[str, pd.DataFrame]


# ---- shared helpers ----

def policy_key(name: str) -> tuple[int, int, str]:
    try:
        policy = parse_policy(name)
    except PolicyError:  # a policy this engine version does not know: last
        return (len(FAMILIES), 0, name)
    return (FAMILIES.index(policy.family), policy.workers, name)


def _policies(tables: Tables, context: dict) -> list[str]:
    """Every policy of the campaign in a fixed order (bulk, linear, partial:1, ...), so
    that each policy keeps its colour in every figure."""
    names = {parse_policy(p).name for p in context.get("run", {}).get("policies", [])}
    runs = tables.get("runs", pd.DataFrame())
    if "policy" in runs:
        names |= set(runs["policy"].dropna())
    return sorted(names, key=policy_key)


def colors_for(keys: list, style: dict) -> dict:
    cmap = matplotlib.colormaps[style.get("palette", "tab10")]
    if isinstance(cmap, ListedColormap) and cmap.N <= 20:  # qualitative: cycle its colours
        return {k: cmap(i % cmap.N) for i, k in enumerate(keys)}
    return {k: cmap(i / max(len(keys) - 1, 1)) for i, k in enumerate(keys)}


def _limit_order(limit: str) -> float:
    return np.inf if limit == "none" else parse_size(limit)


def _with_panel(df: pd.DataFrame) -> pd.DataFrame:
    """Adds ``panel``: the limit as a label, marked when the limit was not enforced or the
    run was emulated, so such runs are never averaged with the others."""
    label = df["limit"].where(df["limit"] != "none", "unconstrained")
    enforced = df["limit_enforced"].astype(bool) | (df["limit"] == "none")
    label = label.where(enforced, label + " (not enforced)")
    sandbox = df["sandbox"] if "sandbox" in df else pd.Series("vm", index=df.index)
    label = label.where(~df["emulated"].astype(bool),
                        label + ", emulated (" + sandbox.astype(str) + ")")
    if "runtime" in df:
        label = label.where(df["runtime"] == "lean", label + ", " + df["runtime"] + " runtime")
    return df.assign(panel=label)


def _panel_names(df: pd.DataFrame) -> list[str]:
    """Panels from the loosest limit to the tightest; native before emulated."""
    keys = df[["panel", "limit", "limit_enforced", "emulated"]].drop_duplicates("panel")
    order = sorted(keys.itertuples(), key=lambda k: (-_limit_order(k.limit),
                                                     not k.limit_enforced, k.emulated))
    return [k.panel for k in order]


def grid(n_rows: int, n_cols: int, sharey: str | bool = "row",
          sharex: bool = False) -> tuple[Figure, np.ndarray]:
    fig = Figure(figsize=(min(PANEL_W * n_cols + 1.2, 16), PANEL_H * n_rows + 0.9),
                 layout="constrained")
    axes = fig.subplots(n_rows, n_cols, squeeze=False, sharey=sharey, sharex=sharex)
    return fig, axes


def no_data(title: str, why: str) -> Figure:
    fig = Figure(figsize=(6, 2.5), layout="constrained")
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.set_title(title)
    ax.text(0.5, 0.5, f"no data: {why}", ha="center", va="center", wrap=True,
            transform=ax.transAxes)
    return fig


def _mark_failed(ax: Axes, x: float, width: float, label: str, color) -> None:
    """A hatched, empty bar over the lower part of the panel: the run(s) did not finish."""
    ax.axvspan(x - width / 2, x + width / 2, ymax=0.35, facecolor="none", edgecolor=color,
               hatch=FAILED_HATCH, linewidth=0.8)
    ax.text(x, 0.37, label, transform=ax.get_xaxis_transform(), rotation=90, ha="center",
            va="bottom", fontsize="x-small", color="0.25")


def _failed_legend() -> Patch:
    return Patch(facecolor="none", edgecolor="0.3", hatch=FAILED_HATCH,
                 label="did not finish (OOM / timeout / error)")


def _end_label(terminations: pd.Series) -> str:
    """The most frequent non-ok termination of a group, as a short label."""
    failed = terminations[terminations != "ok"]
    return _short(failed.mode().iloc[0]) if len(failed) else ""


def _short(termination: str) -> str:
    return SHORT_END.get(termination, termination)


def _legend(fig: Figure, handles: list, ncols: int | None = None,
            loc: str = "outside upper center") -> None:
    fig.legend(handles=handles, loc=loc, fontsize="small", frameon=False,
               ncols=ncols or min(len(handles), 6))


def _policy_handles(policies: list[str], colors: dict) -> list:
    return [Patch(color=colors[p], label=p) for p in policies]


def _bin_order(runs: pd.DataFrame) -> list[str]:
    """Size bins from the smallest pipelines to the largest."""
    return list(runs.groupby("size_bin")["param_bytes"].median().sort_values().index)


@dataclass
class Cell:
    """One bar: a median with its 95 % CI, how many runs did not finish (and how), and
    whether a ratio's CI excludes 1 (None: not a ratio; ``few``: too few values for a
    claim either way)."""

    median: float = np.nan
    lo: float = np.nan
    hi: float = np.nan
    n_failed: int = 0
    failed: str = ""
    significant: bool | None = None
    few: bool = False


NOT_SIGNIFICANT_ALPHA = 0.35


def _grouped_bars(ax: Axes, groups: list[str], policies: list[str], colors: dict,
                  value: Callable[[str, str], Cell | None], width_scale: float = 1.0,
                  alpha: float = 1.0) -> None:
    """Bars of ``policies`` side by side in each group at the median, with the 95 % CI as
    an error bar. A ratio whose CI contains 1 is drawn pale and marked "n.s."; a cell
    whose runs all failed is a hatched slot named after their end."""
    width = 0.8 / max(len(policies), 1)
    for i, policy in enumerate(policies):
        for g, group in enumerate(groups):
            cell = value(group, policy)
            if cell is None:
                continue
            x = g - 0.4 + width * (i + 0.5)
            if np.isnan(cell.median):
                if cell.n_failed:
                    _mark_failed(ax, x, width, cell.failed, colors[policy])
                continue
            faded = cell.significant is False
            ax.bar(x, cell.median, width * width_scale, color=colors[policy],
                   alpha=alpha * (NOT_SIGNIFICANT_ALPHA if faded else 1.0),
                   edgecolor=colors[policy] if faded else "none")
            if np.isfinite(cell.lo) and np.isfinite(cell.hi):
                ax.errorbar(x, cell.median, yerr=[[cell.median - cell.lo],
                                                  [cell.hi - cell.median]],
                            color="0.15", linewidth=0.7, capsize=1.5)
            notes = (["n.s."] if faded else []) + (["n<6"] if cell.few else []) + (
                [f"{cell.n_failed}× {cell.failed}"] if cell.n_failed else [])
            if notes:
                top = cell.hi if np.isfinite(cell.hi) else cell.median
                ax.annotate(" ".join(notes), (x, top), rotation=90, ha="center",
                            va="bottom", fontsize="x-small", xytext=(0, 2),
                            textcoords="offset points")
    ax.set_xticks(range(len(groups)), groups)
    ax.set_xlim(-0.5, len(groups) - 0.5)


def _summary_cells(df: pd.DataFrame, metric: str, scale: float = 1.0,
                   significance: str | None = None) -> Callable[[str, str], Cell | None]:
    """A ``value`` function over the size-bin rows of a summary table: ``metric``'s
    median and CI (divided by ``scale``), the runs that did not finish, and the cell's
    significance column if given."""
    rows = {(r["size_bin"], r["policy"]): r for r in df.to_dict("records")}

    def value(group: str, policy: str) -> Cell | None:
        r = rows.get((group, policy))
        if r is None:
            return None
        sig = r.get(significance) if significance else None
        if metric in ("speedup", "slowdown"):  # missing when either run did not finish
            prefix = "" if metric == "speedup" else "slowdown_"
            n_failed = int(r.get(f"{prefix}pairs_missing") or 0)
            why = _why_short(r.get(f"{prefix}missing_why"))
            if why == "no bulk" and np.isnan(r[f"{metric}_median"]):
                return None  # a run set without Bulk (vm.policies): nothing to compare
        else:
            n_failed, why = int(r.get("runs_not_ok") or 0), _short(r.get("ended") or "")
        return Cell(r[f"{metric}_median"] / scale, r[f"{metric}_ci_low"] / scale,
                    r[f"{metric}_ci_high"] / scale, n_failed, why,
                    {"higher": True, "lower": True, "no difference": False}.get(sig),
                    sig == "too few runs")

    return value


def _why_short(reason: str | None) -> str:
    """speedup_table's reason ("bulk ended 'memory'", "linear ended 'timeout'") as a
    label: "bulk OOM", "timeout"."""
    if not reason or not isinstance(reason, str):
        return ""
    if reason == "no bulk run":
        return "no bulk"
    if reason.startswith("no ") or " ended " not in reason:
        return reason
    who, _, end = reason.partition(" ended ")
    end = _short(end.strip("'"))
    return f"bulk {end}" if who == "bulk" else end


def _bin_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The size-bin level of a summary table, with its panel."""
    if df.empty or "level" not in df:
        return df
    return _with_panel(df[df["level"] == "size_bin"])


def _summary_bin_order(df: pd.DataFrame, runs: pd.DataFrame) -> list[str]:
    order = _bin_order(runs) if not runs.empty else []
    return [b for b in order if b in set(df["size_bin"])] or sorted(set(df["size_bin"]))


# ---- figures ----

def speedup(tables: Tables, style: dict, context: dict) -> Figure:
    """(a) Median inference time and the paired speed-up over Bulk per pipeline-size bin
    with 95 % CIs, one column of panels per memory limit and execution mode."""
    summary = _bin_rows(tables.get("summary", pd.DataFrame()))
    ratios = _bin_rows(tables.get("speedup_summary", pd.DataFrame()))
    runs = tables.get("runs", pd.DataFrame())
    if summary.empty:
        return no_data("Inference time and speed-up", "no runs")
    # Without Bulk runs there is nothing to take a speed-up over: times only.
    with_speedup = bool((summary["policy"] == "bulk").any()) and not ratios.empty
    policies = _policies(tables, context)
    colors = colors_for(policies, style)
    bins = _summary_bin_order(summary, runs)
    panels = _panel_names(summary)
    # a third row where some panel is limited: the slowdown against the same policy
    # unconstrained, in the same repetition and execution mode
    with_slowdown = with_speedup and bool((ratios["limit"] != "none").any())
    # native and emulated times differ 15-60x: every panel gets its own y axis
    fig, axes = grid(1 + with_speedup + with_slowdown, len(panels), sharey=False)
    for c, panel in enumerate(panels):
        # Every panel keeps a slot per policy, so a policy sits at the same place in each;
        # it shows the size bins its runs fall in.
        panel_bins = [b for b in bins if b in set(summary.loc[summary["panel"] == panel,
                                                              "size_bin"])]
        _grouped_bars(axes[0, c], panel_bins, policies, colors,
                      _summary_cells(summary[summary["panel"] == panel], "makespan_s"))
        axes[0, c].set_title(panel)
        axes[-1, c].set_xlabel("pipeline size (total weights)")
        if with_speedup:
            # Bulk over itself is 1 by definition: its slot stays empty
            cells = _summary_cells(ratios[ratios["panel"] == panel], "speedup",
                                   significance="speedup_significance")
            _grouped_bars(axes[1, c], panel_bins, policies, colors,
                          lambda group, policy, cells=cells: None if policy == "bulk"
                          else cells(group, policy))
            axes[1, c].axhline(1.0, color="0.3", linewidth=0.8, linestyle="--")
        if with_slowdown:
            limited = ratios[(ratios["panel"] == panel) & (ratios["limit"] != "none")]
            if limited.empty:
                _instrument_note(axes[2, c], "the unconstrained baseline")
            else:
                _grouped_bars(axes[2, c], panel_bins, policies, colors,
                              _summary_cells(limited, "slowdown",
                                             significance="slowdown_significance"))
            axes[2, c].axhline(1.0, color="0.3", linewidth=0.8, linestyle="--")
    axes[0, 0].set_ylabel("median inference time (s)")
    if with_speedup:
        axes[1, 0].set_ylabel("speed-up over Bulk (×)")
    if with_slowdown:
        axes[2, 0].set_ylabel("slowdown vs unconstrained (×)")
    else:
        fig.suptitle("no speed-up panel: the config runs no Bulk policy to compare with",
                     fontsize="small", color="0.35")
    _legend(fig, _policy_handles(policies, colors) + _ci_handles() + [_failed_legend()])
    return fig


def _ci_handles() -> list:
    return [Line2D([], [], color="0.15", marker="_", markersize=6, linewidth=0.7,
                   label="95 % CI"),
            Patch(facecolor="0.5", alpha=NOT_SIGNIFICANT_ALPHA, edgecolor="0.5",
                  label="n.s.: CI contains 1 (no difference)"),
            Line2D([], [], linestyle="none", label="n<6: too few pairs for a claim")]


def _instrument_note(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.97, text, transform=ax.transAxes, ha="center", va="top",
            fontsize="x-small", color="0.35")


def memory(tables: Tables, style: dict, context: dict) -> Figure:
    """(b) Mean and peak RAM (process RSS) and swap per size bin and policy, medians over
    pipelines and repetitions with 95 % CIs, one column per limit and execution mode."""
    summary = _bin_rows(tables.get("summary", pd.DataFrame()))
    runs = tables.get("runs", pd.DataFrame())
    if summary.empty:
        return no_data("RAM and swap per policy", "no runs")
    policies = _policies(tables, context)
    colors = colors_for(policies, style)
    bins = _summary_bin_order(summary, runs)
    panels = _panel_names(summary)
    fig, axes = grid(2, len(panels), sharey=False)
    rows = [("rss", "RAM: process RSS (MiB)"), ("swap", "swap: process VmSwap (MiB)")]
    for c, panel in enumerate(panels):
        sub = summary[summary["panel"] == panel]
        panel_bins = [b for b in bins if b in set(sub["size_bin"])]
        for r, (quantity, ylabel) in enumerate(rows):
            ax = axes[r, c]
            _grouped_bars(ax, panel_bins, policies, colors,
                          _summary_cells(sub, f"peak_{quantity}_bytes", MIB), alpha=0.4)
            _grouped_bars(ax, panel_bins, policies, colors,
                          _summary_cells(sub, f"mean_{quantity}_bytes", MIB),
                          width_scale=0.5)
            axes[r, 0].set_ylabel(ylabel)
            ax.set_ylim(bottom=0)
            if sub[[f"peak_{quantity}_bytes_median"]].isna().all().all():
                _instrument_note(ax, "sampler not run: no RSS/swap series")
        limit = runs.loc[(runs["limit"] == sub["limit"].iloc[0])
                         & (runs["emulated"] == sub["emulated"].iloc[0]), "limit_bytes"]
        if limit.notna().any():
            axes[0, c].axhline(limit.dropna().iloc[0] / MIB, color="firebrick",
                               linewidth=0.9, linestyle="--")
        axes[0, c].set_title(panel)
        axes[-1, c].set_xlabel("pipeline size (total weights)")
    handles = [Patch(color="0.35", label="mean over the run (narrow)"),
               Patch(color="0.35", alpha=0.4, label="peak (wide)"),
               _ci_handles()[0],
               Line2D([], [], color="firebrick", linestyle="--", label="memory limit"),
               _failed_legend()]
    _legend(fig, _policy_handles(policies, colors) + handles, ncols=6)
    return fig


# Whole-run values from other instruments, drawn over the sampler's bars.
MARKERS = {
    "hwm_rss_bytes": dict(marker="v", color="black", linestyle="none",
                          label="max RSS (GNU time + VmHWM windows)"),
    "peak_cg_current_bytes": dict(marker="_", color="black", markersize=10, linestyle="none",
                                  label="cgroup memory.current peak"),
    "peak_cg_swap_current_bytes": dict(marker="_", color="black", markersize=10,
                                       linestyle="none", label="cgroup swap peak"),
}


def _memory_bars(ax: Axes, runs: pd.DataFrame, policies: list[str], colors: dict,
                 quantity: str, markers: list[str]) -> None:
    """Peak (pale, wide) and mean (solid, narrow) of ``quantity`` per policy, averaged over
    the panel's runs; hatched when some run did not finish."""
    cols = [f"mean_{quantity}_bytes", f"peak_{quantity}_bytes", *markers]
    means = runs.groupby("policy")[cols].mean() / MIB
    ends = runs.groupby("policy")["termination"].agg(_end_label)
    for x, policy in enumerate(policies):
        if policy not in means.index:  # keep the slot: policies sit alike in every panel
            continue
        mean, peak = means.loc[policy, cols[0]], means.loc[policy, cols[1]]
        hatch = FAILED_HATCH if ends[policy] else None
        ax.bar(x, peak, 0.8, color=colors[policy], alpha=0.4, hatch=hatch)
        ax.bar(x, mean, 0.45, color=colors[policy])
        if ends[policy]:
            ax.annotate(ends[policy], (x, np.nan_to_num(peak)), ha="center", va="bottom",
                        fontsize="x-small", xytext=(0, 2), textcoords="offset points")
        for m in markers:
            ax.plot(x, means.loc[policy, m], **MARKERS[m])
    ax.set_xticks(range(len(policies)), policies, rotation=45, ha="right")
    if means[cols[:2]].isna().all().all():
        _instrument_note(ax, "sampler not run: no RSS/swap series")


def partial_workers(tables: Tables, style: dict, context: dict) -> Figure:
    """(c) Linear against Partial with k workers: median inference time and peak RAM with
    95 % CIs (over pipelines and repetitions), one line per limit and execution mode."""
    from engine.analysis.stats import cluster_bootstrap_ci

    runs = tables.get("runs", pd.DataFrame())
    if "policy_family" in runs:
        runs = runs[runs["policy_family"].isin(["linear", "partial"])]
    if runs.empty or not (runs["policy_family"] == "partial").any():
        return no_data("Linear and Partial with k workers",
                        "no partial:k policy in run.policies (add partial:1, partial:2, ...)")
    runs = _with_panel(runs)
    panels = _panel_names(runs)
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
            _instrument_note(ax, "not measured (sampler not run)")
    handles = [Line2D([], [], color=colors[p], marker="o", label=p) for p in panels]
    handles += [_ci_handles()[0], Line2D([], [], color="0.3", marker="x", linestyle="none",
                                         label="a run did not finish (OOM / timeout / error)")]
    _legend(fig, handles, ncols=3)
    return fig


def _mark_failed_points(ax: Axes, runs: pd.DataFrame, order: list[str], color) -> None:
    """An x on the axis at a policy where some run did not finish, named by its end."""
    failed = runs[runs["termination"] != "ok"]
    for policy, group in failed.groupby("policy"):
        x = order.index(policy)
        ax.plot(x, 0.02, marker="x", color=color, transform=ax.get_xaxis_transform(),
                clip_on=False)
        ax.annotate(f"{len(group)}× {_end_label(group['termination'])}", (x, 0.02),
                    xycoords=ax.get_xaxis_transform(), xytext=(4, 0),
                    textcoords="offset points", fontsize="x-small", color=color)


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


def layer_times(tables: Tables, style: dict, context: dict) -> Figure:
    """(d) Per-layer LOAD and EXEC time against the layer's parameter bytes: the median
    over every run of the layer with its 95 % CI, coloured by limit (layers without
    weights and Bulk's whole-network tasks are left out)."""
    tasks = tables.get("tasks", pd.DataFrame())
    if not tasks.empty:
        tasks = tasks[(tasks["layer"] >= 0) & (tasks["param_bytes"] > 0)
                      & tasks["task_type"].isin(["LOAD", "EXEC"])]
    if tasks.empty:
        return no_data("Layer times", "no per-layer LOAD/EXEC task with weights")
    layers = _layer_medians(_with_panel(tasks))
    # Emulated times are another clock: they get their own row, never the same axes.
    clocks = sorted(layers["emulated"].unique())
    limits = _panel_names(_with_panel(tasks))
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
    handles += [_ci_handles()[0], Line2D([], [], color="0.3", marker="x", linestyle="none",
                                         label="some run of the layer did not finish")]
    _legend(fig, handles, ncols=3)
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


LEVELS = [("cg_peak_bytes", "cgroup memory.peak (window)"),
          ("proc_hwm_bytes", "process VmHWM (window)"),
          ("proc_rss_bytes", "process VmRSS (window end)"),
          ("tc_physical_bytes", "tcmalloc physical bytes"),
          ("heap_inuse_end", "heap profile in-use (window end)")]
RESIDUALS = [("res_cgroup_minus_rss", "cgroup − RSS: page cache, kernel"),
             ("res_rss_minus_tcmalloc", "RSS − tcmalloc physical (mixed; see attribution)"),
             ("res_tcmalloc_minus_heap", "tcmalloc − heap: allocator caches"),
             ("res_load_vs_weights", "LOAD heap growth − weights: extra copies")]


def _measured(df: pd.DataFrame, col: str) -> bool:
    return col in df and df[col].notna().any()


def _instrument_lines(ax: Axes, df: pd.DataFrame, series: list[tuple[str, str]],
                      colors: dict) -> list:
    """One step line per measured instrument; legend entries name the others as not
    measured."""
    handles = []
    x = np.arange(len(df))
    for col, label in series:
        if _measured(df, col):
            (line,) = ax.step(x, df[col] / MIB, where="mid", color=colors[col], label=label,
                              linewidth=1)
            handles.append(line)
        else:
            handles.append(Line2D([], [], color="0.75", linestyle=":",
                                  label=f"{label}: not measured"))
    return handles


def _network_boundaries(ax: Axes, df: pd.DataFrame) -> None:
    """A vertical line where each network instance's windows begin, named at the top."""
    starts = df.reset_index(drop=True).groupby("instance", sort=False).head(1)
    for i, row in starts.iterrows():
        ax.axvline(i - 0.5, color="0.6", linewidth=0.6)
        ax.text(i, 1.0, f" {row['network']}", transform=ax.get_xaxis_transform(),
                fontsize="x-small", va="bottom", rotation=0, clip_on=False)


def _run_hwm_line(ax: Axes, rec: pd.DataFrame) -> Line2D:
    """The run's max RSS as a dashed line, or a legend entry saying it was not measured."""
    label = "max RSS, whole run (GNU time + VmHWM windows)"
    if _measured(rec, "hwm_rss_bytes"):
        return ax.axhline(rec["hwm_rss_bytes"].iloc[0] / MIB, color="black", linestyle="--",
                          linewidth=1, label=label)
    return Line2D([], [], color="0.75", linestyle="--", label=f"{label}: not measured")


def reconciliation(tables: Tables, style: dict, context: dict) -> Figure:
    """Per-layer memory of the reconciliation run: every instrument per LOAD/EXEC window
    in execution order, GNU time's high-water mark, and the named residuals."""
    rec = tables.get("reconcile", pd.DataFrame())
    if not rec.empty:
        rec = rec[rec["task_type"].isin(["LOAD", "EXEC"])].sort_values("start_ns")
    if rec.empty:
        return no_data("Memory reconciliation", "no reconciliation run")
    cols = [c for c, _ in LEVELS + RESIDUALS] + ["hwm_rss_bytes"]
    colors = colors_for(cols, style)
    fig = Figure(figsize=(11, 6.5), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    handles = _instrument_lines(top, rec, LEVELS, colors)
    # GNU time's max RSS is the kernel's hiwater_rss, which the per-window VmHWM resets
    # lower; hwm_rss_bytes is its maximum with the windows' peaks (runner.folder).
    handles.append(_run_hwm_line(top, rec))
    top.set_ylabel("memory (MiB)")
    top.legend(handles=handles, fontsize="x-small", loc="upper left", bbox_to_anchor=(1, 1))
    is_load = (rec["task_type"] == "LOAD").to_numpy()
    weights = bottom.bar(np.flatnonzero(is_load), rec.loc[is_load, "param_bytes"] / MIB,
                         width=1, color="0.8", label="layer weights (LOAD windows)")
    handles = [weights, *_instrument_lines(bottom, rec, RESIDUALS, colors)]
    bottom.axhline(0, color="0.3", linewidth=0.6)
    bottom.set_ylabel("weights, residuals (MiB)")
    bottom.set_xlabel("LOAD/EXEC window, in execution order")
    bottom.legend(handles=handles, fontsize="x-small", loc="upper left", bbox_to_anchor=(1, 1))
    for ax in (top, bottom):
        _network_boundaries(ax, rec)
    first = rec.iloc[0]
    fig.suptitle(f"Memory reconciliation: {first['pipeline']} under {first['policy']}, "
                 f"limit {_limit_text(first)}")
    if not any(_measured(rec, c) for c in cols):
        _instrument_note(top, "no instrument measured in this run (probes off)")
    return fig


# Attribution parts, bottom of the stack first: (column, label, colour)
ATTRIBUTION = [
    ("att_weights_bytes", "weights in use", "#1f77b4"),
    ("att_activations_bytes", "activations, other heap since profiling", "#aec7e8"),
    ("att_malloc_baseline_bytes", "malloc'd before profiling (interpreter)", "#9edae5"),
    ("att_allocator_free_bytes", "tcmalloc free but resident", "#ff7f0e"),
    ("att_interpreter_anon_bytes", "anon outside malloc (pymalloc, stacks)", "#2ca02c"),
    ("att_anon_bytes", "anonymous (not split: no heap profile)", "#98df8a"),
    ("att_other_anon_bytes", "other processes' anon (cgroup)", "#c5b0d5"),
    ("att_file_bytes", "file-backed: libraries, mapped files", "#8c564b"),
    ("att_shmem_bytes", "shmem", "#e377c2"),
    ("att_page_cache_bytes", "page cache (cgroup)", "#bcbd22"),
    ("att_kernel_bytes", "kernel: slab, stacks, page tables, sock (cgroup)", "#7f7f7f"),
    ("att_unexplained_bytes", "unexplained", "#d62728"),
]
OUTSIDE = [("att_mapped_not_resident_bytes", "tcmalloc mapped, not resident (not in total)",
            "#ffbb78"),
           ("att_swap_bytes", "swap (not in total)", "#17becf")]


def attribution(tables: Tables, style: dict, context: dict) -> Figure:
    """Every window's outermost measurement (cgroup memory.current at its end, else VmRSS)
    stacked by the named part each byte belongs to, the explicit remainder on top; hatched
    above: what is outside it (tcmalloc's untouched pages, swap). Lines: the outer value,
    the cgroup's window peak and the run's max RSS (GNU time + VmHWM windows)."""
    rec = tables.get("reconcile", pd.DataFrame())
    if not rec.empty:
        rec = rec[rec["task_type"].isin(["LOAD", "EXEC"])].sort_values("start_ns")
    if rec.empty:
        return no_data("Memory attribution", "no reconciliation run")
    rec = rec.reset_index(drop=True)
    for col in ("att_outer_bytes", "att_unexplained_bytes"):
        if col not in rec:
            rec[col] = np.nan
    fig = Figure(figsize=(12, 5.5), layout="constrained")
    ax = fig.subplots()
    x = np.arange(len(rec))
    pos, neg = np.zeros(len(rec)), np.zeros(len(rec))
    handles = []
    for col, label, color in ATTRIBUTION:
        if not _measured(rec, col):
            continue
        v = rec[col].fillna(0).to_numpy() / MIB
        base = np.where(v >= 0, pos, neg)
        handles.append(ax.bar(x, v, bottom=base, width=1.0, color=color, label=label,
                              linewidth=0))
        pos += np.where(v >= 0, v, 0)
        neg += np.where(v < 0, v, 0)
    for col, label, color in OUTSIDE:
        if not _measured(rec, col):
            continue
        v = rec[col].fillna(0).clip(lower=0).to_numpy() / MIB
        handles.append(ax.bar(x, v, bottom=pos, width=1.0, color="none", edgecolor=color,
                              hatch="////", linewidth=0, label=label))
        pos += v
    outer = rec.get("att_outer", pd.Series(dtype=object)).replace("", np.nan).dropna()
    outer_name = outer.iloc[0] if len(outer) else "outer"
    (line,) = ax.step(x, rec["att_outer_bytes"] / MIB, where="mid", color="black",
                      linewidth=1, label=f"{outer_name} (window end): the total")
    handles.append(line)
    handles += _instrument_lines(ax, rec, [("cg_peak_bytes", "cgroup memory.peak (window)")],
                                 {"cg_peak_bytes": "firebrick"})
    handles.append(_run_hwm_line(ax, rec))
    if "plausible" in rec and (~rec["plausible"].astype(bool)).any():
        bad = np.flatnonzero(~rec["plausible"].astype(bool).to_numpy())
        ax.plot(bad, np.full(len(bad), 0), "v", color="red", markersize=4, clip_on=False)
        handles.append(Line2D([], [], color="red", marker="v", linestyle="none",
                              label="window failing a plausibility check"))
    _network_boundaries(ax, rec)
    ax.axhline(0, color="0.3", linewidth=0.6)
    ax.set_xlim(-0.5, len(rec) - 0.5)
    ax.set_ylabel("memory (MiB)")
    ax.set_xlabel("LOAD/EXEC window, in execution order")
    ax.legend(handles=handles, fontsize="x-small", loc="upper left", bbox_to_anchor=(1, 1))
    first = rec.iloc[0]
    rest = rec["att_unexplained_bytes"].abs().max() / MIB
    fig.suptitle(f"Memory attribution: {first['pipeline']} under {first['policy']}, limit "
                 f"{_limit_text(first)}{' (emulated)' if first.get('emulated') else ''}"
                 + ("" if np.isnan(rest) else f"; largest unexplained remainder {rest:.1f} MiB"))
    if rec["att_outer_bytes"].isna().all():
        _instrument_note(ax, "not measured: no process or cgroup counters in this run "
                             "(probes off)")
    return fig


def _limit_text(row: pd.Series) -> str:
    limit = row.get("limit_bytes")
    if limit is None or pd.isna(limit):
        return "none"
    text = f"{int(limit) // MIB} MiB"
    return text if row.get("limit_enforced") else text + " (not enforced)"


def _pick_series(samples: pd.DataFrame, context: dict) -> tuple[str, str]:
    """Which pipeline and limit memory_over_time shows: the tightest sampled limit (most
    memory pressure; enforced limits first), and of its pipelines the reconciliation
    pipeline if it ran there, else the first."""
    wanted = context.get("run", {}).get("reconcile", {}).get("pipeline")
    enforced = samples[samples["limit_enforced"].astype(bool)]
    pool = samples if enforced.empty else enforced
    limit = min(pool["limit"].unique(), key=_limit_order)
    pipelines = sorted(pool.loc[pool["limit"] == limit, "pipeline"].unique())
    return (wanted if wanted in pipelines else pipelines[0]), limit


SERIES = [("rss_bytes", "process RSS"), ("swap_bytes", "process swap"),
          ("cg_current_bytes", "cgroup memory.current"), ("cg_swap_current_bytes", "cgroup swap")]


def memory_over_time(tables: Tables, style: dict, context: dict) -> Figure:
    """The sampler's memory series per policy for one pipeline and limit, layer boundaries
    (EXEC ends) marked as ticks on the time axis."""
    samples = tables.get("samples", pd.DataFrame())
    if samples.empty:
        return no_data("Memory over time", "no samples (the sampler was off: sample_hz 0)")
    pipeline, limit = _pick_series(samples, context)
    samples = _with_panel(samples[(samples["pipeline"] == pipeline)
                                  & (samples["limit"] == limit)])
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
        end = "" if key.termination == "ok" else f" — {_short(key.termination)}"
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
    _legend(fig, handles, loc="outside lower center")
    fig.suptitle(f"Memory over time: {pipeline}, limit {keys['panel'].iloc[0]}")
    return fig


def _layer_ticks(ax: Axes, tasks: pd.DataFrame, run_id: str) -> None:
    if tasks.empty:
        return
    ends = tasks.loc[(tasks["run_id"] == run_id) & (tasks["task_type"] == "EXEC"), "end_ns"]
    ax.vlines(ends / 1e9, 0, 0.04, transform=ax.get_xaxis_transform(), color="0.4",
              linewidth=0.5)


FIGURES: dict[str, Callable[[Tables, dict, dict], Figure]] = {
    "speedup": speedup,
    "memory": memory,
    "partial_workers": partial_workers,
    "layer_times": layer_times,
    "reconciliation": reconciliation,
    "attribution": attribution,
    "memory_over_time": memory_over_time,
}


def make_figure(name: str, tables: Tables, style: dict, context: dict) -> Figure:
    """Figure ``name`` drawn under the config's font size."""
    with matplotlib.rc_context({"font.size": style.get("font_size", 9)}):
        return FIGURES[name](tables, style, context)


def save_figure(fig: Figure, png: str | os.PathLike, pdf: str | os.PathLike,
                dpi: int) -> None:
    """The figure as PNG and PDF, each through a temporary file and a rename."""
    for path, fmt in ((png, "png"), (pdf, "pdf")):
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=fmt, dpi=dpi)

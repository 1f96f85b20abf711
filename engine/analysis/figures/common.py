"""What the campaign's figures share: panels per limit and mode, policy colours and
order, bars with their CIs, failed-run marks, legends, instrument notes, saving."""

from __future__ import annotations

import os
import re
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


def policy_key(name: str) -> tuple[int, int, str]:
    try:
        policy = parse_policy(name)
    except PolicyError:  # a policy this engine version does not know: last
        return (len(FAMILIES), 0, name)
    return (FAMILIES.index(policy.family), policy.workers, name)


def campaign_policies(tables: Tables, context: dict) -> list[str]:
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


def limit_order(limit: str) -> float:
    return np.inf if limit == "none" else parse_size(limit)


def with_panel(df: pd.DataFrame) -> pd.DataFrame:
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
    # runs at several batches (run.batch a list) are never averaged together either
    if "batch" in df and df["batch"].nunique(dropna=False) > 1:
        label = label + ", " + df["batch"].map(
            lambda b: "deploy batch" if pd.isna(b) else f"batch {int(b)}")
    return df.assign(panel=label)


def panel_names(df: pd.DataFrame) -> list[str]:
    """Panels from the loosest limit to the tightest; native before emulated."""
    batch = df["batch"] if "batch" in df else pd.Series(pd.NA, index=df.index)
    keys = df.assign(batch_order=batch.fillna(0).astype(int))[
        ["panel", "limit", "limit_enforced", "emulated", "batch_order"]].drop_duplicates("panel")
    order = sorted(keys.itertuples(), key=lambda k: (-limit_order(k.limit),
                                                     not k.limit_enforced, k.emulated,
                                                     k.batch_order))
    return [k.panel for k in order]


def grid(n_rows: int, n_cols: int, sharey: str | bool = "row",
          sharex: bool = False) -> tuple[Figure, np.ndarray]:
    fig = Figure(figsize=(min(PANEL_W * n_cols + 1.2, 16), PANEL_H * n_rows + 0.9),
                 layout="constrained")
    axes = fig.subplots(n_rows, n_cols, squeeze=False, sharey=sharey, sharex=sharex)
    return fig, axes


MAX_PANEL_COLS = 4  # wider, a row of panels shrinks below what a title and bins need


def panel_grid(rows_per_panel: int, n_panels: int) -> tuple[Figure, np.ndarray]:
    """Axes for ``n_panels`` panels of ``rows_per_panel`` stacked axes each, wrapped into
    blocks of at most MAX_PANEL_COLS panels: ``axes[r, c]`` is row r of panel c. The
    cells of the last block no panel uses are switched off."""
    cols = min(n_panels, MAX_PANEL_COLS)
    blocks = -(-n_panels // cols)
    fig, grid_axes = grid(rows_per_panel * blocks, cols, sharey=False)
    axes = np.empty((rows_per_panel, n_panels), dtype=object)
    for c in range(n_panels):
        block, col = divmod(c, cols)
        for r in range(rows_per_panel):
            axes[r, c] = grid_axes[block * rows_per_panel + r, col]
    for c in range(n_panels, blocks * cols):
        for r in range(rows_per_panel):
            grid_axes[(blocks - 1) * rows_per_panel + r, c % cols].set_axis_off()
    return fig, axes


def panel_title(ax: Axes, panel: str) -> None:
    """A panel's name on two lines at most: its limit, then how it ran."""
    limit, _, rest = panel.partition(", ")
    ax.set_title(f"{limit}\n{rest}" if rest else limit, fontsize="medium")


def no_data(title: str, why: str) -> Figure:
    fig = Figure(figsize=(6, 2.5), layout="constrained")
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.set_title(title)
    ax.text(0.5, 0.5, f"no data: {why}", ha="center", va="center", wrap=True,
            transform=ax.transAxes)
    return fig


def mark_failed(ax: Axes, x: float, width: float, label: str, color) -> None:
    """A hatched, empty bar over the lower part of the panel: the run(s) did not finish."""
    ax.axvspan(x - width / 2, x + width / 2, ymax=0.35, facecolor="none", edgecolor=color,
               hatch=FAILED_HATCH, linewidth=0.8)
    ax.text(x, 0.37, label, transform=ax.get_xaxis_transform(), rotation=90, ha="center",
            va="bottom", fontsize="x-small", color="0.25")


def failed_legend() -> Patch:
    return Patch(facecolor="none", edgecolor="0.3", hatch=FAILED_HATCH,
                 label="did not finish (OOM / timeout / error)")


def counted_failed_legend() -> Patch:
    return Patch(facecolor="0.8", edgecolor="0.3", hatch=FAILED_HATCH,
                 label="counts runs that did not finish (their memory until the end)")


def failed_mark(n: int, failed: str) -> str:
    """A bar's mark of its runs that did not finish: "3× OOM", or a mixed cell's own
    counts as they stand ("2 OOM, 1 timeout", never "3× 2 OOM, 1 timeout")."""
    return failed if failed[:1].isdigit() else f"{n}× {failed}"


def short_end(termination: str) -> str:
    """A termination, or several with their counts ("2 memory, 1 timeout"), in a
    label's words ("2 OOM, 1 timeout")."""
    return re.sub(r"[a-z]+", lambda m: SHORT_END.get(m.group(0), m.group(0)), termination)


def add_legend(fig: Figure, handles: list, ncols: int | None = None,
               loc: str = "outside upper center", title: str | None = None) -> None:
    """The figure's one legend, above the panels; ``title``: a note that belongs with it
    (a suptitle would sit on the legend)."""
    # about two inches per entry, so a one-panel figure's legend wraps instead of clipping
    fits = max(1, int(fig.get_figwidth() // 2.0))
    fig.legend(handles=handles, loc=loc, fontsize="small", frameon=False,
               ncols=ncols or min(len(handles), 6, fits), title=title, title_fontsize="small")


def policy_handles(policies: list[str], colors: dict) -> list:
    return [Patch(color=colors[p], label=p) for p in policies]


def bin_order(runs: pd.DataFrame) -> list[str]:
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


def grouped_bars(ax: Axes, groups: list[str], policies: list[str], colors: dict,
                  value: Callable[[str, str], Cell | None], width_scale: float = 1.0,
                  alpha: float = 1.0, notes: bool = True, counts_failed: bool = False
                  ) -> None:
    """Bars of ``policies`` side by side in each group at the median, with the 95 % CI as
    an error bar. A ratio whose CI contains 1 is drawn pale and marked "n.s."; a cell
    whose runs all failed is a hatched slot named after their end. ``notes``: False for
    bars drawn over others' (their notes would repeat). ``counts_failed``: the values
    count the runs that did not finish too (memory up to a kill): such a bar is hatched."""
    width = 0.8 / max(len(policies), 1)
    for i, policy in enumerate(policies):
        for g, group in enumerate(groups):
            cell = value(group, policy)
            if cell is None:
                continue
            x = g - 0.4 + width * (i + 0.5)
            if np.isnan(cell.median):
                if cell.n_failed and notes:
                    mark_failed(ax, x, width, cell.failed, colors[policy])
                continue
            faded = cell.significant is False
            hatched = counts_failed and cell.n_failed > 0
            ax.bar(x, cell.median, width * width_scale, color=colors[policy],
                   alpha=alpha * (NOT_SIGNIFICANT_ALPHA if faded else 1.0),
                   edgecolor="0.3" if hatched else colors[policy] if faded else "none",
                   hatch=FAILED_HATCH if hatched else None,
                   linewidth=0.5 if hatched else None)
            if np.isfinite(cell.lo) and np.isfinite(cell.hi):
                ax.errorbar(x, cell.median, yerr=[[cell.median - cell.lo],
                                                  [cell.hi - cell.median]],
                            color="0.15", linewidth=0.7, capsize=1.5)
            marks = (["n.s."] if faded else []) + (["n<6"] if cell.few else []) + (
                [failed_mark(cell.n_failed, cell.failed)] if cell.n_failed else [])
            if marks and notes:
                top = cell.hi if np.isfinite(cell.hi) else cell.median
                ax.annotate(" ".join(marks), (x, top), rotation=90, ha="center",
                            va="bottom", fontsize="xx-small", xytext=(0, 2),
                            textcoords="offset points")
    # bins as "0-400": the unit once, in the axis label (size_axis_label), keeps many
    # bins legible
    unit = _bin_unit(groups)
    labels = [g.removesuffix(f" {unit}") if unit else g for g in groups]
    slanted = len(groups) > 3
    ax.set_xticks(range(len(groups)), labels, fontsize="small", rotation=30 if slanted else 0,
                  ha="right" if slanted else "center", rotation_mode="anchor")
    ax.set_xlim(-0.5, len(groups) - 0.5)


def _bin_unit(groups: list[str]) -> str | None:
    units = {g.rpartition(" ")[2] for g in groups if " " in g}
    return units.pop() if len(units) == 1 and all(" " in g for g in groups) else None


def size_axis_label(groups: list[str]) -> str:
    """The x label under grouped_bars' size bins, with the unit their ticks leave out."""
    unit = _bin_unit(groups)
    return f"pipeline size ({unit} of weights)" if unit else "pipeline size (total weights)"


def summary_cells(df: pd.DataFrame, metric: str, scale: float = 1.0,
                   significance: str | None = None) -> Callable[[str, str], Cell | None]:
    """A ``value`` function over the size-bin rows of a summary table: ``metric``'s
    median and CI (divided by ``scale``), the runs that did not finish, and the cell's
    significance column if given."""
    rows = {(r["size_bin"], r["policy"]): r for r in df.to_dict("records")}

    def num(r: dict, col: str) -> float:  # a cell without finished runs holds None or NaN
        v = r.get(col)
        return np.nan if v is None else float(v)

    def value(group: str, policy: str) -> Cell | None:
        r = rows.get((group, policy))
        if r is None:
            return None
        sig = r.get(significance) if significance else None
        if metric in ("speedup", "slowdown"):  # missing when either run did not finish
            prefix = "" if metric == "speedup" else "slowdown_"
            n_failed = int(r.get(f"{prefix}pairs_missing") or 0)
            why = why_short(r.get(f"{prefix}missing_why"))
            if why == "no bulk" and np.isnan(num(r, f"{metric}_median")):
                return None  # a run set without Bulk (sandbox.policies): nothing to compare
        else:
            n_failed, why = int(r.get("runs_not_ok") or 0), short_end(r.get("ended") or "")
        return Cell(num(r, f"{metric}_median") / scale, num(r, f"{metric}_ci_low") / scale,
                    num(r, f"{metric}_ci_high") / scale, n_failed, why,
                    {"higher": True, "lower": True, "no difference": False}.get(sig),
                    sig == "too few runs")

    return value


def why_short(reason: str | None) -> str:
    """speedup_table's reasons ("bulk ended 'memory'", "linear ended 'timeout'", several
    joined by "; ") as a label: "bulk OOM", "timeout", "OOM, bulk OOM"."""
    if not reason or not isinstance(reason, str):
        return ""
    return ", ".join(dict.fromkeys(_why_one(r) for r in reason.split("; ")))


def _why_one(reason: str) -> str:
    if reason == "no bulk run":
        return "no bulk"
    if reason.startswith("no ") or " ended " not in reason:
        return reason
    who, _, end = reason.partition(" ended ")
    end = short_end(end.strip("'"))
    return f"bulk {end}" if who == "bulk" else end


def bin_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The size-bin level of a summary table, with its panel."""
    if df.empty or "level" not in df:
        return df
    return with_panel(df[df["level"] == "size_bin"])


def summary_bin_order(df: pd.DataFrame, runs: pd.DataFrame) -> list[str]:
    order = bin_order(runs) if not runs.empty else []
    return [b for b in order if b in set(df["size_bin"])] or sorted(set(df["size_bin"]))


def ci_handles() -> list:
    return [Line2D([], [], color="0.15", marker="_", markersize=6, linewidth=0.7,
                   label="95 % CI"),
            Patch(facecolor="0.5", alpha=NOT_SIGNIFICANT_ALPHA, edgecolor="0.5",
                  label="n.s.: CI contains 1 (no difference)"),
            Line2D([], [], linestyle="none", label="n<6: too few pairs for a claim")]


def instrument_note(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.97, text, transform=ax.transAxes, ha="center", va="top",
            fontsize="x-small", color="0.35")


def drop_if_empty(ax: Axes, note: str) -> bool:
    """Switches off a panel nothing was drawn on (call before reference lines), keeping
    ``note`` where it was: a default 0-1 axis reads as data. True: it was dropped."""
    if ax.patches or ax.lines or ax.collections:
        return False
    ax.set_axis_off()
    ax.text(0.5, 0.5, note, transform=ax.transAxes, ha="center", va="center",
            fontsize="x-small", color="0.35", wrap=True)
    return True


def label_lowest(axes: list[Axes], xlabel: str) -> None:
    """The x label and tick labels on the lowest panel still drawn of a column of
    stacked panels that share their x positions; none on those above it."""
    drawn = [ax for ax in axes if ax.axison]
    for ax in drawn[:-1]:
        ax.tick_params(labelbottom=False)
    if drawn:
        drawn[-1].set_xlabel(xlabel, fontsize="small")


def is_measured(df: pd.DataFrame, col: str) -> bool:
    return col in df and df[col].notna().any()


def instrument_lines(ax: Axes, df: pd.DataFrame, series: list[tuple[str, str]],
                      colors: dict) -> list:
    """One step line per measured instrument; legend entries name the others as not
    measured."""
    handles = []
    x = np.arange(len(df))
    for col, label in series:
        if is_measured(df, col):
            (line,) = ax.step(x, df[col] / MIB, where="mid", color=colors[col], label=label,
                              linewidth=1)
            handles.append(line)
        else:
            handles.append(Line2D([], [], color="0.75", linestyle=":",
                                  label=f"{label}: not measured"))
    return handles


def network_boundaries(ax: Axes, df: pd.DataFrame) -> None:
    """A vertical line where each network instance's windows begin, named at the top."""
    starts = df.reset_index(drop=True).groupby("instance", sort=False).head(1)
    for i, row in starts.iterrows():
        ax.axvline(i - 0.5, color="0.6", linewidth=0.6)
        ax.text(i, 1.0, f" {row['network']}", transform=ax.get_xaxis_transform(),
                fontsize="x-small", va="bottom", rotation=0, clip_on=False)


def run_hwm_line(ax: Axes, rec: pd.DataFrame) -> Line2D:
    """The run's max RSS as a dashed line, or a legend entry saying it was not measured."""
    label = "max RSS, whole run (GNU time + VmHWM windows)"
    if is_measured(rec, "hwm_rss_bytes"):
        return ax.axhline(rec["hwm_rss_bytes"].iloc[0] / MIB, color="black", linestyle="--",
                          linewidth=1, label=label)
    return Line2D([], [], color="0.75", linestyle="--", label=f"{label}: not measured")


def limit_text(row: pd.Series) -> str:
    limit = row.get("limit_bytes")
    if limit is None or pd.isna(limit):
        return "none"
    text = f"{int(limit) // MIB} MiB"
    return text if row.get("limit_enforced") else text + " (not enforced)"


def save_figure(fig: Figure, png: str | os.PathLike, pdf: str | os.PathLike,
                dpi: int) -> None:
    """The figure as PNG and PDF, each through a temporary file and a rename."""
    for path, fmt in ((png, "png"), (pdf, "pdf")):
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=fmt, dpi=dpi)

"""The model's figures, from the tables ``evaluate-model`` writes (reporters apart from
the model): predicted against measured, per execution mode and limit, on log-log axes;
and the per-layer time model's errors per layer type.

Same conventions as ``engine.analysis.plots``: one colour per policy in every figure,
emulated runs in panels of their own, what could not be measured named instead of left
out.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator, NullFormatter, ScalarFormatter

from engine.analysis.figures.common import colors_for, grid, no_data, policy_key
from engine.model.params import batch_name, batch_order, batch_value
from engine.units import MIB

ROWS = [  # (measured, predicted, its error column, label, scale, band: the target)
    ("measured_makespan_s", "predicted_makespan_s", "makespan_error_pct", "makespan (s)",
     1.0, 0.15),
    ("measured_hwm_rss_bytes", "predicted_peak_ram_bytes", "peak_error_pct",
     "peak RSS (MiB)", MIB, 0.05),
    ("measured_slowdown", "predicted_slowdown", "slowdown_error_pct",
     "slowdown under the limit (x)", 1.0, 0.15),
]


def _panel(row: pd.Series) -> str:
    limit = "unconstrained" if row["limit"] == "none" else f"limit {row['limit']}"
    return f"{row['mode']}, {limit}"


def _diagonal(ax, lo: float, hi: float, band: float) -> None:
    xs = np.array([lo, hi])
    ax.plot(xs, xs, color="0.3", linewidth=0.8)
    for f in (1 - band, 1 + band):
        ax.plot(xs, xs * f, color="0.6", linewidth=0.6, linestyle="--")


def model_predictions(tables: dict[str, pd.DataFrame], style: dict,
                      context: dict | None = None) -> Figure:
    """Predicted against measured (held out by the cross-validation's schemes, named in the
    title): makespan, peak RSS and, under a limit, the slowdown; one column per execution
    mode and limit."""
    pred = tables.get("cv_predictions", pd.DataFrame())
    if pred.empty:
        return no_data("Model: predicted against measured",
                       "no execution mode had two pipelines to cross-validate on")
    pred = pred.assign(panel=pred.apply(_panel, axis=1))
    panels = sorted(pred["panel"].unique(), key=lambda p: ("emulated" in p,
                                                          "unconstrained" not in p, p))
    rows = [r for r in ROWS if pred[r[0]].notna().any()]
    policies = sorted(pred["policy"].unique(), key=policy_key)
    colors = colors_for(policies, style)
    fig, axes = grid(len(rows), len(panels), sharey=False)
    for j, panel in enumerate(panels):
        part = pred[pred["panel"] == panel]
        for i, (meas, predicted, error, label, scale, band) in enumerate(rows):
            ax = axes[i, j]
            ok = part.dropna(subset=[meas, predicted])
            ok = ok[(ok[meas] > 0) & (ok[predicted] > 0)]
            if ok.empty:
                ax.set_axis_off()
                ax.text(0.5, 0.5, "not measured here" if part[meas].isna().all()
                        else "no prediction", ha="center", va="center",
                        transform=ax.transAxes, fontsize="small")
                continue
            for policy, g in ok.groupby("policy"):
                x, y = g[meas] / scale, g[predicted] / scale
                xerr = None
                if meas == "measured_makespan_s":
                    lo = (g[meas] - g["measured_makespan_ci_low"]).clip(lower=0)
                    hi = (g["measured_makespan_ci_high"] - g[meas]).clip(lower=0)
                    xerr = np.vstack([lo.fillna(0), hi.fillna(0)])
                ax.errorbar(x, y, xerr=xerr, fmt="o", markersize=3.5, color=colors[policy],
                            elinewidth=0.6, capsize=0)
            values = pd.concat([ok[meas], ok[predicted]]) / scale
            lo, hi = values.min() / 1.3, values.max() * 1.3
            _diagonal(ax, lo, hi, band)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlim(lo, hi)
            ax.set_ylim(lo, hi)
            for axis in (ax.xaxis, ax.yaxis):  # plain numbers, a few per axis
                axis.set_major_locator(MaxNLocator(nbins=4))
                axis.set_major_formatter(ScalarFormatter())
                axis.set_minor_formatter(NullFormatter())
            if error == "peak_error_pct":  # the scores' statistic for each quantity
                what, err = "median abs. error", ok[error].abs().median()
            else:
                what, err = "MAPE", ok[error].abs().mean()
            ax.set_title(f"{panel}\n{what} {err:.1f} % (band ±{band:.0%}), n = {len(ok)}",
                         fontsize="small")
            ax.set_xlabel(f"measured {label}")
            # every panel: each has its own log scale, and a column may be switched off
            ax.set_ylabel(f"predicted {label}")
    handles = [Line2D([], [], marker="o", linestyle="", color=colors[p], label=p)
               for p in policies]
    handles += [Line2D([], [], color="0.3", linewidth=0.8, label="predicted = measured"),
                Line2D([], [], color="0.6", linestyle="--", linewidth=0.6,
                       label="the target's band")]
    fig.legend(handles=handles, loc="outside right center", fontsize="small")
    fig.set_figwidth(max(fig.get_figwidth(), 6.5))
    # what was held out: pipelines, networks, or batches (leave-batch-out)
    schemes = ", ".join(sorted(pred["scheme"].dropna().unique())) if "scheme" in pred else ""
    fig.suptitle(f"Held out ({schemes or 'cross-validation'}): predicted against measured\n"
                 f"(medians over repetitions with their 95 % CI)", fontsize="medium")
    return fig


def model_residuals(tables: dict[str, pd.DataFrame], style: dict,
                    context: dict | None = None) -> Figure:
    """The per-layer time model's error (predicted / measured - 1) per layer type, one
    point per (network, layer, task), the tasks that ran alone in unconstrained runs."""
    resid = tables.get("layer_residuals", pd.DataFrame())
    if resid.empty:
        return no_data("Model: per-layer residuals", "no unconstrained runs to compare with")
    modes = sorted(resid["mode"].unique())
    fig, axes = grid(1, len(modes), sharey=False)
    kinds = {"EXEC": "tab:blue", "LOAD": "tab:orange", "INIT": "tab:green"}
    for j, mode in enumerate(modes):
        ax = axes[0, j]
        part = resid[(resid["mode"] == mode) & resid["error_pct"].notna()]
        bulk = (part["layer"] < 0) & (part["task_type"] != "INIT")
        part = part.assign(group=np.where(part["task_type"] == "EXEC", part["layer_type"],
                                          part["task_type"] + np.where(bulk, " (bulk)", "")))
        groups = sorted(part["group"].unique())
        for x, name in enumerate(groups):
            g = part[part["group"] == name]
            jitter = (np.random.default_rng(x).random(len(g)) - 0.5) * 0.5
            ax.scatter(x + jitter, g["error_pct"], s=8, alpha=0.6,
                       color=kinds.get(g["task_type"].iloc[0], "0.4"))
            ax.boxplot(g["error_pct"], positions=[x], widths=0.6, showfliers=False,
                       medianprops={"color": "black"}, whiskerprops={"color": "0.5"},
                       capprops={"color": "0.5"}, boxprops={"color": "0.5"})
        ax.axhline(0, color="0.3", linewidth=0.8)
        ax.set_yscale("symlog", linthresh=10)
        counts = part["group"].value_counts()
        ax.set_xticks(range(len(groups)), [f"{g} ({counts[g]})" for g in groups], rotation=60,
                      ha="right", fontsize="small")
        ax.set_ylabel("predicted / measured − 1 (%)")
        ax.set_xlabel("layer type (EXEC) or task (points)")
        weighted = (part["predicted_s"].sum() / part["measured_s"].sum() - 1) * 100
        ax.set_title(f"{mode}: {len(part)} medians, their sum {weighted:+.1f} %",
                     fontsize="small")
    handles = [Line2D([], [], marker="o", linestyle="", color=c, label=k)
               for k, c in kinds.items()]
    fig.legend(handles=handles, loc="outside right center", fontsize="small")
    # two lines: one mode's panel is narrower than the title on one line (it was clipped)
    fig.suptitle("Per-layer time model: error per layer type\n(in brackets: points; fitted "
                 "on all runs, in-sample)", fontsize="medium")
    return fig


def _limit_bytes(limit: str) -> float:
    from engine.units import parse_size

    return np.inf if limit == "none" else parse_size(limit)


def _at_batch(table: pd.DataFrame, key: int) -> pd.Series:
    """Which rows of ``table`` are at the batch keyed ``key`` (``batch_order``)."""
    if "batch" not in table:
        return pd.Series(True, index=table.index)
    return table["batch"].map(batch_order) == key


def swap_cost(tables: dict[str, pd.DataFrame], style: dict,
              context: dict | None = None) -> Figure:
    """Each policy's speed-up over Bulk at native speed per size bin (the median over
    the bin's pipelines), against the per-page swap cost on a log axis; one row per
    runtime, sandbox (whose page traffic it is) and limit. Dotted lines: the costs where
    the fastest policy changes; ticks on top: the named device profiles."""
    from engine.model.devices import PROFILES

    curves = tables.get("swap_cost_curves", pd.DataFrame())
    cross = tables.get("swap_cost_crossovers", pd.DataFrame())
    if curves.empty:
        return no_data("Speed-up over Bulk against the swap cost",
                       "no sandbox limited runs with native unconstrained twins to rebuild "
                       "(sandbox.native_baseline, docs/model.md)")
    batch = (curves["batch"].map(batch_value) if "batch" in curves
             else pd.Series(None, index=curves.index, dtype=object))
    several = batch.nunique(dropna=False) > 1  # a row per batch, never two curves in one
    curves = curves.assign(batch_key=batch.map(batch_order),
                           row=curves["runtime"] + " runtime, " + curves["sandbox"]
                           + " traffic, limit " + curves["limit"]
                           + (", batch " + batch.map(batch_name) if several else ""))
    order = {r.row: (r.runtime, -_limit_bytes(r.limit), r.batch_key)
             for r in curves.itertuples()}
    rows = sorted(order, key=order.get)
    bins = list(dict.fromkeys(curves.sort_values("size_bin")["size_bin"]))
    policies = sorted(curves["policy"].unique(), key=policy_key)
    colors = colors_for(policies, style)
    fig, axes = grid(len(rows), len(bins), sharey="row")
    for i, row in enumerate(rows):
        labelled = False  # the row's y label on its first drawn panel: the first bin may lack it
        for j, size_bin in enumerate(bins):
            ax = axes[i, j]
            part = curves[(curves["row"] == row) & (curves["size_bin"] == size_bin)]
            if part.empty:
                ax.set_axis_off()
                continue
            unfinished = []
            for policy, g in part.groupby("policy"):
                g = g.sort_values("per_page_s")
                lost = int(g["runs_not_ok"].iloc[0]) if "runs_not_ok" in g else 0
                if lost:  # the curve is its finished runs' only: pale, and named
                    none = g["speedup_over_bulk"].isna().all()
                    unfinished.append(f"{policy}: {lost} of {int(g['runs'].iloc[0])} runs "
                                      f"did not finish{' (no curve)' if none else ''}")
                ax.plot(g["per_page_s"], g["speedup_over_bulk"], color=colors[policy],
                        linewidth=1.2, linestyle="--" if policy == "bulk" else "-",
                        alpha=0.4 if lost else 1.0)
            if part["speedup_over_bulk"].isna().all():
                unfinished.insert(0, "no Bulk run finished: no speed-up over Bulk")
            if unfinished:
                ax.text(0.02, 0.98, "\n".join(unfinished), transform=ax.transAxes,
                        fontsize="x-small", va="top", ha="left", color="0.2")
            first = part.iloc[0]
            here = cross[(cross["sandbox"] == first["sandbox"])
                         & (cross["runtime"] == first["runtime"])
                         & (cross["limit"] == first["limit"])
                         & (cross["size_bin"] == size_bin)
                         & _at_batch(cross, first["batch_key"])] if not cross.empty else cross
            for c in here.itertuples():
                if c.what == "fastest policy":
                    ax.axvline(c.per_page_s, color="0.4", linestyle=":", linewidth=0.8)
                    ax.annotate(f" {c.to} from {c.per_page_s * 1e6:.3g} us",
                                (c.per_page_s, 0.02), xycoords=("data", "axes fraction"),
                                fontsize="x-small", va="bottom", ha="left", rotation=90,
                                color="0.3")
            ax.axhline(1.0, color="0.3", linewidth=0.6)
            ax.set_xscale("log")
            ax.set_xlim(COST_RANGE)
            top = ax.secondary_xaxis("top")
            top.set_xticks([d.per_page_in_s for d in PROFILES.values()],
                           list(PROFILES), fontsize="x-small", rotation=45, ha="left")
            n = int(part["pipelines"].max())
            ax.set_title(f"{row}\nsize bin {size_bin} ({n} pipeline{'s' * (n != 1)})",
                         fontsize="small")
            ax.set_xlabel("swap cost per 4 KiB page (s)")
            if not labelled:
                ax.set_ylabel("speed-up over Bulk (x)")
                ax.tick_params(labelleft=True)  # sharey hid them outside the first column
                labelled = True
    handles = [Line2D([], [], color=colors[p], linestyle="--" if p == "bulk" else "-",
                      label=p) for p in policies]
    handles.append(Line2D([], [], color="0.4", linestyle=":",
                          label="fastest policy changes"))
    if "runs_not_ok" in curves and curves["runs_not_ok"].gt(0).any():
        handles.append(Line2D([], [], color="0.4", alpha=0.4,
                              label="pale: from the runs that finished\n(the others named)"))
    fig.legend(handles=handles, loc="outside right center", fontsize="small")
    fig.set_figwidth(max(fig.get_figwidth(), 4.2 * len(bins) + 2.2))
    fig.suptitle("Speed-up over Bulk at native speed\nagainst the swap cost per page "
                 "(top: device profiles)", fontsize="medium")
    return fig


COST_RANGE = (1e-6, 1e-2)
FIGURES = {"model_predictions": model_predictions, "model_residuals": model_residuals,
           "swap_cost": swap_cost}


def caption_facts(model_dir: str) -> dict[str, str]:
    """What the model figures' captions state that only the results know: per mode, the
    held-out pipelines and cells and the cross-validated scores; empty strings before
    the tables exist (a DAG being built)."""
    from pathlib import Path

    from engine.analysis.stats import CI_METHOD

    facts = {"n": "", "scores": "", "ci": CI_METHOD, "layers": ""}
    folder = Path(model_dir)
    pred_path, scores_path = folder / "cv_predictions.parquet", folder / "cv_scores.parquet"
    if pred_path.is_file():
        pred = pd.read_parquet(pred_path)
        facts["n"] = "; ".join(
            f"{mode}: {g['pipeline'].nunique()} held-out pipeline(s), {len(g)} cells "
            f"(policy x limit), medians over {int(g['runs'].median())} repetition(s) each"
            for mode, g in pred.groupby("mode")) or "no mode could be cross-validated"
    if scores_path.is_file():
        scores = pd.read_parquet(scores_path)
        parts = []
        for r in scores.itertuples():
            if r.metric == "cross-validation":
                parts.append(f"{r.mode}: {r.note}")
            elif "," not in str(r.scope) and pd.notna(r.value):
                parts.append(f"{r.mode} {r.metric} ({r.scope}) {r.value:.2f} (n = {r.n})")
        facts["scores"] = "; ".join(parts)
    cross_path = folder / "swap_cost_crossovers.parquet"
    facts["crossovers"] = ""
    if cross_path.is_file():
        cross = pd.read_parquet(cross_path)
        best = cross[cross["what"] == "fastest policy"]
        facts["crossovers"] = "; ".join(
            f"{r.runtime} runtime, {r.sandbox} traffic, limit {r.limit}, bin {r.size_bin}: "
            f"{r['from']} -> {r.to} at {r.per_page_s * 1e6:.3g} us"
            + (f" ({r['not_finished']})" if r.get("not_finished") else "")
            for _, r in best.iterrows()) or "the fastest policy does not change over the axis"
    resid_path = folder / "layer_residuals.parquet"
    if resid_path.is_file():
        resid = pd.read_parquet(resid_path)
        facts["layers"] = "; ".join(f"{mode}: {len(g)} (network, layer, task) medians"
                                    for mode, g in resid.groupby("mode"))
    return facts

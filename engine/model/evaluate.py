"""Cross-validation that tests generalisation, per execution mode and runtime.

Three fold structures, each model fitted only on its training runs and scored on every
(policy, limit, batch) cell of its test runs against the median over the cell's
repetitions (and that median's 95 % bootstrap CI):

- **leave-pipeline-out**: one fold per pipeline; the test pipeline's runs never reach
  training.
- **leave-network-out**: one fold per network of the mode's runs, held out at the
  pipeline level: every pipeline that contains the network, in any instance, is a test
  pipeline, and training sees only pipelines without it (so neither its layers nor its
  LOAD files are ever fitted on). A network every pipeline contains cannot be held out
  and is named in the notes.
- **leave-batch-out**, where the mode's runs ran at two batches or more: one fold per
  batch, trained on the other batches' runs (the batch is an input of the features and
  the memory replay: ``engine.model.fit``).

A mode with fewer than two pipelines cannot be cross-validated and says so. Per scheme,
the scores below with a 95 % bootstrap CI over pipelines (a pipeline's cells resampled
together; in leave-network-out a pipeline holding two networks is tested in both folds),
and per fold the same errors (``cv_folds``):

- makespan: mean absolute percentage error (MAPE), unconstrained and limited apart;
- slowdown under a limit (makespan / the same policy unconstrained): MAPE;
- peak memory: median absolute % error of the predicted peak RSS against the measured
  resident high-water mark (unconstrained, per policy, the worst policy, and limited);
  for the multi-worker policies, whose peak depends on how concurrent tasks interleave,
  the model also replays ``ORDERINGS`` orderings (each task's work scaled by a
  log-normal factor of the spread the training runs showed, ``duration_sigma``) and the
  measured peak is scored against their 5-95 % range, and against that range widened by
  the baseline's 5-95 % spread over the training cells (``baseline_spread_bytes``: what
  the allocator keeps varies too), the peak's prediction interval; and the memory model
  alone, on each run's own measured schedule (``memory.schedule_peak``): what of the
  peak's error is the simulated schedule's and what the memory bookkeeping's;
- ranking: Kendall's tau between predicted and measured makespans of the policies, per
  (pipeline, limit), its median; how often the predicted best policy is the measured
  best, and how often its measured median lies within the measured best's CI;
- OOM: cells predicted to be killed against cells whose runs were.

``TARGETS`` are the issue's; ``cv_targets`` says per mode and scheme which are met.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from engine.analysis.stats import (
    CI_METHOD,
    cell_seed,
    cluster_bootstrap_ci,
    cluster_mean_ci,
    kendall_tau,
)
from engine.caffe.splitter import Description
from engine.files import sha256_file
from engine.model.fit import at_batch, fitted_batches, mode_keys, pipeline_content, run_batches
from engine.model.memory import schedule_peak
from engine.model.params import Model, ModeModel, batch_name, batch_value
from engine.model.predict import (
    Networks,
    NetworksByBatch,
    predict,
    predict_against_unconstrained,
)
from engine.model.train import (
    SWAP_FLOOR_BYTES,
    Paths,
    measured_cells,
    pipelines_from_networks,
    train,
)
from engine.schedule.pipelines import Pipeline
from engine.schedule.policies import parse_policy

log = logging.getLogger(__name__)

LPO, LNO, LBO = "leave-pipeline-out", "leave-network-out", "leave-batch-out"
HELD_OUT_SEED = "held-out seed"
SCHEMES = (LPO, LNO, LBO)
ORDERINGS = 40  # orderings of a multi-worker policy's concurrent tasks per cell
PEAK_RANGE = (5, 95)  # percentiles of the orderings' peaks the measured one is scored in

PREDICTION_COLUMNS = [
    "mode", "scheme", "fold", "pipeline", "policy", "limit", "batch", "workers", "runs", "runs_ok",
    "measured_makespan_s", "measured_makespan_ci_low", "measured_makespan_ci_high",
    "predicted_makespan_s", "makespan_error_pct", "measured_slowdown", "predicted_slowdown",
    "slowdown_error_pct", "measured_hwm_rss_bytes", "measured_cg_peak_bytes",
    "predicted_peak_ram_bytes", "predicted_peak_p05_bytes", "predicted_peak_p95_bytes",
    "peak_in_range", "predicted_peak_pi_low_bytes", "predicted_peak_pi_high_bytes",
    "peak_in_pi", "peak_error_pct", "peak_cg_error_pct", "schedule_peak_error_pct",
    "predicted_peak_swap_bytes", "measured_peak_swap_bytes", "peak_swap_error_pct",
    "predicted_swap_out_bytes", "measured_swap_out_bytes", "measured_oom", "predicted_oom",
]
SCORE_COLUMNS = ["mode", "scheme", "metric", "scope", "value", "ci_low", "ci_high", "n",
                 "pipelines", "note"]
# error column -> (predicted, measured): predicted / measured - 1, in %
ERRORS = {
    "makespan_error_pct": ("predicted_makespan_s", "measured_makespan_s"),
    "slowdown_error_pct": ("predicted_slowdown", "measured_slowdown"),
    "peak_error_pct": ("predicted_peak_ram_bytes", "measured_hwm_rss_bytes"),
    "peak_cg_error_pct": ("predicted_peak_ram_bytes", "measured_cg_peak_bytes"),
    "peak_swap_error_pct": ("predicted_peak_swap_bytes", "measured_peak_swap_bytes"),
}

# the targets: (metric, scope) -> (bound, "max" | "min")
TARGETS = {
    ("makespan MAPE %", "unconstrained"): (10.0, "max"),
    ("makespan MAPE %", "limited"): (15.0, "max"),
    ("peak RSS median abs error %", "unconstrained, worst policy"): (5.0, "max"),
    ("peak RSS in the orderings' 5-95 % range (share)", "multi-worker cells"): (0.9, "min"),
    ("Kendall tau (median)", "limited, per pipeline and limit"): (0.6, "min"),
    ("predicted best within measured best's CI (share)", "limited, per pipeline and limit"):
        (0.8, "min"),
    ("OOM predicted correctly (share)", "limited cells"): (1.0, "min"),
}

# what evaluate-model and score-holdout write (their commands check each place up front)
EVALUATE_TABLES = ("cv_predictions", "cv_scores", "cv_folds", "cv_targets", "layer_residuals")
CV_SUMMARY = "cv.json"
HOLDOUT_TABLES = ("holdout_predictions", "holdout_scores", "holdout_targets")


def _pct(pred: float, meas: float) -> float:
    return (pred / meas - 1) * 100 if np.isfinite(meas) and meas > 0 else np.nan


def ordering_peaks(mode, pipeline, networks: Networks, policy: str, orderings: int,
                   seed: int, limit_bytes: int | None = None,
                   swap_bytes: int | None = None) -> np.ndarray:
    """The predicted peak RSS of ``orderings`` replays in which every task's work is
    scaled by exp(N(0, duration_sigma)): how the concurrent tasks of a multi-worker
    policy may interleave."""
    rng = np.random.default_rng(seed)
    peaks = []
    for _ in range(orderings):
        factors: dict[int, float] = {}

        def scale(task, f=factors, r=rng) -> float:
            if task.id not in f:
                f[task.id] = float(np.exp(r.normal(0.0, mode.duration_sigma)))
            return f[task.id]

        pred, _ = predict(mode, pipeline, networks, policy, limit_bytes, swap_bytes,
                          work_scale=scale)
        peaks.append(pred.peak_ram_bytes)
    return np.asarray(peaks)


Schedule = tuple[np.ndarray, np.ndarray, float]  # a run's task starts, ends (s), VmHWM


CellKey = tuple[str, str, str, int | None]  # pipeline, policy, limit, batch (None: deploy)


def measured_schedules(runs: pd.DataFrame, tasks: pd.DataFrame
                       ) -> dict[CellKey, list[Schedule]]:
    """Per (pipeline, policy, limit, batch): each finished unconstrained run's own schedule
    (every task's start and the end of its work, by task id; a run without
    ``work_end_ns``, its end) and its resident high-water mark."""
    ok = runs[(runs["termination"] == "ok") & (runs["limit"] == "none")
              & runs["hwm_rss_bytes"].notna()]
    t = tasks[tasks["run_id"].isin(ok["run_id"])]
    out: dict[CellKey, list[Schedule]] = {}
    by_run = dict(tuple(t.groupby("run_id")))
    for r, batch in zip(ok.itertuples(), run_batches(ok)):
        rows = by_run.get(r.run_id)
        if rows is None:
            continue
        ids = rows["task_id"].astype(int).to_numpy()
        start = np.full(ids.max() + 1, np.nan)
        end = start.copy()
        # the task's memory effects are over when its work is: runs that record it
        done = (rows["work_end_ns"].fillna(rows["end_ns"]) if "work_end_ns" in rows
                else rows["end_ns"])
        start[ids], end[ids] = rows["start_ns"] / 1e9, done / 1e9
        out.setdefault((str(r.pipeline), str(r.policy), str(r.limit), batch_value(batch)),
                       []).append(
            (start, end, float(r.hwm_rss_bytes)))
    return out


def schedule_peak_error(mode: ModeModel, pipeline: Pipeline, networks: Networks,
                        policy: str, schedules: list[Schedule]) -> float:
    """The median over the runs of the % error of the peak the memory model gives each
    run's own measured schedule (``memory.schedule_peak``) against its VmHWM; NaN
    without runs whose every task was timed."""
    if not schedules:  # a limited cell, or one no run of which finished
        return np.nan
    planned = networks.plan(pipeline, parse_policy(policy))
    tasks = planned.graph.tasks
    profiles = {i.id: networks.memory(i.network) for i in planned.instances}
    errors = []
    for start, end, hwm in schedules:
        if len(start) != len(tasks) or not (np.isfinite(start).all() and np.isfinite(end).all()):
            continue
        peak = mode.baseline_bytes + schedule_peak(profiles, tasks, start, end)
        errors.append(_pct(peak, hwm))
    return float(np.median(errors)) if errors else np.nan


def predict_cells(model: Model, key: str, cells: pd.DataFrame, pipelines: dict,
                  networks: NetworksByBatch, orderings: int = ORDERINGS,
                  schedules: dict[CellKey, list[Schedule]] | None = None
                  ) -> pd.DataFrame:
    """The model's predictions for each measured cell at its batch (adds the predicted_* columns):
    under the cell's limit and swap allowance, and unconstrained for its slowdown; for a
    multi-worker policy the 5-95 % range of its orderings' peaks; with ``schedules``
    (``measured_schedules``) the memory model's peak error on each cell's measured
    schedules."""
    m = model.modes[key]
    out = []
    for c in cells.itertuples():
        batch, nets = batch_value(c.batch), networks[c.batch]
        runs_of = (schedules or {}).get((str(c.pipeline), str(c.policy), str(c.limit), batch),
                                        [])
        limit = None if c.limit == "none" else int(c.limit_bytes)
        swap = None if pd.isna(c.swap_bytes) else int(c.swap_bytes)
        pred, free = predict_against_unconstrained(m, pipelines[c.pipeline], nets,
                                                   c.policy, limit, swap)
        low = high = pred.peak_ram_bytes
        if parse_policy(c.policy).workers > 1 and m.duration_sigma > 0 and orderings:
            peaks = ordering_peaks(m, pipelines[c.pipeline], nets, c.policy, orderings,
                                   cell_seed((key, c.pipeline, c.policy, c.limit, batch)),
                                   limit, swap)
            low, high = np.percentile(peaks, PEAK_RANGE)
        measured = c.measured_hwm_rss_bytes
        pi_low, pi_high = low + m.baseline_spread_bytes[0], high + m.baseline_spread_bytes[1]
        out.append({"predicted_makespan_s": pred.makespan_s,
                    "predicted_slowdown": (pred.makespan_s / free.makespan_s
                                           if limit is not None else np.nan),
                    "predicted_peak_ram_bytes": pred.peak_ram_bytes,
                    "predicted_peak_p05_bytes": low, "predicted_peak_p95_bytes": high,
                    "peak_in_range": (bool(low <= measured <= high)
                                      if np.isfinite(measured) else None),
                    "predicted_peak_pi_low_bytes": pi_low,
                    "predicted_peak_pi_high_bytes": pi_high,
                    "peak_in_pi": (bool(pi_low <= measured <= pi_high)
                                   if np.isfinite(measured) else None),
                    "schedule_peak_error_pct": schedule_peak_error(
                        m, pipelines[c.pipeline], nets, c.policy, runs_of),
                    "predicted_peak_swap_bytes": pred.peak_swap_bytes,
                    "predicted_swap_out_bytes": pred.swap_out_bytes,
                    "predicted_oom": pred.oom})
    return pd.concat([cells.reset_index(drop=True), pd.DataFrame(out)], axis=1)


def folds(runs: pd.DataFrame, scheme: str) -> tuple[list[tuple[str, pd.Series]], list[str]]:
    """(fold name, which of ``runs`` it tests) of one mode's runs under ``scheme``, and
    notes on what could not be held out. Only pipelines with finished unconstrained runs
    count. Leave-pipeline-out holds twins out together: pipelines of the same networks
    (in any order) are one fold, so no fold trains on a copy of what it tests.
    Leave-batch-out holds out every run at one batch, where the runs ran at two or more:
    the model predicts a batch it never saw."""
    ok = runs[(runs["limit"] == "none") & (runs["termination"] == "ok")]
    names = sorted(ok["pipeline"].astype(str).unique())
    counted = runs["pipeline"].astype(str).isin(names)
    if scheme == LBO:  # a campaign at one batch has nothing to hold out
        at = fitted_batches(ok)
        return ([(f"batch {batch_name(b)}", counted & at_batch(runs, b)) for b in at]
                if len(at) >= 2 else []), []
    nets = (runs[counted].drop_duplicates("pipeline").set_index("pipeline")["networks"]
            .str.split())

    def testing(test: list[str]) -> pd.Series:
        return runs["pipeline"].astype(str).isin(test)

    if scheme == LPO:
        twins: dict[str, list[str]] = {}
        for p in names:
            twins.setdefault(pipeline_content(" ".join(nets[p])), []).append(p)
        return [("+".join(group), testing(group)) for group in twins.values()], []
    out, notes = [], []
    for net in sorted(set(nets.explode())):
        test = sorted(p for p in names if net in nets[p])
        if len(test) == len(names):
            notes.append(f"{net} is in every pipeline: it cannot be held out")
            continue
        out.append((net, testing(test)))
    return out, notes


TrainFn = Callable[..., Model]


def cross_validate(runs: pd.DataFrame, tasks: pd.DataFrame, networks: pd.DataFrame,
                   descriptions: dict[str, Description], schemes: tuple[str, ...] = SCHEMES,
                   orderings: int = ORDERINGS, trainer: TrainFn = train,
                   progress: Callable[[str], None] = lambda s: None
                   ) -> tuple[pd.DataFrame, list[tuple[str, str, str]]]:
    """(predictions, notes): every test cell of every fold of every scheme, per mode and
    runtime; the notes name what could not be cross-validated (mode, scheme, why).
    ``trainer`` fits a fold's model (``engine.model.train.train``) from the training
    runs, their tasks and the networks table, restricted to those runs."""
    runs = runs[runs["limit_enforced"].astype(bool) | (runs["limit"] == "none")]
    runs = runs.assign(pipeline=runs["pipeline"].astype(str))
    pipelines = pipelines_from_networks(networks[networks["run_id"].isin(runs["run_id"])])
    keys = mode_keys(runs)
    preds, notes = [], []
    for key, part in runs.groupby(keys):
        for scheme in schemes:
            fold_list, why = folds(part, scheme)
            notes += [(key, scheme, w) for w in why]
            tested = {p for _, test in fold_list for p in part.loc[test, "pipeline"]}
            if len(tested) < 2 and scheme == LPO:
                notes.append((key, scheme, f"not cross-validated: {len(fold_list)} "
                                           f"pipeline(s) with finished unconstrained runs, "
                                           f"two are needed"))
                continue
            for i, (fold, test) in enumerate(fold_list):
                progress(f"{key} {scheme}: fold {i + 1}/{len(fold_list)} ({fold})")
                train_runs = part[~test]
                if train_runs.empty:  # one fold of twins holds every pipeline
                    notes.append((key, scheme, f"fold {fold}: not cross-validated: every "
                                  f"pipeline is a twin of this fold's (the same networks): "
                                  f"nothing left to train on; two pipelines of other "
                                  f"networks are needed"))
                    continue
                model = trainer(train_runs, tasks[tasks["run_id"].isin(train_runs["run_id"])],
                                networks[networks["run_id"].isin(train_runs["run_id"])],
                                descriptions)
                if key not in model.modes:
                    notes.append((key, scheme, f"fold {fold}: "
                                  f"{model.unfitted.get(key) or 'no fit of its training runs'}"))
                    continue
                test_runs = part[test]
                cells = measured_cells(test_runs)
                m = model.modes[key]
                nets = NetworksByBatch(descriptions, m.runtime)
                schedules = measured_schedules(
                    test_runs, tasks[tasks["run_id"].isin(test_runs["run_id"])])
                preds.append(predict_cells(model, key, cells, pipelines, nets, orderings,
                                           schedules)
                             .assign(mode=key, scheme=scheme, fold=fold))
    return _with_errors(preds), notes


def _with_errors(preds: list[pd.DataFrame]) -> pd.DataFrame:
    pred = pd.concat(preds, ignore_index=True) if preds else pd.DataFrame(
        columns=PREDICTION_COLUMNS)
    if not pred.empty:
        for error, (predicted, measured) in ERRORS.items():
            pred[error] = [_pct(p, m) for p, m in zip(pred[predicted], pred[measured])]
        pred.loc[~_swapped(pred), "peak_swap_error_pct"] = np.nan
    return pred.reindex(columns=PREDICTION_COLUMNS)


def _swapped(pred: pd.DataFrame) -> pd.Series:
    """The limited cells whose peak swap is scored: predicted and measured to reach
    SWAP_FLOOR_BYTES, with a run that finished (a killed run swapped only until its
    kill: its peak is cut short, and a right prediction of a kill read as a large
    error; seventeenth held-out pass H1)."""
    return ((pred["limit"] != "none")
            & (pd.to_numeric(pred["runs_ok"]) > 0)
            & (pd.to_numeric(pred["predicted_peak_swap_bytes"]) >= SWAP_FLOOR_BYTES)
            & (pd.to_numeric(pred["measured_peak_swap_bytes"]) >= SWAP_FLOOR_BYTES))


# ---- scores ----

def _row(mode: str, scheme: str, metric: str, scope: str, values: pd.Series,
         clusters: pd.Series, how: str, note: str = "") -> dict:
    """One score with its CI over pipelines: ``mape`` (mean of |values|), ``median_abs``,
    ``median`` or ``mean``."""
    v = pd.Series(values, dtype=float)
    keep = v.notna().to_numpy()
    v, c = v[keep], pd.Series(clusters)[keep]
    seed = cell_seed((mode, scheme, metric, scope))
    if v.empty:
        value = lo = hi = np.nan
    elif how == "mape":
        value, lo, hi = cluster_mean_ci(v.abs(), c, seed=seed)
    elif how == "mean":
        value, lo, hi = cluster_mean_ci(v, c, seed=seed)
    else:
        value, lo, hi = cluster_bootstrap_ci(v.abs() if how == "median_abs" else v, c,
                                             seed=seed)
    return {"mode": mode, "scheme": scheme, "metric": metric, "scope": scope, "value": value,
            "ci_low": lo, "ci_high": hi, "n": int(len(v)), "pipelines": int(c.nunique()),
            "note": note}


def _rankings(cells: pd.DataFrame) -> pd.DataFrame:
    """Per (fold, pipeline, limit) with two or more policies that finished: Kendall's
    tau of the predicted and measured makespans; whether the policy advise would pick
    (the fastest predicted not to be killed) is the measured fastest, and whether its
    measured median lies within the measured fastest's CI. Policies predicted equally
    fast share the credit (1/k each); a pick that was killed, or no pick, is a miss."""
    rows = []
    for (fold, pipeline, limit, _), g in cells.groupby(["fold", "pipeline", "limit", "batch"],
                                                       dropna=False):
        done = g.dropna(subset=["measured_makespan_s"])
        if len(done) < 2:
            continue
        tau = kendall_tau(done["predicted_makespan_s"], done["measured_makespan_s"])
        best = done.loc[done["measured_makespan_s"].idxmin()]
        high = best["measured_makespan_ci_high"]
        high = best["measured_makespan_s"] if not np.isfinite(high) else high
        alive = g[~g["predicted_oom"].astype(bool)]
        if alive.empty:
            hit = within = 0.0
        else:
            fastest = alive["predicted_makespan_s"].min()
            picks = alive[np.isclose(alive["predicted_makespan_s"], fastest, rtol=1e-9)]
            hit = float((picks["policy"] == best["policy"]).mean())
            within = float((picks["measured_makespan_s"] <= high).mean())  # NaN: killed
        rows.append({"fold": fold, "pipeline": pipeline, "limit": limit, "tau": tau,
                     "hit": hit, "within": within})
    return pd.DataFrame(rows, columns=["fold", "pipeline", "limit", "tau", "hit", "within"])


def scores(pred: pd.DataFrame, notes: list[tuple[str, str, str]] = ()) -> pd.DataFrame:
    """Every score per mode and scheme (module docstring), with its CI over pipelines."""
    rows = [{"mode": m, "scheme": s, "metric": "cross-validation", "scope": "",
             "value": np.nan, "ci_low": np.nan, "ci_high": np.nan, "n": 0, "pipelines": 0,
             "note": note} for m, s, note in notes]
    if pred.empty:
        return pd.DataFrame(rows, columns=SCORE_COLUMNS)
    # a column a table of predictions lacks is unknown in every cell
    pred = pred.reindex(columns=list(dict.fromkeys([*pred.columns, *PREDICTION_COLUMNS])))
    for (mode, scheme), p in pred.groupby(["mode", "scheme"], sort=True):
        free, lim = p[p["limit"] == "none"], p[p["limit"] != "none"]
        held = (f"{p['batch'].nunique()} held-out batches" if scheme == LBO
                else f"{p['pipeline'].nunique()} held-out pipelines")
        note = f"{held}, {p['fold'].nunique()} folds"

        def row(metric, scope, part, column, how, n=note, m=mode, s=scheme):
            return _row(m, s, metric, scope, part[column], part["pipeline"], how, n)

        rows.append(row("makespan MAPE %", "unconstrained", free, "makespan_error_pct", "mape"))
        rows.append(row("makespan MAPE %", "limited", lim, "makespan_error_pct", "mape"))
        rows.append(row("slowdown MAPE %", "limited", lim, "slowdown_error_pct", "mape"))
        rows.append(row("peak RSS median abs error %", "unconstrained", free,
                        "peak_error_pct", "median_abs"))
        per_policy = [row("peak RSS median abs error %", f"unconstrained, {policy}", g,
                          "peak_error_pct", "median_abs")
                      for policy, g in free.groupby("policy")]
        rows += per_policy
        worst = max((r for r in per_policy if pd.notna(r["value"])),
                    key=lambda r: r["value"], default=None)
        if worst is not None:
            rows.append({**worst, "scope": "unconstrained, worst policy",
                         "note": f"{worst['scope'].split(', ')[1]}; {note}"})
        # the memory model on each run's own schedule: what of the peak error is the
        # schedule's (which tasks overlapped) and what the memory bookkeeping's
        rows += [row("peak RSS median abs error %, on the measured schedule",
                     f"unconstrained, {policy}", g, "schedule_peak_error_pct", "median_abs")
                 for policy, g in free.groupby("policy")]
        rows.append(row("peak RSS median abs error %, on the measured schedule",
                        "unconstrained", free, "schedule_peak_error_pct", "median_abs"))
        # a cell no run of which finished peaked only until its kill (as its swap did)
        finished = lim[pd.to_numeric(lim["runs_ok"]) > 0]
        rows.append(row("peak RSS median abs error %", "limited", finished, "peak_error_pct",
                        "median_abs", "cells with a finished run; RSS counts file pages the "
                                      "cgroup may not: compare the cgroup peak"))
        swap_note = (f"cells predicted and measured to swap {SWAP_FLOOR_BYTES // 2**20} MiB "
                     f"or more; {note}")
        rows.append(row("peak swap median abs error %", "limited", lim,
                        "peak_swap_error_pct", "median_abs", swap_note))
        rows.append(row("peak swap median error % (signed)", "limited", lim,
                        "peak_swap_error_pct", "median", swap_note))
        measured = lim[pd.to_numeric(lim["measured_peak_swap_bytes"]) >= SWAP_FLOOR_BYTES]
        rows.append(_row(mode, scheme, "swap predicted where measured (share)", "limited",
                         (pd.to_numeric(measured["predicted_peak_swap_bytes"])
                          >= SWAP_FLOOR_BYTES).astype(float), measured["pipeline"], "mean",
                         f"cells measured to swap {SWAP_FLOOR_BYTES // 2**20} MiB or more; "
                         f"{note}"))
        multi = p[(p["workers"] > 1) & p["peak_in_range"].notna()]
        rows.append(_row(mode, scheme, "peak RSS in the orderings' 5-95 % range (share)",
                         "multi-worker cells", multi["peak_in_range"].astype(float),
                         multi["pipeline"], "mean", note))
        rows.append(_row(mode, scheme, "peak RSS in the 5-95 % prediction interval (share)",
                         "multi-worker cells", multi["peak_in_pi"].astype(float),
                         multi["pipeline"], "mean",
                         f"the orderings' range widened by the baseline's spread; {note}"))
        every = p[p["peak_in_pi"].notna()]
        rows.append(_row(mode, scheme, "peak RSS in the 5-95 % prediction interval (share)",
                         "all cells", every["peak_in_pi"].astype(float), every["pipeline"],
                         "mean", note))
        for scope, part in (("unconstrained", free), ("limited", lim)):
            ranks = _rankings(part)
            rows.append(_row(mode, scheme, "Kendall tau (median)",
                             f"{scope}, per pipeline and limit", ranks["tau"],
                             ranks["pipeline"], "median", note))
            rows.append(_row(mode, scheme, "predicted best = measured best (share)",
                             f"{scope}, per pipeline and limit", ranks["hit"],
                             ranks["pipeline"], "mean", note))
            rows.append(_row(mode, scheme, "predicted best within measured best's CI (share)",
                             f"{scope}, per pipeline and limit", ranks["within"],
                             ranks["pipeline"], "mean", f"{note}; {CI_METHOD}"))
        predicted, measured = lim["predicted_oom"].astype(bool), lim["measured_oom"].astype(bool)
        rows.append(_row(mode, scheme, "OOM predicted correctly (share)", "limited cells",
                         (predicted == measured).astype(float), lim["pipeline"], "mean",
                         f"{int(predicted.sum())} predicted, {int(measured.sum())} measured "
                         f"OOM cells; {note}"))
    return pd.DataFrame(rows, columns=SCORE_COLUMNS)


def fold_scores(pred: pd.DataFrame) -> pd.DataFrame:
    """Per mode, scheme and fold: its test pipelines and cells and the errors on them."""
    rows = []
    for (mode, scheme, fold), p in pred.groupby(["mode", "scheme", "fold"], sort=True):
        free, lim = p[p["limit"] == "none"], p[p["limit"] != "none"]
        ranks = _rankings(lim)
        rows.append({
            "mode": mode, "scheme": scheme, "fold": fold,
            "test_pipelines": " ".join(sorted(p["pipeline"].unique())), "cells": len(p),
            "makespan_mape_unconstrained_pct": free["makespan_error_pct"].abs().mean(),
            "makespan_mape_limited_pct": lim["makespan_error_pct"].abs().mean(),
            "slowdown_mape_pct": lim["slowdown_error_pct"].abs().mean(),
            "peak_median_abs_error_pct": free["peak_error_pct"].abs().median(),
            "peak_worst_policy_pct": free.groupby("policy")["peak_error_pct"]
            .apply(lambda s: s.abs().median()).max() if len(free) else np.nan,
            "kendall_tau_limited_median": ranks["tau"].median(),
            "best_within_ci_limited_share": ranks["within"].mean(),
        })
    return pd.DataFrame(rows)


def target_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per mode and scheme, each of the issue's ``TARGETS``: the score, its CI, whether
    the score meets it, and n (a target without cells to score says so)."""
    rows = []
    for (mode, scheme), g in table.groupby(["mode", "scheme"], sort=True):
        # why a mode's scheme has no cells (no fit of it, every pipeline left out)
        why = "; ".join(g.loc[g["metric"] == "cross-validation", "note"].dropna())
        for (metric, scope), (bound, kind) in TARGETS.items():
            hit = g[(g["metric"] == metric) & (g["scope"] == scope)]
            r = hit.iloc[0] if len(hit) else None
            value = np.nan if r is None else r["value"]
            met = None if not np.isfinite(value) else bool(
                value <= bound if kind == "max" else value >= bound)
            rows.append({"mode": mode, "scheme": scheme, "metric": metric, "scope": scope,
                         "target": f"{'<=' if kind == 'max' else '>='} {bound:g}",
                         "value": value, "ci_low": np.nan if r is None else r["ci_low"],
                         "ci_high": np.nan if r is None else r["ci_high"],
                         "n": 0 if r is None else int(r["n"]),
                         "met": "no cells" if met is None else ("met" if met else "missed"),
                         "note": why if r is None else r["note"]})
    return pd.DataFrame(rows)


def log_error_interval(log_errors: pd.Series | np.ndarray) -> dict[str, float] | None:
    """The 95 % prediction interval of one more held-out log(predicted / measured) from n
    of them (n >= 2): mean +- t(0.975, n - 1) s sqrt(1 + 1/n), Student's t. Honest for a
    few cells, where the 2.5-97.5 % range of n values would cover a new one with
    probability only (n - 1) / (n + 1). {"low", "high", "n"}; None below two."""
    from scipy import stats

    r = np.asarray(log_errors, dtype=float)
    r = r[np.isfinite(r)]
    if len(r) < 2:
        return None
    half = stats.t.ppf(0.975, len(r) - 1) * r.std(ddof=1) * np.sqrt(1 + 1 / len(r))
    return {"low": float(r.mean() - half), "high": float(r.mean() + half), "n": len(r)}


def makespan_error_intervals(pred: pd.DataFrame) -> dict[str, dict[str, dict]]:
    """Per mode, ``log_error_interval`` of log(predicted / measured makespan) of the
    held-out cells, unconstrained and limited: advise's prediction interval."""
    out: dict[str, dict[str, dict]] = {}
    ok = pred.dropna(subset=["predicted_makespan_s", "measured_makespan_s"])
    ok = ok[(ok["measured_makespan_s"] > 0) & (ok["predicted_makespan_s"] > 0)]
    for mode, p in ok.groupby("mode"):
        for scope, part in (("unconstrained", p[p["limit"] == "none"]),
                            ("limited", p[p["limit"] != "none"])):
            pi = log_error_interval(np.log(part["predicted_makespan_s"]
                                           / part["measured_makespan_s"]))
            if pi is not None:
                out.setdefault(mode, {})[scope] = pi
    return out


def swap_error_intervals(pred: pd.DataFrame) -> dict[str, dict]:
    """Per mode, ``log_error_interval`` of log(predicted / measured peak swap) of the
    held-out limited cells that swapped (``_swapped``): advise's interval of a peak
    swap."""
    if pred.empty:
        return {}
    out = {}
    for mode, p in pred[_swapped(pred)].groupby("mode"):
        pi = log_error_interval(np.log(pd.to_numeric(p["predicted_peak_swap_bytes"])
                                       / pd.to_numeric(p["measured_peak_swap_bytes"])))
        if pi is not None:
            out[mode] = pi
    return out


def score_summary(scores_table: pd.DataFrame, pred: pd.DataFrame) -> dict[str, dict]:
    """What advise states per mode: the headline scores of each scheme, and the log-error
    intervals of its predictions (``interval_cells``: leave-pipeline-out's, or
    leave-batch-out's; each names its scheme)."""
    out: dict[str, dict] = {}
    for r in scores_table.itertuples():
        entry = out.setdefault(r.mode, {}).setdefault(r.scheme, {})
        if r.metric == "cross-validation":
            entry.setdefault("notes", []).append(r.note)
            continue
        if "," in str(r.scope) and not str(r.scope).endswith(("worst policy",
                                                            "per pipeline and limit")):
            continue
        entry[f"{r.metric} ({r.scope})"] = None if pd.isna(r.value) else float(r.value)
        if "worst policy" in str(r.scope):
            entry["worst policy"] = r.note.split(";")[0]
        elif r.metric == "makespan MAPE %" and r.scope == "unconstrained":
            entry["note"] = r.note
    base = interval_cells(pred)
    scheme_of = (dict(zip(base["mode"], base["scheme"])) if "scheme" in base else {})
    for mode, pis in makespan_error_intervals(base).items():
        out.setdefault(mode, {})["makespan_log_error_pi"] = {
            scope: {**pi, "scheme": scheme_of.get(mode)} for scope, pi in pis.items()}
    for mode, pi in swap_error_intervals(base).items():
        out.setdefault(mode, {})["swap_log_error_pi"] = {**pi, "scheme": scheme_of.get(mode)}
    return out


def interval_cells(pred: pd.DataFrame) -> pd.DataFrame:
    """The held-out cells advise's prediction intervals come from: leave-pipeline-out's;
    a mode with none (a single pipeline of its own) takes its leave-batch-out's, cells of
    a batch its fold never saw."""
    if "scheme" not in pred:
        return pred
    lpo = pred[pred["scheme"] == LPO]
    batches = pred[(pred["scheme"] == LBO) & ~pred["mode"].isin(lpo["mode"])]
    return pd.concat([lpo, batches], ignore_index=True)


def layer_residuals(model: Model, runs: pd.DataFrame, tasks: pd.DataFrame,
                    descriptions: dict[str, Description]) -> pd.DataFrame:
    """Per mode and (network, layer, task type): the median measured duration of the
    tasks that ran alone in unconstrained runs, the model's prediction (the gap between
    tasks left out: it is not in a task's duration), the residual (measured - predicted)
    and the prediction's error (predicted / measured - 1, in %)."""
    from engine.model.fit import solo_medians, task_features, with_batches
    from engine.model.predict import task_work_s

    rows = []
    keys = mode_keys(runs)
    for name, mode in model.modes.items():
        part = runs[(keys == name) & (runs["limit"] == "none") & (runs["termination"] == "ok")]
        t = tasks[tasks["run_id"].isin(part["run_id"])]
        if t.empty:
            continue
        med = solo_medians(task_features(with_batches(t, part).assign(
            duration_s=t["duration_ns"] / 1e9), descriptions))
        nets = NetworksByBatch(descriptions, mode.runtime)
        for r in med.itertuples():
            feats = nets[r.batch].features(r.network)
            pred = task_work_s(mode, feats, r.task_type, int(r.layer)) - mode.gap_s
            rows.append({"mode": name, "network": r.network, "batch": batch_value(r.batch),
                         "layer": int(r.layer), "task_type": r.task_type,
                         "layer_type": r.ltype or ("whole network" if r.task_type != "INIT"
                                                   else "INIT"),
                         "tasks": int(r.n), "measured_s": r.duration_s, "predicted_s": pred,
                         "residual_s": r.duration_s - pred,
                         "error_pct": _pct(pred, r.duration_s)})
    return pd.DataFrame(rows)


def evaluate_files(tables_dir: Paths, models_dir: Paths,
                   model_path: str | os.PathLike, out_dir: str | os.PathLike,
                   orderings: int = ORDERINGS) -> dict:
    """``evaluate-model``: the cross-validation (both schemes) of the tables in
    ``tables_dir`` and the per-layer residuals of the model in ``model_path``, written to
    ``out_dir`` (cv_predictions, cv_scores, cv_folds, cv_targets, layer_residuals as CSV
    + Parquet; cv.json, what advise states); returns the score summary."""
    from engine.analysis.tablefiles import write_tables
    from engine.model.train import read_tables

    runs, tasks, networks, descriptions = read_tables(tables_dir, models_dir)
    pred, notes = cross_validate(runs, tasks, networks, descriptions, orderings=orderings,
                                 progress=log.info)
    table = scores(pred, notes)
    resid = layer_residuals(Model.read(model_path), runs, tasks, descriptions)
    summary = score_summary(table, pred)
    # which model file the scores go with: advise refuses to state them for another
    summary["model_sha256"] = sha256_file(model_path)
    write_tables(dict(zip(EVALUATE_TABLES, (pred, table, fold_scores(pred), target_table(table),
                                            resid), strict=True)), out_dir,
                 {CV_SUMMARY: json.dumps(summary, indent=1, allow_nan=False,
                                         default=_no_nan) + "\n"})
    return summary


def _no_nan(value: object) -> object:
    raise TypeError(f"not JSON: {value!r}")


def check_held_out(model: Model, runs: pd.DataFrame, tables_dir: Paths,
                   model_path: str | os.PathLike) -> None:
    """EdgeprofError unless no run of ``runs`` is one the model was fitted on, nor runs a
    pipeline file it was fitted on: compared by record digest and pipeline SHA-256
    (``fit.run_identities``), never by name, since a read of several campaigns names
    ``p000`` ``results:p000``."""
    from engine.errors import EdgeprofError
    from engine.files import flat_paths

    folders = flat_paths(tables_dir)
    where = ", ".join(map(str, folders))
    holds = "hold" if len(folders) > 1 else "holds"
    if not {"record_digests", "pipeline_contents"} <= set(model.trained_on):
        raise EdgeprofError(f"{model_path} does not record which runs it was fitted on "
                            f"(fitted by an older edgeprof): refit it with fit-model")
    if "record_digest" not in runs or runs["record_digest"].isna().any():
        raise EdgeprofError(f"{where}: runs without a record_digest (tables of an older "
                            f"edgeprof): rerun the tidy and aggregate stages")
    checks = (("record_digest", "record_digests", "runs"),
              ("pipeline_sha256", "pipeline_sha256s", "pipeline files"))
    for column, key, what in checks:
        if column not in runs:
            continue
        fitted = set(model.trained_on.get(key, ()))
        hit = runs[runs[column].astype(str).isin(fitted)]
        if len(hit):
            names = sorted(hit["pipeline"].astype(str).unique())
            raise EdgeprofError(f"{where} {holds} {what} the model was fitted on (pipelines "
                                f"{', '.join(names)}): they are not held out; give only the "
                                f"held-out seed's tables")


def held_out_twins(model: Model, runs: pd.DataFrame) -> dict[str, list[str]]:
    """Per mode, the pipelines of ``runs`` whose content (``fit.pipeline_content``, what
    the cross-validation calls twins) is one the model was fitted on in that mode: the
    same networks under another name or file, no test of generalisation."""
    fitted = model.trained_on.get("pipeline_contents", {})
    out: dict[str, list[str]] = {}
    for key, part in runs.groupby(mode_keys(runs)):
        seen = set(fitted.get(str(key), ()))
        twins = part[part["networks"].map(pipeline_content).isin(seen)]
        if len(twins):
            out[str(key)] = sorted(twins["pipeline"].astype(str).unique())
    return out


def score_holdout_files(tables_dir: Paths, models_dir: Paths,
                        model_path: str | os.PathLike, out_dir: str | os.PathLike,
                        orderings: int = ORDERINGS) -> pd.DataFrame:
    """The fitted model scored on the held-out seed's pipelines (tables in
    ``tables_dir``, aggregated apart and never fitted on): holdout_predictions,
    holdout_scores and holdout_targets in ``out_dir``; returns the scores."""
    from engine.analysis.tablefiles import write_tables
    from engine.model.train import read_tables

    model = Model.read(model_path)
    runs, tasks, networks, descriptions = read_tables(tables_dir, models_dir)
    check_held_out(model, runs, tables_dir, model_path)
    runs = runs[runs["limit_enforced"].astype(bool) | (runs["limit"] == "none")]
    runs = runs.assign(pipeline=runs["pipeline"].astype(str))
    pipelines = pipelines_from_networks(networks)
    keys = mode_keys(runs)
    preds, notes = [], []
    twins = held_out_twins(model, runs)
    for key, part in runs.groupby(keys):
        if key not in model.modes:
            notes.append((key, HELD_OUT_SEED, f"the model has no {key} fit"))
            continue
        if key in twins:
            notes.append((key, HELD_OUT_SEED, f"left out {', '.join(twins[key])}: twin(s) of a "
                                              f"training pipeline (the same networks), not "
                                              f"held out"))
            part = part[~part["pipeline"].isin(twins[key])]
        # a pipeline no run of which recorded its arrivals (every run failed before its
        # guest started, or was killed before writing them) cannot be rebuilt
        unknown = sorted(set(part["pipeline"]) - set(pipelines))
        if unknown:
            notes.append((key, HELD_OUT_SEED, f"left out {', '.join(unknown)}: no run of it "
                                              f"recorded its arrivals (none started)"))
            part = part[part["pipeline"].isin(pipelines)]
        if part.empty:
            continue
        m = model.modes[key]
        nets = NetworksByBatch(descriptions, m.runtime)
        schedules = measured_schedules(part, tasks[tasks["run_id"].isin(part["run_id"])])
        preds.append(predict_cells(model, key, measured_cells(part), pipelines, nets,
                                   orderings, schedules)
                     .assign(mode=key, scheme=HELD_OUT_SEED, fold=HELD_OUT_SEED))
    pred = _with_errors(preds)
    table = scores(pred, notes)
    write_tables(dict(zip(HOLDOUT_TABLES, (pred, table, target_table(table)), strict=True)),
                 Path(out_dir))
    return table

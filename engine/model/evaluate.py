"""Leave-pipelines-out cross-validation, per execution mode.

For each pipeline of a mode, the model is trained on the mode's other pipelines and
predicts every (policy, limit) cell of the held-out one, which is compared with the
median over its repetitions (and that median's 95 % bootstrap CI). A mode with fewer than
two pipelines cannot be cross-validated and says so. Scores:

- makespan: mean absolute percentage error (MAPE), unconstrained and limited apart;
- slowdown under a limit (makespan / the same policy unconstrained): MAPE;
- peak memory: median absolute % error of the predicted peak RSS against the measured
  resident high-water mark (unconstrained, per policy, the worst policy, and limited);
  the cgroup's window peak stands beside it in the predictions table, but is not scored:
  it also counts the page cache of the files a run reads, which the replay leaves out;
- ranking: Kendall's tau between predicted and measured makespans of the policies, per
  (pipeline, limit), its median; how often the predicted best policy is the measured
  best, and how often its measured median lies within the measured best's CI;
- OOM: cells predicted to be killed against cells whose runs were.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from engine.analysis.stats import CI_METHOD, kendall_tau
from engine.caffe.splitter import Description
from engine.files import sha256_file, write_text_atomic
from engine.model.params import Model
from engine.model.predict import Networks, predict_against_unconstrained
from engine.model.train import measured_cells, pipelines_from_networks, train

PREDICTION_COLUMNS = [
    "mode", "pipeline", "policy", "limit", "runs", "runs_ok", "measured_makespan_s",
    "measured_makespan_ci_low", "measured_makespan_ci_high", "predicted_makespan_s",
    "makespan_error_pct", "measured_slowdown", "predicted_slowdown", "slowdown_error_pct",
    "measured_hwm_rss_bytes", "measured_cg_peak_bytes", "predicted_peak_ram_bytes",
    "peak_error_pct", "peak_cg_error_pct", "predicted_peak_swap_bytes",
    "predicted_swap_out_bytes", "measured_swap_out_bytes", "measured_oom", "predicted_oom",
]
SCORE_COLUMNS = ["mode", "metric", "scope", "value", "n", "note"]
# error column -> (predicted, measured): predicted / measured - 1, in %
ERRORS = {
    "makespan_error_pct": ("predicted_makespan_s", "measured_makespan_s"),
    "slowdown_error_pct": ("predicted_slowdown", "measured_slowdown"),
    "peak_error_pct": ("predicted_peak_ram_bytes", "measured_hwm_rss_bytes"),
    "peak_cg_error_pct": ("predicted_peak_ram_bytes", "measured_cg_peak_bytes"),
}


def _pct(pred: float, meas: float) -> float:
    return (pred / meas - 1) * 100 if np.isfinite(meas) and meas > 0 else np.nan


def predict_cells(model: Model, mode: str, cells: pd.DataFrame, pipelines: dict,
                  networks: Networks) -> pd.DataFrame:
    """The model's predictions for each measured cell (adds the predicted_* columns):
    under the cell's limit and swap allowance, and unconstrained for its slowdown."""
    m = model.mode(mode)
    out = []
    for c in cells.itertuples():
        limit = None if c.limit == "none" else int(c.limit_bytes)
        swap = None if pd.isna(c.swap_bytes) else int(c.swap_bytes)
        pred, free = predict_against_unconstrained(m, pipelines[c.pipeline], networks,
                                                   c.policy, limit, swap)
        out.append({"predicted_makespan_s": pred.makespan_s,
                    "predicted_slowdown": (pred.makespan_s / free.makespan_s
                                           if limit is not None else np.nan),
                    "predicted_peak_ram_bytes": pred.peak_ram_bytes,
                    "predicted_peak_swap_bytes": pred.peak_swap_bytes,
                    "predicted_swap_out_bytes": pred.swap_out_bytes,
                    "predicted_oom": pred.oom})
    return pd.concat([cells.reset_index(drop=True), pd.DataFrame(out)], axis=1)


def cross_validate(runs: pd.DataFrame, tasks: pd.DataFrame, networks: pd.DataFrame,
                   descriptions: dict[str, Description]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(predictions, scores): every held-out cell, and the scores per mode."""
    runs = runs[runs["limit_enforced"].astype(bool) | (runs["limit"] == "none")]
    pipelines = pipelines_from_networks(networks[networks["run_id"].isin(runs["run_id"])])
    preds, notes = [], []
    for emulated, part in runs.groupby("emulated"):
        mode = "emulated" if emulated else "native"
        names = sorted(part.loc[(part["limit"] == "none") & (part["termination"] == "ok"),
                                "pipeline"].astype(str).unique())
        if len(names) < 2:
            notes.append((mode, f"not cross-validated: {len(names)} pipeline(s) with "
                                f"finished unconstrained runs, two are needed"))
            continue
        for held in names:
            train_runs = part[part["pipeline"] != held]
            model = train(train_runs, tasks[tasks["run_id"].isin(train_runs["run_id"])],
                          networks, descriptions)
            if mode not in model.modes:
                notes.append((mode, f"fold without {held}: {model.unfitted.get(mode)}"))
                continue
            cells = measured_cells(part[part["pipeline"] == held])
            nets = Networks(descriptions, model.mode(mode).batch)
            preds.append(predict_cells(model, mode, cells, pipelines, nets).assign(mode=mode))
    pred = pd.concat(preds, ignore_index=True) if preds else pd.DataFrame(
        columns=PREDICTION_COLUMNS)
    if not pred.empty:
        for error, (predicted, measured) in ERRORS.items():
            pred[error] = [_pct(p, m) for p, m in zip(pred[predicted], pred[measured])]
        pred = pred[PREDICTION_COLUMNS]
    return pred, scores(pred, notes)


def _row(mode: str, metric: str, scope: str, values: pd.Series | list, how: str,
         note: str = "") -> dict:
    v = pd.Series(values, dtype=float).dropna()
    value = {"mape": v.abs().mean(), "median_abs": v.abs().median(), "median": v.median(),
             "mean": v.mean()}[how] if len(v) else np.nan
    return {"mode": mode, "metric": metric, "scope": scope, "value": value, "n": len(v),
            "note": note}


def _rankings(cells: pd.DataFrame) -> tuple[list[float], list[float], list[float]]:
    """Per (pipeline, limit) with two or more policies that finished: Kendall's tau of
    the predicted and measured makespans; whether the policy advise would pick (the
    fastest predicted not to be killed) is the measured fastest, and whether its
    measured median lies within the measured fastest's CI. Policies predicted equally
    fast share the credit (1/k each); a pick that was killed, or no pick, is a miss."""
    taus, hits, within = [], [], []
    for _, g in cells.groupby(["pipeline", "limit"]):
        done = g.dropna(subset=["measured_makespan_s"])
        if len(done) < 2:
            continue
        taus.append(kendall_tau(done["predicted_makespan_s"], done["measured_makespan_s"]))
        best = done.loc[done["measured_makespan_s"].idxmin()]
        high = best["measured_makespan_ci_high"]
        high = best["measured_makespan_s"] if not np.isfinite(high) else high
        alive = g[~g["predicted_oom"].astype(bool)]
        if alive.empty:
            hits.append(0.0)
            within.append(0.0)
            continue
        fastest = alive["predicted_makespan_s"].min()
        picks = alive[np.isclose(alive["predicted_makespan_s"], fastest, rtol=1e-9)]
        hits.append(float((picks["policy"] == best["policy"]).mean()))
        within.append(float((picks["measured_makespan_s"] <= high).mean()))  # NaN: killed
    return taus, hits, within


def scores(pred: pd.DataFrame, notes: list[tuple[str, str]] = ()) -> pd.DataFrame:
    rows = [{"mode": m, "metric": "cross-validation", "scope": "", "value": np.nan, "n": 0,
             "note": note} for m, note in notes]
    for mode, p in pred.groupby("mode"):
        free, lim = p[p["limit"] == "none"], p[p["limit"] != "none"]
        k = p["pipeline"].nunique()
        note = f"{k} held-out pipelines"
        rows.append(_row(mode, "makespan MAPE %", "unconstrained", free["makespan_error_pct"],
                         "mape", note))
        rows.append(_row(mode, "makespan MAPE %", "limited", lim["makespan_error_pct"],
                         "mape", note))
        rows.append(_row(mode, "slowdown MAPE %", "limited", lim["slowdown_error_pct"],
                         "mape", note))
        rows.append(_row(mode, "peak RSS median abs error %", "unconstrained",
                         free["peak_error_pct"], "median_abs", note))
        per_policy = [_row(mode, "peak RSS median abs error %", f"unconstrained, {policy}",
                           g["peak_error_pct"], "median_abs", note)
                      for policy, g in free.groupby("policy")]
        rows += per_policy
        worst = max((r for r in per_policy if pd.notna(r["value"])),
                    key=lambda r: r["value"], default=None)
        if worst is not None:
            rows.append({**worst, "scope": "unconstrained, worst policy",
                         "note": f"{worst['scope'].split(', ')[1]}; {note}"})
        rows.append(_row(mode, "peak RSS median abs error %", "limited",
                         lim["peak_error_pct"], "median_abs",
                         "RSS counts file pages the cgroup may not: compare the cgroup peak"))
        taus, hits, within = _rankings(p)
        rows.append(_row(mode, "Kendall tau (median)", "per pipeline and limit", taus,
                         "median", note))
        rows.append(_row(mode, "predicted best = measured best (share)",
                         "per pipeline and limit", hits, "mean", note))
        rows.append(_row(mode, "predicted best within measured best's CI (share)",
                         "per pipeline and limit", within, "mean", f"{note}; {CI_METHOD}"))
        predicted, measured = lim["predicted_oom"].astype(bool), lim["measured_oom"].astype(bool)
        rows.append(_row(mode, "OOM predicted correctly (share)", "limited cells",
                         (predicted == measured).astype(float), "mean",
                         f"{int(predicted.sum())} predicted, {int(measured.sum())} measured "
                         f"OOM cells; {note}"))
    return pd.DataFrame(rows, columns=SCORE_COLUMNS)


def score_summary(scores_table: pd.DataFrame) -> dict[str, dict[str, float | str]]:
    """The headline scores per mode, as advise states them."""
    out: dict[str, dict[str, float | str]] = {}
    for r in scores_table.itertuples():
        entry = out.setdefault(r.mode, {})
        if r.metric == "cross-validation":
            entry["note"] = r.note
            continue
        if "," in str(r.scope) and "worst policy" not in str(r.scope):
            continue
        entry[f"{r.metric} ({r.scope})"] = None if pd.isna(r.value) else float(r.value)
        if "worst policy" in str(r.scope):
            entry["worst policy"] = r.note.split(";")[0]
            continue
        entry.setdefault("note", r.note)
    return out


def layer_residuals(model: Model, runs: pd.DataFrame, tasks: pd.DataFrame,
                    descriptions: dict[str, Description]) -> pd.DataFrame:
    """Per mode and (network, layer, task type): the median measured duration of the
    tasks that ran alone in unconstrained runs, the model's prediction (the gap between
    tasks left out: it is not in a task's duration), the residual (measured - predicted)
    and the prediction's error (predicted / measured - 1, in %)."""
    from engine.model.fit import solo_medians, task_features
    from engine.model.predict import task_work_s

    rows = []
    for name, mode in model.modes.items():
        part = runs[(runs["emulated"] == (name == "emulated")) & (runs["limit"] == "none")
                    & (runs["termination"] == "ok")]
        t = tasks[tasks["run_id"].isin(part["run_id"])]
        if t.empty:
            continue
        med = solo_medians(task_features(t.assign(duration_s=t["duration_ns"] / 1e9),
                                         descriptions, mode.batch))
        nets = Networks(descriptions, mode.batch)
        for r in med.itertuples():
            feats = nets.features(r.network)
            pred = task_work_s(mode, feats, r.task_type, int(r.layer)) - mode.gap_s
            rows.append({"mode": name, "network": r.network, "layer": int(r.layer),
                         "task_type": r.task_type,
                         "layer_type": r.ltype or ("whole network" if r.task_type != "INIT"
                                                   else "INIT"),
                         "tasks": int(r.n), "measured_s": r.duration_s, "predicted_s": pred,
                         "residual_s": r.duration_s - pred,
                         "error_pct": _pct(pred, r.duration_s)})
    return pd.DataFrame(rows)


def evaluate_files(tables_dir: str | os.PathLike, models_dir: str | os.PathLike,
                   model_path: str | os.PathLike, out_dir: str | os.PathLike) -> dict:
    """``evaluate-model``: the cross-validation of the tables in ``tables_dir`` and the
    per-layer residuals of the model in ``model_path``, written to ``out_dir``
    (cv_predictions, cv_scores, layer_residuals as CSV + Parquet; cv.json, the scores
    advise states); returns the score summary."""
    from engine.analysis.tables import write_tables
    from engine.model.train import read_tables

    runs, tasks, networks, descriptions = read_tables(tables_dir, models_dir)
    pred, table = cross_validate(runs, tasks, networks, descriptions)
    resid = layer_residuals(Model.read(model_path), runs, tasks, descriptions)
    out = Path(out_dir)
    write_tables({"cv_predictions": pred, "cv_scores": table, "layer_residuals": resid}, out)
    summary = score_summary(table)
    # which model file the scores go with: advise refuses to state them for another
    summary["model_sha256"] = sha256_file(model_path)
    write_text_atomic(out / "cv.json", json.dumps(summary, indent=1) + "\n")
    return summary

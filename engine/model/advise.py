"""``python -m engine advise``: which policy for this pipeline under this limit, and how
much slower than unconstrained; or (``--find-limit``) the smallest limit at which each
policy runs without swapping.

Every policy is simulated twice (unconstrained and under the limit) with the fitted
model of one execution mode; the answer ranks them by predicted makespan, marks those
predicted to be killed (more swap than allowed), and states the model's cross-validated
error from the ``cv.json`` beside the model file, so that a prediction never goes out
without its expected error. A mode fitted without limited runs has no swap cost: it
says so, and its slowdowns count only what the schedule changes, not the swapping.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from engine.caffe.splitter import description_index
from engine.errors import EdgeprofError
from engine.files import parse_json, sha256_file
from engine.model.params import Model, ModeModel
from engine.model.predict import (
    Networks,
    Prediction,
    predict,
    predict_against_unconstrained,
)
from engine.schedule.pipelines import Pipeline, load_pipeline
from engine.schedule.plan import resolve_descriptions
from engine.schedule.policies import parse_policy
from engine.units import MIB, PAGE_SIZE, format_size

CV_FILE = "cv.json"  # beside the model file: evaluate_model's scores


@dataclass
class Advice:
    """One policy's predictions under the limit, and unconstrained."""

    rank: int | None  # None: predicted to be killed
    prediction: Prediction
    unconstrained: Prediction

    @property
    def slowdown(self) -> float:
        return self.prediction.makespan_s / self.unconstrained.makespan_s


def read_cv(model_path: str | os.PathLike) -> dict:
    """The cross-validated scores next to the model file: {} when there are none, and
    {"note": why} when they cannot be used (unreadable, or scores of another model)."""
    path = Path(model_path).with_name(CV_FILE)
    if not path.is_file():
        return {}
    try:
        data = parse_json(path.read_text(), finite=False)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        return {"note": f"{path} cannot be read ({exc})"}
    if data.get("model_sha256") != sha256_file(model_path):
        return {"note": f"{path} scores another model file (refitted since): run "
                        f"`snakemake {path}` again"}
    return data


def advise(mode: ModeModel, pipeline: Pipeline, networks: Networks, policies: list[str],
           limit_bytes: int | None, swap_bytes: int | None) -> list[Advice]:
    """Every policy predicted under the limit; ranked by predicted makespan, the ones
    predicted to be killed last and unranked."""
    out = []
    for name in policies:
        pred, free = predict_against_unconstrained(mode, pipeline, networks, name,
                                                   limit_bytes, swap_bytes)
        out.append(Advice(None, pred, free))
    alive = sorted((a for a in out if not a.prediction.oom),
                   key=lambda a: a.prediction.makespan_s)
    for i, a in enumerate(alive, 1):
        a.rank = i
    return alive + [a for a in out if a.prediction.oom]


def find_limits(mode: ModeModel, pipeline: Pipeline, networks: Networks,
                policies: list[str]) -> list[tuple[str, int, float]]:
    """(policy, the smallest limit in MiB at which it is predicted not to swap, its
    predicted makespan): its unconstrained peak, rounded up to a MiB. The swap model
    holds a LOAD's weights from its end, the peak from its start on (growing over it),
    so under that limit the swap model never runs out of room."""
    out = []
    for name in policies:
        free, _ = predict(mode, pipeline, networks, name)
        out.append((free.policy, math.ceil(free.peak_ram_bytes / MIB), free.makespan_s))
    return sorted(out, key=lambda r: r[1])


def _mib(value: float) -> str:
    return f"{value / MIB:.0f} MiB"


def cv_sentence(cv: dict, mode: str) -> str:
    scores = cv.get(mode)
    if not scores:
        why = cv.get("note") or (f"no {CV_FILE} beside the model file: run `snakemake "
                                 f"results/model/{CV_FILE}`")
        return f"The {mode} model's cross-validated error is unknown: {why}."
    if "makespan MAPE % (unconstrained)" not in scores:
        return f"The {mode} model's cross-validated error is unknown: {scores.get('note')}."

    def pct(key: str) -> str:
        v = scores.get(key)
        return "n/a" if v is None else f"{v:.1f} %"

    worst = scores.get("peak RSS median abs error % (unconstrained, worst policy)")
    worst_text = "" if worst is None else (
        f", {worst:.1f} % for the worst policy "
        f"({scores.get('worst policy', '?')})")
    return (f"Cross-validated error of the {mode} model ({scores.get('note', '')}): "
            f"makespan MAPE {pct('makespan MAPE % (unconstrained)')} unconstrained, "
            f"{pct('makespan MAPE % (limited)')} under a limit; slowdown MAPE "
            f"{pct('slowdown MAPE % (limited)')}; peak RSS median absolute error "
            f"{pct('peak RSS median abs error % (unconstrained)')}{worst_text}.")


def format_advice(rows: list[Advice], pipeline: Pipeline, mode: ModeModel,
                  limit_bytes: int | None, swap_bytes: int | None, cv: dict) -> str:
    limit = "unconstrained" if limit_bytes is None else f"limit {format_size(limit_bytes)}"
    swap = "unlimited swap" if swap_bytes is None else f"swap {format_size(swap_bytes)}"
    lines = [f"pipeline {pipeline.name}: {' '.join(pipeline.networks())}; {limit}, {swap}; "
             f"{mode.mode} model (batch {mode.batch or 'deploy'}, fitted on {mode.runs} "
             f"run(s) of {len(mode.pipelines)} pipeline(s))",
             f"{'rank':>4}  {'policy':<18}{'makespan':>10}{'vs unconstr.':>14}"
             f"{'peak RSS':>11}{'peak swap':>11}"]
    for a in rows:
        p = a.prediction
        if p.oom:
            lines.append(f"{'OOM':>4}  {p.policy:<18}predicted to be killed: {p.why}")
            continue
        lines.append(f"{a.rank:>4}  {p.policy:<18}{p.makespan_s:>9.3f}s{a.slowdown:>13.2f}x"
                     f"{_mib(p.peak_ram_bytes):>11}{_mib(p.peak_swap_bytes):>11}")
    if limit_bytes is not None and any(a.prediction.peak_ram_bytes > limit_bytes
                                       for a in rows if not a.prediction.oom):
        lines.append(f"note: RSS counts the runtime's file-backed pages "
                     f"({_mib(mode.baseline_file_bytes)}: libraries), which the limit "
                     f"reclaims and the process maps again: it can exceed the limit by them")
    if limit_bytes is not None and mode.swap is None:
        lines.append(f"note: the {mode.mode} model has no swap cost (no limited {mode.mode} "
                     f"runs to fit it from): its slowdowns leave out the time swapping "
                     f"costs; the swap it predicts is shown")
    note = page_size_note(mode) if limit_bytes is not None else None
    if note:
        lines.append(note)
    lines.append(cv_sentence(cv, mode.mode))
    return "\n".join(lines)


def page_size_note(mode: ModeModel, page_size: int = PAGE_SIZE) -> str | None:
    """What a model whose swap cost was measured with pages of another size than this
    machine's (``page_size``) cannot promise; None when they agree or it has none."""
    if mode.swap is None or mode.swap.page_bytes == page_size:
        return None
    return (f"note: the {mode.mode} model's swap cost was measured with "
            f"{mode.swap.page_bytes}-byte pages, this machine's are {page_size} bytes: its "
            f"slowdowns assume a swapped byte costs here what it cost there")


def format_limits(rows: list[tuple[str, int, float]], pipeline: Pipeline, mode: ModeModel,
                  cv: dict) -> str:
    lines = [f"pipeline {pipeline.name}: {' '.join(pipeline.networks())}; {mode.mode} "
             f"model: the smallest limit at which each policy is predicted not to swap",
             f"{'policy':<18}{'limit':>10}{'makespan':>11}"]
    lines += [f"{policy:<18}{mib:>7} MiB{makespan:>10.3f}s" for policy, mib, makespan in rows]
    lines.append(cv_sentence(cv, mode.mode))
    return "\n".join(lines)


def run_advise(pipeline_path: str, model_path: str, models_dir: str, limit_bytes: int | None,
               swap_bytes: int | None, policies: list[str] | None, mode_name: str | None,
               find_limit: bool, as_json: bool) -> str:
    """What ``python -m engine advise`` prints; bad input raises EdgeprofError."""
    model = Model.read(model_path)
    mode = model.mode(mode_name)
    pipeline = load_pipeline(pipeline_path)
    descriptions = resolve_descriptions(pipeline, description_index(models_dir),
                                        check_files=False)
    names = list(dict.fromkeys(parse_policy(p).name for p in (policies or model.policies)))
    if not names:
        raise EdgeprofError("no policies to rank: give --policies")
    networks = Networks(descriptions, mode.batch)
    cv = read_cv(model_path)
    if find_limit:
        rows = find_limits(mode, pipeline, networks, names)
        if as_json:
            return json.dumps([{"policy": p, "limit_mib": m, "makespan_s": t}
                               for p, m, t in rows], indent=1)
        return format_limits(rows, pipeline, mode, cv)
    advice = advise(mode, pipeline, networks, names, limit_bytes, swap_bytes)
    if as_json:
        return json.dumps({"pipeline": pipeline.name, "mode": mode.mode,
                           "limit_bytes": limit_bytes, "swap_bytes": swap_bytes,
                           "swap_cost_fitted": mode.swap is not None,
                           "policies": [{"rank": a.rank, "slowdown": a.slowdown,
                                         **asdict(a.prediction)} for a in advice],
                           "cross_validation": cv.get(mode.mode)}, indent=1)
    return format_advice(advice, pipeline, mode, limit_bytes, swap_bytes, cv)

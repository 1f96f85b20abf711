"""``python -m engine advise``: which policy for this pipeline under this limit, and how
much slower than unconstrained; or (``--find-limit``) the smallest limit at which each
policy runs without swapping.

Every policy is simulated twice (unconstrained and under the limit) with the fitted
model of one execution mode and runtime; the answer ranks them by predicted makespan,
marks those predicted to be killed (more swap than allowed), gives each makespan a 95 %
prediction interval from the held-out errors of the cross-validation, checks the
question against the model's domain (``engine.model.domain``: warned, or refused with
``--strict``), and states the model's cross-validated errors from the ``cv.json`` beside
the model file, so that a prediction never goes out without its expected error.
``--swap-cost`` prices the swap traffic with a device's per-page costs
(``engine.model.devices``): the native model's times under a limit at native speed.
Without ``--swap-cost``, a policy predicted to swap under a mode whose per-page cost is
unknown (no limited runs, or limited runs that moved no pages: ``run.swap: 0``) has an
unknown slowdown: it is listed unranked after the ranked ones, never ranked as if
swapping were free, the domain check names the unknown cost (``--strict`` refuses).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from engine.caffe.splitter import description_index
from engine.errors import EdgeprofError
from engine.files import parse_json, sha256_file
from engine.model.devices import Device, parse_swap_cost
from engine.model.domain import outside, unpriced_swap
from engine.model.params import Model, ModeModel, batch_name
from engine.model.predict import (
    Networks,
    Prediction,
    predict,
    predict_against_unconstrained,
)
from engine.schedule.pipelines import Pipeline, load_pipeline
from engine.schedule.plan import resolve_descriptions
from engine.schedule.policies import parse_policy
from engine.units import MIB, PAGE_SIZE, format_size, format_swap, parse_size

CV_FILE = "cv.json"  # beside the model file: evaluate_model's scores
REBUILT_FILE = "reconstruction.csv"  # beside it too: reconstruct_model's native-speed times


@dataclass
class Advice:
    """One policy's predictions under the limit, and unconstrained."""

    rank: int | None  # None: predicted to be killed, or its swapping has no price
    prediction: Prediction
    unconstrained: Prediction
    interval: tuple[float, float] | None = None  # 95 % prediction interval of the makespan
    swap_interval: tuple[float, float] | None = None  # the same of the peak swap (bytes)
    rebuilt: dict | None = None  # this pipeline measured: its native-speed reconstruction
    measured: dict | None = None  # this pipeline's cell among the fit's own runs
    swap_measured_over: str = ""  # a run of it measured more swap than allowed: which
    swap_measured_within: str = ""  # predicted killed, but its runs fit the swap: which
    swap_unchecked: bool = False  # its swap need was never checked against a run's
    kill_risk: bool = False  # at or below a limit at which a fitted run was OOM-killed
    # predicted to finish, but this pipeline's runs under this limit in the sandbox whose
    # kills this mode takes (ModeModel.kills_from) were all OOM-killed: that sandbox
    killed_in: str | None = None
    # with no swap, a peak over the limit only by the runtime's file-backed pages: the
    # kernel must keep dropping and re-reading them (eighteenth held-out pass H1: such
    # runs were OOM-killed), which the model does not predict
    file_pressed: bool = False
    # predicted killed, but runs of it under this limit (and the swap asked) finished, in
    # the fit's own cells or a sandbox's whose kills it takes: how many, where
    finished_anyway: str = ""

    @property
    def slowdown(self) -> float | None:
        """None: unknown (the swap it predicts has no price)."""
        if self.prediction.unpriced:
            return None
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


def _interval_source(key: str, pi: dict, what: str) -> str:
    scheme = f" ({pi['scheme']})" if pi.get("scheme") else ""
    return f"{key}'s {pi['n']} held-out {what}{scheme}"


def _held_out(cv: dict, mode: ModeModel, pick: Callable[[dict], dict | None]
              ) -> tuple[dict | None, str | None]:
    """``pick`` of the mode's own cross-validation entry, else of the first mode's of the
    same runtime that has it, and whose it is; (None, None) when none has it."""
    own = pick(cv.get(mode.key) or {})
    if own:
        return own, mode.key
    for key, entry in cv.items():
        if isinstance(entry, dict) and key.endswith(f"/{mode.runtime}") and pick(entry):
            return pick(entry), key
    return None, None


def error_interval(cv: dict, mode: ModeModel, limited: bool) -> tuple[dict | None, str]:
    """The held-out log(predicted / measured makespan) interval that gives a prediction
    its own (``engine.model.evaluate.log_error_interval``), and whose it is: the mode's
    own (unconstrained, or limited); under a limit without limited cells of its own
    (native), a sandbox's of the same runtime."""
    scope = "limited" if limited else "unconstrained"
    pi, key = _held_out(cv, mode, lambda e: e.get("makespan_log_error_pi", {}).get(scope))
    if pi is None:
        return None, f"no held-out {scope} cells in the cross-validation{_no_cv(cv)}"
    source = _interval_source(key, pi, f"{scope} cells")
    if key != mode.key:
        source += f" (another mode's error: the {mode.key} model has none of its own)"
    return pi, source


def swap_interval(cv: dict, mode: ModeModel) -> tuple[dict | None, str]:
    """The held-out log(predicted / measured peak swap) interval that gives a peak swap
    its own, and whose it is: the mode's own, or (native, which never swaps under a limit
    of its own) a sandbox's of the same runtime."""
    what = "limited cells that swapped"
    pi, key = _held_out(cv, mode, lambda e: e.get("swap_log_error_pi"))
    if pi is None:
        return None, (f"no held-out {what} a MiB or more, measured and predicted, in the "
                      f"cross-validation{_no_cv(cv)}")
    return pi, _interval_source(key, pi, what)


def _no_cv(cv: dict) -> str:
    if not cv:
        return f" (no {CV_FILE} beside the model file)"
    return f" ({cv['note']})" if "note" in cv and len(cv) == 1 else ""


# reconstruction.csv's columns as advise gives them (--json): numbers, yes/no, or missing
_REBUILT_NUMBERS = ("per_page_in_s", "per_page_out_s", "native_makespan_s",
                    "native_makespan_ci_low", "native_makespan_ci_high",
                    "native_unconstrained_s", "replayed_unconstrained_s")


def _typed(row: dict[str, str]) -> dict:
    out: dict = dict(row)
    for key in _REBUILT_NUMBERS:
        if key in out:
            out[key] = float(out[key]) if out[key] not in ("", "nan", "NaN") else None
    for key in ("sandbox_runs", "sandbox_runs_ok"):
        if out.get(key):
            out[key] = int(float(out[key]))
    out["oom"] = out.get("oom") == "True"
    return out


def read_rebuilt(model_path: str | os.PathLike, pipeline_file: str | os.PathLike,
                 runtime: str, limit_bytes: int | None, swap_bytes: int | None,
                 device: Device | None, batch: int | None) -> dict[str, dict]:
    """Policy -> the campaign's native-speed reconstruction of this pipeline (the same
    file: its SHA-256, not its name) under this limit and swap at this batch on this device profile
    (``engine.model.reconstruct``), from the table beside the model file, typed; empty
    when it has none (another pipeline, limit, swap or device: runs measured with swap
    say nothing of a run allowed none)."""
    import csv

    path = Path(model_path).with_name(REBUILT_FILE)
    if device is None or limit_bytes is None or not path.is_file():
        return {}
    want = (sha256_file(pipeline_file), runtime, format_size(limit_bytes),
            format_swap(swap_bytes), device.name, "" if batch is None else str(batch))
    out = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):  # the deploy batch: an empty field
            if (row.get("pipeline_sha256"), row["runtime"], row["limit"], row.get("swap"),
                    row["device"], row.get("batch") or "") == want:
                out[row["policy"]] = _typed(row)
    return out


def advise(mode: ModeModel, pipeline: Pipeline, networks: Networks, policies: list[str],
           limit_bytes: int | None, swap_bytes: int | None, device: Device | None = None,
           log_pi: dict | None = None, swap_log_pi: dict | None = None) -> list[Advice]:
    """Every policy predicted under the limit (priced with ``device``'s per-page costs
    when given); ranked by predicted makespan, the ones predicted to be killed last and
    unranked, and before them, unranked too, the ones whose swapping has no price
    (their makespan leaves it out). ``log_pi``, the held-out log(predicted / measured)
    interval (``error_interval``), gives each makespan its interval, ``swap_log_pi``
    (``swap_interval``) each peak swap its own."""
    out = []
    cost = device.swap_cost() if device is not None else None
    for name in policies:
        pred, free = predict_against_unconstrained(mode, pipeline, networks, name,
                                                   limit_bytes, swap_bytes, cost)
        interval = None
        if log_pi is not None:
            interval = (pred.makespan_s / math.exp(log_pi["high"]),
                        pred.makespan_s / math.exp(log_pi["low"]))
        swap = None
        if swap_log_pi is not None and pred.peak_swap_bytes > 0:
            swap = (pred.peak_swap_bytes / math.exp(swap_log_pi["high"]),
                    pred.peak_swap_bytes / math.exp(swap_log_pi["low"]))
        out.append(Advice(None, pred, free, interval, swap))
    def by_time(rows: list[Advice]) -> list[Advice]:
        return sorted(rows, key=lambda a: a.prediction.makespan_s)

    priced = by_time([a for a in out if not a.prediction.oom and not a.prediction.unpriced])
    for i, a in enumerate(priced, 1):
        a.rank = i
    return (priced + by_time([a for a in out if not a.prediction.oom and a.prediction.unpriced])
            + [a for a in out if a.prediction.oom])


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
    """The cross-validated errors of ``mode`` (a model key), one sentence per scheme."""
    entry = cv.get(mode)
    if not entry:
        why = cv.get("note") or (f"no {CV_FILE} beside the model file: run `snakemake "
                                 f"results/model/{CV_FILE}`")
        return f"The {mode} model's cross-validated error is unknown: {why}."
    lines = []
    # leave-batch-out only where the fit saw two batches or more (engine.model.evaluate)
    for scheme in ("leave-pipeline-out", "leave-network-out", "leave-batch-out"):
        if scheme == "leave-batch-out" and scheme not in entry:
            continue
        scores = entry.get(scheme) or {}
        if "makespan MAPE % (unconstrained)" not in scores:
            notes = "; ".join(scores.get("notes", [])) or "not run"
            lines.append(f"{scheme}: unknown ({notes}).")
            continue

        def pct(key: str, s=scores) -> str:
            v = s.get(key)
            return "n/a" if v is None else f"{v:.1f} %"

        worst = scores.get("peak RSS median abs error % (unconstrained, worst policy)")
        worst_text = "" if worst is None else (
            f", {worst:.1f} % for the worst policy ({scores.get('worst policy', '?')})")
        tau = scores.get("Kendall tau (median) (limited, per pipeline and limit)")
        swap = scores.get("peak swap median error % (signed) (limited)")
        swap_text = "" if swap is None else f"; peak swap median error {swap:+.0f} %"
        lines.append(
            f"{scheme} ({scores.get('note', '')}): makespan MAPE "
            f"{pct('makespan MAPE % (unconstrained)')} unconstrained, "
            f"{pct('makespan MAPE % (limited)')} under a limit; slowdown MAPE "
            f"{pct('slowdown MAPE % (limited)')}; peak RSS median absolute error "
            f"{pct('peak RSS median abs error % (unconstrained)')}{worst_text}; Kendall "
            f"tau under a limit {'n/a' if tau is None else f'{tau:.2f}'}{swap_text}.")
    return f"Cross-validated error of the {mode} model: " + " ".join(lines)


def domain_lines(problems: list[str]) -> list[str]:
    if not problems:
        return ["domain: inside what the model was fitted on"]
    return ["outside the model's domain (an extrapolation; --strict refuses):",
            *(f"  - {p}" for p in problems)]


def format_advice(rows: list[Advice], pipeline: Pipeline, mode: ModeModel,
                  batch: int | None, limit_bytes: int | None, swap_bytes: int | None, cv: dict,
                  device: Device | None = None, problems: list[str] = (),
                  interval_source: str = "", swap_source: str = "") -> str:
    limit = "unconstrained" if limit_bytes is None else f"limit {format_size(limit_bytes)}"
    swap = "unlimited swap" if swap_bytes is None else f"swap {format_size(swap_bytes)}"
    lines = [f"pipeline {pipeline.name}: {' '.join(pipeline.networks())}; {limit}, {swap}; "
             # the sandbox by name, as the notes below and --mode name it
             f"{mode.mode} model, {mode.runtime} runtime (batch {batch_name(batch)}, "
             f"{'fitted' if mode.batches == [batch] else fitted_at(mode)} on "
             f"{mode.runs} run(s) of {len(mode.pipelines)} pipeline(s))"]
    if device is not None and limit_bytes is not None:
        lines.append(f"swap priced on {device.name}: {device.per_page_in_s * 1e6:.1f} us per "
                     f"page in, {device.per_page_out_s * 1e6:.1f} us out ({device.source})"
                     + ("; at native speed" if mode.mode == "native" else ""))
    lines.append(f"{'rank':>4}  {'policy':<18}{'makespan':>10}{'95 % PI':>18}"
                 f"{'vs unconstr.':>14}{'peak RSS':>11}{'peak swap':>11}{'swap PI':>14}")
    for a in rows:
        p = a.prediction
        if p.oom:
            lines.append(f"{'OOM':>4}  {p.policy:<18}predicted to be killed: {p.why}")
            continue
        if p.unpriced:  # at least the time without the swapping: a bound, not a rank
            lines.append(f"{'?':>4}  {p.policy:<18}{'>=' + f'{p.makespan_s:.3f}s':>10}"
                         f"{'n/a':>18}{'unknown':>14}"
                         f"{_mib(p.peak_ram_bytes):>11}{_mib(p.peak_swap_bytes):>11}"
                         f"{_swap_pi(a):>14}")
            continue
        pi = ("n/a" if a.interval is None
              else f"{a.interval[0]:.3f}-{a.interval[1]:.3f}s")
        lines.append(f"{a.rank:>4}  {p.policy:<18}{p.makespan_s:>9.3f}s{pi:>18}"
                     f"{a.slowdown:>13.2f}x"
                     f"{_mib(p.peak_ram_bytes):>11}{_mib(p.peak_swap_bytes):>11}"
                     f"{_swap_pi(a):>14}")
    lines.append(f"PI: the 95 % prediction interval: the prediction over the spread of "
                 f"predicted/measured (Student's t) on {interval_source}")
    alive = [a for a in rows if not a.prediction.oom]
    if limit_bytes is not None and any(a.prediction.peak_swap_bytes > 0 for a in rows):
        lines.append(f"swap PI: the same for the peak swap, on {swap_source}"
                     if any(a.swap_interval for a in alive)
                     else f"swap PI: unknown: {swap_source}")
        lines.append(_swap_scale_line(mode))
    # the kill limit's reason only where this limit is at or below it (a policy flagged
    # for another reason, the file pages or a sandbox's kills, has its own note)
    at_kill = (limit_bytes is not None and mode.kill_limit_bytes is not None
               and limit_bytes <= mode.kill_limit_bytes)
    risky = [a.prediction.policy for a in alive if a.kill_risk]
    if risky and at_kill:
        whose = (f"a run in the {' or '.join(mode.kills_from)} sandbox (this model has no "
                 f"limited runs of its own)" if mode.kills_from
                 else "a run the model was fitted on")
        lines.append(f"note: may be killed whatever the prediction: {', '.join(risky)} "
                     f"({whose} was OOM-killed at {format_size(int(mode.kill_limit_bytes))}, "
                     f"at or above this limit; the model does not predict such kills)")
    short = [a for a in alive if _short_of_swap(a, swap_bytes)]
    if short:
        lines.append(f"note: may run out of swap ({format_size(swap_bytes)} allowed): "
                     f"{', '.join(a.prediction.policy for a in short)} (the top of its swap "
                     f"PI, a run of it, or a need never checked against a run that swapped, "
                     f"is over it)")
    unpriced = [a.prediction for a in rows if a.prediction.unpriced and not a.prediction.oom]
    if unpriced:
        lines.append("?: not ranked: predicted to swap at an unknown cost per page (swap "
                     "cost, below), so the slowdown is unknown and the makespan leaves the "
                     "swapping out (price it with --swap-cost)")
    rebuilt = [a for a in rows if a.rebuilt]
    if rebuilt:
        sandbox = rebuilt[0].rebuilt["sandbox"]
        lines.append(f"measured: this pipeline's native-speed time rebuilt from its native "
                     f"unconstrained task times and the {sandbox} sandbox's page traffic "
                     f"under this limit, priced on {device.name} (95 % CI: repetitions of "
                     f"both resampled; {REBUILT_FILE}):")
        for a in rebuilt:
            r = a.rebuilt
            if r["oom"]:
                lines.append(f"      {a.prediction.policy:<18}killed in the sandbox")
            elif r["native_makespan_s"] is not None:
                lo, hi = r["native_makespan_ci_low"], r["native_makespan_ci_high"]
                ci = (f" [{lo:.3f}-{hi:.3f}s]" if lo is not None and hi is not None
                      else " (no CI: one repetition of each part)")
                # some of its sandbox runs did not finish: the time is the others'
                # (twenty-seventh held-out pass M1: said only where no time was rebuilt)
                ended = (f"; {r['note']}: rebuilt from the runs that finished"
                         if r.get("note") else "")
                lines.append(f"      {a.prediction.policy:<18}"
                             f"{r['native_makespan_s']:>9.3f}s{ci}{ended}")
            elif r.get("note"):
                lines.append(f"      {a.prediction.policy:<18}{r['note']}")
        lines += _disagreements([(a, a.rebuilt["native_makespan_s"]) for a in rebuilt
                                 if not a.rebuilt["oom"]
                                 and a.rebuilt["native_makespan_s"] is not None],
                                {a.prediction.policy: "some sandbox runs did not finish"
                                 for a in rebuilt if a.rebuilt.get("note")})
    lines += _measured_lines(rows, swap_bytes)
    if limit_bytes is not None and any(a.prediction.peak_ram_bytes > limit_bytes
                                       for a in rows if not a.prediction.oom):
        lines.append(f"note: RSS counts the runtime's file-backed pages "
                     f"({_mib(mode.baseline_file_bytes)}: libraries), which the limit "
                     f"reclaims and the process maps again: it can exceed the limit by them")
    pressed = [a.prediction.policy for a in rows if a.file_pressed]
    if pressed:
        lines.append(f"note: may be killed with no swap: {', '.join(pressed)} (its peak "
                     f"exceeds the limit by the runtime's file-backed pages, which the "
                     f"kernel must keep dropping and reading again; runs like it were "
                     f"OOM-killed, which the model does not predict; --find-limit gives "
                     f"the limit without that pressure)")
    note = page_size_note(mode) if limit_bytes is not None else None
    if note:
        lines.append(note)
    lines += domain_lines(list(problems))
    lines.append(cv_sentence(cv, mode.key))
    return "\n".join(lines)


def _disagreements(timed: list[tuple[Advice, float]],
                   partial: dict[str, str] | None = None) -> list[str]:
    """Where this pipeline's measured times (each policy's, beside its advice) say
    otherwise than the predictions: a time outside its prediction interval, or another
    order of the policies. ``partial``: policy -> how many of its runs the time rests on,
    where some did not finish (twenty-seventh held-out pass L1: the order was offered as
    the better guide with a policy killed in half its runs ranked first, unmarked)."""
    partial = partial or {}
    timed = [(a, t) for a, t in timed if not a.prediction.oom]
    out = []
    outside = [a.prediction.policy for a, t in timed if a.interval is not None
               and not a.interval[0] <= t <= a.interval[1]]
    if outside:
        out.append(f"note: measured outside the predicted interval: {', '.join(outside)}: "
                   f"on this pipeline the model errs by more than its held-out error")
    measured = [a.prediction.policy for a, t in sorted(timed, key=lambda at: at[1])]
    predicted = [a.prediction.policy for a, _ in
                 sorted(timed, key=lambda at: at[0].prediction.makespan_s)]
    if measured != predicted:
        marked = [f"{p} ({partial[p]})" if p in partial else p for p in measured]
        guide = ("the measured order is the better guide" if not partial.keys() & set(measured)
                 else "the measured order is the better guide where every run of a policy "
                      "finished (a time of some runs only leaves out those that did not)")
        out.append(f"note: measured, this pipeline's policies rank {', '.join(marked)} "
                   f"(predicted: {', '.join(predicted)}); for this pipeline under this "
                   f"limit {guide}")
    return out


def measured_in_fit(model: Model, mode: ModeModel, pipeline_file: str | os.PathLike,
                    limit_bytes: int | None, batch: int | None
                    ) -> tuple[list[dict], list[dict], list[dict]]:
    """The fit's own cells (``ModeModel.measured``) of this pipeline file (its SHA-256,
    not its name) under this limit at this batch, every swap allowance: this mode's, every mode's of
    its runtime (what a kernel paged: a native mode's swap is the sandbox's), and those of
    the modes whose kills this one takes (``kills_from``), each with its ``mode``."""
    sha = sha256_file(pipeline_file)
    limit = "none" if limit_bytes is None else format_size(limit_bytes)

    def of(m: ModeModel) -> list[dict]:
        return [c for c in m.measured if c.get("pipeline_sha256") == sha
                and c["limit"] == limit and c.get("batch") == batch]

    paged = [c for m in model.modes.values() if m.runtime == mode.runtime for c in of(m)]
    lent = [{**c, "mode": key} for key in mode.kills_from if key in model.modes
            for c in of(model.modes[key])]
    return of(mode), paged, lent


def unfitted_kills(model: Model, mode: ModeModel, limit_bytes: int | None) -> list[str]:
    """Under a limit, for a mode with no limited runs of its own nor a sandbox's whose
    kills it takes: the sandbox modes of its runtime the fit could not make, whose runs'
    kills are then nowhere in the model (twenty-second held-out pass M2: native advise
    said nothing of uml runs OOM-killed at the very limit asked)."""
    if limit_bytes is None or mode.kill_limit_bytes is not None or mode.kills_from:
        return []
    lost = sorted(key for key in model.unfitted if key != mode.key
                  and key.endswith(f"/{mode.runtime}"))
    return [f"the {key} mode could not be fitted ({model.unfitted[key]}): the kills its runs "
            f"measured are not taken into account, so no policy is marked as one that may be "
            f"killed under this limit; see that campaign's runs" for key in lost]


def attach_measured(advice: list[Advice], own: list[dict], paged: list[dict],
                    lent: list[dict], swap_bytes: int | None) -> None:
    """Each advice's own cell of this swap (or, asked for a swap, one of unlimited swap
    whose runs all finished within it: a larger cap changes nothing they did; or one of a
    smaller cap than asked that none of its runs came near: more swap changes nothing
    they did; or one of more swap whose runs were all OOM-killed: less saves none); where a
    run of its policy swapped more than ``swap_bytes`` (it may be killed), or, predicted
    killed, where its runs finished within it, says so; predicted to finish where every
    run of it in a sandbox whose kills the mode takes (``lent``) was OOM-killed, names
    that sandbox."""
    asked = format_swap(swap_bytes)

    def max_within(c: dict) -> bool:
        """Runs with unlimited swap, the one that swapped most within the swap asked."""
        most = _most_swapped(c)
        return (swap_bytes is not None and c["swap"] == "max" and most is not None
                and most <= swap_bytes)

    def within(c: dict) -> bool:
        """Runs with unlimited swap that all finished, the one that swapped most within
        the swap asked (twenty-third held-out pass H1: the median was taken, and a run
        past the cap was said to be within it)."""
        return c["runs_ok"] == c["runs"] and max_within(c)

    def under_cap(c: dict) -> bool:
        """Runs under a smaller swap cap than asked (or than none) that all finished and
        never came near it: more swap changes nothing they did."""
        cap = _cap(c["swap"])
        most = _most_swapped(c)
        return (cap is not None and (swap_bytes is None or swap_bytes > cap)
                and c["runs_ok"] == c["runs"] and most is not None
                and most < UNBOUND_SHARE * cap)

    def unbound_by_asked(c: dict) -> bool:
        """Runs with unlimited swap, finished or not, none of which came near the swap
        asked (below UNBOUND_SHARE of it): that cap changes nothing they did (twenty-sixth
        held-out pass H1: a cell with a kill among its runs vanished at --swap 100M,
        though its largest run swapped 74 MiB, and its measured order with it)."""
        most = _most_swapped(c)
        return (swap_bytes is not None and c["swap"] == "max" and most is not None
                and most < UNBOUND_SHARE * swap_bytes)

    def killed_with_more(c: dict) -> bool:
        """Runs all OOM-killed with more swap than asked: less swap saves none of them
        (twenty-fourth held-out pass L2: asked for less, advise dropped them and their
        note)."""
        cap = _cap(c["swap"])
        return (swap_bytes is not None and _all_killed(c)
                and (c["swap"] == "max" or (cap is not None and cap > swap_bytes)))

    def fits_swap(c: dict) -> bool:  # runs under the swap asked, or that all swapped within it
        return c["swap"] == asked or under_cap(c) or max_within(c)

    for a in advice:
        policy = a.prediction.policy
        # under the swap asked or more: runs killed with less swap say nothing of it
        # (twenty-eighth held-out pass L1: runs under a 64M cap were said to be killed
        # "whatever the swap" where, at the swap asked, one had finished)
        a.killed_in = next((c["mode"] for c in lent if c["policy"] == policy
                            and _all_killed(c) and not a.prediction.oom
                            and (c["swap"] == asked or killed_with_more(c))), None)
        if a.prediction.oom:
            done = [f"{c['runs_ok']} of {c['runs']}"
                    + (f" in the {c['mode']} sandbox" if "mode" in c else "")
                    for c in [*own, *lent] if c["policy"] == policy and c["runs_ok"] > 0
                    and fits_swap(c)]
            a.finished_anyway = f"{policy} ({'; '.join(done)})" if done else ""
        mine = [c for c in own if c["policy"] == policy]
        a.measured = next((c for c in mine if c["swap"] == asked),
                          next((c for c in mine if within(c) or under_cap(c)
                                or unbound_by_asked(c)),
                               next((c for c in mine if killed_with_more(c)), None)))
        if swap_bytes is None:
            continue
        runs = [c for c in paged if c["policy"] == policy
                and _swapped_at_least(c) is not None]
        over = [c for c in runs if _swapped_at_least(c) > swap_bytes]
        if over:
            c = max(over, key=_swapped_at_least)
            a.swap_measured_over = (f"{policy} swapped {_mib(_swapped_at_least(c))} with "
                                    f"swap {c['swap']}")
        elif a.prediction.oom and any(within(c) for c in runs):
            c = max((c for c in runs if within(c)), key=_most_swapped)
            a.swap_measured_within = (f"{policy}'s runs finished having swapped at most "
                                      f"{_mib(_most_swapped(c))}")


# A run that swapped less than this share of its swap cap never came near it: the cap did
# not bind it (the kernel fills a cap it reaches to within pages)
UNBOUND_SHARE = 0.95


def _most_swapped(c: dict) -> float | None:
    """The most any run of a cell swapped (None in a model file from before that was kept:
    no claim about every run then)."""
    return c.get("max_swap_bytes")


def _swapped_at_least(c: dict) -> float | None:
    """The most any run of a cell swapped, or where that is not known the median of its
    runs, which the most is at least."""
    most = _most_swapped(c)
    return c["peak_swap_bytes"] if most is None else most


def _cap(swap: str) -> int | None:
    """A cell's swap cap in bytes, from its label (format_swap); None for max, none for 0
    (a run with no swap cannot show it did not need more)."""
    if swap in ("max", "0"):
        return None
    return parse_size(swap)


def _all_killed(c: dict) -> bool:
    """No run of the cell finished, and every one was OOM-killed."""
    return c["runs_ok"] == 0 and set(c.get("ended", {})) == {"memory"}


def _ended(c: dict) -> str:
    """How a cell's runs that did not finish ended, in words."""
    words = {"memory": "OOM-killed", "error": "ended in error (e.g. a sandbox that did "
             "not start)", "timeout": "timed out"}
    parts = [f"{n} {words.get(how, how)}" for how, n in sorted(c.get("ended", {}).items())]
    return ", ".join(parts) or f"{c['runs'] - c['runs_ok']} did not finish"


def _measured_lines(rows: list[Advice], swap_bytes: int | None) -> list[str]:
    """The fit's own runs of this pipeline, limit and swap, and what they contradict."""
    lines = []
    shown = [a for a in rows if a.measured]
    if shown:
        lines.append("measured: this pipeline file's own runs among those the model was "
                     "fitted on, under this limit (median [95 % CI]; peak swap):")
        for a in shown:
            c = a.measured
            cap = "" if c["swap"] == format_swap(swap_bytes) else f" (swap {c['swap']})"
            if c["makespan_s"] is None:
                lines.append(f"      {a.prediction.policy:<18}no run finished: "
                             f"{_ended(c)}{cap}")
                continue
            ci = (f" [{c['makespan_ci'][0]:.3f}-{c['makespan_ci'][1]:.3f}s]"
                  if c["makespan_ci"] else f" (no CI: {c['runs_ok']} finished run(s))")
            swap = ("" if c["peak_swap_bytes"] is None
                    else f"; swap {_mib(c['peak_swap_bytes'])}")
            left = (f"; of {c['runs']} runs {_ended(c)}" if c["runs_ok"] < c["runs"] else "")
            lines.append(f"      {a.prediction.policy:<18}{c['makespan_s']:>9.3f}s{ci}"
                         f"{swap}{left}{cap}")
        timed = [(a, a.measured["makespan_s"]) for a in shown
                 if a.measured["makespan_s"] is not None]
        lines += _disagreements(timed, {
            a.prediction.policy: f"{a.measured['runs_ok']} of {a.measured['runs']} finished"
            for a in shown if a.measured["runs_ok"] < a.measured["runs"]})
        lines += _unbounded(timed)
    killed = [a.prediction.policy for a in shown if not a.prediction.oom
              and _all_killed(a.measured)]
    if killed:
        lines.append(f"note: predicted to finish, but this pipeline's runs under this limit "
                     f"were all OOM-killed: {', '.join(killed)}: they may be killed whatever "
                     f"the swap")
    for sandbox in sorted({a.killed_in for a in rows if a.killed_in}):
        lent = [a.prediction.policy for a in rows if a.killed_in == sandbox]
        lines.append(f"note: predicted to finish, but this pipeline's runs under this limit "
                     f"in the {sandbox} sandbox (whose kills this model takes: it has no "
                     f"limited runs of its own) were all OOM-killed: {', '.join(lent)}: they "
                     f"may be killed whatever the swap")
    over = [a.swap_measured_over for a in rows if a.swap_measured_over]
    if over:
        lines.append(f"note: more swap than the {format_size(swap_bytes)} allowed here was "
                     f"measured on this pipeline: {'; '.join(over)}: it may be killed")
    finished = [a.finished_anyway for a in rows if a.finished_anyway]
    if finished:
        lines.append(f"note: predicted killed, but runs of this pipeline under this limit "
                     f"finished: {', '.join(finished)}: kills there are a matter of chance "
                     f"(the start-up's, or the swap's); read these as may be killed")
    within = [a.swap_measured_within for a in rows if a.swap_measured_within]
    if within:
        lines.append(f"note: predicted killed, but with more swap allowed "
                     f"{'; '.join(within)}, within the {format_size(swap_bytes)} asked: "
                     f"the prediction overstates the swap they need")
    return lines


def _unbounded(timed: list[tuple[Advice, float]]) -> list[str]:
    """Where a prediction beside a measured figure has no interval to hold it against:
    how far apart they are (time, and swap where both swapped)."""
    parts = []
    for a, t in timed:
        if a.prediction.oom or (a.interval is not None and (
                a.swap_interval is not None or not a.prediction.peak_swap_bytes)):
            continue
        gaps = [] if a.interval is not None else [
            f"time {100 * (a.prediction.makespan_s / t - 1):+.0f} %"]
        measured_swap = a.measured.get("peak_swap_bytes")
        if a.swap_interval is None and measured_swap and a.prediction.peak_swap_bytes:
            gaps.append(f"swap {100 * (a.prediction.peak_swap_bytes / measured_swap - 1):+.0f} %")
        if gaps:
            parts.append(f"{a.prediction.policy} {', '.join(gaps)}")
    if not parts:
        return []
    return [f"note: predicted against measured, with no held-out interval to weigh the gap: "
            f"{'; '.join(parts)}"]


def _swap_scale_line(mode: ModeModel) -> str:
    """Where the predicted swap comes from: the replay's shortfall, scaled by what runs
    that swapped measured (``engine.model.train.calibrate``), or not."""
    if mode.swap_scale_from is None:
        return ("note: each policy's swap is the replay's shortfall alone (what does not fit "
                "under the limit): no run the model was fitted on swapped a MiB or more, "
                "and a run swaps more than its shortfall (docs/model.md): allow more swap "
                "than it says")
    whose = ("its own runs" if mode.swap_scale_from == mode.key
             else f"{mode.swap_scale_from}'s runs (this mode has no limited runs)")
    return (f"swap: the replay's shortfall times {mode.swap_scale:.2f}, measured over "
            f"replayed on {whose} that swapped")


def _short_of_swap(a: Advice, swap_bytes: int | None) -> bool:
    """Predicted to fit, but the top of its swap PI, a run of it, or a swap need the
    model never checked against a run that swapped, is over (or may be over) the swap
    allowed."""
    return (not a.prediction.oom and swap_bytes is not None
            and (a.swap_interval is not None and a.swap_interval[1] > swap_bytes
                 or bool(a.swap_measured_over)
                 or (a.swap_unchecked and a.prediction.peak_swap_bytes > 0)))


def _swap_pi(a: Advice) -> str:
    if a.swap_interval is None:
        return "n/a" if a.prediction.peak_swap_bytes > 0 else ""
    low, high = a.swap_interval
    return f"{low / MIB:.0f}-{high / MIB:.0f} MiB"


def page_size_note(mode: ModeModel, page_size: int = PAGE_SIZE) -> str | None:
    """What a model whose swap cost was measured with pages of another size than this
    machine's (``page_size``) cannot promise; None when they agree or it has none."""
    if mode.swap is None or mode.swap.page_bytes == page_size:
        return None
    return (f"note: the {mode.mode} model's swap cost was measured with "
            f"{mode.swap.page_bytes}-byte pages, this machine's are {page_size} bytes: its "
            f"slowdowns assume a swapped byte costs here what it cost there")


def _killed_at(mode: ModeModel, mib: int) -> bool:
    """A limit of ``mib`` MiB at or below one a run the model knows was OOM-killed at."""
    return mode.kill_limit_bytes is not None and mib * MIB <= mode.kill_limit_bytes


def format_limits(rows: list[tuple[str, int, float]], pipeline: Pipeline, mode: ModeModel,
                  batch: int | None, cv: dict, problems: list[str]) -> str:
    lines = [f"pipeline {pipeline.name}: {' '.join(pipeline.networks())}; "
             f"{mode.mode} model, {mode.runtime} runtime, batch {batch_name(batch)}: the "
             f"smallest limit at which each policy is predicted not to swap",
             f"{'policy':<18}{'limit':>10}{'makespan':>11}"]
    lines += [f"{policy:<18}{mib:>7} MiB{makespan:>10.3f}s{' !' if _killed_at(mode, mib) else ''}"
              for policy, mib, makespan in rows]
    if any(_killed_at(mode, mib) for _, mib, _ in rows):
        lines.append(f"!: may be killed at that limit: a run was OOM-killed at "
                     f"{format_size(int(mode.kill_limit_bytes))}, at or above it (the model "
                     f"does not predict such kills)")
    lines += domain_lines(problems)
    lines.append(cv_sentence(cv, mode.key))
    return "\n".join(lines)


def fitted_at(mode: ModeModel) -> str:
    """The batches a mode was fitted at, in words: "fitted at batch 1", "fitted at batches
    1, 2 and 4"."""
    names = [batch_name(b) for b in mode.batches]
    if len(names) == 1:
        return f"fitted at batch {names[0]}"
    return f"fitted at batches {', '.join(names[:-1])} and {names[-1]}"


def asked_batch(mode: ModeModel, batch: int | None) -> int | None:
    """The batch a question is answered at: ``batch``, or (None) the one the mode was
    fitted at; a mode fitted at several needs it named."""
    if batch is not None:
        return batch
    if len(mode.batches) > 1:
        raise EdgeprofError(f"the {mode.key} model was {fitted_at(mode)}: give --batch N "
                            f"(one of them, or another: the domain check names a batch "
                            f"outside them)")
    return mode.batches[0]


def _refuse_outside(strict: bool, mode: ModeModel, problems: list[str]) -> None:
    if strict and problems:
        raise EdgeprofError(f"outside the {mode.key} model's domain: {'; '.join(problems)} "
                            f"(drop --strict to be answered anyway)")


def run_advise(pipeline_path: str, model_path: str, models_dir: str, limit_bytes: int | None,
               swap_bytes: int | None, policies: list[str] | None, mode_name: str | None,
               find_limit: bool, as_json: bool, runtime: str | None = None,
               swap_cost: str | None = None, strict: bool = False,
               batch: int | None = None) -> str:
    """What ``python -m engine advise`` prints, at ``batch`` (None: the one batch the
    mode was fitted at); bad input (and with ``strict`` a question outside the model's
    domain) raises EdgeprofError before anything is printed."""
    model = Model.read(model_path)
    mode = model.mode(mode_name, runtime)
    batch = asked_batch(mode, batch)
    device = parse_swap_cost(swap_cost, model) if swap_cost is not None else None
    pipeline = load_pipeline(pipeline_path)
    descriptions = resolve_descriptions(pipeline, description_index(models_dir),
                                        check_files=False)
    names = list(dict.fromkeys(parse_policy(p).name for p in (policies or model.policies)))
    if not names:
        raise EdgeprofError("no policies to rank: give --policies")
    networks = Networks(descriptions, batch, mode.runtime)
    problems = outside(mode, pipeline, {n: set(networks.features(n).types)
                                        for n in descriptions}, names, limit_bytes, batch)
    cv = read_cv(model_path)
    if find_limit:
        _refuse_outside(strict, mode, problems)
        rows = find_limits(mode, pipeline, networks, names)
        if as_json:
            return json.dumps({"pipeline": pipeline.name, "mode": mode.mode,
                               "runtime": mode.runtime, "batch": batch,
                               "outside_domain": problems,
                               "limits": [{"policy": p, "limit_mib": m, "makespan_s": t,
                                           "may_be_killed": _killed_at(mode, m)}
                                          for p, m, t in rows]}, indent=1)
        return format_limits(rows, pipeline, mode, batch, cv, problems)
    log_pi, source = error_interval(cv, mode, limit_bytes is not None)
    swap_log_pi, swap_source = swap_interval(cv, mode)
    advice = advise(mode, pipeline, networks, names, limit_bytes, swap_bytes, device,
                    log_pi, swap_log_pi)
    problems += unpriced_swap([a.prediction for a in advice])
    problems += unfitted_kills(model, mode, limit_bytes)
    _refuse_outside(strict, mode, problems)
    if mode.mode == "native":
        rebuilt = read_rebuilt(model_path, pipeline_path, mode.runtime, limit_bytes,
                               swap_bytes, device, batch)
        for a in advice:
            a.rebuilt = rebuilt.get(a.prediction.policy)
    attach_measured(advice, *measured_in_fit(model, mode, pipeline_path, limit_bytes, batch),
                    swap_bytes)
    kill = mode.kill_limit_bytes
    for a in advice:
        a.swap_unchecked = limit_bytes is not None and mode.swap_scale_from is None
        a.file_pressed = (swap_bytes == 0 and limit_bytes is not None
                          and not a.prediction.oom
                          and a.prediction.peak_ram_bytes > limit_bytes)
        a.kill_risk = (limit_bytes is not None and kill is not None
                       and limit_bytes <= kill and not a.prediction.oom) \
            or bool(a.killed_in) or a.file_pressed
    if as_json:
        return json.dumps({"pipeline": pipeline.name, "mode": mode.mode,
                           "runtime": mode.runtime, "batch": batch, "limit_bytes": limit_bytes,
                           "swap_bytes": swap_bytes,
                           "swap_cost_fitted": mode.swap is not None
                           and not mode.swap.unknown_why,
                           "device": asdict(device) if device is not None else None,
                           "outside_domain": problems, "interval_from": source,
                           "swap_interval_from": swap_source,
                           "policies": [{"rank": a.rank, "slowdown": a.slowdown,
                                         "makespan_pi_95": a.interval,
                                         "peak_swap_pi_95": a.swap_interval,
                                         "may_run_out_of_swap": _short_of_swap(a, swap_bytes),
                                         "may_be_killed": a.kill_risk,
                                         "all_killed_in": a.killed_in,
                                         "finished_anyway": a.finished_anyway or None,
                                         "rebuilt_from_measurements": a.rebuilt,
                                         "measured_in_fit": a.measured,
                                         "swap_measured_over": a.swap_measured_over or None,
                                         **asdict(a.prediction)} for a in advice],
                           "cross_validation": cv.get(mode.key)}, indent=1)
    return format_advice(advice, pipeline, mode, batch, limit_bytes, swap_bytes, cv, device,
                         problems, source, swap_source)

"""Whether a question lies inside what a mode's model was fitted on (``params.Domain``).

A prediction outside is an extrapolation: a network or layer type the time fit never
saw (its EXEC falls back on the fit over every layer), a policy whose runs never reached
the calibration, a part of the time model fitted with an intercept alone (it answers the
same seconds whatever the size: bulk's LOAD of a 262 MB and an 87 MB caffemodel alike;
named when it predicts at least ``MATERIAL_S`` per task),
a limit outside the limits whose runs fitted the swap costs, a batch outside the batches
fitted. ``outside`` names each;
``unpriced_swap`` names a prediction that swaps where the cost per page is unknown (no
page moved that way in the fitted runs); advise prints them, and with ``--strict``
refuses.
"""

from __future__ import annotations

from engine.model.params import ModeModel, batch_name
from engine.model.predict import Prediction
from engine.schedule.pipelines import Pipeline
from engine.schedule.policies import parse_policy
from engine.units import format_size, parse_size

# an intercept-only part is named when it predicts at least this much per task: a
# Softmax's or Dropout's microseconds are the same whatever the size, and do not matter
MATERIAL_S = 1e-3
# a part of the time model -> what it times, and which policies use it (None: all)
PARTS = {
    "init": ("INIT", None),
    "load_layer": ("a layer's LOAD", None),
    "load_whole": ("bulk's LOAD of a whole caffemodel", {"bulk"}),
    "exec_whole": ("bulk's whole forward pass", {"bulk"}),
}


def _part(mode: ModeModel, name: str):
    if name.startswith("exec_types."):
        return mode.exec_types.get(name.split(".", 1)[1])
    return getattr(mode, name)


def outside(mode: ModeModel, pipeline: Pipeline, layer_types: dict[str, set[str]],
            policies: list[str], limit_bytes: int | None, batch: int | None) -> list[str]:
    """What of this question lies outside ``mode``'s domain, one line each (empty:
    inside). ``layer_types``: each network of the pipeline -> its layer types; ``batch``:
    the question's (None: each network's deploy batch)."""
    d = mode.domain
    if d is None:
        return ["the model file records no domain (fitted by an older edgeprof): refit it"]
    out = []
    nets = sorted(set(pipeline.networks()))
    unseen = [n for n in nets if n not in d.networks]
    if unseen:
        out.append(f"network(s) {', '.join(unseen)}: never in a fitted run (fitted on "
                   f"{', '.join(d.networks)})")
    types = sorted({t for n in nets for t in layer_types.get(n, ())} - {"Input"})
    untimed = [t for t in types if t not in d.layer_types]
    if untimed:
        out.append(f"layer type(s) {', '.join(untimed)}: no time fit of their own (timed "
                   f"by the fit over every layer)")
    out += _batch_outside(d.batches, batch)
    names = [parse_policy(p).name for p in policies]
    unfitted = [p for p in names if p not in d.policies]
    if unfitted:
        out.append(f"policy(ies) {', '.join(unfitted)}: never run in the fitted campaign "
                   f"(fitted on {', '.join(d.policies)})")
    families = {parse_policy(p).family for p in names}
    for name in d.intercept_only:
        if name.startswith("exec_types."):
            layer_type = name.split(".", 1)[1]
            what, users = f"EXEC of {layer_type} layers", None
            if layer_type not in types:
                continue
        else:
            what, users = PARTS[name]
        if users is not None and not users & families:
            continue
        line = _part(mode, name)
        if line is None or line.intercept < MATERIAL_S:
            continue
        out.append(f"{what}: fitted with an intercept alone, the same time whatever the "
                   f"size ({line.intercept:.3f} s)")
    if limit_bytes is not None and not d.limits:
        out.append(f"limit {format_size(limit_bytes)}: the {mode.key} fit has no finished "
                   f"limited runs of its own, so what it predicts swapping was never checked "
                   f"against a run of its own under a limit")
    elif limit_bytes is not None:
        sizes = [parse_size(x) for x in d.limits]
        if not min(sizes) <= limit_bytes <= max(sizes):
            out.append(f"limit {format_size(limit_bytes)}: outside the limits of the "
                       f"finished runs its swap costs were fitted on ({', '.join(d.limits)})")
    return out


def _batch_outside(fitted: list[int | None], batch: int | None) -> list[str]:
    """A batch the fit never saw and cannot interpolate to: the deploy batch where it saw
    only set batches (or the other way), or a set batch outside the range of the set
    batches it saw (activations, im2col buffers and the work of every layer scale with
    the batch: the fit's lines are then extrapolated)."""
    numbers = [b for b in fitted if b is not None]
    seen = ", ".join(batch_name(b) for b in fitted)
    if batch is None:
        return ([] if None in fitted else
                [f"batch deploy (each network's own): fitted at batch(es) {seen}"])
    if not numbers:
        return [f"batch {batch}: fitted at each network's deploy batch only"]
    if not min(numbers) <= batch <= max(numbers):
        return [f"batch {batch}: outside the batches fitted ({seen}): what scales with the "
                f"batch (activations, buffers, every layer's work) is extrapolated"]
    return []


def unpriced_swap(predictions: list[Prediction]) -> list[str]:
    """The line naming the predictions (not killed) that swap at an unknown cost per
    page, if any: only a prediction that swaps needs that cost."""
    rows = [p for p in predictions if p.unpriced and not p.oom]
    if not rows:
        return []
    return [f"swap cost: {rows[0].unpriced}, and {', '.join(p.policy for p in rows)} would "
            f"swap: the slowdown is unknown (give --swap-cost)"]

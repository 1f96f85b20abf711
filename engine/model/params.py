"""The model's parameters and its file, and the features of a network's layers they are
applied to: what predicting needs, without pandas (``python -m engine advise`` answers in
well under a second). The fit that produces them is ``engine.model.fit``."""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from engine import ops
from engine.caffe import graph
from engine.caffe.splitter import Description
from engine.errors import EdgeprofError
from engine.files import parse_json, read_regular, write_text_atomic
from engine.model.memory import description_graph

MODEL_VERSION = 4  # 2: keyed by execution mode and runtime; the domain; duration spread;
# the swap cost's page size; 3: a mode without limited runs takes its runtime's sandbox
# kills (kills_from); 4: the batches fitted (batch an input)

DIGEST = "model_digest"


def model_digest(data: dict) -> str:
    """SHA-256 of a model file's fields but ``model_digest``, as sorted compact JSON
    (what a parse and a dump give back unchanged), as run records' ``record_digest``."""
    body = {k: v for k, v in data.items() if k != DIGEST}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"))
                          .encode()).hexdigest()


class ModelFileError(EdgeprofError):
    """A model file that cannot be used (missing, corrupt, another version)."""


@dataclass
class Linear:
    """seconds = intercept + sum of coef[f] x feature f (never below 0); fitted on n
    points with coefficient of determination r2."""

    intercept: float
    coef: dict[str, float] = field(default_factory=dict)
    n: int = 0
    r2: float | None = None

    def __call__(self, features: dict[str, float]) -> float:
        return max(self.intercept + sum(c * features.get(f, 0.0)
                                        for f, c in self.coef.items()), 0.0)


@dataclass
class SwapCost:
    """Seconds per page swapped in and out, from ``n`` task windows; and per major fault
    beyond the pages swapped in (file pages read again after the page cache let them go:
    fitted to keep them out of the swap costs, not predicted, since the replay has no page
    cache). A page is ``page_bytes``: the page size of the kernel that counted them. A
    cost is None (unknown, not 0) where those windows moved no such page: runs without
    swap traffic (``run.swap: 0``) say nothing of what a page costs; ``unknown_why``
    says so."""

    per_page_in_s: float | None
    per_page_out_s: float | None
    per_major_fault_s: float | None
    n: int
    source: str  # the counters it was fitted from
    page_bytes: int
    unknown_why: str = ""

    def per_byte_s(self) -> tuple[float, float]:
        """Seconds per byte swapped (in, out); an unknown cost counts 0 here, and
        ``unknown`` says whether that matters."""
        return ((self.per_page_in_s or 0.0) / self.page_bytes,
                (self.per_page_out_s or 0.0) / self.page_bytes)

    def unknown(self, pages_in: float, pages_out: float, refaults: float = 0.0) -> str:
        """Why traffic of these pages cannot be priced ("" when it can): it moves pages
        in a direction whose cost is unknown."""
        moved = {"in": (pages_in, self.per_page_in_s), "out": (pages_out, self.per_page_out_s),
                 "major faults": (refaults, self.per_major_fault_s)}
        lacking = [k for k, (pages, cost) in moved.items() if pages > 0 and cost is None]
        if not lacking:
            return ""
        return (f"the cost per page {' and '.join(lacking)} is unknown"
                f"{': ' + self.unknown_why if self.unknown_why else ''}")


@dataclass
class Domain:
    """What a mode's model was fitted on: a prediction outside it is an extrapolation
    (``engine.model.domain``)."""

    networks: list[str]
    layer_types: list[str]  # layer types with an EXEC time fit of their own
    policies: list[str]
    batches: list[int | None]  # None: each network's deploy batch
    limits: list[str]  # of the finished limited runs (none: no swap cost fitted)
    pipelines: list[str]
    # parts of the time model fitted with an intercept alone: the same seconds whatever
    # the size ("load_whole": bulk's LOAD of a whole caffemodel; "exec_types.LRN"; ...)
    intercept_only: list[str]


@dataclass
class ModeModel:
    """Everything the simulator needs for one execution mode and runtime."""

    mode: str  # native, or the sandbox that ran the runs (vm, uml): engine.model.keys
    start_rss_bytes: float  # resident at the first task's start (median over runs)
    baseline_bytes: float  # the runtime's own resident bytes (engine.model.train)
    cpus: float  # CPUs the measured child could run on
    parallel_cpus: float  # CPUs' worth of progress of concurrent tasks (engine.model.train)
    baseline_file_bytes: float  # of the runtime's start RSS, file-backed (reclaimable)
    gap_s: float
    init: Linear
    load_layer: Linear
    load_whole: Linear | None
    exec_types: dict[str, Linear]
    exec_any: Linear  # a layer type the fit never saw
    exec_whole: Linear | None
    swap: SwapCost | None
    runs: int
    pipelines: list[str]
    # the batches its runs ran at (None: each network's deploy batch): batch is an input
    # of its features and memory replay, so it predicts others (engine.model.domain)
    batches: list[int | None]
    runtime: str = "lean"  # engine.runtime: what each stage allocates and frees
    # the spread of a task's duration in the multi-worker runs (a robust sd of
    # log(duration / its median)): how far orderings of concurrent workers vary
    # (engine.model.evaluate)
    duration_sigma: float = 0.0
    # the 5 and 95 % points of (measured peak RSS - the replay's) over the training cells,
    # less their median (the baseline): how far a run's peak strays from the replay's
    # besides the orderings (what the allocator keeps of freed blocks varies)
    baseline_spread_bytes: list[float] = field(default_factory=lambda: [0.0, 0.0])
    # measured peak swap / the replay's shortfall (what does not fit under the limit),
    # median over the training cells that swapped: the kernel reclaims ahead of the
    # shortfall, so a run swaps more than it (engine.model.train.calibrate)
    swap_scale: float = 1.0
    # whose cells swap_scale was fitted on: this mode's key, another mode's of the same
    # runtime (native has no limited runs of its own), or None: no training cell swapped
    swap_scale_from: str | None = None
    # the largest limit at which a training run was OOM-killed before its first task (the
    # interpreter's and numpy's start-up): at or below it a run is killed whatever the
    # swap (engine.model.train.startup_floor); None: no such run
    startup_floor_bytes: float | None = None
    # the most swap a run killed in its start-up at or below the floor had (format_swap:
    # "max", "0", a size): a kill verdict only for a swap up to it (twenty-fifth held-out
    # pass M4: floors of swap-0 runs said "whatever the swap", and runs with swap finished)
    startup_floor_swap: str = "max"
    # the largest limit at which a training run was OOM-killed at any moment: at or below
    # it advise warns a run may be killed whatever it predicts; None: no such run
    kill_limit_bytes: float | None = None
    # the modes whose runs the two above come from, where this mode has no limited runs
    # of its own (native: a sandbox's of its runtime; engine.model.train.share_sandbox_facts)
    kills_from: list[str] = field(default_factory=list)
    # the training runs' own measurements, one dict a (pipeline, policy, limit, swap)
    # cell (engine.model.train.training_cells): what advise shows of a pipeline it was
    # fitted on
    measured: list[dict] = field(default_factory=list)
    domain: Domain | None = None

    @property
    def key(self) -> str:
        return mode_key(self.mode, self.runtime)

    def exec_model(self, layer_type: str) -> Linear:
        return self.exec_types.get(layer_type, self.exec_any)


def batch_value(batch: object) -> int | None:
    """A batch as the engine takes it: an int, or None (from None, NaN or NA) for each
    network's deploy batch."""
    try:
        return int(batch)  # type: ignore[call-overload]
    except (TypeError, ValueError):  # None and NA (TypeError), NaN (ValueError)
        return None


def batch_order(batch: object) -> int:
    """A batch's place in order: the deploy batch (None, NaN or NA) before every set one."""
    value = batch_value(batch)
    return -1 if value is None else value


def batch_name(batch: int | None) -> str:
    """How a batch reads in tables and messages: its number, or "deploy"."""
    return "deploy" if batch is None else str(batch)


def mode_key(mode: str, runtime: str) -> str:
    """How a model file names one execution mode's fit in one runtime: ``native/lean``,
    ``vm/caffe``, ..."""
    return f"{mode}/{runtime}"


@dataclass
class Model:
    modes: dict[str, ModeModel]
    policies: list[str]  # the campaign's policies: what advise ranks by default
    trained_on: dict = field(default_factory=dict)
    unfitted: dict[str, str] = field(default_factory=dict)  # mode -> why it has no fit
    version: int = MODEL_VERSION

    def mode(self, name: str | None, runtime: str | None = None) -> ModeModel:
        """The fit of execution mode ``name`` (native, a sandbox, or ``emulated`` for the
        only sandbox fitted; None: native if fitted, else the first) in ``runtime``
        (None: lean if fitted, else the only one)."""
        fitted = [(m.mode, m.runtime) for m in self.modes.values()]
        modes = list(dict.fromkeys(m for m, _ in fitted))
        if name is None:
            name = "native" if "native" in modes else (modes[0] if modes else "native")
        elif name == "emulated":
            sandboxes = [m for m in modes if m != "native"]
            name = sandboxes[0] if len(sandboxes) == 1 else name
        runtimes = [r for m, r in fitted if m == name]
        if runtime is None:
            runtime = "lean" if "lean" in runtimes or not runtimes else runtimes[0]
        key = mode_key(name, runtime)
        if key not in self.modes:
            why = self.unfitted.get(key) or ", ".join(f"{m}: {w}"
                                                     for m, w in self.unfitted.items())
            hint = (": use --mode/--runtime for one of them" if self.modes
                    else ": fit it on runs that finished")
            raise ModelFileError(f"the model has no fitted '{key}' mode (it has: "
                                 f"{', '.join(self.modes) or 'none'}"
                                 f"{'; ' + why if why else ''}){hint}")
        return self.modes[key]

    def to_json(self) -> str:
        data = asdict(self)
        data[DIGEST] = model_digest(data)  # sealed: trained_on edited by hand is refused
        return json.dumps(data, indent=1)

    def write(self, path: str | os.PathLike) -> None:
        write_text_atomic(path, self.to_json() + "\n")

    @classmethod
    def read(cls, path: str | os.PathLike) -> Model:
        path = Path(path)
        try:
            data = parse_json(read_regular(path, "model file", 64 * 2**20), finite=True)
        except (OSError, ValueError) as exc:
            raise ModelFileError(f"cannot read model file {path}: {exc}; fit one with "
                                 f"`snakemake results/model/model.json`") from None
        if not isinstance(data, dict) or data.get("version") != MODEL_VERSION:
            version = data.get("version") if isinstance(data, dict) else None
            raise ModelFileError(f"{path} is not a version {MODEL_VERSION} model file "
                                 f"(version {version!r}); refit it with this edgeprof")
        # what it was fitted on decides what score-holdout may call held out: a file
        # without its digest cannot be told from one edited by hand
        if DIGEST not in data:
            raise ModelFileError(f"{path} carries no {DIGEST} (fitted before model files "
                                 f"carried one, or edited): refit it with fit-model")
        if data[DIGEST] != model_digest(data):
            raise ModelFileError(f"{path} was edited after fitting (its content no longer "
                                 f"matches its {DIGEST}): refit it with fit-model")
        try:
            modes = {}
            for name, m in data["modes"].items():
                m = dict(m)
                for key in ("init", "load_layer", "exec_any"):
                    m[key] = Linear(**m[key])
                for key in ("load_whole", "exec_whole"):
                    m[key] = Linear(**m[key]) if m[key] is not None else None
                m["exec_types"] = {t: Linear(**v) for t, v in m["exec_types"].items()}
                m["swap"] = SwapCost(**m["swap"]) if m["swap"] is not None else None
                m["domain"] = Domain(**m["domain"]) if m.get("domain") is not None else None
                modes[name] = ModeModel(**m)
                if modes[name].key != name:
                    raise ValueError(f"mode {name!r} holds the fit of {modes[name].key!r}")
            model = cls(modes, list(data["policies"]), dict(data.get("trained_on", {})),
                        dict(data.get("unfitted", {})))
            model.check()
            return model
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ModelFileError(f"{path} is not a usable model file ({exc}); refit it") \
                from None

    def check(self) -> None:
        """Every number where the simulator can use it (ValueError otherwise): a damaged
        file must not hang or crash a prediction."""
        from engine.runtime import RUNTIMES

        for name, m in self.modes.items():
            if not isinstance(m.mode, str) or not m.mode or m.runtime not in RUNTIMES:
                raise ValueError(f"unknown execution mode or runtime {name!r}")
            _number(m.duration_sigma, f"{name}.duration_sigma", 0, high=5.0)
            lo, hi = m.baseline_spread_bytes
            _number(-lo, f"{name}.baseline_spread_bytes[0]", 0)
            _number(hi, f"{name}.baseline_spread_bytes[1]", 0)
            for field_name, low in (("start_rss_bytes", 0), ("baseline_bytes", 0),
                                    ("gap_s", 0)):
                _number(getattr(m, field_name), f"{name}.{field_name}", low)
            _number(m.cpus, f"{name}.cpus", 0, strict=True)
            _number(m.parallel_cpus, f"{name}.parallel_cpus", 0, strict=True)
            _number(m.baseline_file_bytes, f"{name}.baseline_file_bytes", 0)
            if not isinstance(m.batches, list) or not m.batches or any(
                    b is not None and (isinstance(b, bool) or not isinstance(b, int) or b < 1)
                    for b in m.batches):
                raise ValueError(f"{name}.batches is {m.batches!r}")
            lines = {"init": m.init, "load_layer": m.load_layer, "exec_any": m.exec_any,
                     "load_whole": m.load_whole, "exec_whole": m.exec_whole,
                     **{f"exec_types.{t}": v for t, v in m.exec_types.items()}}
            for what, line in lines.items():
                if line is None:
                    continue
                _number(line.intercept, f"{name}.{what}.intercept", 0)
                if not isinstance(line.coef, dict):
                    raise ValueError(f"{name}.{what}.coef is not an object")
                for feature, c in line.coef.items():
                    _number(c, f"{name}.{what}.coef.{feature}", 0)
            if m.swap is not None:
                for field_name in ("per_page_in_s", "per_page_out_s", "per_major_fault_s"):
                    if getattr(m.swap, field_name) is not None:  # None: unknown
                        _number(getattr(m.swap, field_name), f"{name}.swap.{field_name}", 0)
                size = m.swap.page_bytes
                if isinstance(size, bool) or not isinstance(size, int) or size < 512 or (
                        size & (size - 1)):
                    raise ValueError(f"{name}.swap.page_bytes is {size!r}, not a page size")
        if not all(isinstance(p, str) for p in self.policies):
            raise ValueError("policies must be names")


def _number(value: object, what: str, low: float, strict: bool = False,
            high: float = math.inf) -> None:
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
          and math.isfinite(value) and (value > low if strict else value >= low)
          and value <= high)
    if not ok:
        raise ValueError(f"{what} is {value!r}, not a number in its range")


# ---- features of a network's layers ----

# What an EXEC's time is regressed on, per layer type: MACs where the layer multiplies;
# at batch 1 a convolution over a small output and an inner product are GEMVs that read
# every weight once (weight bytes), and im2col copies the input into its scratch matrix
# (scratch bytes); the element-wise layers' FLOPs; Concat's copied elements.
EXEC_FEATURES = {
    "Convolution": ("macs", "weight_bytes", "scratch_bytes"),
    "InnerProduct": ("macs", "weight_bytes"),
    "Concat": ("elements",),
}
DEFAULT_FEATURES = ("flops",)


def layer_features(layer: graph.Layer, scratch: int) -> dict[str, float]:
    return {"macs": float(layer.macs), "flops": float(layer.flops),
            "weight_bytes": float(layer.param_bytes), "scratch_bytes": float(scratch),
            "elements": float(sum(math.prod(s) for s in layer.top_shapes))}


def exec_features(layer_type: str) -> tuple[str, ...]:
    return EXEC_FEATURES.get(layer_type, DEFAULT_FEATURES)


@dataclass(frozen=True)
class NetworkFeatures:
    types: tuple[str, ...]
    layers: tuple[dict[str, float], ...]
    weight_bytes: tuple[int, ...]
    input_bytes: int

    @property
    def total_weight_bytes(self) -> int:
        return sum(self.weight_bytes)


def network_features(desc: Description, batch: int | None) -> NetworkFeatures:
    g = description_graph(desc, batch)
    shapes: dict[str, tuple[int, ...]] = {}
    feats = []
    for layer in g.layers:
        scratch = ops.scratch_bytes(layer.type, layer.args, layer.param_shapes,
                                    [shapes[b] for b in layer.bottoms])
        shapes.update(zip(layer.tops, layer.top_shapes))
        feats.append(layer_features(layer, scratch))
    inputs = sum(4 * math.prod(s) for layer in g.layers if layer.type == "Input"
                 for s in layer.top_shapes)
    return NetworkFeatures(tuple(layer.type for layer in g.layers), tuple(feats),
                           tuple(layer.param_bytes for layer in g.layers), inputs)


def exec_layer_s(mode: ModeModel, feats: NetworkFeatures, layer: int) -> float:
    return mode.exec_model(feats.types[layer])(feats.layers[layer])


def exec_whole_s(mode: ModeModel, feats: NetworkFeatures) -> float:
    total = sum(exec_layer_s(mode, feats, i) for i in range(len(feats.types)))
    return mode.exec_whole({"layers_s": total}) if mode.exec_whole is not None else total


def load_whole_s(mode: ModeModel, feats: NetworkFeatures) -> float:
    return (mode.load_whole or mode.load_layer)({"bytes": feats.total_weight_bytes})



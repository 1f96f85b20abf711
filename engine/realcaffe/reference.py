"""Real Caffe against the engine's runtimes, stage by stage, for one network.

Both sides run the same two sequences in a fresh process (``probe.cpp`` in the bullseye
chroot for Caffe, ``engine.realcaffe.stages`` for the engine), under the measured child's
allocator settings (``engine.runner.supervise.child_env``), after a warm-up that leaves
each library's once-per-process set-up in the baseline:

- ``bulk``: construct (INIT), load the whole caffemodel, forward pass, delete;
- ``layers``: construct, then per layer its partial's load and its forward + reset.

``figures`` turns the stage records into the numbers compared, in MiB above the
process's resident set at the start (its interpreter and libraries left out).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.caffe.splitter import Description
from engine.errors import EdgeprofError
from engine.procs import preexec
from engine.realcaffe import chroot
from engine.units import MIB

MODES = ("bulk", "layers")
PYCAFFE = Path(__file__).with_name("pycaffe_run.py")


@dataclass(frozen=True)
class Stage:
    stage: str
    layer: int
    rss_kib: int
    hwm_kib: int


@dataclass
class Measured:
    """One side's stage records and output blobs (concatenated, in output order)."""

    stages: list[Stage]
    outputs: np.ndarray
    seconds: float


def _records(stdout: str) -> list[Stage]:
    out = []
    for line in stdout.splitlines():
        if line.startswith("{"):
            d = json.loads(line)
            out.append(Stage(d["stage"], d["layer"], d["rss_kib"], d["hwm_kib"]))
    if not out:
        raise EdgeprofError("no stage records in the output")
    return out


def _measured_env() -> dict[str, str]:
    from engine.runner.supervise import child_env

    env = child_env()
    return {k: env[k] for k in ("NUMPY_MADVISE_HUGEPAGE", "GLIBC_TUNABLES")}


def _inside(path: Path, data: Path) -> str:
    return f"{chroot.DATA}/{path.resolve().relative_to(data.resolve())}"


def batch_prototxt(description: str | Path, batch: int, out: Path) -> Path:
    """``description``'s deploy prototxt with every input's first axis set to ``batch``,
    as a deployment at that batch writes it (legacy ``input_dim``/``input_shape`` and
    ``Input`` layers alike), written to ``out``."""
    from engine.caffe import io

    desc = Description.load(description)
    net = io.read_prototxt(desc.resolve(desc.prototxt))
    for shape in [*net.input_shape, *(s for layer in net.layer if layer.type == "Input"
                                      for s in layer.input_param.shape)]:
        shape.dim[0] = batch
    for first in range(0, len(net.input_dim), 4):  # N, C, H, W per legacy input
        net.input_dim[first] = batch
    out.write_text(io.prototxt_text(net))
    return out


def _staged(description: str | Path, data: Path, work: Path, seed: int,
            batch: int | None = None):
    """The network's description, its deploy prototxt (at ``batch``: a copy in ``work``
    with that batch; None: the deploy batch) and whole caffemodel as the chroot sees them,
    and its input image written to ``work`` (bound at ``/out``)."""
    from engine.network import Network, input_blob

    desc = Description.load(description)
    shape = next(layer.top_shapes[0] for layer in Network(desc, batch=batch).layers
                 if layer.type == "Input")
    work.mkdir(parents=True, exist_ok=True)
    input_blob(shape, seed).tofile(work / "input.bin")
    prototxt = _inside(desc.resolve(desc.prototxt), data)
    if batch is not None:
        name = f"{desc.stem}.batch{batch}.prototxt"
        batch_prototxt(description, batch, work / name)
        prototxt = f"{chroot.OUT}/{name}"
    return desc, prototxt, _inside(desc.resolve(desc.caffemodel), data)


def measure_caffe(description: str | Path, mode: str, data: Path, work: Path,
                  seed: int = 0, cache: Path | None = None,
                  caffemodel: Path | None = None, batch: int | None = None) -> Measured:
    """Real Caffe's stage records for ``description``'s network (``probe.cpp``); its
    model files must lie under ``data`` (bound read-only); ``work`` receives the input
    and the outputs. ``caffemodel``: load this file instead of the description's (bulk),
    one under ``data`` or in ``work``; ``batch``: the net at that batch (None: the
    deploy batch)."""
    desc, prototxt, model = _staged(description, data, work, seed, batch)
    if caffemodel is not None:  # under --data, or in ``work`` (bound at /out)
        inside_work = work.resolve() in caffemodel.resolve().parents
        model = (f"{chroot.OUT}/{caffemodel.resolve().relative_to(work.resolve())}"
                 if inside_work else _inside(caffemodel, data))
    argv = [chroot.PROBE, mode, chroot.WARMUP, prototxt]
    out_name = f"{chroot.OUT}/outputs.bin"
    if mode == "bulk":
        argv += [model, f"{chroot.OUT}/input.bin", out_name]
    else:
        argv += [f"{chroot.OUT}/input.bin", out_name]
        argv += [f"{info.index}={_inside(desc.resolve(info.partial), data)}"
                 for info in desc.layers if info.partial is not None]
    t0 = time.perf_counter()
    proc = chroot.run(argv, data, work, env=_measured_env(), cache=cache)
    seconds = time.perf_counter() - t0
    return Measured(_records(proc.stdout), np.fromfile(work / "outputs.bin", np.float32),
                    seconds)


def measure_pycaffe(description: str | Path, data: Path, work: Path, seed: int = 0,
                    cache: Path | None = None, batch: int | None = None) -> Measured:
    """Real Caffe through pycaffe (``pycaffe_run.py``: after the probe's warm-up,
    construct, whole-file ``copy_from``, forward, delete, then a second net loading the
    partials one by one)."""
    desc, prototxt, model = _staged(description, data, work, seed, batch)
    partials = [_inside(desc.resolve(info.partial), data)
                for info in desc.layers if info.partial is not None]
    argv = ["python3", "-", chroot.WARMUP, prototxt, model, f"{chroot.OUT}/input.bin",
            f"{chroot.OUT}/outputs-pycaffe.bin", *partials]
    t0 = time.perf_counter()
    proc = chroot.run(argv, data, work, env={**_measured_env(), "GLOG_minloglevel": "2"},
                      cache=cache, stdin=PYCAFFE.read_text())
    seconds = time.perf_counter() - t0
    return Measured(_records(proc.stdout),
                    np.fromfile(work / "outputs-pycaffe.bin", np.float32), seconds)


def measure_engine(description: str | Path, mode: str, runtime: str, work: Path,
                   seed: int = 0, batch: int | None = None) -> Measured:
    """The engine's stage records for ``description`` under ``runtime`` (at ``batch``;
    None: the deploy batch), in a fresh process with the measured child's environment."""
    work.mkdir(parents=True, exist_ok=True)
    out = work / f"outputs-{runtime}-{mode}.npy"
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "engine.realcaffe.stages", mode, str(description),
         "--runtime", runtime, "--seed", str(seed), "--outputs", str(out),
         *([] if batch is None else ["--batch", str(batch)])],
        capture_output=True, text=True, env={**os.environ, **_measured_env()},
        preexec_fn=preexec())  # never outlives a compare killed by SIGKILL
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise EdgeprofError(f"engine stages of {description} failed: {proc.stderr.strip()}")
    return Measured(_records(proc.stdout), np.load(out), seconds)


def v2_caffemodel(description: str | Path, out: Path) -> Path:
    """``description``'s V1 caffemodel written in the V2 layout (``layer`` with string
    types, blobs with ``shape`` dims), the same weights: real Caffe loads it without
    upgrading a V1 message (the controlled twin of a V1 file)."""
    from engine.caffe import graph, io, wire
    from engine.network import Network

    desc = Description.load(description)
    deploy = io.read_prototxt(desc.resolve(desc.prototxt))
    if not len(deploy.layers):
        raise EdgeprofError(f"{desc.prototxt} is not a V1 net")
    shapes = {layer.name: layer.param_shapes for layer in Network(desc).layers}
    path = desc.resolve(desc.caffemodel)
    records = {rec.name: rec for rec in wire.scan(path)}
    v2 = type(deploy)()
    v2.CopyFrom(deploy)
    del v2.layers[:]
    v2.layer.extend(graph.upgrade_v1_layer(v1) for v1 in deploy.layers)

    def blobs_for(index: int, layer) -> list[np.ndarray]:
        rec = records.get(layer.name)
        blobs = wire.read_blobs(path, rec) if rec is not None else []
        return [b.reshape(s) for b, s in zip(blobs, shapes.get(layer.name, ()))]

    io.write_caffemodel(out, v2, blobs_for)
    return out


def figures(stages: list[Stage], mode: str) -> dict[str, float | list[float]]:
    """The compared numbers, MiB above the start: ``init`` (after construction), and for
    bulk the whole-file load's ``load_peak`` and ``load_end``, ``forward`` (after the
    forward pass); for layers ``partials_peak`` (the highest of the partial loads) and
    ``resets`` (after each layer's forward and reset, in layer order); ``delete``."""
    start = stages[0].rss_kib

    def mib(kib: int) -> float:
        return (kib - start) * 1024 / MIB

    by = {}
    for s in stages:
        by.setdefault(s.stage, []).append(s)
    out: dict[str, float | list[float]] = {"init": mib(by["init"][0].rss_kib)}
    if mode == "bulk":
        out["load_peak"] = mib(by["load"][0].hwm_kib)
        out["load_end"] = mib(by["load"][0].rss_kib)
        out["forward"] = mib(by["forward"][0].rss_kib)
    else:
        out["partials_peak"] = max(mib(s.hwm_kib) for s in by["load"])
        out["resets"] = [mib(s.rss_kib) for s in by["reset"]]
    out["delete"] = mib(by["delete"][0].rss_kib)
    return out


def reset_frees(stages: list[Stage]) -> dict[int, float]:
    """Real Caffe's ``layers`` sequence: MiB each layer's ``reset()`` gave back (the
    resident set after its forward pass less that after its reset), by layer index."""
    after_forward = {s.layer: s.rss_kib for s in stages if s.stage == "forward"}
    return {s.layer: (after_forward[s.layer] - s.rss_kib) * 1024 / MIB
            for s in stages if s.stage == "reset"}


def pycaffe_figures(stages: list[Stage]) -> dict[str, float]:
    """``measure_pycaffe``'s figures, MiB above the start (after the imports): those of
    ``figures(stages, "bulk")`` and ``partials_peak``, the highest resident set while
    the second net took the partial files (none: absent)."""
    out = figures([s for s in stages if s.stage != "partial"], "bulk")
    start = stages[0].rss_kib
    peaks = [s.hwm_kib for s in stages if s.stage == "partial"]
    if peaks:
        out["partials_peak"] = (max(peaks) - start) * 1024 / MIB
    return out  # type: ignore[return-value]


def tolerance(reference: float) -> float:
    """How far the engine's figure may be from real Caffe's: 5 % or 4 MiB, whichever is
    larger."""
    return max(0.05 * abs(reference), 4.0)


def mismatches(caffe: dict, engine: dict) -> list[str]:
    """Every compared figure of the engine outside ``tolerance`` of Caffe's, named."""
    bad = []
    for key, ref in caffe.items():
        got = engine[key]
        pairs = (list(enumerate(zip(ref, got))) if isinstance(ref, list)
                 else [(None, (ref, got))])
        if isinstance(ref, list) and len(ref) != len(got):
            bad.append(f"{key}: {len(ref)} layers in Caffe, {len(got)} in the engine")
            continue
        for i, (r, g) in pairs:
            if abs(g - r) > tolerance(r):
                where = key if i is None else f"{key}[layer {i}]"
                bad.append(f"{where}: engine {g:.1f} MiB, Caffe {r:.1f} MiB")
    return bad


def relative_error(got: np.ndarray, reference: np.ndarray) -> float:
    """max |got - reference| / max |reference| over the output blobs."""
    if got.size != reference.size:
        raise EdgeprofError(f"outputs of {got.size} and {reference.size} values")
    scale = float(np.max(np.abs(reference))) or 1.0
    return float(np.max(np.abs(got.reshape(-1) - reference.reshape(-1)))) / scale

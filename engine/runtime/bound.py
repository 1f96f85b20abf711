"""What an unconstrained run may hold at most: each network's bound in a runtime, and a
pipeline's from them. The workflow asks a cluster for it (engine.workflow.resources), and
a sandbox sizes an unconstrained run's guest by it (engine.sandbox.run)."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from engine.caffe.graph import NetGraph
from engine.ops import scratch_bytes
from engine.units import MIB

# The engine's own processes besides its networks' bytes: the measured child's Python,
# numpy and engine (the slowdown model's baseline_bytes: 43 MiB) and its supervisor,
# sampler and GNU time (61 MiB: the process tree's peak RSS less the child's, sampled
# every 10 ms over `python -m engine run`, FaceNet + GoogLeNet, linear and bulk),
# rounded up
ENGINE_BASELINE_MB = 128
PEAK_MARGIN = 1.5  # the bound is of the bytes the runtime holds; allocator and pages above


def graph_bound_bytes(g: NetGraph, runtime: str) -> tuple[int, int]:
    """(held, transient): an upper bound of the bytes one instance of network ``g`` holds
    at once in ``runtime``, and of what a task of it holds for a moment on top. Held:
    every weight and every layer's output, none freed (what Caffe 1.0 keeps; the lean
    runtime frees some), and in caffe the buffers each layer owns. Transient: the largest
    operator scratch, and in caffe a LOAD's parsed message, at most three times the
    weights (a V1 file upgraded: engine.runtime.protobuf)."""
    shapes = {top: shape for layer in g.layers for top, shape in zip(layer.tops,
                                                                     layer.top_shapes)}
    weights = 4 * g.param_count
    held = weights + sum(4 * math.prod(s) for layer in g.layers for s in layer.top_shapes)
    scratch = max(scratch_bytes(layer.type, layer.args, layer.param_shapes,
                                [shapes[b] for b in layer.bottoms]) for layer in g.layers)
    if runtime == "caffe":
        from engine.runtime.caffe import layer_buffers

        held += sum(n * np.dtype(dtype).itemsize for layer in g.layers
                    for n, dtype in layer_buffers(layer))
        return held, max(scratch, 3 * weights)
    return held, scratch


def run_bound_mb(bounds: Iterable[tuple[int, int]], workers: int) -> int:
    """MiB an unconstrained run of instances with these ``graph_bound_bytes`` may use:
    every instance's held bytes, the ``workers`` largest transients on top (one task per
    worker at once), a margin, and the engine's own processes."""
    bounds = list(bounds)
    transients = sorted((t for _, t in bounds), reverse=True)[:max(1, workers)]
    need = sum(h for h, _ in bounds) + sum(transients)
    return ENGINE_BASELINE_MB + math.ceil(PEAK_MARGIN * need / MIB)

"""One network instance at run time: INIT, per-layer LOAD and EXEC over a split model.

What each stage allocates and frees is the runtime's (``engine.runtime``: ``lean``, the
engine's own, or ``caffe``, Caffe 1.0's); this class runs the layers with the numpy
operators and holds the instance's weights and blobs. Bulk loading reads all weights
from the whole caffemodel instead of the partials.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from engine import ops
from engine.caffe import graph, io, wire
from engine.caffe.splitter import Description
from engine.errors import ModelError
from engine.runtime import DEFAULT_RUNTIME, RUNTIMES

if TYPE_CHECKING:
    from engine.runtime.caffe import CaffeRuntime
    from engine.runtime.lean import LeanRuntime

# Caffe's ImageNet BGR means, as EdgeCaffe's descriptions use for mean subtraction.
MEAN_BGR = (104.0, 117.0, 123.0)


def runtime(name: str) -> LeanRuntime | CaffeRuntime:
    """The runtime called ``name`` (one of ``engine.runtime.RUNTIMES``); imported here, by
    the only code that runs one, so a job that merely names the runtimes (an option's
    choices) does not import their code."""
    if name == "lean":
        from engine.runtime.lean import LeanRuntime
        return LeanRuntime()
    if name == "caffe":
        from engine.runtime.caffe import CaffeRuntime
        return CaffeRuntime()
    raise ValueError(f"unknown runtime {name!r}; choose one of {', '.join(RUNTIMES)}")


def synthetic_image(height: int, width: int, seed: int) -> np.ndarray:
    """A deterministic 8-bit BGR test image (H, W, 3): smooth gradients plus seeded noise,
    so every run of every policy sees the same input without shipping image files."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.stack([x / max(width - 1, 1), y / max(height - 1, 1),
                     (x + y) / max(height + width - 2, 1)], axis=-1) * 200.0
    noise = rng.integers(0, 56, size=(height, width, 3)).astype(np.float32)
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def input_blob(shape: tuple[int, ...], seed: int, touched: bool = False) -> np.ndarray:
    """The network input as EdgeCaffe fills it: image 0 of the batch holds the
    mean-subtracted image, the other N-1 images stay zero (but are still computed).
    ``touched``: the zeros are written, as Caffe's blob memory is on first use, instead
    of left to the kernel's zero page (numpy's calloc)."""
    n, c, h, w = shape
    blob = np.zeros(shape, dtype=np.float32)
    if touched:
        blob.fill(0.0)
    image = synthetic_image(h, w, seed).astype(np.float32)
    for ch in range(min(c, 3)):
        blob[0, ch] = image[:, :, ch] - MEAN_BGR[ch]
    return blob


@functools.lru_cache(maxsize=64)
def _graph_of(prototxt: str, mtime_ns: int, batch: int | None) -> graph.NetGraph:
    return graph.build_graph(io.read_prototxt(prototxt), batch=batch, source=prototxt)


def deploy_graph(prototxt: str | Path, batch: int | None) -> graph.NetGraph:
    """The runtime graph of a deploy prototxt at ``batch`` (None: the deploy batch),
    parsed once per process: instances of one network share the immutable graph (the
    mtime in the key notices an edited prototxt)."""
    path = Path(prototxt)
    return _graph_of(str(path), path.stat().st_mtime_ns, batch)


class Network:
    """A network instance built from a split model's description file."""

    def __init__(self, description: Description | str | Path, batch: int | None = None,
                 instance: str = "", runtime_name: str = DEFAULT_RUNTIME) -> None:
        self.desc = (description if isinstance(description, Description)
                     else Description.load(description))
        self.instance = instance or self.desc.network
        prototxt = self.desc.resolve(self.desc.prototxt)
        self.graph = deploy_graph(prototxt, batch)
        if len(self.graph.layers) != len(self.desc.layers):
            raise ModelError(
                f"{self.desc.path}: describes {len(self.desc.layers)} layers but "
                f"{prototxt} now has {len(self.graph.layers)}; re-run the split stage"
            )
        self.runtime = runtime(runtime_name)
        self.weights: dict[int, list[np.ndarray]] = {}
        self.blobs: dict[str, np.ndarray] = {}
        self.layer_state: dict[int, list[np.ndarray]] = {}  # caffe: what bulk layers keep
        self.layer_index = {layer.name: layer.index for layer in self.graph.layers}
        self._last_reader = self.graph.last_readers()
        self.outputs = self.graph.outputs

    @property
    def layers(self) -> tuple[graph.Layer, ...]:
        return self.graph.layers

    def init(self, seed: int = 0) -> None:
        """INIT: the runtime's allocations (caffe: ``new Net``), then the input image."""
        self.runtime.init(self)
        self.set_input(seed)

    def set_input(self, seed: int = 0) -> None:
        """Place the deterministic input image in every Input layer's tops."""
        for layer in self.graph.layers:
            if layer.type == "Input":
                for top, shape in zip(layer.tops, layer.top_shapes):
                    self.blobs[top] = input_blob(shape, seed, self.runtime.touches_memory
                                                 or wire.uml_ascending())

    def load_layer(self, index: int) -> int:
        """LOAD: read layer ``index``'s partial file; returns the bytes of weights read."""
        info = self.desc.layers[index]
        if info.partial is None:
            return 0
        path = self.desc.resolve(info.partial)
        if not path.exists():
            raise ModelError(
                f"partial file {path} of layer {index} '{info.name}' is missing; "
                "re-run the split stage"
            )
        return self.runtime.load_layer(self, index, path)

    def load_all(self) -> int:
        """Bulk LOAD: every layer's weights from the whole caffemodel, in one pass."""
        return self.runtime.load_all(self, self.desc.resolve(self.desc.caffemodel))

    def keep(self, index: int, blobs: list[np.ndarray], path: Path) -> int:
        """Hold ``blobs`` read from ``path`` as layer ``index``'s weights, checked against
        the layer's parameter shapes; returns their bytes."""
        layer = self.graph.layers[index]
        if len(blobs) != len(layer.param_shapes):
            raise ModelError(
                f"{path}: layer '{layer.name}' has {len(blobs)} blobs, expected "
                f"{len(layer.param_shapes)}"
            )
        shaped = []
        for blob, shape in zip(blobs, layer.param_shapes):
            if blob.size != int(np.prod(shape)):
                raise ModelError(
                    f"{path}: layer '{layer.name}' blob of shape {blob.shape} does not fit {shape}"
                )
            shaped.append(blob.reshape(shape))  # legacy (1,1,O,I) dims -> (O,I): a view
        self.weights[index] = shaped
        return sum(b.nbytes for b in shaped)

    def exec_layer(self, index: int, bulk: bool = False) -> None:
        """EXEC: run layer ``index``, then free what the runtime frees (lean: its weights
        and the blobs no later layer reads; caffe: the layer's own buffers, unless
        ``bulk``, Caffe's whole forward pass, which frees nothing)."""
        layer = self.graph.layers[index]
        if layer.type == "Input":
            missing = [t for t in layer.tops if t not in self.blobs]
            if missing:
                raise ModelError(f"{self.instance}: input blob(s) {missing} not set (INIT not run)")
            return
        if layer.param_shapes and index not in self.weights:
            raise ModelError(f"{self.instance}: layer {index} '{layer.name}' executed before LOAD")
        try:
            x = [self.blobs[b] for b in layer.bottoms]
        except KeyError as exc:
            raise ModelError(
                f"{self.instance}: layer {index} '{layer.name}' needs blob {exc} which is "
                "not computed yet (layers must execute in order)"
            ) from None
        tops = self._run(layer, x, self.runtime.weights_for_exec(self, index))
        for name, value in zip(layer.tops, tops):
            self.blobs[name] = value
        self.runtime.after_exec(self, layer, bulk)
        if self.runtime.keeps_activations:
            return
        for b in set(layer.bottoms):
            if self._last_reader.get(b) == index and b not in layer.tops and b not in self.outputs:
                del self.blobs[b]

    def _run(self, layer: graph.Layer, x: list[np.ndarray],
             w: list[np.ndarray]) -> list[np.ndarray]:
        a = layer.args
        t = layer.type
        if t == "Convolution":
            return [ops.convolution(x[0], w[0], w[1] if len(w) > 1 else None, **a)]
        if t == "InnerProduct":
            return [ops.inner_product(x[0], w[0], w[1] if len(w) > 1 else None, **a)]
        if t == "Pooling":
            return [ops.pooling(x[0], **a)]
        if t == "ReLU":
            # Caffe runs ReLU in place; do so unless a Split shares the array.
            in_place = layer.tops[0] == layer.bottoms[0] and not self._shared(layer.bottoms[0])
            return [ops.relu(x[0], a["negative_slope"], out=x[0] if in_place else None)]
        if t == "LRN":
            return [ops.lrn(x[0], **a)]
        if t == "Concat":
            return [ops.concat(x, a["axis"])]
        if t == "Softmax":
            return [ops.softmax(x[0], a["axis"])]
        if t == "Dropout":
            return [ops.dropout(x[0])]
        if t == "Split":
            return [ops.split(x[0]) for _ in layer.tops]
        raise ModelError(f"layer '{layer.name}': no operator for type '{t}'")

    def _shared(self, name: str) -> bool:
        arr = self.blobs[name]
        return any(v is arr for k, v in self.blobs.items() if k != name)

    def forward(self) -> dict[str, np.ndarray]:
        """Bulk EXEC: every layer in order (weights must be loaded); returns the outputs."""
        for layer in self.graph.layers:
            self.exec_layer(layer.index, bulk=True)
        return self.result()

    def result(self) -> dict[str, np.ndarray]:
        """The output blobs, as arrays of their own (nothing else of the net stays alive
        through them once the instance is dropped)."""
        return {name: np.array(self.blobs[name], copy=True) for name in self.outputs}


def run_standalone(description: Description | str | Path, seed: int = 0,
                   batch: int | None = None,
                   bulk: bool = False,
                   runtime_name: str = DEFAULT_RUNTIME) -> dict[str, np.ndarray]:
    """Load and run one network alone (layer by layer, or bulk); returns its outputs."""
    net = Network(description, batch=batch, runtime_name=runtime_name)
    net.init(seed)
    if bulk:
        net.load_all()
        return net.forward()
    for layer in net.layers:
        net.load_layer(layer.index)
        net.exec_layer(layer.index)
    return net.result()

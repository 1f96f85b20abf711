"""The Caffe-faithful runtime: Caffe 1.0's allocations under EdgeCaffe (``engine.runtime``)."""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

import numpy as np

from engine.errors import ModelError
from engine.runtime.protobuf import Message

if TYPE_CHECKING:
    from engine.caffe.graph import Layer


class CaffeRuntime:
    """Caffe 1.0's allocations under EdgeCaffe (module docstring)."""

    name = "caffe"
    keeps_activations = True
    touches_memory = True  # SyncedMemory memsets every buffer it allocates

    def init(self, net) -> None:
        # Net::Init: every parameter blob allocated and filled with the constant-0 filler
        for layer in net.layers:
            if layer.param_shapes:
                params = [np.empty(shape, np.float32) for shape in layer.param_shapes]
                for p in params:
                    p.fill(0.0)
                net.weights[layer.index] = params

    def _copy(self, net, message: Message, only: str | None) -> int:
        total = 0
        by_name = net.layer_index
        for name, blobs in message.layers.items():
            if only is not None and name != only:
                continue
            index = by_name.get(name)
            if index is None:
                continue  # CopyTrainedLayersFrom ignores layers the net does not have
            target = net.weights.get(index, [])
            layer = net.layers[index]
            if len(blobs) != len(target):
                raise ModelError(
                    f"{message.path}: layer '{name}' has {len(blobs)} blobs, expected "
                    f"{len(layer.param_shapes)}"
                )
            for src, dst in zip(blobs, target):
                if src.size != dst.size:
                    raise ModelError(
                        f"{message.path}: layer '{name}' blob of {src.size} values does not "
                        f"fit {dst.shape}"
                    )
                dst.reshape(-1)[:] = src.reshape(-1)
                total += dst.nbytes
        return total

    def load_layer(self, net, index: int, path) -> int:
        message = Message(path)
        if len(message.records) != 1:
            raise ModelError(
                f"{os.fspath(path)}: a partial caffemodel holds one layer, "
                f"found {len(message.records)}"
            )
        name = message.records[0].name
        if name != net.layers[index].name:
            raise ModelError(
                f"{os.fspath(path)}: holds layer '{name}', expected "
                f"'{net.layers[index].name}'; re-run the split stage"
            )
        try:
            return self._copy(net, message, name)
        finally:
            message.release()

    def load_all(self, net, path) -> int:
        message = Message(path)
        missing = [info.name for info in net.desc.layers
                   if info.model_index is not None and info.name not in message.layers]
        if missing:
            raise ModelError(f"{path} no longer matches its description (no layer "
                             f"{missing[0]!r}); re-run split")
        try:
            return self._copy(net, message, None)
        finally:
            message.release()

    def weights_for_exec(self, net, index: int) -> list[np.ndarray]:
        return net.weights.get(index, [])

    def after_exec(self, net, layer: Layer, bulk: bool) -> None:
        # What the layer object owns: allocated by its Forward; reset() frees it, the
        # bulk forward pass keeps it until the net is deleted.
        owned = [np.empty(n, dtype) for n, dtype in layer_buffers(layer) if n]
        for buf in owned:
            buf.fill(0)
        if bulk and owned:
            net.layer_state[layer.index] = owned


def layer_buffers(layer: Layer) -> list[tuple[int, type]]:
    """(elements, dtype) of the buffers a Caffe 1.0 layer allocates in its forward pass
    and owns (freed by the layer's reset): convolution's im2col buffer (none on the 1x1
    stride-1 unpadded path, which multiplies the input itself), max pooling's argmax
    indices (int, one per output), LRN's scale (one per input)."""
    t = layer.type
    if t == "Convolution":
        _, cg, kh, kw = layer.param_shapes[0]
        c = cg * layer.args["group"]
        (sh, sw), (ph, pw) = layer.args["stride"], layer.args["pad"]
        if (kh, kw, sh, sw, ph, pw) == (1, 1, 1, 1, 0, 0):
            return []
        _, _, oh, ow = layer.top_shapes[0]
        return [(c * kh * kw * oh * ow, np.float32)]
    if t == "Pooling" and layer.args["method"] == "max":
        return [(math.prod(layer.top_shapes[0]), np.int32)]
    if t == "LRN":
        return [(math.prod(layer.top_shapes[0]), np.float32)]
    return []

"""The lean runtime: the engine's own (``engine.runtime``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from engine.caffe import wire
from engine.errors import ModelError

if TYPE_CHECKING:
    from engine.caffe.graph import Layer


class LeanRuntime:
    """The engine's own runtime: weights live from their LOAD to their layer's EXEC."""

    name = "lean"
    keeps_activations = False
    touches_memory = False  # fresh zeros stay the kernel's zero page until written

    def init(self, net) -> None:
        pass

    def load_layer(self, net, index: int, path) -> int:
        _, blobs = wire.load_partial(path)
        return net.keep(index, blobs, path)

    def load_all(self, net, path) -> int:
        records = wire.scan(path)
        total = 0
        for info in net.desc.layers:
            if info.model_index is not None:
                if info.model_index >= len(records) or records[info.model_index].name != info.name:
                    raise ModelError(f"{path} no longer matches its description; re-run split")
                blobs = wire.read_blobs(path, records[info.model_index])
                total += net.keep(info.index, blobs, path)
        return total

    def weights_for_exec(self, net, index: int) -> list[np.ndarray]:
        return net.weights.pop(index, [])

    def after_exec(self, net, layer: Layer, bulk: bool) -> None:
        pass

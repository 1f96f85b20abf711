"""Zoo networks as real files: a deploy prototxt and a caffemodel with seeded random weights.

Weights are He-normal (std = sqrt(2 / fan_in); divided by 128 for layers that read the
raw mean-subtracted pixels, whose scale is ~128) and biases N(0, 0.01), drawn per layer
from ``SeedSequence([seed, crc32(network), layer index])``: the same seed gives the same
bytes on any machine, and activations stay O(1) through every zoo network so outputs are
non-degenerate numbers that policies can be compared on bit for bit.
"""

from __future__ import annotations

import zlib
from pathlib import Path

# numpy loads numpy.random on first use; imported here, with this module, it is loaded
# before a command's signals unwind it: a SIGTERM whose exception interrupted that import
# mid-write was lost there (the models verb wrote its whole set and exited 0)
import numpy as np
import numpy.random  # noqa: F401

from engine.caffe import graph, io, schema, zoo
from engine.files import write_text_atomic

PIXEL_SCALE = 128.0


def layer_weights(seed: int, network: str, index: int, shapes: tuple[tuple[int, ...], ...],
                  reads_pixels: bool = False) -> list[np.ndarray]:
    """The random parameter blobs of one layer (weight first, then bias)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, zlib.crc32(network.encode()), index]))
    blobs = []
    for i, shape in enumerate(shapes):
        arr = rng.standard_normal(shape, dtype=np.float32)
        if i == 0:
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
            gain = 1.0 / PIXEL_SCALE if reads_pixels else 1.0
            arr *= np.float32(gain * np.sqrt(2.0 / fan_in))
        else:
            arr *= np.float32(0.01)
        blobs.append(arr)
    return blobs


def model_layers(deploy: schema.NetParameter) -> schema.NetParameter:
    """The layer list a trained caffemodel of this deploy net would hold.

    New-style nets (an explicit Input layer) are written as Caffe's ``Net::ToProto`` does:
    every runtime layer, Split layers included, with ``phase: TEST`` (so GoogLeNet keeps
    EdgeCaffe's 152-partial indexing). Nets with legacy inputs (V1 AgeNet/GenderNet, and
    FaceNet) keep their own layer list and no input layer, like the published files."""
    net = schema.NetParameter()
    net.CopyFrom(deploy)
    if len(net.layers) or net.input:
        return net
    runtime = graph.insert_splits(graph.runtime_layers(deploy))
    del net.layer[:]
    for layer in runtime:
        copy = net.layer.add()
        copy.CopyFrom(layer)
        copy.phase = schema.PHASE_TEST
    return net


def write_zoo_model(name: str, out_dir: str | Path, seed: int) -> tuple[Path, Path]:
    """Write ``<stem>.prototxt`` and ``<stem>.caffemodel`` of zoo network ``name``."""
    entry = zoo.ZOO[name]
    deploy = zoo.deploy_net(name)
    g = graph.build_graph(deploy, source=name)
    shapes = {layer.name: layer.param_shapes for layer in g.layers}
    pixels = {t for layer in g.layers if layer.type == "Input" for t in layer.tops}
    first = {layer.name for layer in g.layers if pixels & set(layer.bottoms)}
    out_dir = Path(out_dir)
    prototxt = out_dir / f"{entry.stem}.prototxt"
    caffemodel = out_dir / f"{entry.stem}.caffemodel"
    model = model_layers(deploy)

    def blobs_for(index: int, layer) -> list[np.ndarray]:
        return layer_weights(seed, name, index, shapes.get(layer.name, ()),
                             reads_pixels=layer.name in first)

    io.write_caffemodel(caffemodel, model, blobs_for)
    write_text_atomic(prototxt, io.prototxt_text(deploy))
    return prototxt, caffemodel

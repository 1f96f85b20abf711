"""The runtime layer list of a deploy net, as Caffe builds it, with every blob's shape.

Caffe turns a deploy ``NetParameter`` into its runtime net in four steps, all reproduced
here so that layer indices match EdgeCaffe's: V1 ``layers`` are upgraded to V2 ``layer``;
legacy ``input``/``input_dim``/``input_shape`` fields become an ``Input`` layer; layers
excluded from the TEST phase are dropped; a ``Split`` layer is inserted after every blob
that more than one layer reads (GoogLeNet: 143 prototxt layers -> 152 runtime layers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from engine.caffe import schema
from engine.errors import ModelError
from engine.shapes import conv_out_dim, pool_out_dim

Shape = tuple[int, ...]

SUPPORTED_TYPES = (
    "Input", "Convolution", "Pooling", "InnerProduct", "ReLU", "LRN",
    "Concat", "Softmax", "Dropout", "Split",
)
_PARAM_FIELDS = (
    "concat_param", "convolution_param", "dropout_param", "inner_product_param",
    "lrn_param", "pooling_param", "relu_param", "softmax_param", "transform_param",
)


@dataclass(frozen=True)
class Layer:
    """One runtime layer: its wiring, operator arguments, parameter and output shapes."""

    index: int
    name: str
    type: str
    bottoms: tuple[str, ...]
    tops: tuple[str, ...]
    args: dict = field(hash=False, compare=False)
    param_shapes: tuple[Shape, ...]
    top_shapes: tuple[Shape, ...]
    macs: int
    flops: int

    @property
    def param_count(self) -> int:
        return sum(math.prod(s) for s in self.param_shapes)

    @property
    def param_bytes(self) -> int:
        return 4 * self.param_count


@dataclass(frozen=True)
class NetGraph:
    """A deploy net in runtime order; ``outputs`` are the blobs no layer consumes."""

    name: str
    layers: tuple[Layer, ...]
    outputs: tuple[str, ...]

    @property
    def param_count(self) -> int:
        return sum(layer.param_count for layer in self.layers)

    def last_readers(self) -> dict[str, int]:
        """Blob -> index of the last layer that reads it: after that layer runs, the blob
        can be freed (unless it is an output or that layer's own top)."""
        last: dict[str, int] = {}
        for layer in self.layers:
            for b in layer.bottoms:
                last[b] = layer.index
        return last

    def layer(self, name: str) -> Layer:
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise KeyError(name)


def upgrade_v1_layer(v1) -> schema.LayerParameter:
    """A V1 ``layers`` entry as a V2 ``LayerParameter`` (type enum -> type string)."""
    type_name = schema.V1_TYPE_BY_NUMBER.get(v1.type)
    if type_name is None:
        raise ModelError(f"layer '{v1.name}' has an unknown V1 layer type number {v1.type}")
    layer = schema.LayerParameter(name=v1.name, type=type_name)
    layer.bottom.extend(v1.bottom)
    layer.top.extend(v1.top)
    layer.include.extend(v1.include)
    layer.exclude.extend(v1.exclude)
    layer.blobs.extend(v1.blobs)
    for name in _PARAM_FIELDS:
        if v1.HasField(name):
            getattr(layer, name).CopyFrom(getattr(v1, name))
    return layer


def runtime_layers(net, source: str = "<net>") -> list:
    """Caffe's upgraded, TEST-filtered layer list with the implicit Input layer first."""
    if len(net.layer) and len(net.layers):
        raise ModelError(f"{source}: net mixes V1 'layers' and V2 'layer' fields")
    layers = [upgrade_v1_layer(v1) for v1 in net.layers] if len(net.layers) else list(net.layer)
    layers = [layer for layer in layers if _in_test_phase(layer)]
    _check_unique_names(layers, source)
    inputs = _legacy_input_layer(net, source)
    return ([inputs] if inputs is not None else []) + layers


def _check_unique_names(layers: list, source: str) -> None:
    """Weights go to layers by name (a caffemodel's, each partial's): two layers of one
    name would share one layer's weights, or fail on a shape that is not theirs."""
    first: dict[str, int] = {}
    for index, layer in enumerate(layers):
        if layer.name in first:
            raise ModelError(f"{source}: the layer name '{layer.name}' is duplicated "
                             f"(its layers {first[layer.name] + 1} and {index + 1}, counted "
                             f"from 1); weights are matched to layers by name: rename one")
        first[layer.name] = index


def _in_test_phase(layer) -> bool:
    test = schema.PHASE_TEST
    if layer.include:
        return any(not rule.HasField("phase") or rule.phase == test for rule in layer.include)
    return not any(rule.HasField("phase") and rule.phase == test for rule in layer.exclude)


def _legacy_input_layer(net, source: str):
    if not net.input:
        return None
    layer = schema.LayerParameter(name="input", type="Input")
    layer.top.extend(net.input)
    if net.input_shape:
        shapes = [list(s.dim) for s in net.input_shape]
    elif net.input_dim:
        if len(net.input_dim) != 4 * len(net.input):
            raise ModelError(
                f"{source}: {len(net.input)} legacy inputs need {4 * len(net.input)} "
                f"input_dim values, found {len(net.input_dim)}"
            )
        dims = list(net.input_dim)
        shapes = [dims[4 * i: 4 * i + 4] for i in range(len(net.input))]
    else:
        raise ModelError(f"{source}: legacy input {list(net.input)} has no input_dim/input_shape")
    for dims in shapes:
        layer.input_param.shape.add().dim.extend(dims)
    return layer


def insert_splits(layers: list) -> list:
    """Caffe's InsertSplits: a Split layer after each blob read by more than one layer."""
    last_top: dict[str, tuple[int, int]] = {}
    source_of: dict[tuple[int, int], tuple[int, int]] = {}
    readers: dict[tuple[int, int], int] = {}
    for i, layer in enumerate(layers):
        for j, bottom in enumerate(layer.bottom):
            if bottom not in last_top:
                raise ModelError(
                    f"layer '{layer.name}' reads blob '{bottom}' that no earlier layer produces"
                )
            src = last_top[bottom]
            source_of[(i, j)] = src
            readers[src] = readers.get(src, 0) + 1
        for j, top in enumerate(layer.top):
            last_top[top] = (i, j)
    out = []
    used: dict[tuple[int, int], int] = {}
    for i, layer in enumerate(layers):
        copy = schema.LayerParameter()
        copy.CopyFrom(layer)
        for j in range(len(copy.bottom)):
            src = source_of[(i, j)]
            if readers[src] > 1:
                k = used.get(src, 0)
                used[src] = k + 1
                src_layer = layers[src[0]]
                copy.bottom[j] = _split_blob(src_layer.name, src_layer.top[src[1]], src[1], k)
        out.append(copy)
        for j, top in enumerate(layer.top):
            n = readers.get((i, j), 0)
            if n > 1:
                split = schema.LayerParameter(
                    name=f"{top}_{layer.name}_{j}_split", type="Split"
                )
                split.bottom.append(top)
                split.top.extend(_split_blob(layer.name, top, j, k) for k in range(n))
                out.append(split)
    return out


def _split_blob(layer_name: str, blob: str, top_index: int, k: int) -> str:
    return f"{blob}_{layer_name}_{top_index}_split_{k}"


def build_graph(net, batch: int | None = None, source: str = "<net>") -> NetGraph:
    """Runtime layers of ``net`` with shapes; ``batch`` overrides the inputs' first axis."""
    layers = insert_splits(runtime_layers(net, source))
    shapes: dict[str, Shape] = {}
    consumed: set[str] = set()
    built = []
    for index, layer in enumerate(layers):
        if layer.type not in SUPPORTED_TYPES:
            raise ModelError(
                f"{source}: layer {index} '{layer.name}' has type '{layer.type}', which the "
                f"engine does not implement (supported: {', '.join(SUPPORTED_TYPES)})"
            )
        bottoms = [shapes[b] for b in layer.bottom]
        consumed.update(layer.bottom)
        try:
            args, param_shapes, top_shapes, macs, flops = _INFER[layer.type](
                layer, bottoms, batch
            )
        except (ValueError, IndexError) as exc:
            raise ModelError(f"{source}: layer {index} '{layer.name}': {exc}") from exc
        if len(top_shapes) != len(layer.top):
            raise ModelError(
                f"{source}: layer {index} '{layer.name}' declares {len(layer.top)} tops, "
                f"its type produces {len(top_shapes)}"
            )
        for top, shape in zip(layer.top, top_shapes):
            if any(d <= 0 for d in shape):
                raise ModelError(
                    f"{source}: layer {index} '{layer.name}' produces an empty blob "
                    f"'{top}' of shape {shape}"
                )
            shapes[top] = shape
        built.append(
            Layer(index, layer.name, layer.type, tuple(layer.bottom), tuple(layer.top),
                  args, tuple(param_shapes), tuple(top_shapes), macs, flops)
        )
    produced = [t for layer in built for t in layer.tops]
    outputs = tuple(dict.fromkeys(t for t in produced if t not in consumed))
    return NetGraph(net.name, tuple(built), outputs)


def _pair(values, h, w, default: int) -> tuple[int, int]:
    """Caffe's rule for repeated kernel/pad/stride with optional *_h/*_w overrides."""
    if h is not None and w is not None:
        return int(h), int(w)
    values = list(values)
    if not values:
        return default, default
    if len(values) == 1:
        return int(values[0]), int(values[0])
    if len(values) == 2:
        return int(values[0]), int(values[1])
    raise ValueError(f"expected 1 or 2 spatial values, got {values}")


def _opt(p, name):
    return getattr(p, name) if p.HasField(name) else None


def _infer_input(layer, bottoms, batch):
    shapes = []
    for s in layer.input_param.shape:
        dims = [int(d) for d in s.dim]
        if batch is not None and dims:
            dims[0] = batch
        shapes.append(tuple(dims))
    return {}, [], shapes, 0, 0


def _infer_conv(layer, bottoms, batch):
    p = layer.convolution_param
    (n, c, h, w) = _four_d(bottoms[0])
    kh, kw = _pair(p.kernel_size, _opt(p, "kernel_h"), _opt(p, "kernel_w"), 0)
    ph, pw = _pair(p.pad, _opt(p, "pad_h"), _opt(p, "pad_w"), 0)
    sh, sw = _pair(p.stride, _opt(p, "stride_h"), _opt(p, "stride_w"), 1)
    dh, dw = _pair(p.dilation, None, None, 1)
    if kh <= 0 or kw <= 0:
        raise ValueError("convolution needs kernel_size (or kernel_h and kernel_w)")
    if p.axis != 1:
        raise ValueError(f"convolution axis {p.axis} is not supported (only 1)")
    out, group = int(p.num_output), int(p.group)
    if out <= 0 or c % group or out % group:
        raise ValueError(
            f"num_output {out} and input channels {c} must both be positive multiples "
            f"of group {group}"
        )
    oh, ow = conv_out_dim(h, kh, sh, ph, dh), conv_out_dim(w, kw, sw, pw, dw)
    params = [(out, c // group, kh, kw)] + ([(out,)] if p.bias_term else [])
    macs = n * out * oh * ow * (c // group) * kh * kw
    args = dict(stride=(sh, sw), pad=(ph, pw), group=group, dilation=(dh, dw))
    return args, params, [(n, out, oh, ow)], macs, 2 * macs


def _infer_pool(layer, bottoms, batch):
    p = layer.pooling_param
    (n, c, h, w) = _four_d(bottoms[0])
    method = {0: "max", 1: "ave"}.get(p.pool)
    if method is None:
        raise ValueError("STOCHASTIC pooling is not supported")
    if p.global_pooling:
        kh, kw, sh, sw, ph, pw = h, w, 1, 1, 0, 0
    else:
        kh, kw = _pair([p.kernel_size] if p.HasField("kernel_size") else [],
                       _opt(p, "kernel_h"), _opt(p, "kernel_w"), 0)
        sh, sw = _pair([p.stride], _opt(p, "stride_h"), _opt(p, "stride_w"), 1)
        ph, pw = _pair([p.pad], _opt(p, "pad_h"), _opt(p, "pad_w"), 0)
        if kh <= 0 or kw <= 0:
            raise ValueError("pooling needs kernel_size (or kernel_h/kernel_w, or global)")
    ceil_mode = p.round_mode == 0
    oh = pool_out_dim(h, kh, sh, ph, ceil_mode)
    ow = pool_out_dim(w, kw, sw, pw, ceil_mode)
    args = dict(method=method, kernel=(kh, kw), stride=(sh, sw), pad=(ph, pw),
                global_pooling=bool(p.global_pooling), ceil_mode=ceil_mode)
    return args, [], [(n, c, oh, ow)], 0, n * c * oh * ow * kh * kw


def _infer_ip(layer, bottoms, batch):
    p = layer.inner_product_param
    shape = bottoms[0]
    axis = p.axis if p.axis >= 0 else len(shape) + p.axis
    outer, k, out = math.prod(shape[:axis]), math.prod(shape[axis:]), int(p.num_output)
    if out <= 0:
        raise ValueError("inner product needs a positive num_output")
    weight = (k, out) if p.transpose else (out, k)
    params = [weight] + ([(out,)] if p.bias_term else [])
    macs = outer * out * k
    return (dict(axis=axis, transpose=bool(p.transpose)), params,
            [tuple(shape[:axis]) + (out,)], macs, 2 * macs)


def _infer_relu(layer, bottoms, batch):
    slope = float(layer.relu_param.negative_slope)
    return dict(negative_slope=slope), [], [bottoms[0]], 0, math.prod(bottoms[0])


def _infer_lrn(layer, bottoms, batch):
    p = layer.lrn_param
    if p.norm_region != 0:
        raise ValueError("LRN WITHIN_CHANNEL is not supported (only ACROSS_CHANNELS)")
    _four_d(bottoms[0])
    args = dict(local_size=int(p.local_size), alpha=float(p.alpha), beta=float(p.beta),
                k=float(p.k))
    return args, [], [bottoms[0]], 0, math.prod(bottoms[0]) * (int(p.local_size) + 3)


def _infer_concat(layer, bottoms, batch):
    p = layer.concat_param
    axis = p.concat_dim if p.HasField("concat_dim") and not p.HasField("axis") else p.axis
    axis = axis if axis >= 0 else len(bottoms[0]) + axis
    first = bottoms[0]
    for b in bottoms[1:]:
        if len(b) != len(first) or any(
            x != y for i, (x, y) in enumerate(zip(b, first)) if i != axis
        ):
            raise ValueError(f"concat inputs {bottoms} differ outside axis {axis}")
    out = list(first)
    out[axis] = sum(b[axis] for b in bottoms)
    return dict(axis=axis), [], [tuple(out)], 0, 0


def _infer_softmax(layer, bottoms, batch):
    axis = layer.softmax_param.axis
    axis = axis if axis >= 0 else len(bottoms[0]) + axis
    return dict(axis=axis), [], [bottoms[0]], 0, 3 * math.prod(bottoms[0])


def _infer_identity(layer, bottoms, batch):
    return {}, [], [bottoms[0]] * len(layer.top), 0, 0


def _four_d(shape: Shape) -> tuple[int, int, int, int]:
    if len(shape) != 4:
        raise ValueError(f"expects a 4-D (N, C, H, W) input, got shape {shape}")
    return shape  # type: ignore[return-value]


_INFER = {
    "Input": _infer_input,
    "Convolution": _infer_conv,
    "Pooling": _infer_pool,
    "InnerProduct": _infer_ip,
    "ReLU": _infer_relu,
    "LRN": _infer_lrn,
    "Concat": _infer_concat,
    "Softmax": _infer_softmax,
    "Dropout": _infer_identity,
    "Split": _infer_identity,
}

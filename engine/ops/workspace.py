"""What each operator allocates besides its output, from the shapes alone: the model's
memory replay (``engine.model.memory``) needs it, and it is a fact of the operators'
code, so it lives beside them (``tests/unit/test_ops.py`` checks every formula against what
tracemalloc sees numpy allocate). Left out: numpy's iterator buffers, at most 8192
elements per buffered operand of one ufunc or copy (32 KiB in float32).
"""

from __future__ import annotations

import math

from .pooling import _padded_extent

Shape = tuple[int, ...]
F32 = 4


def aliases_input(layer_type: str, in_place_relu: bool) -> bool:
    """Whether the layer's output is its input array itself (no allocation): Split and
    Dropout always, ReLU when Caffe runs it in place (top == bottom, not shared)."""
    return layer_type in ("Split", "Dropout") or (layer_type == "ReLU" and in_place_relu)


def scratch_bytes(layer_type: str, args: dict, param_shapes: tuple[Shape, ...],
                  in_shapes: list[Shape]) -> int:
    """Bytes of the temporaries the operator holds while it runs, besides its inputs and
    its output; freed when it returns."""
    if layer_type == "Convolution":
        n, c, h, w = in_shapes[0]
        _, _, kh, kw = param_shapes[0]
        (sh, sw), (ph, pw) = args["stride"], args["pad"]
        if (kh, kw, sh, sw, ph, pw) == (1, 1, 1, 1, 0, 0):
            return 0  # the 1x1 fast path multiplies the input itself
        oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
        padded = c * (h + 2 * ph) * (w + 2 * pw) if ph or pw else 0
        return F32 * (padded + c * kh * kw * oh * ow)
    if layer_type == "Pooling":
        if args["global_pooling"]:
            return 0
        n, c, h, w = in_shapes[0]
        rows, cols = _padded_extent(h, w, args["kernel"], args["stride"], args["pad"],
                                    args["ceil_mode"])
        return F32 * n * c * rows * cols if (rows, cols) != (h, w) else 0
    if layer_type == "LRN":
        n, c, h, w = in_shapes[0]
        squares = n * (c + args["local_size"] - 1) * h * w
        # beta 0.75 takes a square root of the scale into a second buffer
        return F32 * (squares + (n * c * h * w if args["beta"] == 0.75 else 0))
    if layer_type == "Softmax":
        shape = in_shapes[0]
        return 2 * F32 * (math.prod(shape) // shape[args["axis"]])  # max and sum
    if layer_type == "ReLU" and args["negative_slope"] != 0.0:
        return F32 * math.prod(in_shapes[0])  # the negative part
    return 0

"""Caffe InnerProduct layer (forward)."""

from __future__ import annotations

import math

import numpy as np

from ._util import as_f32, blas_ready


def inner_product(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None,
    axis: int = 1,
    transpose: bool = False,
) -> np.ndarray:
    """Fully connected layer: flattens axes >= `axis`, then computes x @ W.T + b.

    weight is (O, I), or (I, O) when `transpose` is set (Caffe's `transpose` param).
    Returns float32 of shape x.shape[:axis] + (O,).
    """
    op = "inner_product"
    x = as_f32(x, "input", op)
    # Contiguous aligned float32 weight: matmul hands its transposed view straight to sgemm/sgemv.
    weight = blas_ready(as_f32(weight, "weight", op, ndim=2))
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"{op}: axis {axis} out of range for input of rank {x.ndim}")
    axis %= x.ndim
    lead = x.shape[:axis]
    m = math.prod(lead)
    k = math.prod(x.shape[axis:])
    w_t = weight if transpose else weight.T  # (I, O) view, no copy
    if w_t.shape[0] != k:
        layout = "(I, O)" if transpose else "(O, I)"
        raise ValueError(
            f"{op}: weight {layout} has shape {weight.shape} but input flattens to "
            f"{k} features from axis {axis}"
        )
    o = w_t.shape[1]
    if bias is not None:
        bias = as_f32(bias, "bias", op)
        if bias.shape != (o,):
            raise ValueError(f"{op}: bias has shape {bias.shape} but there are {o} outputs")
    x2 = blas_ready(x).reshape(m, k)
    out = np.empty((m, o), dtype=np.float32)
    np.matmul(x2, w_t, out=out)
    if bias is not None:
        out += bias
    return out.reshape(*lead, o)

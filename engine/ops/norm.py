"""Caffe LRN (ACROSS_CHANNELS) and Softmax layers (forward)."""

from __future__ import annotations

import numpy as np

from ._util import as_f32


def lrn(
    x: np.ndarray,
    local_size: int = 5,
    alpha: float = 1.0,
    beta: float = 0.75,
    k: float = 1.0,
) -> np.ndarray:
    """Caffe ACROSS_CHANNELS local response normalisation on NCHW input.

    out = x * (k + alpha / local_size * sum of x^2 over local_size channels centred on c,
    zero-padded at the channel ends) ** -beta.
    """
    op = "lrn"
    x = as_f32(x, "input", op, ndim=4)
    if local_size < 1 or local_size % 2 == 0:
        # Caffe requires an odd size so the window is centred on the channel.
        raise ValueError(f"{op}: local_size must be a positive odd number, got {local_size}")
    n, c, h, w = x.shape
    pre = (local_size - 1) // 2
    # every element written before it is read: a read of a never-written page maps the
    # zero page, one host mapping per page in a user-mode Linux guest (docs/sandboxes.md)
    sq = np.empty((n, c + local_size - 1, h, w), dtype=np.float32)
    sq[:, :pre] = 0.0
    sq[:, pre + c :] = 0.0
    np.square(x, out=sq[:, pre : pre + c])
    # Window sum as local_size shifted adds: for Caffe-sized windows this is several times
    # faster than cumsum along axis 1 and has no cumsum cancellation error.
    scale = sq[:, 0:c].copy()
    for i in range(1, local_size):
        scale += sq[:, i : i + c]
    scale *= np.float32(alpha / local_size)
    scale += np.float32(k)
    if beta == 0.75:
        # s**-0.75 == 1 / (sqrt(s) * sqrt(sqrt(s))); sqrt is much cheaper than pow.
        root = np.sqrt(scale, out=scale)
        root *= np.sqrt(root)
        return np.divide(x, root, out=root)
    np.power(scale, np.float32(-beta), out=scale)
    return np.multiply(x, scale, out=scale)


def softmax(x: np.ndarray, axis: int = 1) -> np.ndarray:
    """Numerically stable softmax along `axis` (max subtracted before exp)."""
    x = as_f32(x, "input", "softmax")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"softmax: axis {axis} out of range for input of rank {x.ndim}")
    out = x - x.max(axis=axis, keepdims=True)
    np.exp(out, out=out)
    out /= out.sum(axis=axis, keepdims=True)
    return out

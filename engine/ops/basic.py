"""Caffe element-wise and blob-plumbing layers: ReLU, Concat, Dropout, Split."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._util import as_f32


def relu(x: np.ndarray, negative_slope: float = 0.0, out: np.ndarray | None = None) -> np.ndarray:
    """Caffe ReLU: max(x, 0) + negative_slope * min(x, 0).

    Pass out=x to run in place, as Caffe does for ReLU layers whose top == bottom.
    """
    x = as_f32(x, "input", "relu")
    if out is not None and (out.shape != x.shape or out.dtype != np.float32):
        raise ValueError(
            f"relu: out must be float32 with shape {x.shape}, got {out.dtype} {out.shape}"
        )
    if negative_slope == 0.0:
        return np.maximum(x, np.float32(0.0), out=out)
    # Take the negative part before `out` (possibly x itself) is overwritten.
    neg = np.minimum(x, np.float32(0.0))
    neg *= np.float32(negative_slope)
    res = np.maximum(x, np.float32(0.0), out=out)
    res += neg
    return res


def concat(xs: Sequence[np.ndarray], axis: int = 1) -> np.ndarray:
    """Concatenate blobs along `axis`; all other dimensions must match."""
    if len(xs) == 0:
        raise ValueError("concat: need at least one input")
    arrs = [as_f32(a, f"input {i}", "concat") for i, a in enumerate(xs)]
    ref = arrs[0]
    if not -ref.ndim <= axis < ref.ndim:
        raise ValueError(f"concat: axis {axis} out of range for input of rank {ref.ndim}")
    ax = axis % ref.ndim
    for i, a in enumerate(arrs[1:], start=1):
        same_rest = a.shape[:ax] + a.shape[ax + 1 :] == ref.shape[:ax] + ref.shape[ax + 1 :]
        if a.ndim != ref.ndim or not same_rest:
            raise ValueError(
                f"concat: input {i} has shape {a.shape}, incompatible with input 0 shape "
                f"{ref.shape} for concatenation along axis {axis}"
            )
    return np.concatenate(arrs, axis=ax)


def dropout(x: np.ndarray) -> np.ndarray:
    """Inference-time Dropout is the identity (Caffe scales at train time): returns x itself."""
    return x


def split(x: np.ndarray) -> np.ndarray:
    """Caffe Split shares its bottom blob with every top: returns x itself."""
    return x

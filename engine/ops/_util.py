"""Small shared helpers for the ops package."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

IntPair = int | Sequence[int]


def pair(value: IntPair, name: str, op: str) -> tuple[int, int]:
    """Normalise an int or 2-sequence to an (h, w) tuple of ints."""
    if isinstance(value, (int, np.integer)):
        return int(value), int(value)
    vals = tuple(int(v) for v in value)
    if len(vals) != 2:
        raise ValueError(f"{op}: {name} must be an int or a pair (h, w), got {value!r}")
    return vals[0], vals[1]


def as_f32(x: np.ndarray, name: str, op: str, ndim: int | None = None) -> np.ndarray:
    """View `x` as float32 (copying only if the dtype differs) and check its rank."""
    arr = np.asarray(x, dtype=np.float32)
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{op}: {name} must be {ndim}-D, got shape {arr.shape}")
    return arr


def blas_ready(x: np.ndarray) -> np.ndarray:
    """float32, C-contiguous and aligned, so numpy's matmul can hand it to BLAS.

    Unaligned arrays (e.g. np.frombuffer at an odd offset into a model file) make numpy
    fall back to its slow non-BLAS matmul loop; this copies only when needed.
    """
    return np.require(x, dtype=np.float32, requirements=("C", "A"))

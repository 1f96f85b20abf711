"""Caffe Pooling layer (forward): MAX and AVE with Caffe's exact window rules."""

from __future__ import annotations

import numpy as np

from engine.shapes import pool_out_dim

from ._util import IntPair, as_f32, pair


def _padded_extent(h: int, w: int, kernel: IntPair, stride: IntPair, pad: IntPair,
                   ceil_mode: bool) -> tuple[int, int]:
    """(rows, cols) of the padded buffer the windows read; (h, w) when the input itself
    will do (no border needed)."""
    (kh, kw), (sh, sw), (ph, pw) = (pair(v, name, "pooling") for v, name in
                                    ((kernel, "kernel"), (stride, "stride"), (pad, "pad")))
    rows = (pool_out_dim(h, kh, sh, ph, ceil_mode) - 1) * sh + kh  # the last window's reach
    cols = (pool_out_dim(w, kw, sw, pw, ceil_mode) - 1) * sw + kw
    if ph == 0 and pw == 0 and rows <= h and cols <= w:
        return h, w
    return max(rows, ph + h), max(cols, pw + w)


def _padded(x: np.ndarray, ph: int, pw: int, extent: tuple[int, int], fill: float) -> np.ndarray:
    """Return x placed at (ph, pw) in a spatial buffer of ``extent`` filled with `fill`.

    Returns x itself when the extent is x's own, avoiding a copy. Windows can run past
    H + pad in ceil mode, so the buffer may also be cropped or extended on the far side.
    """
    n, c, h, w = x.shape
    if extent == (h, w):
        return x
    buf = np.empty((n, c, *extent), dtype=np.float32)
    # Fill only the border strips, then copy the interior once.
    buf[:, :, :ph] = fill
    buf[:, :, ph + h :] = fill
    buf[:, :, ph : ph + h, :pw] = fill
    buf[:, :, ph : ph + h, pw + w :] = fill
    buf[:, :, ph : ph + h, pw : pw + w] = x
    return buf


def _edges(size: int, kernel: int, stride: int, pad: int, out: int) -> np.ndarray:
    """Caffe AVE divisor extent per output index: window clipped to size + pad only."""
    start = np.arange(out) * stride - pad
    end = np.minimum(start + kernel, size + pad)
    return (end - start).astype(np.float32)


def pooling(
    x: np.ndarray,
    method: str = "max",
    kernel: IntPair | None = None,
    stride: IntPair = (1, 1),
    pad: IntPair = (0, 0),
    global_pooling: bool = False,
    ceil_mode: bool = True,
) -> np.ndarray:
    """Caffe MAX / AVE pooling on float32 NCHW input.

    Output size follows `pool_out_dim` (ceil by default). MAX ignores padding cells;
    AVE sums valid cells but divides by the window size clipped only to size + pad,
    exactly as Caffe does. `global_pooling` pools the whole H x W plane to 1 x 1.
    """
    op = "pooling"
    x = as_f32(x, "input", op, ndim=4)
    method = method.lower()
    if method not in ("max", "ave"):
        raise ValueError(f"{op}: method must be 'max' or 'ave', got {method!r}")
    n, c, h, w = x.shape
    sh, sw = pair(stride, "stride", op)
    ph, pw = pair(pad, "pad", op)
    if global_pooling:
        if (ph, pw) != (0, 0) or (sh, sw) != (1, 1):
            raise ValueError(f"{op}: global pooling requires pad 0 and stride 1")
        # Plain reductions are both faster and exact for the single full window.
        if method == "max":
            return x.max(axis=(2, 3), keepdims=True)
        return x.mean(axis=(2, 3), keepdims=True, dtype=np.float32)
    if kernel is None:
        raise ValueError(f"{op}: kernel size is required unless global_pooling is set")
    kh, kw = pair(kernel, "kernel", op)
    if kh < 1 or kw < 1:
        raise ValueError(f"{op}: kernel must be >= 1, got {(kh, kw)}")
    if sh < 1 or sw < 1:
        raise ValueError(f"{op}: stride must be >= 1, got {(sh, sw)}")
    if ph < 0 or pw < 0 or ph >= kh or pw >= kw:
        # Caffe CHECKs pad < kernel; otherwise a window could lie wholly in padding.
        raise ValueError(f"{op}: pad {(ph, pw)} must be >= 0 and smaller than kernel {(kh, kw)}")
    oh = pool_out_dim(h, kh, sh, ph, ceil_mode)
    ow = pool_out_dim(w, kw, sw, pw, ceil_mode)
    if oh < 1 or ow < 1:
        raise ValueError(f"{op}: kernel {(kh, kw)} does not fit input {(h, w)} with pad {(ph, pw)}")

    # -inf padding means padding cells never win a max; zero padding adds nothing to a sum.
    extent = _padded_extent(h, w, (kh, kw), (sh, sw), (ph, pw), ceil_mode)
    buf = _padded(x, ph, pw, extent, -np.inf if method == "max" else 0.0)
    hspan = (oh - 1) * sh + 1
    wspan = (ow - 1) * sw + 1
    out = np.empty((n, c, oh, ow), dtype=np.float32)
    reduce = np.maximum if method == "max" else np.add
    np.copyto(out, buf[:, :, 0:hspan:sh, 0:wspan:sw])
    for i in range(kh):
        for j in range(kw):
            if i or j:
                reduce(out, buf[:, :, i : i + hspan : sh, j : j + wspan : sw], out=out)
    if method == "ave":
        out /= np.multiply.outer(_edges(h, kh, sh, ph, oh), _edges(w, kw, sw, pw, ow))
    return out

"""Caffe Convolution layer (forward) via im2col + BLAS matmul."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from engine.shapes import conv_out_dim

from ._util import IntPair, as_f32, blas_ready, pair


def convolution(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None,
    stride: IntPair = (1, 1),
    pad: IntPair = (0, 0),
    group: int = 1,
    dilation: IntPair = (1, 1),
) -> np.ndarray:
    """2-D cross-correlation with Caffe semantics on float32 NCHW input.

    x: (N, C, H, W); weight: (O, C // group, kh, kw); bias: (O,) or None.
    Returns (N, O, OH, OW) float32 with OH/OW from `conv_out_dim`.
    """
    op = "convolution"
    x = as_f32(x, "input", op, ndim=4)
    # Contiguous + aligned so per-group weight slices are row blocks BLAS can use directly.
    weight = blas_ready(as_f32(weight, "weight", op, ndim=4))
    sh, sw = pair(stride, "stride", op)
    ph, pw = pair(pad, "pad", op)
    dh, dw = pair(dilation, "dilation", op)
    if (dh, dw) != (1, 1):
        raise ValueError(f"{op}: dilation {(dh, dw)} is not supported (only dilation 1)")
    if sh < 1 or sw < 1:
        raise ValueError(f"{op}: stride must be >= 1, got {(sh, sw)}")
    if ph < 0 or pw < 0:
        raise ValueError(f"{op}: pad must be >= 0, got {(ph, pw)}")
    group = int(group)
    n, c, h, w = x.shape
    o, cg, kh, kw = weight.shape
    if group < 1:
        raise ValueError(f"{op}: group must be >= 1, got {group}")
    if c % group:
        raise ValueError(f"{op}: input has {c} channels, not divisible by group {group}")
    if o % group:
        raise ValueError(f"{op}: weight has {o} output channels, not divisible by group {group}")
    if cg * group != c:
        raise ValueError(
            f"{op}: weight has {cg} input channels per group but input has {c} channels "
            f"with group {group}"
        )
    if kh < 1 or kw < 1:
        raise ValueError(f"{op}: kernel must be >= 1, got {(kh, kw)}")
    if bias is not None:
        bias = as_f32(bias, "bias", op)
        if bias.shape != (o,):
            raise ValueError(
                f"{op}: bias has shape {bias.shape} but weight has {o} output channels"
            )
    oh = conv_out_dim(h, kh, sh, ph)
    ow = conv_out_dim(w, kw, sw, pw)
    if oh < 1 or ow < 1:
        raise ValueError(f"{op}: kernel {(kh, kw)} does not fit input {(h, w)} with pad {(ph, pw)}")

    og = o // group
    k = cg * kh * kw  # rows of the im2col matrix per group
    w2 = weight.reshape(o, k)
    # Single preallocated output; each matmul writes straight into a contiguous slice.
    out = np.empty((n, o, oh * ow), dtype=np.float32)

    if kh == 1 and kw == 1 and sh == 1 and sw == 1 and ph == 0 and pw == 0:
        # 1x1 fast path: the input already is the column matrix, no im2col needed.
        xc = blas_ready(x).reshape(n, c, h * w)
        for i in range(n):
            for g in range(group):
                np.matmul(
                    w2[g * og : (g + 1) * og],
                    xc[i, g * cg : (g + 1) * cg],
                    out=out[i, g * og : (g + 1) * og],
                )
    else:
        # Zero border written once (written, not calloc'd: a read of a never-written page
        # maps the zero page, a host mapping per page under user-mode Linux); only the
        # interior is refreshed per batch item.
        padded = None
        if ph or pw:
            padded = np.empty((c, h + 2 * ph, w + 2 * pw), dtype=np.float32)
            padded[:, :ph] = padded[:, h + ph :] = 0.0
            padded[:, :, :pw] = padded[:, :, w + pw :] = 0.0
        cols = np.empty((c * kh * kw, oh * ow), dtype=np.float32)
        cols5 = cols.reshape(c, kh, kw, oh, ow)
        for i in range(n):
            if padded is not None:
                padded[:, ph : ph + h, pw : pw + w] = x[i]
                src = padded
            else:
                src = x[i]
            # (C, OH, OW, kh, kw) strided view; one copy reorders it into im2col layout.
            win = sliding_window_view(src, (kh, kw), axis=(1, 2))[:, ::sh, ::sw]
            np.copyto(cols5, win.transpose(0, 3, 4, 1, 2))
            for g in range(group):
                np.matmul(
                    w2[g * og : (g + 1) * og],
                    cols[g * k : (g + 1) * k],
                    out=out[i, g * og : (g + 1) * og],
                )

    if bias is not None:
        out += bias[:, None]
    return out.reshape(n, o, oh, ow)

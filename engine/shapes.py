"""Caffe output-size rules for convolution and pooling: what a network graph needs of its
operators (``engine.caffe.graph``) without importing them (and numpy: a run's supervisor
never does)."""

from __future__ import annotations


def conv_out_dim(size: int, kernel: int, stride: int, pad: int, dilation: int = 1) -> int:
    """Caffe convolution output size: floor((size + 2*pad - extent) / stride) + 1."""
    extent = dilation * (kernel - 1) + 1
    return (size + 2 * pad - extent) // stride + 1


def pool_out_dim(size: int, kernel: int, stride: int, pad: int, ceil_mode: bool = True) -> int:
    """Caffe pooling output size (ceil rounding by default), with Caffe's pad correction."""
    span = size + 2 * pad - kernel
    # Integer ceil/floor: avoids float rounding surprises that float ceil() could give.
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    # Caffe drops a last window that would start inside the bottom/right padding.
    if pad > 0 and (out - 1) * stride >= size + pad:
        out -= 1
    return out

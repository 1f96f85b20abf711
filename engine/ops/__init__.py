"""Caffe-semantics forward operators on float32 NCHW numpy arrays."""

from .basic import concat, dropout, relu, split
from .conv import convolution
from .dense import inner_product
from .norm import lrn, softmax
from .pooling import pooling
from .shapes import conv_out_dim, pool_out_dim
from .workspace import aliases_input, scratch_bytes

__all__ = [
    "aliases_input",
    "concat",
    "conv_out_dim",
    "convolution",
    "dropout",
    "inner_product",
    "lrn",
    "pool_out_dim",
    "pooling",
    "relu",
    "scratch_bytes",
    "softmax",
    "split",
]

"""Caffe-semantics forward operators on float32 NCHW numpy arrays."""

from .basic import concat, dropout, relu, split
from .conv import convolution
from .dense import inner_product
from .norm import lrn, softmax
from .pooling import pooling
from .workspace import aliases_input, scratch_bytes

__all__ = [
    "aliases_input",
    "concat",
    "convolution",
    "dropout",
    "inner_product",
    "lrn",
    "pooling",
    "relu",
    "scratch_bytes",
    "softmax",
    "split",
]

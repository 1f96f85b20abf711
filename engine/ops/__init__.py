"""Caffe-semantics forward operators on float32 NCHW numpy arrays.

Each is imported where first used (PEP 562), so that a process that needs only the shape
rules or the scratch sizes (a run's supervisor, through engine.caffe.graph) never
imports numpy: 0.08 s of a native run's start, 0.37 s of a user-mode Linux one's
(docs/performance.md)."""

from __future__ import annotations

import importlib
from typing import Any

_HOME = {"concat": "basic", "dropout": "basic", "relu": "basic", "split": "basic",
         "convolution": "conv", "inner_product": "dense", "lrn": "norm", "softmax": "norm",
         "pooling": "pooling", "conv_out_dim": "shapes", "pool_out_dim": "shapes",
         "aliases_input": "workspace", "scratch_bytes": "workspace"}

__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
    globals()[name] = value  # once: later lookups find it without this function
    return value

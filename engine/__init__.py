"""edgeprof engine: multi-DNN layer-by-layer inference and memory measurement."""

__version__ = "0.1.0"

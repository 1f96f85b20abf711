"""edgeprof engine: multi-DNN layer-by-layer inference and memory measurement."""

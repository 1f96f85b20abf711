"""Caffe's files: the prototxt and caffemodel formats (``schema``, ``io``, ``wire``), a
deploy graph (``graph``), the zoo's exact architectures and their seeded weights (``zoo``,
``generate``), and the per-layer split (``splitter``)."""

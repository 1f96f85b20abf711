"""What a network instance allocates and frees at each stage: the two runtime modes.

``lean`` is the engine's own: INIT allocates nothing, a LOAD reads a layer's packed floats
straight into aligned arrays (``engine.caffe.wire``), an EXEC frees the layer's weights
and every blob no later layer reads.

``caffe`` allocates and frees as Caffe 1.0 does under EdgeCaffe, stage by stage, as
measured against real Caffe (``engine/realcaffe/probe.cpp``, compared with this mode by
``tests/integration/caffe/test_real_caffe.py``):

- INIT (``new Net(prototxt, TEST)``): every parameter blob is allocated and filled (the
  deploy nets' default filler, constant 0, writes every page). Activations are not
  allocated yet (Caffe's ``SyncedMemory`` allocates on first write).
- LOAD (``CopyTrainedLayersFrom``, one partial or the whole caffemodel): the file is
  parsed into a ``NetParameter`` message first. Each blob's packed floats grow a
  protobuf ``RepeatedField`` chunk by chunk as the stream delivers them (capacity
  doubling, the old buffer copied and freed at each step), so a blob's parse briefly
  holds up to twice its size. A V1 file (``layers``, the Levi-Hassner and SoS-AlexNet
  caffemodels) is then upgraded: ``UpgradeNetAsNeeded`` copies the whole message
  (``NetParameter original_param(*param)``) and ``UpgradeV1Net`` copies every blob
  again into the new V2 layers while the cleared V1 layers keep their buffers: three
  times the weights at once. The blobs are copied into the layers' parameters by layer
  name, then the message is freed.
- EXEC of one layer (``layers()[i]->Forward`` then ``layers_unsafe()[i].reset()``): the
  layer's output blobs are allocated and stay (the ``Net`` owns them); what the layer
  itself owns (the im2col buffer, max pooling's argmax indices, LRN's scale) is freed by
  the reset. The parameters are *not* freed: ``Net::params_`` holds a second reference
  to every parameter blob (measured: RSS does not drop at any reset).
- The bulk forward pass (``net->Forward()``): the same allocations, and nothing is freed
  until the network is deleted, the layers' own buffers included.
- The network's end (``delete net``): everything.
"""

from __future__ import annotations

RUNTIMES = ("lean", "caffe")
DEFAULT_RUNTIME = "lean"


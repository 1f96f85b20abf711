"""Real Caffe through pycaffe, as a new user tries it: run inside the bullseye chroot by
Debian's python3 (``python3 - ARGS``, this file on its standard input), so it imports
only numpy and caffe. An independent check of the outputs, beside ``probe.cpp``.

usage: python3 - WARMUP PROTOTXT CAFFEMODEL INPUT OUTPUT [PARTIAL...]

After the probe's warm-up (the WARMUP net built, run, and loaded from its own weights
saved as a V2 and a V1 caffemodel): ``caffe.Net(PROTOTXT, TEST)``,
``copy_from(CAFFEMODEL)``, the input blob set from INPUT (float32), ``forward()``, the
output blobs written to OUTPUT (float32, concatenated in output order), the net
deleted; then a second net takes the PARTIAL files one by one with ``copy_from``. One
JSON line per stage on stdout, as the probe prints them: ``start`` (after the imports
and the warm-up), ``init``, ``load``, ``forward``, ``delete``, then ``init`` and a
``partial`` line per partial file. The high-water mark is reset before every stage.
"""

import json
import os
import sys
import tempfile

import numpy as np


def _status():
    found = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                found[key] = int(value.split()[0])
    return found["VmRSS"], found["VmHWM"]


def _report(stage):
    rss, hwm = _status()
    print(json.dumps({"stage": stage, "layer": -1, "rss_kib": rss, "hwm_kib": hwm}),
          flush=True)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _warm_up(caffe, prototxt):
    from caffe.proto import caffe_pb2

    net = caffe.Net(prototxt, caffe.TEST)
    net.forward()
    with tempfile.TemporaryDirectory() as tmp:
        v2_path, v1_path = os.path.join(tmp, "v2.caffemodel"), os.path.join(tmp, "v1.caffemodel")
        net.save(v2_path)
        v2 = caffe_pb2.NetParameter()
        with open(v2_path, "rb") as f:
            v2.ParseFromString(f.read())
        v1 = caffe_pb2.NetParameter()
        for layer in v2.layer:
            if layer.blobs:
                old = v1.layers.add(name=layer.name)
                old.type = (caffe_pb2.V1LayerParameter.CONVOLUTION
                            if layer.type == "Convolution"
                            else caffe_pb2.V1LayerParameter.INNER_PRODUCT)
                old.blobs.extend(layer.blobs)
        with open(v1_path, "wb") as f:
            f.write(v1.SerializeToString())
        for path in (v2_path, v1_path):
            net.copy_from(path)
    net.forward()


def main(argv):
    warmup, prototxt, model, input_path, output_path = argv[:5]
    partials = argv[5:]
    import caffe

    caffe.set_mode_cpu()
    _warm_up(caffe, warmup)
    _report("start")
    net = caffe.Net(prototxt, caffe.TEST)
    _report("init")
    net.copy_from(model)
    _report("load")
    blob = net.blobs[net.inputs[0]]
    blob.data[...] = np.fromfile(input_path, np.float32).reshape(blob.data.shape)
    net.forward()
    _report("forward")
    outputs = [net.blobs[name].data.astype(np.float32).reshape(-1) for name in net.outputs]
    np.concatenate(outputs).tofile(output_path)
    del net, blob
    _report("delete")
    if partials:
        net = caffe.Net(prototxt, caffe.TEST)
        _report("init")
        for path in partials:
            net.copy_from(path)
            _report("partial")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

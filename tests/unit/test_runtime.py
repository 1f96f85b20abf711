"""The two runtimes' stage semantics, by hand counts (engine/runtime). The comparison
with real Caffe itself is tests/integration/caffe/test_real_caffe.py (marker caffe)."""

from __future__ import annotations

import os
import tracemalloc

import numpy as np
import pytest

from engine.caffe import wire
from engine.network import Network, run_standalone
from engine.runtime.caffe import layer_buffers
from engine.runtime.protobuf import Message, repeated_capacities


def test_repeated_field_growth_follows_protobufs_8k_chunks():
    """A packed float field of 56448 bytes (14112 floats) at offset 53 of a 56907-byte
    file (AgeNet's conv1 partial: tag at 49, three-byte length). The stream hands out
    8192-byte chunks, each chunk's last 16 bytes through a patch buffer with the next
    chunk's first 16:
    - chunk 0 up to 8192 - 53 = 8139 bytes: 2034 floats (3 left over): capacity 2034;
    - patch: 16 + 3 bytes, 4 floats, size 2038 > 2034: capacity max(2 x 2034, 2038) = 4068;
    - chunk 1: 8192 - 16 + 3 bytes, 2044 floats, size 4082 > 4068: capacity 8136;
    - patch 4 (4086), chunk 2044 (6130), patch 4 (6134), then 6134 + 2044 > 8136:
      capacity 16272, after which the remaining 7978 floats fit."""
    assert repeated_capacities(53, 56448, 56907) == [
        (0, 2034), (2034, 4068), (2038, 8136), (6134, 16272)]
    # inside one chunk: one exact reservation
    assert repeated_capacities(56515, 384, 56907) == [(0, 96)]
    # a field whose tag (at 8181) sits in a chunk's last 16 bytes is read from the patch
    # first: 8192 + 16 - 8185 = 23 bytes, 5 floats (3 left over); then the next chunk
    # past its first 16 bytes, 8192 - 16 + 3 bytes, 2044 floats: 2049 > 2 x 5
    assert repeated_capacities(8185, 40000, 60000)[:2] == [(0, 5), (5, 2049)]


@pytest.fixture(scope="module")
def conv1_partials(zoo_split):
    age = zoo_split["AgeNet"]  # V1 (`layers`) caffemodel
    face = zoo_split["FaceNet"]  # V2 (`layer`)
    return (age.resolve(age.layers[1].partial), face.resolve(face.layers[1].partial))


def _traced(fn):
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        result = fn()
        current, peak = tracemalloc.get_traced_memory()
        return result, current - before, peak - before
    finally:
        tracemalloc.stop()


def test_a_v1_message_holds_its_parse_and_two_upgrade_copies(conv1_partials):
    """UpgradeNetAsNeeded copies the parsed V1 message (original_param) and UpgradeV1Net
    copies every blob again into the V2 layers while the cleared V1 layers keep their
    buffers: for AgeNet's conv1 (14112 weights, 96 biases; the weights' buffer grew to
    16272 floats, above) three buffers per blob at the peak, each with protobuf's 8-byte
    header; the original copy is freed when the upgrade returns."""
    path = conv1_partials[0]
    rec = wire.scan(path)[0]
    assert rec.v1 and [b.nbytes for b in rec.blobs] == [56448, 384]
    parsed = 4 * (16272 + 96) + 2 * 8
    copy = 4 * (14112 + 96) + 2 * 8
    message, held, peak = _traced(lambda: Message(path))
    slack = 8192  # a few Python objects
    assert parsed + 2 * copy <= peak <= parsed + 2 * copy + slack
    assert parsed + copy <= held <= parsed + copy + slack
    message.release()
    assert message.layers == {} and message.blobs == [] and message.v1_retained == []


def test_a_v2_message_holds_its_parse_once(conv1_partials):
    path = conv1_partials[1]
    rec = wire.scan(path)[0]
    assert not rec.v1
    sizes = [repeated_capacities(b.offset, b.nbytes, os.path.getsize(path))[-1][1]
             for b in rec.blobs]
    message, held, _ = _traced(lambda: Message(path))
    expected = sum(4 * cap + 8 for cap in sizes)
    assert expected <= held <= expected + 8192
    message.release()


def test_caffe_init_allocates_and_touches_every_parameter(zoo_split, tmp_path):
    """Measured in a fresh process (engine.realcaffe.stages, the measured child's
    allocator settings): the resident set after INIT holds every weight, written."""
    from engine.realcaffe.reference import figures, measure_engine

    desc = zoo_split["AgeNet"]
    weights_mib = desc.param_bytes / 2**20
    caffe = figures(measure_engine(desc.path, "bulk", "caffe", tmp_path).stages, "bulk")
    lean = figures(measure_engine(desc.path, "bulk", "lean", tmp_path).stages, "bulk")
    assert 0.98 * weights_mib <= caffe["init"] <= weights_mib + 4  # small ones reuse heap
    assert lean["init"] < 1  # the lean runtime allocates weights at their LOAD
    net = Network(desc, runtime_name="caffe")
    net.init(0)
    assert sum(sum(w.nbytes for w in ws) for ws in net.weights.values()) == desc.param_bytes


def test_caffe_exec_keeps_parameters_and_activations_lean_frees_them(zoo_split):
    desc = zoo_split["AgeNet"]
    caffe, lean = Network(desc, runtime_name="caffe"), Network(desc)
    for net in (caffe, lean):
        net.init(0)
        for layer in net.layers:
            net.load_layer(layer.index)
            net.exec_layer(layer.index)
    assert sum(sum(w.nbytes for w in ws) for ws in caffe.weights.values()) == desc.param_bytes
    assert lean.weights == {}
    # Caffe's Net owns every top blob to the end; lean keeps only the outputs
    tops = {t for layer in caffe.layers for t in layer.tops}
    assert set(caffe.blobs) == tops
    assert set(lean.blobs) == set(lean.outputs)
    assert caffe.layer_state == {}  # reset freed the layers' own buffers


def test_the_bulk_forward_pass_keeps_each_layers_own_buffers(zoo_split):
    """AgeNet at batch 1: conv1 (3 x 7 x 7 kernel, stride 4, 227 -> 56 x 56) keeps its
    im2col buffer of 3*7*7 * 56*56 floats; pool1 (max, 96 x 28 x 28) its argmax indices;
    norm1 its scale, one per input (96 x 28 x 28)."""
    net = Network(zoo_split["AgeNet"], runtime_name="caffe")
    net.init(0)
    net.load_all()
    net.forward()
    by_name = {layer.name: layer.index for layer in net.layers}
    conv1 = net.layer_state[by_name["conv1"]]
    assert [a.size for a in conv1] == [3 * 7 * 7 * 56 * 56]
    pool1 = net.layer_state[by_name["pool1"]]
    assert [(a.size, a.dtype) for a in pool1] == [(96 * 28 * 28, np.int32)]
    assert [a.size for a in net.layer_state[by_name["norm1"]]] == [96 * 28 * 28]
    assert by_name["relu1"] not in net.layer_state
    for layer in net.layers:
        expected = [n for n, _ in layer_buffers(layer) if n]
        assert [a.size for a in net.layer_state.get(layer.index, [])] == expected


@pytest.mark.parametrize("name", ["AgeNet", "SoS-GoogleNet"])
def test_outputs_are_bit_identical_across_runtimes(zoo_split, name):
    desc = zoo_split[name]
    ref = run_standalone(desc.path, batch=1)
    for runtime in ("lean", "caffe"):
        for bulk in (False, True):
            out = run_standalone(desc.path, batch=1, bulk=bulk, runtime_name=runtime)
            assert all(np.array_equal(out[k], ref[k]) for k in ref)


def test_layer_buffers_by_hand():
    from engine.caffe.graph import Layer

    conv = Layer(0, "c", "Convolution", ("x",), ("y",),
                 {"stride": (2, 2), "pad": (1, 1), "group": 2, "dilation": (1, 1)},
                 ((8, 2, 3, 3), (8,)), ((1, 8, 5, 5),), 0, 0)
    assert layer_buffers(conv) == [(4 * 3 * 3 * 5 * 5, np.float32)]  # C = 2 x group 2
    one = Layer(0, "c", "Convolution", ("x",), ("y",),
                {"stride": (1, 1), "pad": (0, 0), "group": 1, "dilation": (1, 1)},
                ((8, 4, 1, 1),), ((1, 8, 5, 5),), 0, 0)
    assert layer_buffers(one) == []  # Caffe's 1x1 path multiplies the input itself
    ave = Layer(0, "p", "Pooling", ("x",), ("y",), {"method": "ave"}, (), ((1, 3, 2, 2),),
                0, 0)
    assert layer_buffers(ave) == []


def test_the_parse_peak_from_blob_sizes_alone_matches_the_files(zoo_split):
    """``message_peak_bytes`` without the file (what a description gives: the blobs'
    sizes and the format) against the same from every zoo partial's layout: within
    0.5 MiB (where the 8 KiB chunks fall moves a growth by a few KiB)."""
    from engine.runtime.protobuf import message_peak_bytes

    for desc in zoo_split.values():
        graph = Network(desc).graph
        for info in desc.layers:
            if info.partial is None or not info.param_bytes:
                continue
            sizes = [4 * int(np.prod(s)) for s in graph.layers[info.index].param_shapes]
            from_file = message_peak_bytes(desc.resolve(info.partial))
            alone = message_peak_bytes(None, sizes, desc.format == "V1")
            assert abs(alone - from_file) <= 2**19, (desc.network, info.name)
            # V1: the parse and the upgrade's two copies; V2: at least the parse
            assert from_file >= (3 if desc.format == "V1" else 1) * info.param_bytes

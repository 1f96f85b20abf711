"""Caffemodel writing and the zero-copy wire loader, against protobuf's own parse."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from engine.caffe import io, schema, wire
from engine.errors import CorruptModelError, ModelError
from engine.files import atomic_path


def _small_net(v1: bool) -> schema.NetParameter:
    net = schema.NetParameter(name="small")
    layers = net.layers if v1 else net.layer
    conv = layers.add(name="conv", bottom=["data"], top=["conv"])
    fc = layers.add(name="fc", bottom=["conv"], top=["fc"])
    if v1:
        conv.type = schema.V1LayerParameter.CONVOLUTION
        fc.type = schema.V1LayerParameter.INNER_PRODUCT
        conv.blobs_lr.extend([1.0, 2.0])  # training metadata real V1 models carry
    else:
        conv.type, fc.type = "Convolution", "InnerProduct"
        conv.phase = schema.PHASE_TEST
    conv.convolution_param.num_output = 4
    conv.convolution_param.kernel_size.append(3)
    fc.inner_product_param.num_output = 3
    return net


def _blobs(index, layer):
    rng = np.random.default_rng(index)
    shapes = [[(4, 2, 3, 3), (4,)], [(3, 36), (3,)]][index]
    return [rng.standard_normal(s, dtype=np.float32) for s in shapes]


@pytest.mark.parametrize("v1", [False, True])
def test_streamed_writer_is_byte_identical_to_protobuf_serialisation(tmp_path, v1):
    net = _small_net(v1)
    path = tmp_path / "m.caffemodel"
    size = io.write_caffemodel(path, net, _blobs)
    # Build the same message through protobuf itself and compare bytes.
    ref = schema.NetParameter()
    ref.CopyFrom(net)
    for i, layer in enumerate(ref.layers if v1 else ref.layer):
        for arr in _blobs(i, layer):
            blob = layer.blobs.add()
            if v1:
                blob.num, blob.channels, blob.height, blob.width = io.legacy_dims(arr.shape)
            else:
                blob.shape.dim.extend(arr.shape)
            blob.data.extend(arr.ravel().tolist())
    assert path.read_bytes() == ref.SerializeToString()
    assert size == os.path.getsize(path)


@pytest.mark.parametrize("v1", [False, True])
def test_wire_scan_and_read_equal_the_generic_parse(tmp_path, v1):
    path = tmp_path / "m.caffemodel"
    io.write_caffemodel(path, _small_net(v1), _blobs)
    records = wire.scan(path)
    parsed = io.read_caffemodel(path)
    layers = parsed.layers if v1 else parsed.layer
    assert [r.name for r in records] == [layer.name for layer in layers]
    assert [r.type for r in records] == ["Convolution", "InnerProduct"]
    for rec, layer in zip(records, layers):
        fast = wire.read_blobs(path, rec)
        ref = [io.blob_array(b) for b in layer.blobs]
        for a, b in zip(fast, ref):
            assert a.dtype == np.float32 and a.shape == b.shape
            assert np.array_equal(a, b)
            # its own aligned buffer of exactly its size, not a view into file bytes
            owner = a if a.base is None else a.base
            assert a.flags.aligned and a.flags.c_contiguous and owner.nbytes == a.nbytes
    if v1:  # legacy dims: FC weight (1,1,O,I), bias (1,1,1,O)
        assert records[1].blobs[0].shape == (1, 1, 3, 36)
        assert records[1].blobs[1].shape == (1, 1, 1, 3)


def test_wire_loader_matches_generic_parse_on_every_zoo_layer(zoo_split):
    for desc in zoo_split.values():
        model = desc.resolve(desc.caffemodel)
        parsed = io.read_caffemodel(model)
        layers = parsed.layers if desc.format == "V1" else parsed.layer
        records = wire.scan(model)
        assert len(records) == len(layers)
        for rec, layer in zip(records, layers):
            if not rec.blobs:
                continue
            for fast, blob in zip(wire.read_blobs(model, rec), layer.blobs):
                assert np.array_equal(fast, io.blob_array(blob)), (desc.network, rec.name)


def test_unpacked_and_double_encodings_are_read(tmp_path):
    # proto2 parsers must accept one tag per float; Caffe also has double_data.
    floats = np.array([1.5, -2.0, 3.25], dtype="<f4")
    blob = b"".join(b"\x2d" + f.tobytes() for f in floats)  # field 5, wire type 5
    layer = b"\x0a\x01a" + b"\x3a" + bytes([len(blob)]) + blob
    doubles = np.array([0.5, 4.0], dtype="<f8").tobytes()
    blob2 = b"\x42" + bytes([len(doubles)]) + doubles  # field 8 packed doubles
    layer2 = b"\x0a\x01b" + b"\x3a" + bytes([len(blob2)]) + blob2
    data = (b"\xa2\x06" + bytes([len(layer)]) + layer + b"\xa2\x06" + bytes([len(layer2)])
            + layer2)
    path = tmp_path / "odd.caffemodel"
    path.write_bytes(data)
    a, b = wire.scan(path)
    assert np.array_equal(wire.read_blobs(path, a)[0], floats)
    assert np.array_equal(wire.read_blobs(path, b)[0], np.array([0.5, 4.0], np.float32))
    ref = io.read_caffemodel(path)
    assert list(ref.layer[0].blobs[0].data) == floats.tolist()


def test_truncated_file_names_the_file_and_offset(tmp_path, zoo_split):
    desc = zoo_split["AgeNet"]
    src = desc.resolve(desc.layers[1].partial)
    size = os.path.getsize(src)
    for cut in (size - 1, size // 2, 30):
        bad = tmp_path / f"cut{cut}.partial.caffemodel"
        bad.write_bytes(src.read_bytes()[:cut])
        with pytest.raises(CorruptModelError) as err:
            wire.load_partial(bad)
        assert str(bad) in str(err.value)
        assert f"at byte {err.value.offset}" in str(err.value)
        assert 0 <= err.value.offset < cut


def test_corrupt_bytes_fail_with_offset(tmp_path):
    path = tmp_path / "bad.caffemodel"
    path.write_bytes(b"\x0a\x02ab\x0f\x00")  # wire type 7 at byte 4
    with pytest.raises(CorruptModelError, match="at byte 4: invalid wire type 7"):
        wire.scan(path)
    with pytest.raises(ModelError, match="corrupt or truncated"):
        io.read_caffemodel(path)


def test_blob_whose_shape_disagrees_with_its_payload_is_rejected(tmp_path):
    blob = b"\x3a\x02\x08\x05" + b"\x2a\x04" + np.float32(1).tobytes()  # shape (5), 1 value
    layer = b"\x0a\x01a" + b"\x3a" + bytes([len(blob)]) + blob
    path = tmp_path / "m.caffemodel"
    path.write_bytes(b"\xa2\x06" + bytes([len(layer)]) + layer)
    with pytest.raises(CorruptModelError, match=r"declares shape \(5,\) \(5 values\) but holds 1"):
        wire.scan(path)


def test_partial_with_several_layers_is_rejected(tmp_path, zoo_split):
    model = zoo_split["AgeNet"].resolve(zoo_split["AgeNet"].caffemodel)
    copy = tmp_path / "whole.caffemodel"
    shutil.copy(model, copy)
    with pytest.raises(ModelError, match="holds one layer, found 19"):
        wire.load_partial(copy)


def test_prototxt_errors_and_unknown_fields(tmp_path):
    bad = tmp_path / "bad.prototxt"
    bad.write_text('layer { name: "x" type: "ReLU" bottom: "a" top: "a" ')
    with pytest.raises(ModelError, match="not a valid Caffe prototxt"):
        io.read_prototxt(bad)
    extra = tmp_path / "extra.prototxt"
    extra.write_text('layer { name: "x" type: "Scale" scale_param { bias_term: true } }')
    assert io.read_prototxt(extra).layer[0].type == "Scale"  # skipped field, layer kept
    with pytest.raises(ModelError, match="cannot read prototxt"):
        io.read_prototxt(tmp_path / "missing.prototxt")


def test_atomic_path_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out.bin"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("copy", ["", "1"])
def test_a_payload_is_read_whole_directly_or_through_the_locked_buffer(tmp_path, monkeypatch,
                                                                        copy):
    """Under the uml backend (EDGEPROF_UML_COPY_READS) a payload goes through a 1 MiB
    buffer, copied in from user space (UML 7.2 loses kernel writes into swapped-in pages):
    the same bytes as the file, across the buffer's boundaries, at an odd offset."""
    data = np.random.default_rng(0).integers(0, 256, 3 * wire.SCRATCH_BYTES + 5, np.uint8)
    path = tmp_path / "payload"
    path.write_bytes(data.tobytes())
    monkeypatch.setenv(wire.UML_READS_ENV, copy)
    out = np.empty(len(data) - 7, np.uint8)
    with open(path, "rb", buffering=0) as f:
        wire.readinto_at(f, memoryview(out), 7, str(path))
    assert np.array_equal(out, data[7:])
    with open(path, "rb", buffering=0) as f, pytest.raises(CorruptModelError, match="ended inside"):
        wire.readinto_at(f, memoryview(np.empty(len(data), np.uint8)), 7, str(path))


def test_concurrent_loads_each_read_through_their_own_locked_buffer(tmp_path, monkeypatch):
    """The workers of a multi-worker policy load at once: under the uml backend each
    thread copies through a buffer of its own (a shared one handed a LOAD another's bytes:
    every multi-worker UML run of the default run computed other outputs)."""
    import threading

    monkeypatch.setenv(wire.UML_READS_ENV, "1")
    files = []
    for i in range(2):
        data = np.random.default_rng(i).integers(0, 256, 4 * wire.SCRATCH_BYTES, np.uint8)
        (tmp_path / f"p{i}").write_bytes(data.tobytes())
        files.append((tmp_path / f"p{i}", data))
    buffers, wrong = {}, []

    def load(path, data):
        buffers[threading.get_ident()] = wire._locked_scratch()
        for _ in range(20):
            out = np.empty(len(data), np.uint8)
            with open(path, "rb", buffering=0) as f:
                wire.readinto_at(f, memoryview(out), 0, str(path))
            wrong.append(not np.array_equal(out, data))

    threads = [threading.Thread(target=load, args=f) for f in files]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    a, b = buffers.values()
    assert a.obj is not b.obj and not any(wrong)

"""Every parser of the project fed random bytes, random text and truncated or corrupted real
inputs: each returns a well-formed result or raises the project's own error
(``EdgeprofError`` or a subclass), never a bare IndexError/KeyError/ValueError/
struct.error/UnicodeDecodeError.

The named tests after each section's properties are regressions of inputs that used to
escape as bare exceptions (found by these properties, issue 14).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from engine.caffe import generate, io, schema, splitter, wire, zoo
from engine.errors import EdgeprofError, ModelError
from engine.limits import LimitRequest
from engine.limits import cgroupfs as fs
from engine.limits.cgroupfs import CgroupError, CgroupV1Reader, CgroupV2Reader
from engine.probes import tcmalloc
from engine.probes.gnutime import parse_gnu_time
from engine.probes.heap import TOTALS, parse_heap_profile
from engine.probes.process import status_bytes
from engine.probes.vmstat import WINDOW_KEYS, read_vmstat
from engine.runner.execute import PipelineRun
from engine.runner.folder import read_progress
from engine.runner.meta import PipelineInfo, RunMeta
from engine.runner.request import ProbeOptions, RunOptions, RunRequest
from engine.schedule import pipelines
from engine.schedule.pipelines import Arrival, Pipeline, PipelineError, load_pipeline
from engine.schedule.policies import parse_policy
from engine.units import parse_size

FUZZ = settings(max_examples=50, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

random_bytes = st.binary(max_size=600)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12)


def cut(data, fraction: float):
    """``data`` cut at ``fraction`` of its length (0: empty, 1: whole)."""
    return data[:int(len(data) * fraction)]


fractions = st.floats(0.0, 1.0)


def _write(path: Path, data: bytes | str) -> Path:
    if isinstance(data, str):
        data = data.encode()
    path.write_bytes(data)
    return path


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """A folder the property tests overwrite their input files in, example after example."""
    return tmp_path_factory.mktemp("fuzz")


# ---------------------------------------------------------------------------------------
# Real inputs to truncate: zoo models (V1 AgeNet, V2 GoogLeNet), a pipeline run's
# progress.jsonl, GNU time reports, a tcmalloc heap dump.


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, splitter.Description]:
    root = tmp_path_factory.mktemp("fuzz-models")
    out = {}
    for name in ("AgeNet", "GoogLeNet"):
        prototxt, caffemodel = generate.write_zoo_model(name, root / "m", 5)
        path = splitter.split_model(caffemodel, prototxt, root / "s", network=name,
                                    fc_start=zoo.ZOO[name].fc_start)
        out[name] = splitter.Description.load(path)
    return out


@pytest.fixture(scope="module")
def partials(models) -> list[bytes]:
    """The bytes of a few small partials of each format (V1 legacy dims, V2 shapes), with
    and without blobs."""
    out = []
    for desc in models.values():
        with_blobs = [x for x in desc.layers if x.partial and x.param_count][:2]
        without = [x for x in desc.layers if x.partial and not x.param_count][:1]
        out += [desc.resolve(x.partial).read_bytes() for x in with_blobs + without]
    return out


def _tiny_model(v1: bool) -> bytes:
    net = schema.NetParameter(name="tiny")
    layers = net.layers if v1 else net.layer
    conv = layers.add(name="conv", bottom=["data"], top=["conv"])
    relu = layers.add(name="relu", bottom=["conv"], top=["conv"])
    fc = layers.add(name="fc", bottom=["conv"], top=["fc"])
    if v1:
        conv.type = schema.V1LayerParameter.CONVOLUTION
        relu.type = schema.V1LayerParameter.RELU
        fc.type = schema.V1LayerParameter.INNER_PRODUCT
    else:
        conv.type, relu.type, fc.type = "Convolution", "ReLU", "InnerProduct"
    shapes = {0: [(2, 1, 3, 3), (2,)], 1: [], 2: [(3, 8), (3,)]}
    rng = np.random.default_rng(3)

    def blobs_for(index, layer):
        return [rng.standard_normal(s, dtype=np.float32) for s in shapes[index]]

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "tiny.caffemodel"
        io.write_caffemodel(path, net, blobs_for)
        return path.read_bytes()


@pytest.fixture(scope="module")
def tiny_models() -> dict[bool, bytes]:
    """Whole (three-layer) caffemodels, V1 and V2, small enough to cut anywhere."""
    return {v1: _tiny_model(v1) for v1 in (False, True)}


# ---------------------------------------------------------------------------------------
# caffemodels: engine.caffe.wire (scan, read_blobs, load_partial) and the reference parse
# engine.caffe.io.read_caffemodel


def _check_records(records: list[wire.LayerRecord], size: int) -> None:
    """Well-formed scan: layers in file order inside the file, every blob's values inside
    its layer, its declared shape holding exactly its values."""
    prev_end = 0
    for i, rec in enumerate(records):
        assert rec.index == i
        assert prev_end <= rec.start < rec.body <= rec.end <= size
        prev_end = rec.end
        assert isinstance(rec.name, str) and isinstance(rec.type, str)
        for blob in rec.blobs:
            assert all(isinstance(d, int) and d >= 0 for d in blob.shape)
            assert math.prod(blob.shape) == blob.count
            if blob.unpacked:
                assert all(rec.body <= off <= rec.end - 4 for off in blob.unpacked)
            elif blob.offset == -1:  # no data field at all: an empty blob, nothing to read
                assert blob.nbytes == 0 and blob.count == 0
            else:
                assert rec.body <= blob.offset <= blob.offset + blob.nbytes <= rec.end


def _read_all(path: Path, records: list[wire.LayerRecord]) -> list[list[np.ndarray]]:
    out = []
    for rec in records:
        arrays = wire.read_blobs(path, rec)
        assert len(arrays) == len(rec.blobs)
        for arr, blob in zip(arrays, rec.blobs):
            assert arr.dtype == np.float32 and arr.shape == blob.shape
        out.append(arrays)
    return out


def _wire_contract(path: Path) -> list[wire.LayerRecord] | None:
    """scan + read_blobs + load_partial on ``path``: well-formed results or ModelError."""
    size = path.stat().st_size
    try:
        records = wire.scan(path)
    except ModelError:
        records = None
    if records is not None:
        _check_records(records, size)
        _read_all(path, records)
    try:
        layer, arrays = wire.load_partial(path)
    except ModelError:
        assert records is None or len(records) != 1
    else:
        assert records is not None and len(records) == 1 and layer == records[0]
        assert [a.shape for a in arrays] == [b.shape for b in layer.blobs]
    return records


def _reference_contract(path: Path) -> schema.NetParameter | None:
    try:
        net = io.read_caffemodel(path)
    except ModelError:
        return None
    assert isinstance(net, schema.NetParameter)
    return net


@FUZZ
@given(data=random_bytes)
def test_caffemodel_parsers_on_random_bytes(scratch, data):
    path = _write(scratch / "random.caffemodel", data)
    _wire_contract(path)
    _reference_contract(path)


@FUZZ
@given(index=st.integers(0, 5), where=fractions)
def test_truncated_partials_are_always_refused_with_model_error(scratch, partials, index,
                                                                where):
    whole = partials[index % len(partials)]
    data = cut(whole, where)
    assume(len(data) < len(whole))
    path = _write(scratch / "cut.partial.caffemodel", data)
    with pytest.raises(ModelError) as err:  # a strict prefix of a partial is never valid
        wire.load_partial(path)
    assert str(path) in str(err.value)
    # protobuf accepts a prefix only at a top-level field boundary: nothing, or the name
    # (tag 0x0a, one length byte, the name) without the layer
    if len(data) in (0, 2 + whole[1]):
        assert len(io.read_caffemodel(path).layer) + len(io.read_caffemodel(path).layers) == 0
    else:
        with pytest.raises(ModelError):
            io.read_caffemodel(path)


@FUZZ
@given(v1=st.booleans(), where=fractions)
def test_truncated_models_scan_to_a_prefix_of_their_layers_or_fail(scratch, tiny_models, v1,
                                                                   where):
    whole = tiny_models[v1]
    full_path = _write(scratch / "whole.caffemodel", whole)
    full = wire.scan(full_path)
    data = cut(whole, where)
    path = _write(scratch / "cut.caffemodel", data)
    records = _wire_contract(path)
    if records is not None:  # only a cut at a layer boundary scans
        assert records == [r for r in full if r.end <= len(data)]
        assert all(r.end <= len(data) for r in records)
        for got, want in zip(_read_all(path, records), _read_all(full_path, records)):
            assert all(np.array_equal(a, b) for a, b in zip(got, want))
    _reference_contract(path)


@FUZZ
@given(index=st.integers(0, 5), pos=fractions, xor=st.integers(1, 255))
def test_partials_with_a_corrupted_byte(scratch, partials, index, pos, xor):
    data = bytearray(partials[index % len(partials)])
    i = min(int(pos * len(data)), len(data) - 1)
    data[i] ^= xor
    path = _write(scratch / "flip.partial.caffemodel", bytes(data))
    _wire_contract(path)
    _reference_contract(path)


# A structured generator: nets built field by field (any field order, unknown fields,
# packed/unpacked/double payloads, shapes or legacy dims), optionally corrupted.

def _varint(value: int) -> bytes:
    return io._varint(value)


def _key(number: int, wtype: int) -> bytes:
    return _varint(number << 3 | wtype)


def _len_field(number: int, payload: bytes) -> bytes:
    return _key(number, 2) + _varint(len(payload)) + payload


def _junk_field() -> st.SearchStrategy[bytes]:
    """A field no message of the schema defines (numbers >= 1000), of any wire type."""
    number = st.integers(1000, 5000)
    return st.one_of(
        st.builds(lambda n, v: _key(n, 0) + _varint(v), number, st.integers(0, 2**64 - 1)),
        st.builds(lambda n, b: _key(n, 1) + b, number, st.binary(min_size=8, max_size=8)),
        st.builds(lambda n, b: _key(n, 5) + b, number, st.binary(min_size=4, max_size=4)),
        st.builds(_len_field, number, st.binary(max_size=12)),
    )


@st.composite
def blob_message(draw, v1: bool) -> tuple[bytes, np.ndarray]:
    """An encoded BlobProto and the float32 array Caffe would read from it."""
    dims = draw(st.lists(st.integers(0, 3), max_size=4))
    legacy = v1 or draw(st.booleans())
    if legacy:
        dims = [draw(st.integers(0, 3)) for _ in range(4)]  # all four, as writers do
    n = math.prod(dims)
    encoding = draw(st.sampled_from(["packed", "double", "unpacked"] if n else
                                    ["packed", "double"]))
    if encoding == "double":
        values = np.array(draw(st.lists(st.floats(allow_nan=False), min_size=n, max_size=n)),
                          dtype="<f8")
        data = [_len_field(8, values.tobytes())]
    else:
        values = np.array(draw(st.lists(st.floats(width=32, allow_nan=False), min_size=n,
                                        max_size=n)), dtype="<f4")
        if encoding == "packed":
            data = [_len_field(5, values.tobytes())]
        else:
            data = [_key(5, 5) + v.tobytes() for v in values]
    if legacy:
        shape = [_key(number, 0) + _varint(d) for number, d in zip((1, 2, 3, 4), dims)]
    else:
        shape = [_len_field(7, _len_field(1, b"".join(_varint(d) for d in dims)))] if dims \
            else []
    fields = shape + data + draw(st.lists(_junk_field(), max_size=2))
    fields = draw(st.permutations(fields)) if encoding != "unpacked" else fields
    want = values.astype(np.float32).reshape(dims if dims or legacy else (n,))
    return b"".join(fields), want


@st.composite
def net_message(draw) -> tuple[bytes, bool, list[tuple[str, list[np.ndarray]]]]:
    v1 = draw(st.booleans())
    layers, want = [], []
    for i in range(draw(st.integers(0, 3))):
        name = f"l{i}"
        blobs = draw(st.lists(blob_message(v1), max_size=2))
        if v1:
            head = [_len_field(4, name.encode()), _key(5, 0) + _varint(4)]  # CONVOLUTION
            blob_fields = [_len_field(6, b) for b, _ in blobs]
        else:
            head = [_len_field(1, name.encode()), _len_field(2, b"Convolution")]
            blob_fields = [_len_field(7, b) for b, _ in blobs]
        junk = draw(st.lists(_junk_field(), max_size=2))
        layers.append(_len_field(2 if v1 else 100,
                                 b"".join(draw(st.permutations(head + junk)) + blob_fields)))
        want.append((name, [w for _, w in blobs]))
    net = [_len_field(1, b"n")] + draw(st.lists(_junk_field(), max_size=2))
    return b"".join(net + layers), v1, want


@FUZZ
@given(msg=net_message())
def test_wire_reads_generated_models_exactly_as_caffe_would(scratch, msg):
    data, v1, want = msg
    path = _write(scratch / "gen.caffemodel", data)
    records = wire.scan(path)
    _check_records(records, len(data))
    assert [(r.name, r.v1) for r in records] == [(name, v1) for name, _ in want]
    ref = io.read_caffemodel(path)
    ref_layers = ref.layers if v1 else ref.layer
    assert len(ref_layers) == len(records)
    for rec, ref_layer, (_, arrays) in zip(records, ref_layers, want):
        got = wire.read_blobs(path, rec)
        assert len(got) == len(arrays) == len(ref_layer.blobs)
        for g, w, r in zip(got, arrays, ref_layer.blobs):
            assert g.dtype == np.float32 and g.shape == w.shape
            assert np.array_equal(g, w) and np.array_equal(g, io.blob_array(r))


@FUZZ
@given(msg=net_message(), how=st.sampled_from(["cut", "flip", "insert"]), where=fractions,
       junk=st.binary(min_size=1, max_size=4))
def test_wire_on_corrupted_generated_models(scratch, msg, how, where, junk):
    data = msg[0]
    i = int(where * len(data))
    if how == "cut":
        data = data[:i]
    elif how == "flip" and data:
        i = min(i, len(data) - 1)
        data = data[:i] + bytes([data[i] ^ junk[0]]) + data[i + 1:]
    else:
        data = data[:i] + junk + data[i:]
    path = _write(scratch / "bad.caffemodel", data)
    _wire_contract(path)
    _reference_contract(path)


def _blob_bytes(*fields: bytes) -> bytes:
    layer = _len_field(1, b"x") + _len_field(2, b"Convolution") + _len_field(7, b"".join(fields))
    return _len_field(1, b"p") + _len_field(100, layer)


def test_wire_blob_without_values_is_read_or_refused(tmp_path):
    path = _write(tmp_path / "empty_blob.caffemodel", _blob_bytes())  # empty BlobProto
    try:
        _, arrays = wire.load_partial(path)
    except ModelError:
        return
    assert [a.shape for a in arrays] == [(0,)]


def test_wire_shape_product_that_overflows_int64_is_refused(tmp_path):
    dims = _varint(2**62 + 1) + _varint(4)
    blob = _blob_bytes(_len_field(7, _len_field(1, dims)),
                       _len_field(5, np.ones(4, "<f4").tobytes()))
    path = _write(tmp_path / "wrap.caffemodel", blob)
    with pytest.raises(ModelError):
        wire.load_partial(path)


# ---------------------------------------------------------------------------------------
# prototxts: engine.caffe.io.read_prototxt


@pytest.fixture(scope="module")
def deploy_texts() -> list[str]:
    return [io.prototxt_text(zoo.deploy_net(name)) for name in zoo.ZOO]


def _prototxt_contract(path: Path) -> None:
    try:
        net = io.read_prototxt(path)
    except ModelError:
        return
    assert isinstance(net, schema.NetParameter) and (len(net.layer) or len(net.layers))


@FUZZ
@given(data=random_bytes | st.text(max_size=300).map(str.encode))
def test_read_prototxt_on_random_input(scratch, data):
    _prototxt_contract(_write(scratch / "random.prototxt", data))


@FUZZ
@given(index=st.integers(0, 4), where=fractions)
def test_read_prototxt_on_truncated_zoo_deploys(scratch, deploy_texts, index, where):
    text = deploy_texts[index]
    data = cut(text.encode(), where)
    path = _write(scratch / "cut.prototxt", data)
    _prototxt_contract(path)
    if len(data) == len(text):
        assert io.read_prototxt(path) == zoo.deploy_net(list(zoo.ZOO)[index])


@FUZZ
@given(index=st.integers(0, 4), where=fractions,
       junk=st.sampled_from(["{", "}", ":", '"', "\\", " layer {", "\x00", "\u00e9", "#"]))
def test_read_prototxt_with_an_inserted_token(scratch, deploy_texts, index, where, junk):
    text = deploy_texts[index]
    i = int(where * len(text))
    _prototxt_contract(_write(scratch / "ins.prototxt", text[:i] + junk + text[i:]))


# ---------------------------------------------------------------------------------------
# network descriptions: engine.caffe.splitter.Description.load


def _description_contract(path: Path) -> None:
    try:
        desc = splitter.Description.load(path)
    except ModelError:
        return
    assert isinstance(desc, splitter.Description) and desc.path == str(path)
    assert isinstance(desc.layers, list)
    assert all(isinstance(x, splitter.LayerInfo) for x in desc.layers)


@FUZZ
@given(data=random_bytes)
def test_description_load_on_random_bytes(scratch, data):
    _description_contract(_write(scratch / "random.description.json", data))


@FUZZ
@given(name=st.sampled_from(["AgeNet", "GoogLeNet"]), where=fractions)
def test_description_load_on_truncated_descriptions(scratch, models, name, where):
    text = Path(models[name].path).read_bytes()
    data = cut(text, where)
    path = _write(scratch / "cut.description.json", data)
    _description_contract(path)
    if len(data) == len(text):
        assert splitter.Description.load(path).layers == models[name].layers


layer_keys = list(splitter.LayerInfo.__dataclass_fields__)
desc_keys = [k for k in splitter.Description.__dataclass_fields__ if k != "path"]


@FUZZ
@given(top=st.dictionaries(st.sampled_from(desc_keys + ["path", "x"]), json_values, max_size=8),
       layers=st.lists(st.dictionaries(st.sampled_from(layer_keys + ["x"]), json_values),
                       max_size=2) | json_values,
       version=st.sampled_from([1, 1, 2, "1", None]))
def test_description_load_on_random_json_objects(scratch, top, layers, version):
    data = dict(top, version=version, layers=layers)
    _description_contract(_write(scratch / "json.description.json", json.dumps(data)))


@FUZZ
@given(name=st.sampled_from(["AgeNet", "GoogLeNet"]), in_layer=st.booleans(), data=st.data())
def test_description_load_with_one_field_spoiled(scratch, models, name, in_layer, data):
    desc = json.loads(Path(models[name].path).read_text())
    target = desc["layers"][data.draw(st.integers(0, len(desc["layers"]) - 1))] if in_layer \
        else desc
    key = data.draw(st.sampled_from(sorted(target)))
    if data.draw(st.booleans()):
        del target[key]
    else:
        target[key] = data.draw(json_values)
    _description_contract(_write(scratch / "spoiled.description.json", json.dumps(desc)))


def test_description_that_is_json_but_not_an_object_is_refused(tmp_path):
    with pytest.raises(ModelError):
        splitter.Description.load(_write(tmp_path / "list.description.json", "[1]"))


# ---------------------------------------------------------------------------------------
# pipelines: engine.schedule.pipelines.load_pipeline


def _pipeline_contract(path: Path) -> None:
    try:
        p = load_pipeline(path)
    except PipelineError:
        return
    assert isinstance(p, Pipeline) and isinstance(p.name, str) and p.name
    assert p.networks() and all(isinstance(a, Arrival) for a in p.arrivals)
    for a in p.arrivals:
        assert isinstance(a.time_s, float) and math.isfinite(a.time_s) and a.time_s >= 0
        assert all(isinstance(n, str) and n for n in a.networks)


@FUZZ
@given(data=random_bytes)
def test_load_pipeline_on_random_bytes(scratch, data):
    _pipeline_contract(_write(scratch / "random.json", data))


@FUZZ
@given(mode=st.sampled_from(pipelines.ARRIVAL_MODES), where=fractions)
def test_load_pipeline_on_truncated_pipelines(scratch, mode, where):
    [p] = pipelines.generate_pipelines(
        4, 1, {"AgeNet": 10, "GoogLeNet": 20}, (2, 4),
        {"mode": mode, "rate": 2.0, "mean": 0.5, "sd": 0.1})
    text = p.to_json().encode()
    path = _write(scratch / "cut.json", cut(text, where))
    _pipeline_contract(path)
    if path.stat().st_size == len(text):
        assert load_pipeline(path) == p


arrival_values = st.fixed_dictionaries(
    {"time_s": json_values | st.floats(0, 10), "networks": json_values
     | st.lists(st.text(max_size=6), max_size=3)}) | json_values


@FUZZ
@given(name=json_values | st.text(min_size=1, max_size=5),
       arrivals=st.lists(arrival_values, max_size=3) | json_values,
       extra=st.dictionaries(st.sampled_from(["seed", "arrival_mode", "param_bytes",
                                              "size_bin", "generator", "bogus"]), json_values,
                             max_size=3))
def test_load_pipeline_on_random_json_objects(scratch, name, arrivals, extra):
    data = dict(extra, name=name, arrivals=arrivals)
    _pipeline_contract(_write(scratch / "json.json", json.dumps(data)))


def test_deeply_nested_pipeline_json_is_refused(tmp_path):
    with pytest.raises(PipelineError):
        load_pipeline(_write(tmp_path / "deep.json", "[" * 100_000))


# ---------------------------------------------------------------------------------------
# GNU time reports: engine.probes.gnutime.parse_gnu_time

GT_OK = """\
\tCommand being timed: "python -m engine child /tmp/x/spec.json"
\tUser time (seconds): 1.25
\tSystem time (seconds): 0.31
\tPercent of CPU this job got: 97%
\tElapsed (wall clock) time (h:mm:ss or m:ss): 0:01.60
\tAverage shared text size (kbytes): 0
\tMaximum resident set size (kbytes): 123456
\tMajor (requiring I/O) page faults: 2
\tMinor (reclaiming a frame) page faults: 34567
\tVoluntary context switches: 89
\tInvoluntary context switches: 12
\tSwaps: 0
\tFile system inputs: 8
\tFile system outputs: 16
\tSignals delivered: 0
\tPage size (bytes): 4096
\tExit status: 0
"""
GT_COLUMNS = {"gt_user_s", "gt_sys_s", "gt_cpu_percent", "gt_max_rss_bytes", "gt_major_faults",
              "gt_minor_faults", "gt_voluntary_cs", "gt_involuntary_cs", "gt_swaps",
              "gt_fs_inputs", "gt_fs_outputs", "gt_signals_delivered", "gt_page_size",
              "gt_exit_status", "gt_wall_s", "gt_signal"}
GT_LABELS = [
    "User time (seconds)", "System time (seconds)", "Percent of CPU this job got",
    "Elapsed (wall clock) time (h:mm:ss or m:ss)", "Maximum resident set size (kbytes)",
    "Major (requiring I/O) page faults", "Exit status", "Page size (bytes)", "Swaps",
    "Average stack size (kbytes)", "Command being timed"]


@pytest.fixture(scope="module")
def gnu_reports(tmp_path_factory) -> list[str]:
    """Reports of real GNU time runs (exit 0, exit 3, SIGKILLed) when it is installed,
    plus a hand copy of a longer one."""
    reports = [GT_OK, "Command terminated by signal 9\n" + GT_OK]
    if os.access("/usr/bin/time", os.X_OK):
        d = tmp_path_factory.mktemp("gnutime")
        for i, cmd in enumerate(["true", "exit 3", "kill -9 $$"]):
            out = d / f"{i}.txt"
            subprocess.run(["/usr/bin/time", "-v", "-o", str(out), "sh", "-c", cmd],
                           capture_output=True)
            reports.append(out.read_text())
    return reports


def test_the_fuzzed_reports_and_dumps_are_real_ones(gnu_reports, heap_dumps):
    if os.access("/usr/bin/time", os.X_OK):
        assert len(gnu_reports) == 5
        assert "Command terminated by signal 9" in gnu_reports[4]
        assert parse_gnu_time(gnu_reports[3])["gt_exit_status"] == 3
    try:
        tcmalloc.library_path()
    except EdgeprofError:
        return
    assert len(heap_dumps) == 2 and parse_heap_profile_bytes(heap_dumps[1])["inuse_bytes"] >= 2**23


def parse_heap_profile_bytes(data: bytes) -> dict[str, int]:
    with tempfile.NamedTemporaryFile(suffix=".heap") as f:
        f.write(data)
        f.flush()
        return parse_heap_profile(f.name)


def _gnu_contract(text: str) -> dict | None:
    try:
        row = parse_gnu_time(text)
    except EdgeprofError:
        return None
    assert set(row) == GT_COLUMNS
    for k, v in row.items():
        assert v is None or isinstance(v, (int, float)), (k, v)
    assert row["gt_signal"] is None or row["gt_exit_status"] is None
    return row


@FUZZ
@given(index=st.integers(0, 4), where=fractions)
def test_parse_gnu_time_on_truncated_reports(gnu_reports, index, where):
    text = gnu_reports[index % len(gnu_reports)]
    part = cut(text, where)
    row = _gnu_contract(part)
    if part == text:
        assert row is not None and row["gt_max_rss_bytes"] > 0 and row["gt_wall_s"] >= 0


_seconds = st.floats(0, 1e6).map(lambda x: f"{x:.2f}")
_count = st.integers(0, 10**12).map(str)
_clock = st.one_of(
    st.tuples(st.integers(0, 9), st.integers(0, 59), st.floats(0, 59.99)).map(
        lambda t: f"{t[0]}:{t[1]:02d}:{t[2]:05.2f}"),
    st.tuples(st.integers(0, 59), st.floats(0, 59.99)).map(lambda t: f"{t[0]}:{t[1]:05.2f}"))
GT_VALUES = {  # what GNU time writes after each label
    "User time (seconds)": _seconds, "System time (seconds)": _seconds,
    "Percent of CPU this job got": st.integers(0, 800).map(lambda x: f"{x}%") | st.just("?%"),
    "Elapsed (wall clock) time (h:mm:ss or m:ss)": _clock,
    "Command being timed": st.text(max_size=20).map(lambda c: f'"{c}"'),
}
gt_line = st.one_of(
    st.sampled_from(GT_LABELS).flatmap(
        lambda label: GT_VALUES.get(label, _count).map(lambda v: f"\t{label}: {v}")),
    st.integers(1, 64).map(lambda s: f"Command terminated by signal {s}"),
    st.integers(1, 255).map(lambda s: f"Command exited with non-zero status {s}"),
    st.text(max_size=40).filter(lambda s: not any(lbl in s for lbl in GT_LABELS)))


@FUZZ
@given(lines=st.lists(gt_line, max_size=12))
def test_parse_gnu_time_on_random_reports(lines):
    row = _gnu_contract("\n".join(lines) + "\n")
    assert row is not None  # every value here is one GNU time can write
    signals = [int(m) for line in lines
               for m in re.findall(r"^Command terminated by signal (\d+)", line)]
    if signals:
        assert row["gt_signal"] == signals[0] and row["gt_exit_status"] is None


def test_gnu_time_report_cut_inside_the_elapsed_time():
    part = GT_OK[:GT_OK.index("0:01.60") + 2]
    assert _gnu_contract(part) is not None


# ---------------------------------------------------------------------------------------
# heap profiles: engine.probes.heap.parse_heap_profile

HEAP_TEXT = ("heap profile:     12:  4194304 [   340: 52428800] @ heapprofile\n"
             "     1:  4194304 [     1:  4194304] @ 0x7f01 0x7f02\n\nMAPPED_LIBRARIES:\n"
             "55d4c0a00000-55d4c0a2e000 r--p 00000000 08:01 1234 /usr/bin/python3.11\n")


@pytest.fixture(scope="module")
def heap_dumps(tmp_path_factory) -> list[bytes]:
    """A real gperftools dump (tcmalloc preloaded in a subprocess) when it is installed,
    and a hand copy of one."""
    dumps = [HEAP_TEXT.encode()]
    try:
        env = tcmalloc.preload_env(dict(os.environ))
    except EdgeprofError:
        return dumps
    d = tmp_path_factory.mktemp("heapdump")
    script = ("import sys, numpy as np; from pathlib import Path\n"
              "from engine.probes.heap import HeapDumper\n"
              "h = HeapDumper(); h.start(Path(sys.argv[1])); a = np.ones(2**20)\n"
              "h.dump('x'); h.stop()\n")
    subprocess.run([sys.executable, "-c", script, str(d)], env=env, check=True,
                   capture_output=True)
    dumps += [p.read_bytes() for p in sorted(d.glob("heap.*.heap"))]
    return dumps


def _heap_contract(path: Path) -> None:
    try:
        totals = parse_heap_profile(path)
    except EdgeprofError:
        return
    assert set(totals) == set(TOTALS)
    assert all(isinstance(v, int) and v >= 0 for v in totals.values())


@FUZZ
@given(data=random_bytes | st.builds(
    lambda nums, tail: ("heap profile: {}: {} [ {}: {}] @ ".format(*nums) + tail).encode(),
    st.lists(st.integers(0, 10**20), min_size=4, max_size=4), st.text(max_size=20)))
def test_parse_heap_profile_on_random_input(scratch, data):
    _heap_contract(_write(scratch / "random.heap", data))


@FUZZ
@given(index=st.integers(0, 3), where=fractions)
def test_parse_heap_profile_on_truncated_dumps(scratch, heap_dumps, index, where):
    whole = heap_dumps[index % len(heap_dumps)]
    data = cut(whole, where)
    path = _write(scratch / "cut.heap", data)
    _heap_contract(path)
    header = whole.split(b"\n")[0]
    if len(data) >= len(header):  # the header survived: the totals are the whole dump's
        m = re.match(rb"heap profile:\s*(\d+):\s*(\d+)\s*\[\s*(\d+):\s*(\d+)", header)
        assert parse_heap_profile(path) == dict(zip(TOTALS, map(int, m.groups())))


# ---------------------------------------------------------------------------------------
# ldconfig -p output: engine.probes.tcmalloc._from_ldconfig

ldconfig_line = st.one_of(
    st.text(max_size=40),
    st.builds(lambda name, path: f"\t{name} (libc6,x86-64) => {path}",
              st.sampled_from([tcmalloc.SONAME, "libfoo.so.1", tcmalloc.SONAME + "x"]),
              st.sampled_from(["/usr/lib/x86_64-linux-gnu/" + tcmalloc.SONAME,
                               "/nonexistent/" + tcmalloc.SONAME, "", "/etc/hostname"])))


@FUZZ
@given(lines=st.lists(ldconfig_line, max_size=6))
def test_from_ldconfig_on_random_output(lines):
    out = "\n".join(lines)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tcmalloc.shutil, "which", lambda *a, **k: "/sbin/ldconfig")
        mp.setattr(tcmalloc.subprocess, "run",
                   lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=out, stderr=""))
        found = tcmalloc._from_ldconfig()
    named = [line.strip().partition(" => ")[2] for line in lines
             if line.strip().startswith(tcmalloc.SONAME + " ")]
    if found is None:
        assert not any(os.path.isfile(path) for path in named)
    else:
        assert found == next(path for path in named if os.path.isfile(path))


# ---------------------------------------------------------------------------------------
# progress.jsonl: engine.runner.folder.read_progress


@pytest.fixture(scope="module")
def progress_text(models, tmp_path_factory) -> str:
    """progress.jsonl of a real (in-process) run of AgeNet twice under partial:2."""
    d = tmp_path_factory.mktemp("progress")
    pipe = Pipeline("p", [Arrival(0.0, ["AgeNet", "AgeNet"])])
    run = PipelineRun(pipe, parse_policy("partial:2"), {"AgeNet": models["AgeNet"]},
                      RunOptions(seed=1, batch=1), progress=d / "progress.jsonl")
    assert run.execute().status == "ok"
    return (d / "progress.jsonl").read_text()


@FUZZ
@given(offset=st.integers(0, 10**6))
def test_read_progress_keeps_everything_before_a_cut(scratch, progress_text, offset):
    lines = progress_text.encode().split(b"\n")[:-1]
    records = [json.loads(line) for line in lines]
    data = progress_text.encode()[:offset % (len(progress_text) + 1)]
    # records whose whole line (its newline aside) is before the cut
    ends = np.cumsum([len(line) + 1 for line in lines]) - 1
    whole = int(np.sum(ends <= len(data)))
    cut, kept = scratch / "cut", scratch / "kept"
    for folder in (cut, kept):
        folder.mkdir(exist_ok=True)
    _write(cut / "progress.jsonl", data)
    _write(kept / "progress.jsonl", b"".join(line + b"\n" for line in lines[:whole]))
    events = read_progress(cut)
    assert events == read_progress(kept)
    # counted against the records themselves, not through read_progress
    assert len(events["end"]) == sum(r["event"] == "end" for r in records[:whole])
    assert len(events["heap"]) + len(events["network"]) == sum(
        r["event"] in ("heap", "network") for r in records[:whole])


def test_read_progress_fixture_is_a_whole_run(progress_text, tmp_path):
    _write(tmp_path / "progress.jsonl", progress_text)
    events = read_progress(tmp_path)
    assert events["begin"] is not None and len(events["network"]) == 2
    assert len(events["end"]) == len(events["start"]) > 0


@pytest.mark.parametrize("line", [b"1\n", b"{}\n", b'{"event": "x"}\n', b"\xff\n"])
def test_read_progress_on_lines_that_are_not_records(tmp_path, line):
    _write(tmp_path / "progress.jsonl", b'{"event": "begin", "t0_monotonic_ns": 5}\n' + line)
    try:
        events = read_progress(tmp_path)
    except EdgeprofError:
        return
    assert events["begin"] == {"t0_monotonic_ns": 5}


# ---------------------------------------------------------------------------------------
# meta.json: engine.runner.meta.RunMeta.read


def _meta() -> RunMeta:
    return RunMeta(pipeline=PipelineInfo("p.json", "p000", "batch", "<150M", 10, ["AgeNet"]),
                   policy="masa:2", termination="memory", limits={"backend": "cgroup2"},
                   running_at_end=["0:AgeNet LOAD_3 conv3"], tasks_finished=7, exit_code=-9,
                   gnu_time={"gt_max_rss_bytes": 4096, "gt_signal": 9}, wall_s=1.5)


def _meta_contract(folder: Path) -> None:
    try:
        meta = RunMeta.read(folder)
    except EdgeprofError:
        return
    assert isinstance(meta, RunMeta) and isinstance(meta.pipeline, PipelineInfo)


@FUZZ
@given(data=random_bytes)
def test_run_meta_read_on_random_bytes(scratch, data):
    folder = scratch / "meta-random"
    folder.mkdir(exist_ok=True)
    _write(folder / "meta.json", data)
    _meta_contract(folder)


@FUZZ
@given(where=fractions)
def test_run_meta_read_on_truncated_records(scratch, where):
    folder = scratch / "meta-cut"
    folder.mkdir(exist_ok=True)
    _meta().write(folder)
    whole = (folder / "meta.json").read_bytes()
    _write(folder / "meta.json", cut(whole, where))
    _meta_contract(folder)
    if int(len(whole) * where) == len(whole):
        assert RunMeta.read(folder) == _meta()


meta_keys = list(RunMeta.__dataclass_fields__)


@FUZZ
@given(data=st.dictionaries(st.sampled_from(meta_keys + ["bogus"]), json_values, max_size=6),
       pipeline=st.none() | st.dictionaries(
           st.sampled_from(list(PipelineInfo.__dataclass_fields__) + ["bogus"]), json_values))
def test_run_meta_read_on_random_json_objects(scratch, data, pipeline):
    folder = scratch / "meta-json"
    folder.mkdir(exist_ok=True)
    _write(folder / "meta.json", json.dumps(dict(data, pipeline=pipeline)))
    _meta_contract(folder)


def test_meta_json_whose_pipeline_is_not_an_object(tmp_path):
    _write(tmp_path / "meta.json", '{"pipeline": ["p.json"]}')
    with pytest.raises(EdgeprofError):
        RunMeta.read(tmp_path)


# ---------------------------------------------------------------------------------------
# run requests: engine.runner.request.RunRequest.from_json

requests = st.builds(
    RunRequest, pipeline=st.text(max_size=8), policy=st.sampled_from(["linear", "masa:2"]),
    split=st.text(max_size=8), out=st.text(max_size=8),
    options=st.builds(RunOptions, blas_threads=st.integers(1, 4), seed=st.integers(0, 9),
                      batch=st.none() | st.integers(1, 4),
                      budget=st.none() | st.integers(1, 2**40),
                      timeout_s=st.none() | st.floats(0.1, 100),
                      estimates=st.none() | st.dictionaries(st.text(max_size=5),
                                                            st.integers(0, 2**40))),
    limits=st.builds(LimitRequest, backend=st.sampled_from(["none", "cgroup2", "vm"]),
                     limit_bytes=st.none() | st.integers(1, 2**40),
                     swap_bytes=st.none() | st.integers(0, 2**40)),
    probes=st.builds(ProbeOptions, sample_hz=st.floats(0, 1000)), force=st.booleans())


@FUZZ
@given(req=requests)
def test_run_request_round_trips_through_json(req):
    assert RunRequest.from_json(req.to_json()) == req


@pytest.mark.parametrize("text", ["", '{"pipeline": "p"', "{}", "[]"])
def test_malformed_run_request_is_refused(text):
    with pytest.raises(EdgeprofError):
        RunRequest.from_json(text)


# ---------------------------------------------------------------------------------------
# cgroup files: engine.limits.cgroupfs

mount_line = st.one_of(
    st.text(max_size=60),
    st.builds(lambda a, mp, root, fstype, opts:
              f"{a} 25 0:{a} {root} {mp} rw,nosuid - {fstype} {fstype} {opts}",
              st.integers(0, 999), st.sampled_from(["/sys/fs/cgroup", "/a\\040b", "/x/y"]),
              st.sampled_from(["/", "/user.slice", "/..", "\\134"]),
              st.sampled_from(["cgroup", "cgroup2", "ext4", "tmpfs"]),
              st.sampled_from(["rw", "rw,memory", "rw,cpu,cpuacct", "rw,nsdelegate"])))


@FUZZ
@given(lines=st.lists(mount_line, max_size=8), where=fractions)
def test_parse_mountinfo_on_random_and_truncated_text(scratch, lines, where):
    real = Path("/proc/self/mountinfo").read_text()
    for text in ("\n".join(lines), cut(real, where)):
        mounts = fs.parse_mountinfo(_write(scratch / "mountinfo", text))
        for m in mounts:
            assert isinstance(m, fs.Mount) and m.version in (1, 2)
            assert m.fstype in ("cgroup", "cgroup2") and isinstance(m.mount_point, Path)
        assert fs.v2_mount(scratch / "mountinfo") in [None, *mounts]


proc_cgroup_line = st.one_of(
    st.text(max_size=30),
    st.builds(lambda n, c, p: f"{n}:{c}:{p}", st.integers(0, 12),
              st.sampled_from(["", "memory", "cpu,cpuacct", "name=systemd"]),
              st.sampled_from(["/", "/user.slice/a:b", "/x", "x/y", ""])))


@FUZZ
@given(lines=st.lists(proc_cgroup_line, max_size=6), where=fractions)
def test_parse_proc_cgroup_and_own_cgroup_on_random_text(scratch, lines, where):
    real = Path("/proc/self/cgroup").read_text()
    mountinfo = _write(scratch / "own-mountinfo",
                       "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
                       "31 25 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n")
    for text in ("\n".join(lines), cut(real, where)):
        path = _write(scratch / "cgroup", text)
        paths = fs.parse_proc_cgroup(path)
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in paths.items())
        if "" in paths.values():  # pinned by test_own_cgroup_with_an_empty_cgroup_path
            continue
        own = fs.own_cgroup("memory", mountinfo, path)
        assert own is None or (own.version in (1, 2) and isinstance(own.path, Path))


def test_own_cgroup_with_an_empty_cgroup_path(tmp_path):
    mountinfo = _write(tmp_path / "mountinfo",
                       "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
    own = fs.own_cgroup("memory", mountinfo, _write(tmp_path / "cgroup", "0::\n"))
    assert own is None or own.version == 2


def _int_token(token: str) -> bool:
    """Tokens parse_keyed must read as numbers: ASCII decimal, as the kernel writes them."""
    return token.isascii() and token.removeprefix("-").isdigit()


keyed_text = st.lists(st.tuples(
    st.text(min_size=1, max_size=10).filter(lambda s: not any(c.isspace() for c in s)),
    st.integers(-2**70, 2**70).map(str) | st.text(max_size=6))).map(
    lambda pairs: "".join(f"{k} {v}\n" for k, v in pairs))


@FUZZ
@given(text=keyed_text | st.text(max_size=80), where=fractions)
def test_parse_keyed_on_random_text(text, where):
    for t in (text, cut(text, where)):
        out = fs.parse_keyed(t)
        assert all(isinstance(k, str) and isinstance(v, int) for k, v in out.items())
        words = t.split()
        want = {k: int(v) for k, v in zip(words[::2], words[1::2]) if _int_token(v)}
        assert out == want


@FUZZ
@given(total=st.integers(0, 2**64), text=st.text(max_size=60), where=fractions)
def test_parse_psi_and_parse_limit_on_random_text(total, text, where):
    psi = f"some avg10=0.00 avg60=0.00 avg300=0.00 total={total}\nfull avg10=1.0 total=7\n"
    assert fs.parse_psi(psi) == {"some": total, "full": 7}
    for t in (text, cut(psi, where)):
        out = fs.parse_psi(t)
        assert all(isinstance(k, str) and isinstance(v, int) and v >= 0 for k, v in out.items())
    assert fs.parse_limit(f"{total}\n") == (None if total >= fs.V1_UNLIMITED else total)
    prefix = cut(f"{total}\n", where).strip()  # a value file cut short: fewer digits
    want = None if not prefix or int(prefix) >= fs.V1_UNLIMITED else int(prefix)
    assert fs.parse_limit(cut(f"{total}\n", where)) == want
    for t in ("", "max\n", None, " \n"):
        assert fs.parse_limit(t) is None


value_text = st.one_of(st.integers(0, 2**63).map(lambda v: f"{v}\n"), st.just("max\n"),
                       st.just(""), st.just("9223372036854771712\n"), st.none())


@st.composite
def cgroup_files(draw, version: int) -> dict[str, str | None]:
    """Interface files with values the kernel can write (None: the file is absent),
    each possibly cut short."""
    r = CgroupV2Reader if version == 2 else CgroupV1Reader
    files: dict[str, str | None] = {}
    for name in set(r.VALUE_FILES) | {r.PEAK, r.LIMIT, r.CURRENT}:
        files[name] = draw(value_text)
    keyed = st.lists(st.tuples(st.sampled_from(["oom_kill", "max", "oom", "anon", "file",
                                                "swap", "total_swap", "under_oom",
                                                "hierarchical_memory_limit"]),
                               st.integers(0, 2**63)), max_size=5).map(
        lambda kv: "".join(f"{k} {v}\n" for k, v in kv))
    for name in set(r.KEYED_FILES) | {"memory.events.local", "memory.oom_control"}:
        files[name] = draw(st.none() | keyed)
    files["memory.pressure"] = draw(st.none() | st.integers(0, 10**9).map(
        lambda t: f"some avg10=0.00 avg60=0.00 avg300=0.00 total={t}\n"))
    for name, text in files.items():
        if text and text[0].isdigit() and draw(st.booleans()):  # a number cut short
            files[name] = cut(text, draw(fractions))
    return files


def _lay_out(path: Path, version: int, files: dict[str, str | None]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    for p in path.iterdir():
        if p.is_file():
            p.unlink()
    marker = "cgroup.controllers" if version == 2 else CgroupV1Reader.LIMIT
    files = dict(files)
    if files.get(marker) is None:
        files[marker] = "memory\n" if version == 2 else ""
    for name, text in files.items():
        if text is not None:
            (path / name).write_text(text)


def _reader_contract(reader: fs.CgroupReader, top: Path) -> None:
    ints = (reader.current(), reader.peak(), reader.limit(), reader.swap_peak(),
            reader.memsw_peak(), reader.swap_limit(), reader.memsw_limit(), reader.swap(),
            reader.oom_kill_count(), *reader.current_and_swap(), *reader.effective_limit(top)[:1])
    assert all(v is None or (isinstance(v, int) and v >= 0) for v in ints), ints
    for d in (reader.stat(), reader.events(), reader.events(local=True), reader.pressure()):
        assert all(isinstance(k, str) and isinstance(v, int) for k, v in d.items())
    assert isinstance(reader.limit_reached(), bool)
    assert all(isinstance(v, bool) for v in reader.features((6, 12)).values())
    assert reader.peak_reset((6, 12)) in (None, "fd", "global")
    snap = reader.snapshot()
    assert set(snap) <= set(reader.VALUE_FILES) | set(reader.KEYED_FILES)


@FUZZ
@given(version=st.sampled_from([1, 2]), data=st.data())
def test_cgroup_readers_on_fake_cgroup_dirs(scratch, version, data):
    files = data.draw(cgroup_files(version))
    top = scratch / f"cgfs{version}"
    path = top / "edgeprof-run"
    _lay_out(top, version, {})
    _lay_out(path, version, files)
    reader = fs.reader_for(path)
    assert reader.version == version
    _reader_contract(reader, top)
    with reader.kept_open(reader.COUNTER_FILES + reader.EVENT_FILES + reader.PEAK_FILES) as kept:
        _reader_contract(kept, top)
        assert kept.current_and_swap() == reader.current_and_swap()


@pytest.mark.parametrize("name, data", [("memory.max", b"abc\n"),
                                        ("memory.current", b"\xff\n")])
def test_cgroup_files_with_garbage_are_refused_with_cgroup_error(tmp_path, name, data):
    _lay_out(tmp_path, 2, {})
    (tmp_path / name).write_bytes(data)
    with pytest.raises(CgroupError):
        fs.reader_for(tmp_path).value(name)


@pytest.mark.parametrize("data", [b"anon --5\nfile 3\n", "anon \u00b2\nfile 3\n".encode()])
def test_a_stat_value_that_is_not_a_count_reads_as_unknown(tmp_path, data):
    _lay_out(tmp_path, 2, {})
    (tmp_path / "memory.stat").write_bytes(data)
    assert fs.reader_for(tmp_path).stat() == {"file": 3}


def test_parse_keyed_on_digit_like_values():
    assert fs.parse_keyed("a --5\nb 3\n") == {"b": 3}


def test_parse_mountinfo_on_non_utf8_bytes(tmp_path):
    _write(tmp_path / "mountinfo", b"30 25 0:26 / /sys/fs/\xff rw - cgroup2 cgroup2 rw\n")
    try:
        fs.parse_mountinfo(tmp_path / "mountinfo")
    except CgroupError:
        pass


# ---------------------------------------------------------------------------------------
# /proc/vmstat: engine.probes.vmstat.read_vmstat ; /proc/self/status: process.status_bytes


@FUZZ
@given(pairs=st.lists(st.tuples(st.sampled_from([*WINDOW_KEYS, "nr_free_pages", "pgfault"]),
                                st.integers(0, 2**64))), where=fractions,
       keys=st.sampled_from([None, WINDOW_KEYS]))
def test_read_vmstat_on_random_and_truncated_files(scratch, pairs, where, keys):
    real = Path("/proc/vmstat").read_text()
    text = "".join(f"{k} {v}\n" for k, v in pairs)
    for t in (text, cut(text, where), cut(real, where)):
        out = read_vmstat(keys, _write(scratch / "vmstat", t))
        assert all(isinstance(v, int) for v in out.values())
        assert keys is None or set(out) <= set(keys)
    want = {}
    for k, v in pairs:
        if keys is None or k in keys:
            want[k] = v
    assert read_vmstat(keys, _write(scratch / "vmstat", text)) == want


def test_read_vmstat_on_a_cut_line(tmp_path):
    try:
        read_vmstat(WINDOW_KEYS, _write(tmp_path / "vmstat", "pgmajfault 3\npswpin "))
    except EdgeprofError:
        pass


@FUZZ
@given(where=fractions, key=st.sampled_from([b"\nVmHWM:", b"\nVmRSS:", b"\nVmSwap:"]))
def test_status_bytes_on_truncated_proc_status(where, key):
    real = Path("/proc/self/status").read_bytes()
    buf = cut(real, where)
    start = buf.find(key)
    # pinned by test_status_bytes_on_a_cut_field: the key survived but not its "kB"
    value = status_bytes(buf, key)
    full = status_bytes(real, key)
    assert value is None or (isinstance(value, int) and value >= 0 and value % 1024 == 0)
    if buf.find(b"\n", start + 1) >= 0 and start >= 0:  # the whole line is there
        assert value == full


def test_status_bytes_on_a_cut_field():
    assert status_bytes(b"Name:\tpython\nVmHWM:\t  1234", b"\nVmHWM:") is None


# ---------------------------------------------------------------------------------------
# memory sizes: engine.units.parse_size


size_text = st.one_of(
    st.text(max_size=20),
    st.builds(lambda n, u, b: f"{n}{u}{b}", st.integers(0, 10**30) | st.floats(0, 1e6),
              st.sampled_from(["", "k", "M", "g", "T", "P", " G"]),
              st.sampled_from(["", "B", "iB", "ib", "b "])))


@FUZZ
@given(text=size_text)
def test_parse_size_on_random_text(text):
    try:
        value = parse_size(text)
    except EdgeprofError:
        return
    assert isinstance(value, int) and value >= 1


def test_parse_size_of_an_overflowing_number():
    with pytest.raises(EdgeprofError):
        parse_size("1" + "0" * 400)


# ---------------------------------------------------------------------------------------
# Other readers of files found while looking for parsers


@pytest.mark.parametrize("text", ["{", "[]", '{"AgeNet": "x"}'])
def test_malformed_estimates_file_is_one_line_error(tmp_path, text):
    from engine.cli import build_parser
    from engine.commands.run import run_request

    est = _write(tmp_path / "est.json", text)
    args = build_parser().parse_args(["run", "--pipeline", "p.json", "--policy", "masa",
                                      "--split", "m", "--out", "o", "--estimates", str(est)])
    with pytest.raises(EdgeprofError):
        run_request(args)


def test_sweep_with_an_out_of_range_pid_in_a_folder_name(tmp_path):
    from engine.procs import sweep

    (tmp_path / ".run.tmp99999999999999999999.abc").mkdir()
    assert sweep(tmp_path, ".run.tmp") == [tmp_path / ".run.tmp99999999999999999999.abc"]

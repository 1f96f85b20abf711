"""The Caffe-faithful runtime against real Caffe 1.0 (Debian bullseye's libcaffe, in a
chroot: engine/realcaffe), on the five paper networks with the engine's generated models
and partials: the same outputs, and the same resident set at every stage, within 5 % or
4 MiB. Each side runs in a fresh process after a warm-up; the interpreter's and the
libraries' baselines are left out (figures are MiB above the start). Real Caffe is
driven twice: by ``probe.cpp`` (every stage, a layer's reset included) and through
pycaffe as a user would (``pycaffe_run.py``), which must agree with each other."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from engine.realcaffe import chroot, reference
from tests.signals import default_signals

REPO = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.caffe]

PAPER_NETWORKS = ("AgeNet", "GenderNet", "FaceNet", "SoS-AlexNet", "SoS-GoogleNet")


@pytest.fixture(scope="session")
def real_caffe() -> Path:
    why = chroot.why_unavailable()
    if why:
        pytest.skip(f"real Caffe reference unavailable: {why}")
    return chroot.ensure_built()


@pytest.fixture(scope="session")
def measured(real_caffe, zoo_split, tmp_path_factory):
    """(network, mode) -> (real Caffe's, the caffe runtime's, the lean runtime's) runs."""
    work = tmp_path_factory.mktemp("realcaffe")
    out = {}
    for name in PAPER_NETWORKS:
        desc = zoo_split[name]
        data = Path(desc.path).parent.parent  # holds models/ and split/
        for mode in reference.MODES:
            out[name, mode] = (
                reference.measure_caffe(desc.path, mode, data, work / name),
                reference.measure_engine(desc.path, mode, "caffe", work / name),
                reference.measure_engine(desc.path, mode, "lean", work / name))
    return out


@pytest.fixture(scope="session")
def pycaffe(real_caffe, zoo_split, tmp_path_factory):
    """network -> real Caffe through pycaffe."""
    work = tmp_path_factory.mktemp("pycaffe")
    return {name: reference.measure_pycaffe(zoo_split[name].path,
                                            Path(zoo_split[name].path).parent.parent,
                                            work / name)
            for name in PAPER_NETWORKS}


@pytest.mark.parametrize("mode", reference.MODES)
@pytest.mark.parametrize("name", PAPER_NETWORKS)
def test_outputs_equal_real_caffes(measured, name, mode):
    caffe, ours, lean = measured[name, mode]
    assert reference.relative_error(ours.outputs, caffe.outputs) <= 1e-4
    assert reference.relative_error(lean.outputs, caffe.outputs) <= 1e-4


@pytest.mark.parametrize("mode", reference.MODES)
@pytest.mark.parametrize("name", PAPER_NETWORKS)
def test_every_stage_holds_what_real_caffe_holds(measured, name, mode):
    caffe, ours, _ = measured[name, mode]
    real, engine = reference.figures(caffe.stages, mode), reference.figures(ours.stages, mode)
    assert reference.mismatches(real, engine) == []


# Issue 38: the batch as a sweep axis; activations, im2col and Caffe's INIT-time tops
# scale with it, parameters do not
BATCHES = (1, 2, 4, 10)


def _deploy_batch(desc) -> int:
    from engine.network import Network

    return next(layer.top_shapes[0][0] for layer in Network(desc).layers
                if layer.type == "Input")


@pytest.fixture(scope="session")
def by_batch(real_caffe, zoo_split, tmp_path_factory):
    """(network, batch) -> mode -> (real Caffe's, the caffe runtime's) runs, at every
    batch of BATCHES but the network's deploy batch (``measured`` holds that one): real
    Caffe on a deploy prototxt with that input batch, the engine with ``--batch``."""
    work = tmp_path_factory.mktemp("batches")
    out = {}
    for name in PAPER_NETWORKS:
        desc = zoo_split[name]
        data = Path(desc.path).parent.parent
        for batch in set(BATCHES) - {_deploy_batch(desc)}:
            cell = work / f"{name}-{batch}"
            out[name, batch] = {
                mode: (reference.measure_caffe(desc.path, mode, data, cell, batch=batch),
                       reference.measure_engine(desc.path, mode, "caffe", cell, batch=batch))
                for mode in reference.MODES}
    return out


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("name", PAPER_NETWORKS)
def test_every_stage_holds_what_real_caffe_holds_at_every_batch(by_batch, measured,
                                                                 zoo_split, name, batch):
    """At batches 1, 2, 4 and 10, every stage of the caffe runtime within 5 % or 4 MiB
    of real Caffe's, the same outputs, and each layer's reset freeing that batch's own
    buffers (the grid's deploy-batch cell is ``measured``'s)."""
    import numpy as np

    from engine.network import Network
    from engine.runtime.caffe import layer_buffers

    runs = by_batch.get((name, batch)) or {m: measured[name, m][:2] for m in reference.MODES}
    for mode, (caffe, ours) in runs.items():
        real = reference.figures(caffe.stages, mode)
        assert reference.mismatches(real, reference.figures(ours.stages, mode)) == [], mode
        assert reference.relative_error(ours.outputs, caffe.outputs) <= 1e-4
    freed = reference.reset_frees(runs["layers"][0].stages)
    for layer in Network(zoo_split[name], batch=batch).layers:
        owned = sum(n * np.dtype(t).itemsize for n, t in layer_buffers(layer)) / 2**20
        assert abs(freed[layer.index] - owned) <= 0.5, (layer.name, freed[layer.index], owned)


def test_a_batch_changes_what_caffe_holds(by_batch, measured):
    """The grid measures what it says: GoogLeNet's activations after the forward pass
    grow with the batch in real Caffe (from 1 to 4 images: more than twice), while its
    INIT (the parameters) does not."""
    after = {b: reference.figures(by_batch["SoS-GoogleNet", b]["bulk"][0].stages, "bulk")
             for b in (1, 4)}
    assert after[4]["forward"] > 2 * after[1]["forward"]
    assert abs(after[4]["init"] - after[1]["init"]) <= 4


@pytest.mark.parametrize("name", PAPER_NETWORKS)
def test_the_lean_runtime_is_what_differs(measured, name):
    """The comparison can fail: the lean runtime, which allocates weights at their LOAD
    and frees them at their EXEC, is outside the tolerance at INIT (nothing allocated)
    and after the layers (activations and weights freed) on every network."""
    caffe, _, lean = measured[name, "layers"]
    real, engine = reference.figures(caffe.stages, "layers"), reference.figures(
        lean.stages, "layers")
    bad = reference.mismatches(real, engine)
    assert any(b.startswith("init") for b in bad)
    assert any(b.startswith("resets") for b in bad)


@pytest.mark.parametrize("name", PAPER_NETWORKS)
def test_pycaffe_sees_what_the_probe_measures(measured, pycaffe, name):
    """The same library through its Python interface, as the issue measured it: the same
    outputs as the probe's (and so the engine's), and every stage within the tolerance
    of the probe's, so the probe's figures are what a pycaffe user sees."""
    caffe_bulk, ours, _ = measured[name, "bulk"]
    py = pycaffe[name]
    assert reference.relative_error(py.outputs, caffe_bulk.outputs) == 0.0
    assert reference.relative_error(ours.outputs, py.outputs) <= 1e-4
    probe = reference.figures(caffe_bulk.stages, "bulk")
    got = reference.pycaffe_figures(py.stages)
    # its partial loads run no forward pass in between (pycaffe cannot reset a layer):
    # no probe figure to compare; docs/runtime.md shows them
    assert got.pop("partials_peak") >= got["init"]
    assert reference.mismatches(probe, got) == []


@pytest.mark.parametrize("name", PAPER_NETWORKS)
def test_each_reset_frees_exactly_the_layers_own_buffers(measured, zoo_split, name):
    """``layers_unsafe()[i].reset()`` measured layer by layer (the resident set after the
    layer's forward pass less that after its reset): what it frees is the layer object's
    own buffers (``engine.runtime.caffe.layer_buffers``: im2col, max pooling's argmax,
    LRN's scale), to a page-rounding margin, and never a parameter: ``Net::params_``
    holds a second reference to every parameter blob, and the Net owns the tops."""
    import numpy as np

    from engine.network import Network
    from engine.runtime.caffe import layer_buffers

    freed = reference.reset_frees(measured[name, "layers"][0].stages)
    net = Network(zoo_split[name])
    assert sorted(freed) == [layer.index for layer in net.layers]
    for layer in net.layers:
        owned = sum(n * np.dtype(t).itemsize for n, t in layer_buffers(layer)) / 2**20
        assert abs(freed[layer.index] - owned) <= 0.5, (layer.name, freed[layer.index], owned)


def test_a_v1_caffemodel_costs_its_upgrade(zoo_split, real_caffe, tmp_path_factory):
    """Why a whole-file load of SoS-AlexNet peaks at about 3x its weights above the
    constructed net and FaceNet's at about 1.1x: the same weights written as a V2
    caffemodel (the V1 prototxt unchanged) load at about 1.1x, so it is the V1 model's
    upgrade (two more copies of the message), not the prototxt's format. Both transients
    as ``message_peak_bytes`` predicts them from the files' layout."""
    from engine.runtime.protobuf import message_peak_bytes

    desc = zoo_split["SoS-AlexNet"]
    base = tmp_path_factory.getbasetemp()
    twin = reference.v2_caffemodel(desc.path, tmp_path_factory.mktemp("twin") / "v2.caffemodel")
    work = tmp_path_factory.mktemp("twin-work")
    v1 = reference.measure_caffe(desc.path, "bulk", base, work / "v1")
    v2 = reference.measure_caffe(desc.path, "bulk", base, work / "v2", caffemodel=twin)
    assert reference.relative_error(v2.outputs, v1.outputs) == 0.0  # the same weights
    transient = {}
    for label, run, path in (("v1", v1, desc.resolve(desc.caffemodel)), ("v2", v2, twin)):
        figs = reference.figures(run.stages, "bulk")
        transient[label] = figs["load_peak"] - figs["init"]
        predicted = message_peak_bytes(path) / 2**20
        assert abs(predicted - transient[label]) <= reference.tolerance(transient[label])
    weights = desc.param_bytes / 2**20
    assert transient["v1"] >= 2.9 * weights
    assert transient["v2"] <= 1.2 * weights


def test_a_layer_reset_frees_no_parameter(measured):
    """What EdgeCaffe's ``layers_unsafe()[i].reset()`` frees, measured: the layer's own
    buffers only. ``Net`` keeps a second reference to every parameter blob, so the
    resident set after the last reset still holds every weight; only deleting the net
    gives them back."""
    caffe, _, _ = measured["SoS-AlexNet", "layers"]
    figs = reference.figures(caffe.stages, "layers")
    weights_mib = 56_888_709 * 4 / 2**20
    assert figs["resets"][-1] >= weights_mib
    assert figs["delete"] < 0.1 * weights_mib


@pytest.mark.parametrize("name", PAPER_NETWORKS)
def test_the_parse_peak_from_the_file_layout_is_real_caffes(measured, zoo_split, name):
    """engine.runtime.protobuf.message_peak_bytes (what the slowdown model's replay holds
    during a Caffe-faithful LOAD) against real Caffe's whole-file load: its peak above
    the parameters constructed at INIT."""
    from engine.runtime.protobuf import message_peak_bytes

    desc = zoo_split[name]
    caffe, _, _ = measured[name, "bulk"]
    figs = reference.figures(caffe.stages, "bulk")
    predicted = message_peak_bytes(desc.resolve(desc.caffemodel)) / 2**20
    real = figs["load_peak"] - figs["init"]
    assert abs(predicted - real) <= reference.tolerance(real)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stopped_compare_leaves_nothing_and_says_so_in_one_line(real_caffe, zoo_split,
                                                                  tmp_path, sig):
    """``compare`` stopped while it measures a V1 model's V2 twin: one line, exit 130, its
    work folder gone, --data as it was, no probe left running; the work folder a compare
    killed by SIGKILL left (its owner dead) is removed by the next compare."""
    desc = zoo_split["AgeNet"]
    assert desc.format == "V1"  # so the compare writes a V2 twin
    data = Path(desc.path).parent.parent
    before = sorted(p.relative_to(data) for p in data.rglob("*"))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    gone = subprocess.Popen([sys.executable, "-c", ""])
    gone.wait()
    stale = tmp / f"edgeprof-realcaffe.{gone.pid}.abc"
    (stale / "sub").mkdir(parents=True)
    proc = subprocess.Popen([sys.executable, "-m", "engine.realcaffe", "compare", desc.path,
                             "--data", str(data)], cwd=REPO, env={**os.environ, "TMPDIR": str(tmp)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_signals)
    try:
        deadline = time.monotonic() + 300
        children = []  # real Caffe loading the twin: the probe under unshare
        while not (list(tmp.glob("edgeprof-realcaffe.*/age_net.v2.caffemodel"))
                   and children):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.05)
            children = psutil.Process(proc.pid).children(recursive=True)
        assert not stale.exists()  # swept at the start
        proc.send_signal(sig)
        err = proc.communicate(timeout=60)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert err == f"error: interrupted by {sig.name}\n", err
    assert list(tmp.iterdir()) == []
    assert sorted(p.relative_to(data) for p in data.rglob("*")) == before
    # none running (a zombie is dead: its reaper is whoever adopted it)
    assert not [c for c in children if _running(c)], children


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False

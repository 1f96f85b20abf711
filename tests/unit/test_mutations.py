"""Values checked against independent references (hand computations, literal numbers, a
sort done here), chosen so that specific plausible mistakes in the code are caught:

- engine/units.py with decimal instead of binary gigabytes (``"G": 10**9``);
- engine/analysis/reconcile.py with the sign of ``res_tcmalloc_minus_heap`` flipped, or
  ``res_cgroup_minus_rss`` taken against VmRSS at the window's end instead of its VmHWM;
- engine/caffe/wire.py without the float64 -> float32 cast of ``double_data`` blobs;
- masa's shortest-network-first order (dispatch.py ``snf`` key, policies.py) reversed;
- engine/runtime/caffe.py (the Caffe-faithful runtime, AgeNet by hand counts): INIT
  allocating the parameters without writing them (``np.empty`` without the fill); a
  LOAD that keeps its parsed message, or takes the message's buffers as the parameters
  instead of copying into INIT's; a layer reset that frees the parameters or the tops,
  or keeps the layer's own buffers; a bulk forward pass that frees the layers' own
  buffers as it goes; an instance that outlives its network.
- engine/model/evaluate.py training a fold's model on its held-out pipeline too;
- engine/model/simulate.py without the shared swap device (``io_rate = 1.0``);
- engine/model/fit.py keeping overlapped tasks in the time fit.
"""

from __future__ import annotations

import csv
import gc
import math
import os
import threading
import tracemalloc
import weakref
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.analysis.reconcile import reconcile_run
from engine.caffe import generate, io, schema, splitter, wire, zoo
from engine.runner.execute import PipelineRun
from engine.runner.meta import PipelineInfo, RunMeta
from engine.runner.request import RunOptions
from engine.schedule.dispatch import Dispatcher
from engine.schedule.pipelines import Arrival, Pipeline
from engine.schedule.policies import parse_policy
from engine.schedule.tasks import Instance, Kind
from engine.units import format_size, parse_size

# ---------------------------------------------------------------------------------------
# engine/units.py: K/M/G/T are binary


@pytest.mark.parametrize("text, nbytes", [
    ("1G", 1073741824), ("1.5G", 1610612736), ("1GiB", 1073741824), ("2g", 2147483648),
    ("512M", 536870912), ("1K", 1024), ("3T", 3298534883328), ("0.5 GB", 536870912),
    ("268435456", 268435456),
])
def test_parse_size_is_binary(text, nbytes):
    assert parse_size(text) == nbytes


@pytest.mark.parametrize("nbytes, text", [
    (3221225472, "3G"), (1099511627776, "1T"), (1610612736, "1536M"), (1024, "1K"),
    (1000000000, "1000000000"),  # a decimal gigabyte is no whole binary unit
    (2000000000, "1953125K"), (1536, "1536"),  # 2e9 = 1953125 * 1024
])
def test_format_size_uses_the_largest_whole_binary_unit(nbytes, text):
    assert format_size(nbytes) == text


# ---------------------------------------------------------------------------------------
# engine/analysis/reconcile.py: residuals of a hand-made run folder

TASK_COLUMNS = ["instance", "network", "layer", "layer_name", "layer_kind", "task_id",
                "task_type", "start_ns", "end_ns", "param_bytes", "cg_peak_bytes",
                "proc_hwm_bytes", "proc_rss_bytes"]
# Window VmHWM (peak) and VmRSS (at the end) differ in every row; so do tcmalloc's
# physical bytes and the heap profile's in-use bytes.
TASKS = [
    # LOAD of 1_000_000 weight bytes
    [0, "Net", 0, "conv1", "conv", 1, "LOAD", 100, 200, 1_000_000,
     9_000_000, 7_500_000, 6_000_000],
    # EXEC of the same layer
    [0, "Net", 0, "conv1", "conv", 2, "EXEC", 200, 300, 1_000_000,
     8_000_000, 7_900_000, 7_000_000],
]
HEAP_COLUMNS = ["dump", "task_id", "phase", "inuse_bytes", "inuse_objects", "alloc_bytes",
                "alloc_objects", "tc_total_physical_bytes", "tc_heap_size_bytes",
                "tc_pageheap_unmapped_bytes"]
HEAP = [
    [1, 1, "start", 2_000_000, 10, 3_000_000, 20, 3_000_000, 5_000_000, 900_000],
    [2, 1, "end", 3_100_000, 11, 4_200_000, 21, 4_000_000, 5_000_000, 800_000],
    [3, 2, "start", 3_100_000, 11, 4_200_000, 21, 4_000_000, 5_000_000, 800_000],
    [4, 2, "end", 2_100_000, 12, 4_300_000, 22, 3_500_000, 5_000_000, 1_300_000],
]


def _csv(path: Path, columns: list[str], rows: list[list]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(columns)
        w.writerows(rows)


def _run_folder(root: Path, physical: bool = True) -> Path:
    folder = root / "run"
    folder.mkdir()
    RunMeta(pipeline=PipelineInfo("p.json", "p000", "batch", None, 1_000_000, ["Net"]),
            policy="linear", termination="ok", hwm_rss_bytes=8_500_000,
            gnu_time={"gt_max_rss_bytes": 8_192_000}).write(folder)
    _csv(folder / "tasks.csv", TASK_COLUMNS, TASKS)
    heap = HEAP if physical else [row[:7] + [""] + row[8:] for row in HEAP]
    _csv(folder / "heap" / "heap.csv", HEAP_COLUMNS, heap)
    return folder


def _row(table: pd.DataFrame, task_id: int) -> pd.Series:
    [index] = table.index[table.task_id == task_id]
    return table.loc[index]


def test_reconcile_residuals_by_hand(tmp_path):
    table = reconcile_run(_run_folder(tmp_path))
    load, exe = _row(table, 1), _row(table, 2)
    # res_cgroup_minus_rss = cgroup window peak - window VmHWM (not VmRSS at the end)
    assert load.res_cgroup_minus_rss == 1_500_000  # 9_000_000 - 7_500_000
    assert exe.res_cgroup_minus_rss == 100_000  # 8_000_000 - 7_900_000
    # res_tcmalloc_minus_heap = tcmalloc physical - heap in use at the end: positive here
    assert load.res_tcmalloc_minus_heap == 900_000  # 4_000_000 - 3_100_000
    assert exe.res_tcmalloc_minus_heap == 1_400_000  # 3_500_000 - 2_100_000
    # res_rss_minus_tcmalloc = VmRSS at the end - tcmalloc physical
    assert load.res_rss_minus_tcmalloc == 2_000_000  # 6_000_000 - 4_000_000
    assert exe.res_rss_minus_tcmalloc == 3_500_000  # 7_000_000 - 3_500_000
    # res_load_vs_weights = heap growth over the LOAD - its weight bytes; NaN off LOADs
    assert load.res_load_vs_weights == 100_000  # (3_100_000 - 2_000_000) - 1_000_000
    assert math.isnan(exe.res_load_vs_weights)
    assert (load.heap_inuse_start, load.heap_inuse_end) == (2_000_000, 3_100_000)
    assert load.heap_alloc_delta == 1_200_000 and load.heap_freed == 100_000
    assert exe.heap_inuse_delta == -1_000_000 and exe.heap_freed == 1_100_000
    assert set(table.gt_max_rss_bytes) == {8_192_000}
    assert set(table.hwm_rss_bytes) == {8_500_000}
    assert set(table.pipeline) == {"p000"} and set(table.run) == {"run"}


def test_reconcile_without_total_physical_uses_heap_size_minus_unmapped(tmp_path):
    table = reconcile_run(_run_folder(tmp_path, physical=False))
    load, exe = _row(table, 1), _row(table, 2)
    assert load.tc_physical_bytes == 4_200_000  # 5_000_000 - 800_000
    assert exe.tc_physical_bytes == 3_700_000  # 5_000_000 - 1_300_000
    assert load.res_tcmalloc_minus_heap == 1_100_000  # 4_200_000 - 3_100_000
    assert exe.res_rss_minus_tcmalloc == 3_300_000  # 7_000_000 - 3_700_000


# ---------------------------------------------------------------------------------------
# engine/caffe/wire.py: double_data blobs come out as float32, as Caffe computes

DOUBLES = [0.1, -2.5, 1e-3, 3.0, 1 / 3, 7.25]  # most have no exact float32


def _double_partial(path: Path, v1: bool) -> Path:
    net = schema.NetParameter(name="ip00")
    if v1:
        layer = net.layers.add(name="ip", type=schema.V1LayerParameter.INNER_PRODUCT)
    else:
        layer = net.layer.add(name="ip", type="InnerProduct")
    weight, bias = layer.blobs.add(), layer.blobs.add()
    weight.double_data.extend(DOUBLES)
    bias.double_data.extend([0.2, -0.7])
    if v1:
        weight.num, weight.channels, weight.height, weight.width = 1, 1, 2, 3
        bias.num, bias.channels, bias.height, bias.width = 1, 1, 1, 2
    else:
        weight.shape.dim.extend([2, 3])
        bias.shape.dim.extend([2])
    path.write_bytes(net.SerializeToString())
    return path


@pytest.mark.parametrize("v1", [False, True])
def test_double_blobs_load_as_float32_equal_to_the_reference_parse(tmp_path, v1):
    path = _double_partial(tmp_path / "ip00.partial.caffemodel", v1)
    layer, arrays = wire.load_partial(path)
    ref = io.read_caffemodel(path)
    ref_blobs = [io.blob_array(b) for b in (ref.layers if v1 else ref.layer)[0].blobs]
    assert [b.dtype for b in layer.blobs] == ["<f8", "<f8"]  # stored as doubles
    assert len(arrays) == len(ref_blobs) == 2
    for arr, want in zip(arrays, ref_blobs):
        assert arr.dtype == np.float32 and want.dtype == np.float32  # array_equal ignores it
        assert arr.shape == want.shape and np.array_equal(arr, want)
    shape = (1, 1, 2, 3) if v1 else (2, 3)
    assert np.array_equal(arrays[0], np.array(DOUBLES, dtype=np.float32).reshape(shape))
    assert arrays[0].ravel()[0] == np.float32(0.1) and float(arrays[0].ravel()[0]) != 0.1


def test_float_partials_of_a_zoo_net_load_as_float32(tmp_path):
    prototxt, model = generate.write_zoo_model("AgeNet", tmp_path / "m", 2)
    desc = splitter.Description.load(splitter.split_model(model, prototxt, tmp_path / "s"))
    checked = 0
    for info in desc.layers:
        if not info.partial:
            continue
        path = desc.resolve(info.partial)
        _, arrays = wire.load_partial(path)
        ref = io.read_caffemodel(path).layers[0].blobs
        for arr, blob in zip(arrays, ref, strict=True):
            want = io.blob_array(blob)
            assert arr.dtype == np.float32 and arr.shape == want.shape
            assert np.array_equal(arr, want)
            checked += 1
    assert checked == 12  # conv1-3 and fc6-8, weight and bias each


# ---------------------------------------------------------------------------------------
# masa: LOAD/INIT pool in shortest-network-first order


def test_masa_single_worker_starts_networks_shortest_first_by_network_time():
    pol = parse_policy("masa:1")
    assert pol.order == "snf"
    network_time = {0: 30.0, 1: 10.0, 2: 20.0, 3: 10.0, 4: 5.0}
    graph = pol.build([Instance(i, "Net", 0, 2, 1) for i in range(5)])
    order: list[tuple[int, Kind]] = []
    lock = threading.Lock()

    def run_task(task):
        with lock:
            order.append((task.instance, task.kind))

    result = Dispatcher(graph, pol, run_task, dict.fromkeys(range(5), 0),
                        network_time=network_time).run()
    assert result.status == "ok" and len(order) == len(graph.tasks)
    inits = [inst for inst, kind in order if kind == Kind.INIT]
    assert inits == [4, 1, 3, 2, 0]  # by time, ties in instance order
    assert inits == sorted(network_time, key=lambda i: (network_time[i], i))
    # one worker: each network runs to its end before the next (longer) one starts
    assert [inst for inst, _ in order] == [i for i in inits for _ in range(5)]


@pytest.fixture(scope="module")
def zoo_descriptions(tmp_path_factory) -> dict[str, splitter.Description]:
    root = tmp_path_factory.mktemp("snf")
    out = {}
    for name in ("AgeNet", "GenderNet", "GoogLeNet"):
        prototxt, model = generate.write_zoo_model(name, root / "m", 1)
        path = splitter.split_model(model, prototxt, root / "s", network=name,
                                    fc_start=zoo.ZOO[name].fc_start)
        out[name] = splitter.Description.load(path)
    return out


def test_masa_runner_orders_zoo_networks_by_total_flops(zoo_descriptions):
    arrived = ["GoogLeNet", "GenderNet", "AgeNet", "GoogLeNet", "AgeNet"]  # together, t=0
    flops = {name: sum(layer.flops for layer in d.layers) for name, d in zoo_descriptions.items()}
    assert len(set(flops.values())) == 3  # three different sizes
    run = PipelineRun(Pipeline("p", [Arrival(0.0, arrived)]), parse_policy("masa:1"),
                      zoo_descriptions, RunOptions())
    inits: list[int] = []

    def no_work(task):  # the order is the dispatcher's: skip the networks' real work
        if task.kind == Kind.INIT:
            inits.append(task.instance)
        return {}

    run._work = no_work
    run.instance_done = lambda instance: None
    result = run.execute()
    assert result.status == "ok"
    expected = sorted(range(len(arrived)), key=lambda i: (flops[arrived[i]], i))
    assert inits == expected
    assert [arrived[i] for i in inits] == ["AgeNet", "AgeNet", "GenderNet", "GoogLeNet",
                                           "GoogLeNet"]


# ---------------------------------------------------------------------------------------
# engine/runtime/caffe.py: what each stage of the Caffe-faithful runtime allocates and
# frees, by hand counts on AgeNet at batch 1 (the layer table of the network's deploy
# prototxt: conv1 96x56x56 from 3x227x227 with a 7x7 stride-4 kernel, ..., fc6 512 from
# 384x7x7, fc8 8 classes)

F32 = 4
FC6_WEIGHTS = 512 * 18816 * F32  # 38 535 168 bytes
AGENET_PARAMS = 11_415_048 * F32


def _resident_share(arr: np.ndarray) -> float:
    """The share of ``arr``'s pages the kernel has mapped (/proc/self/pagemap bit 63):
    memory written (or read) since it was allocated."""
    page = os.sysconf("SC_PAGE_SIZE")
    addr = arr.__array_interface__["data"][0]
    first, last = addr // page, (addr + arr.nbytes - 1) // page
    with open("/proc/self/pagemap", "rb") as f:
        f.seek(8 * first)
        entries = np.frombuffer(f.read(8 * (last - first + 1)), "<u8")
    return float(((entries >> np.uint64(63)) & np.uint64(1)).mean())


def _traced(fn) -> tuple[int, int]:
    """(bytes still held, peak bytes) that ``fn`` allocated, by tracemalloc."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        fn()
        current, peak = tracemalloc.get_traced_memory()
        return current - before, peak - before
    finally:
        tracemalloc.stop()


SLACK = 64 * 1024  # Python objects (arrays' headers, dicts) around the counted buffers


@pytest.fixture()
def agenet(zoo_split):
    from engine.network import Network

    net = Network(zoo_split["AgeNet"], runtime_name="caffe")
    return net, {layer.name: layer.index for layer in net.layers}


def test_caffe_init_allocates_and_writes_every_parameter(agenet):
    net, _ = agenet
    held, _ = _traced(lambda: net.runtime.init(net))
    assert AGENET_PARAMS <= held <= AGENET_PARAMS + SLACK
    for arrays in net.weights.values():
        for arr in arrays:
            assert _resident_share(arr) == 1.0  # Caffe's constant filler wrote every page


def test_caffe_load_copies_into_inits_parameters_and_frees_its_message(agenet, zoo_split):
    net, at = agenet
    net.init(0)
    fc6 = at["fc6"]
    params = list(net.weights[fc6])
    held, peak = _traced(lambda: net.load_layer(fc6))
    assert held <= SLACK  # the message is gone; nothing new is kept
    assert all(a is b for a, b in zip(net.weights[fc6], params))
    # a V1 partial: the parse (fc6's buffer grown to at most twice its floats) and the
    # upgrade's two exact copies at once
    assert 3 * FC6_WEIGHTS <= peak <= 4 * FC6_WEIGHTS + SLACK
    desc = zoo_split["AgeNet"]
    _, want = wire.load_partial(desc.resolve(desc.layers[fc6].partial))
    assert np.array_equal(net.weights[fc6][0].reshape(-1), want[0].reshape(-1))


def test_caffe_reset_frees_the_layers_own_buffers_and_nothing_else(agenet):
    net, at = agenet
    net.init(0)
    for index in range(at["conv1"]):
        net.exec_layer(index)
    conv1 = at["conv1"]
    net.load_layer(conv1)
    params = list(net.weights[conv1])
    held, peak = _traced(lambda: net.exec_layer(conv1))
    top = 96 * 56 * 56 * F32
    im2col = 3 * 7 * 7 * 56 * 56 * F32
    assert top <= held <= top + SLACK  # the top stays, im2col is freed
    assert peak >= top + im2col
    assert all(a is b for a, b in zip(net.weights[conv1], params))  # Net::params_ keeps them
    assert "data" in net.blobs  # the Net owns every blob to its end
    assert net.layer_state == {}


def test_caffe_bulk_forward_keeps_every_top_and_every_layers_buffers(agenet):
    net, _ = agenet
    net.init(0)
    net.load_all()
    held, _ = _traced(net.forward)
    tops = (96 * 56 * 56 + 96 * 28 * 28 * 2 + 256 * 28 * 28 + 256 * 14 * 14 * 2
            + 384 * 14 * 14 + 384 * 7 * 7 + 512 + 512 + 8 + 8)  # ReLU, Dropout in place
    owned = (3 * 49 * 56 * 56 + 96 * 25 * 28 * 28 + 256 * 9 * 14 * 14  # conv1-3 im2col
             + 96 * 28 * 28 + 256 * 14 * 14 + 384 * 7 * 7  # max pooling's argmax (int32)
             + 96 * 28 * 28 + 256 * 14 * 14)  # LRN's scale
    assert F32 * (tops + owned) <= held <= F32 * (tops + owned) + SLACK


def test_the_networks_end_frees_all_it_held(zoo_split):
    from engine.network import Network

    net = Network(zoo_split["AgeNet"], runtime_name="caffe")
    net.init(0)
    net.load_all()
    net.forward()
    kept = [weakref.ref(a) for arrays in (net.weights, net.layer_state)
            for values in arrays.values() for a in values]
    kept += [weakref.ref(a) for a in net.blobs.values()]
    out = net.result()
    del net
    gc.collect()
    assert all(r() is None for r in kept)
    assert out["prob"].shape == (1, 8)


# ---------------------------------------------------------------------------------------
# engine/model: the cross-validation never trains on what it tests; one swap device; the
# time fit only from tasks that ran alone


@pytest.fixture(scope="module")
def two_networks(tmp_path_factory) -> dict[str, splitter.Description]:
    from tests.model_fixtures import TINY, WIDE, write_network

    root = tmp_path_factory.mktemp("nets")
    return {d.network: d for d in (write_network(root, TINY), write_network(root, WIDE))}


def test_cross_validation_never_trains_on_a_held_out_pipeline_or_network(two_networks):
    """Five pipelines of two networks, two of them twins, both schemes: every fold's
    training runs, tasks and networks rows hold none of its test pipelines nor their
    twins, and in leave-network-out none of their networks hold the held-out network;
    every pipeline is tested."""
    from engine.model.evaluate import LNO, LPO, cross_validate
    from engine.model.train import train
    from tests.model_fixtures import campaign

    # p4 is p1's twin (the same networks in another order): held out with it
    pipelines = {"p0": ["Tiny", "Tiny"], "p1": ["Tiny", "Wide"], "p2": ["Wide"],
                 "p3": ["Wide", "Wide", "Wide"], "p4": ["Wide", "Tiny"]}
    runs, tasks, networks = campaign(two_networks, pipelines)
    seen = []

    def recording(train_runs, train_tasks, train_networks, descriptions):
        seen.append((set(train_runs["pipeline"]), set(train_tasks["run_id"]),
                     set(train_networks["run_id"]),
                     set(train_runs["networks"].str.split().explode())))
        return train(train_runs, train_tasks, train_networks, descriptions)

    pred, notes = cross_validate(runs, tasks, networks, two_networks, orderings=0,
                                 trainer=recording)
    folds = pred.drop_duplicates(["scheme", "fold"])
    assert len(seen) == len(folds) == 4 + 2 and not notes
    for (pipes, task_runs, net_runs, nets), fold in zip(seen, folds.itertuples()):
        test = pred[(pred["scheme"] == fold.scheme) & (pred["fold"] == fold.fold)]
        test_runs = set(runs.loc[runs["pipeline"].isin(test["pipeline"]), "run_id"])
        assert not pipes & set(test["pipeline"]), fold
        tested = {tuple(sorted(pipelines[p])) for p in test["pipeline"]}
        assert not tested & {tuple(sorted(pipelines[p])) for p in pipes}, fold
        assert not task_runs & test_runs and not net_runs & test_runs, fold
        if fold.scheme == LNO:
            assert fold.fold not in nets
            holding = {p for p, members in pipelines.items() if fold.fold in members}
            assert set(test["pipeline"]) == holding
    assert set(pred.loc[pred["scheme"] == LPO, "pipeline"]) == set(pipelines)
    assert "p1+p4" in set(pred.loc[pred["scheme"] == LPO, "fold"])


def test_tasks_waiting_for_swap_share_one_device():
    """Two LOADs that each wait 1 s for swap at the same time, on two workers, with no
    work: one device serves both at half speed, so both end at 2 s (not 1 s); a wait
    beside a task that computes 1 s shares nothing: 1 s."""
    from engine.model.simulate import simulate

    policy = parse_policy("partial:2")
    instances = [Instance(0, "A", 0, 1, 1), Instance(1, "B", 0, 1, 1)]
    g = policy.build(instances)
    loads = [t.id for t in g.tasks if t.kind == Kind.LOAD]
    both = simulate(g, policy, {0: 0.0, 1: 0.0}, lambda t: 0.0,
                    on_start=lambda t: 1.0 if t.kind == Kind.LOAD else 0.0)
    assert [both.end_s[i] for i in loads] == [pytest.approx(2.0)] * 2
    assert both.makespan_s == pytest.approx(2.0)
    g = policy.build(instances)
    mixed = simulate(g, policy, {0: 0.0, 1: 0.0},
                     lambda t: 1.0 if t.kind == Kind.LOAD and t.instance == 1 else 0.0,
                     on_start=lambda t: 1.0 if t.kind == Kind.LOAD and t.instance == 0
                     else 0.0, cpus=1.0)
    assert mixed.makespan_s == pytest.approx(1.0)


def test_the_time_fit_takes_only_the_tasks_that_ran_alone():
    """One LOAD timed alone at 1, 2 and 3 ms and overlapped (slowed by a neighbour) at
    10, 20, 30 and 40 ms: its median is 2 ms; a line fitted through such medians of
    four layers (1 + 1 ms/MB, alone) recovers the solo line."""
    from engine.model.fit import fit_linear, solo_medians

    rows = []
    for layer, mb in enumerate([1.0, 2.0, 4.0, 8.0]):
        solo = 1e-3 + 1e-3 * mb
        for seconds, overlap in ([(solo * f, 0) for f in (0.5, 1.0, 1.5)]
                                 + [(solo * f, 1) for f in (10, 20, 30, 40)]):
            rows.append({"network": "N", "batch": 1, "layer": layer, "task_type": "LOAD",
                         "ltype": "", "duration_s": seconds, "overlap": overlap, "bytes": mb * 1e6,
                         **{c: 0.0 for c in ("macs", "flops", "weight_bytes", "scratch_bytes",
                                             "elements", "input_bytes")}})
    med = solo_medians(pd.DataFrame(rows))
    assert med.loc[med["layer"] == 0, "duration_s"].item() == pytest.approx(2e-3)
    assert list(med["n"]) == [3, 3, 3, 3]
    line = fit_linear(med[["bytes"]], med["duration_s"])
    assert line.intercept == pytest.approx(1e-3) and line.coef["bytes"] == pytest.approx(1e-9)

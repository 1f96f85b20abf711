"""Values checked against independent references (hand computations, literal numbers, a
sort done here), chosen so that specific plausible mistakes in the code are caught:

- engine/units.py with decimal instead of binary gigabytes (``"G": 10**9``);
- engine/analysis/reconcile.py with the sign of ``res_tcmalloc_minus_heap`` flipped, or
  ``res_cgroup_minus_rss`` taken against VmRSS at the window's end instead of its VmHWM;
- engine/caffe/wire.py without the float64 -> float32 cast of ``double_data`` blobs;
- masa's shortest-network-first order (dispatch.py ``snf`` key, policies.py) reversed.
"""

from __future__ import annotations

import csv
import math
import threading
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

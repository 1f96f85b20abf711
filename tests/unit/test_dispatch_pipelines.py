"""Event-driven dispatch (ordering, admission, failures, arrivals) and pipeline generation."""

from __future__ import annotations

import threading
import time

import pytest

from engine.schedule import pipelines
from engine.schedule.dispatch import Dispatcher
from engine.schedule.policies import parse_policy
from engine.schedule.tasks import Instance, Kind


def _run(policy: str, n: int = 2, layers: int = 4, work=None, arrivals=None, **kw):
    pol = parse_policy(policy)
    graph = pol.build([Instance(i, "Net", i, layers, layers // 2) for i in range(n)])
    order = []
    lock = threading.Lock()

    def run_task(task):
        with lock:
            order.append(task.id)
        if work:
            work(task)
        return {}

    arrivals = arrivals or {i: 0 for i in range(n)}
    d = Dispatcher(graph, pol, run_task, arrivals, **kw)
    return graph, d.run(), order


@pytest.mark.parametrize("policy", ["partial:3", "deepeye", "masa:2", "linear", "execprio:2"])
def test_no_task_starts_before_its_dependencies_end(policy):
    graph, result, order = _run(policy, n=3, work=lambda t: time.sleep(0.0005))
    assert result.status == "ok"
    recs = result.records
    assert sorted(order) == list(range(len(graph.tasks)))
    for t in graph.tasks:
        for d in t.deps:
            assert recs[d].end_ns <= recs[t.id].start_ns
    for t in graph.tasks:
        if t.pool == 1 and policy == "deepeye":
            assert recs[t.id].worker == 1
        if t.pool == 0 and policy == "deepeye":
            assert recs[t.id].worker == 0


def test_single_worker_fcfs_runs_in_id_order_and_execprio_prefers_exec():
    graph, _, order = _run("partial:1", n=1)
    assert order == list(range(len(graph.tasks)))  # FCFS = creation order
    graph, _, order = _run("execprio:1", n=1, layers=3)
    labels = [graph.tasks[i].label for i in order]
    # after INIT every LOAD is ready; EXEC_i runs as soon as it is ready
    assert labels == ["INIT", "LOAD_0", "EXEC_0", "LOAD_1", "EXEC_1", "LOAD_2", "EXEC_2"]


def test_masa_admits_a_network_only_when_its_estimate_fits():
    pol = parse_policy("masa:2")
    graph = pol.build([Instance(i, "Net", 0, 3, 2) for i in range(3)])
    for t in graph.tasks:
        if t.kind == Kind.INIT:
            t.required_memory = 60  # two networks never fit a budget of 100
    active, peak = set(), [0]
    lock = threading.Lock()

    def run_task(task):
        with lock:
            active.add(task.instance)
            peak[0] = max(peak[0], len(active))
        time.sleep(0.001)

    def done(instance):
        with lock:
            active.discard(instance)

    d = Dispatcher(graph, pol, run_task, {0: 0, 1: 0, 2: 0}, budget=100,
                   on_instance_done=done)
    result = d.run()
    assert result.status == "ok" and peak[0] == 1
    # with room for all three, they overlap
    d = Dispatcher(pol.build([Instance(i, "Net", 0, 3, 2) for i in range(3)]), pol,
                   run_task, {0: 0, 1: 0, 2: 0}, budget=1000, on_instance_done=done)
    peak[0] = 0
    assert d.run().status == "ok" and peak[0] > 1


def test_a_failing_task_stops_the_run_without_hanging():
    def work(task):
        if task.label == "EXEC_2" and task.instance == 0:
            raise RuntimeError("boom")
        time.sleep(0.0005)

    graph, result, order = _run("partial:3", n=3, work=work)
    assert result.status == "error"
    assert str(result.error) == "boom" and result.failed_task.label == "EXEC_2"
    assert len(order) < len(graph.tasks)
    assert threading.active_count() == 1  # every worker joined


def test_arrivals_gate_init_tasks():
    arrivals = {0: 0, 1: 30_000_000}  # 30 ms
    graph, result, _ = _run("partial:2", arrivals=arrivals)
    init1 = next(t for t in graph.tasks if t.kind == Kind.INIT and t.instance == 1)
    assert result.records[init1.id].start_ns >= 30_000_000
    assert result.released_ns[1] >= 30_000_000


def test_timeout_and_external_stop():
    pol = parse_policy("linear")
    graph = pol.build([Instance(0, "Net", 0, 50, 25)])
    d = Dispatcher(graph, pol, lambda t: time.sleep(0.01), {0: 0})
    result = d.run(timeout_s=0.05)
    assert result.status == "timeout"
    assert sum(r.end_ns >= 0 for r in result.records) < len(graph.tasks)
    d = Dispatcher(pol.build([Instance(0, "Net", 0, 50, 25)]), pol,
                   lambda t: time.sleep(0.01), {0: 0})
    threading.Timer(0.05, d.stop, args=("interrupted",)).start()
    assert d.run().status == "interrupted"


@pytest.mark.timing
def test_a_timeout_stops_the_dispatcher_within_a_task_of_it():
    """101 tasks of 10 ms (over a second) under a 50 ms timeout: it returns after the
    timeout and the task running then, not after the pipeline."""
    pol = parse_policy("linear")
    graph = pol.build([Instance(0, "Net", 0, 50, 25)])
    d = Dispatcher(graph, pol, lambda t: time.sleep(0.01), {0: 0})
    t0 = time.perf_counter()
    assert d.run(timeout_s=0.05).status == "timeout"
    assert time.perf_counter() - t0 < 1.0


SIZES = {"AgeNet": 45_660_192, "AlexNet": 243_860_896, "GoogLeNet": 27_994_208}


def test_pipelines_are_reproducible_and_prefix_stable():
    a = pipelines.generate_pipelines(5, 4, SIZES, (2, 4), {"mode": "poisson", "rate": 2.0})
    b = pipelines.generate_pipelines(5, 6, SIZES, (2, 4), {"mode": "poisson", "rate": 2.0})
    assert [p.to_json() for p in a] == [p.to_json() for p in b[:4]]
    c = pipelines.generate_pipelines(6, 4, SIZES, (2, 4), {"mode": "poisson", "rate": 2.0})
    assert [p.networks() for p in a] != [p.networks() for p in c]
    for p in a:
        assert 2 <= len(p.networks()) <= 4
        times = [x.time_s for x in p.arrivals]
        assert times[0] == 0 and times == sorted(times) and len(set(times)) == len(times)
        assert p.param_bytes == sum(SIZES[n] for n in p.networks())


def test_arrival_modes_and_size_bins():
    batch = pipelines.generate_pipelines(1, 3, SIZES, (3, 3), {"mode": "batch"}, [100, 300])
    for p in batch:
        assert len(p.arrivals) == 1 and p.arrivals[0].time_s == 0
    normal = pipelines.generate_pipelines(1, 50, SIZES, (5, 5),
                                          {"mode": "normal", "mean": 1.0, "sd": 0.0})
    assert all([a.time_s for a in p.arrivals] == [0, 1, 2, 3, 4] for p in normal)
    poisson = pipelines.generate_pipelines(2, 200, SIZES, (5, 5), {"mode": "poisson",
                                                                    "rate": 4.0})
    gaps = [b.time_s - a.time_s for p in poisson for a, b in zip(p.arrivals, p.arrivals[1:])]
    assert abs(sum(gaps) / len(gaps) - 0.25) < 0.03  # mean gap 1/rate
    assert pipelines.size_bin(50 * 2**20, [100, 300]) == "0-100 MiB"
    assert pipelines.size_bin(150 * 2**20, [100, 300]) == "100-300 MiB"
    assert pipelines.size_bin(400 * 2**20, [100, 300]) == ">=300 MiB"


def test_pipeline_files_round_trip_and_bad_input(tmp_path):
    p = pipelines.generate_pipelines(0, 1, SIZES, (2, 3), {"mode": "poisson", "rate": 1})[0]
    pipelines.save_pipeline(p, tmp_path / "p.json")
    assert pipelines.load_pipeline(tmp_path / "p.json") == p
    (tmp_path / "bad.json").write_text('{"name": "x", "arrivals": []}')
    with pytest.raises(pipelines.PipelineError, match="has no networks"):
        pipelines.load_pipeline(tmp_path / "bad.json")
    with pytest.raises(pipelines.PipelineError, match="cannot read pipeline"):
        pipelines.load_pipeline(tmp_path / "missing.json")
    for arrival, words in [({"mode": "uniform"}, "not one of"),
                           ({"mode": "poisson"}, "positive, finite 'rate'"),
                           ({"mode": "poisson", "rate": float("inf")}, "finite 'rate'"),
                           ({"mode": "normal", "mean": float("inf"), "sd": 0}, "finite"),
                           ({"mode": "normal", "mean": 1}, "'mean' and 'sd'")]:
        with pytest.raises(pipelines.PipelineError, match=words):
            pipelines.generate_pipelines(0, 1, SIZES, (1, 2), arrival)

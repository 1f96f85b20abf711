"""Reconciliation on a real run: tcmalloc preloaded, a heap profile at every task boundary,
every other probe on (backend ``none``: no cgroup on the development machine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.analysis.reconcile import reconcile_run
from engine.runner.request import LimitOptions, ProbeOptions, RunOptions, RunRequest
from engine.runner.supervise import run_supervised
from engine.schedule.pipelines import Arrival, Pipeline, save_pipeline


@pytest.fixture(scope="module")
def heap_run(zoo_split, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("reconcile")
    pipe = root / "p.json"
    save_pipeline(Pipeline("p", [Arrival(0.0, ["AgeNet", "GenderNet"])]), pipe)
    models = Path(zoo_split["AgeNet"].path).parent
    out = root / "run"
    run_supervised(RunRequest(str(pipe), "linear", str(models), str(out), RunOptions(seed=3),
                              LimitOptions("none"),
                              ProbeOptions(heap_profile=True, sample_hz=50)))
    return out


@pytest.fixture(scope="module")
def table(heap_run):
    return reconcile_run(heap_run).sort_values("start_ns", ignore_index=True)


def test_heap_growth_over_each_load_equals_the_layers_weight_bytes(table):
    loads = table[(table.task_type == "LOAD") & (table.param_bytes > 0)]
    assert len(loads) == 12  # AgeNet, GenderNet: conv1-3 and fc6-8 each
    error = (loads.heap_inuse_delta - loads.param_bytes).abs()
    assert (error <= 0.01 * loads.param_bytes).all(), loads[["layer_name", "param_bytes",
                                                              "heap_inuse_delta"]]
    assert (loads.res_load_vs_weights == loads.heap_inuse_delta - loads.param_bytes).all()


def test_each_exec_frees_its_layers_weights_and_nothing_is_retained(table):
    execs = table[(table.task_type == "EXEC") & (table.param_bytes > 0)]
    assert (execs.heap_freed >= execs.param_bytes).all()
    for _, net in table.groupby("instance"):
        first_load = net[net.task_type == "LOAD"].iloc[0]
        weights = net.loc[net.task_type == "LOAD", "param_bytes"].sum()
        retained = net.iloc[-1].heap_inuse_end - first_load.heap_inuse_start
        assert retained < 0.01 * weights


def test_instruments_are_side_by_side_with_named_residuals(table, heap_run):
    meta = json.loads((heap_run / "meta.json").read_text())
    windows = table[table.task_type.isin(["LOAD", "EXEC"])]
    for col in ("proc_hwm_bytes", "proc_rss_bytes", "tc_physical_bytes", "heap_inuse_end"):
        assert windows[col].notna().all() and (windows[col] > 0).all(), col
    # Outer instruments hold at least what the inner ones count.
    assert (windows.proc_rss_bytes >= windows.tc_physical_bytes).all()
    assert (windows.tc_physical_bytes >= windows.heap_inuse_end).all()
    assert (windows.res_rss_minus_tcmalloc
            == windows.proc_rss_bytes - windows.tc_physical_bytes).all()
    # No cgroup here: its columns are NaN, not zero, and the run says it was not limited.
    assert windows.cg_peak_bytes.isna().all() and not meta["limit_enforced"]
    # The run's high-water mark is at least GNU time's and every window's VmHWM.
    hwm = table.hwm_rss_bytes.iloc[0]
    assert hwm >= table.gt_max_rss_bytes.iloc[0] and hwm >= windows.proc_hwm_bytes.max()
    assert (heap_run / "heap" / "heap.csv").is_file()

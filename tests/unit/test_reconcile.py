"""Reconciliation on a real run: tcmalloc preloaded, a heap profile at every task boundary,
every other probe on (backend ``none``: no cgroup on the development machine)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.analysis import reconcile
from engine.analysis.reconcile import reconcile_run
from engine.limits import LimitRequest
from engine.runner.request import ProbeOptions, RunOptions, RunRequest
from engine.runner.supervise import run_supervised
from engine.schedule.pipelines import Arrival, Pipeline, save_pipeline

MiB = 2**20


@pytest.fixture(scope="module")
def heap_run(zoo_split, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("reconcile")
    pipe = root / "p.json"
    save_pipeline(Pipeline("p", [Arrival(0.0, ["AgeNet", "GenderNet"])]), pipe)
    models = Path(zoo_split["AgeNet"].path).parent
    out = root / "run"
    run_supervised(RunRequest(str(pipe), "linear", str(models), str(out), RunOptions(seed=3),
                              LimitRequest(backend="none"),
                              ProbeOptions(heap_profile=True, sample_hz=50)))
    return out


@pytest.fixture(scope="module")
def table(heap_run):
    return reconcile_run(heap_run).sort_values("start_ns", ignore_index=True)


def test_heap_growth_over_each_load_equals_the_layers_weight_bytes(table):
    loads = table[(table.task_type == "LOAD") & (table.param_bytes > 0)]
    assert len(loads) == 12  # AgeNet, GenderNet: conv1-3 and fc6-8 each
    error = (loads.heap_inuse_delta - loads.param_bytes).abs()
    # the plausibility check's own tolerance: 1 %, or a few Python objects (a 16 KiB
    # layer's LOAD also allocates ~2 KiB of them)
    allowed = np.maximum(reconcile.LOAD_REL * loads.param_bytes, reconcile.LOAD_ABS)
    assert (error <= allowed).all(), loads[["layer_name", "param_bytes", "heap_inuse_delta"]]
    big = loads.param_bytes > 1 << 20
    assert (error[big] <= 0.01 * loads.param_bytes[big]).all()
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


def test_every_window_is_attributed_and_plausible(table):
    from engine.analysis.reconcile import PARTS

    windows = table[table.task_type.isin(["LOAD", "EXEC"])]
    assert (windows.att_outer == "VmRSS").all()
    # the kernel's split of RSS, the arena's residency and tcmalloc's counters are all there
    for col in ("proc_rss_anon_bytes", "proc_rss_file_bytes", "proc_brk_resident_bytes",
                "att_weights_bytes", "att_allocator_free_bytes", "att_interpreter_anon_bytes",
                "att_file_bytes", "att_mapped_not_resident_bytes"):
        assert windows[col].notna().all(), col
    parts = windows[PARTS].sum(axis=1)
    assert ((windows.proc_rss_bytes - parts - windows.att_unexplained_bytes).abs() < 1).all()
    bound = np.maximum(2 * MiB, 0.02 * windows.att_outer_bytes)
    assert (windows.att_unexplained_bytes.abs() <= bound).all()
    assert windows.plausible.all(), windows.loc[~windows.plausible, ["layer_name",
                                                                     "implausible"]]
    # libraries do not vanish: the file-backed part holds within a few MiB all run long
    assert windows.att_file_bytes.max() - windows.att_file_bytes.min() < 4 * MiB
    assert windows.att_file_bytes.min() > 5 * MiB
    # weights in use at the end of each weighted LOAD are that layer's weights (linear)
    loads = windows[(windows.task_type == "LOAD") & (windows.param_bytes > 0)]
    assert (loads.att_weights_bytes == loads.param_bytes).all()
    assert windows.att_why.str.contains("VmRSS").all()

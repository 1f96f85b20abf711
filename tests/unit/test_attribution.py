"""The attribution arithmetic of engine.analysis.reconcile on synthetic counters: parts
from their counters, the explicit remainder, the plausibility flags, the cgroup split."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from engine.analysis.reconcile import PARTS, attribute, check, weights_in_use
from engine.probes.process import resident_pages, start_brk, status_bytes, status_parts

MiB = 2**20


def _window(**values) -> dict:
    base = {"instance": 0, "network": "N", "layer": 1, "layer_name": "fc", "task_id": 1,
            "task_type": "EXEC", "param_bytes": 0, "start_ns": 0, "end_ns": 1}
    return base | values


def _native(**over) -> dict:
    """A heap-profiled native window: RSS 100 MiB = anon 70 + file 29 + shmem 1."""
    return _window(proc_rss_bytes=100 * MiB, proc_rss_anon_bytes=70 * MiB,
                   proc_rss_file_bytes=29 * MiB, proc_rss_shmem_bytes=1 * MiB,
                   proc_swap_bytes=0, proc_brk_resident_bytes=50 * MiB,
                   tc_current_allocated_bytes=40 * MiB, tc_physical_bytes=55 * MiB,
                   heap_inuse_end=35 * MiB, heap_inuse_delta=0) | over


def test_native_parts_come_from_their_counters_and_add_up():
    row = check(attribute(pd.DataFrame([_native(att_weights_in_use=20 * MiB)]))).iloc[0]
    assert row.att_outer == "VmRSS" and row.att_outer_bytes == 100 * MiB
    assert row.att_weights_bytes == 20 * MiB
    assert row.att_activations_bytes == 15 * MiB  # heap in use 35 - weights 20
    assert row.att_malloc_baseline_bytes == 5 * MiB  # tcmalloc allocated 40 - heap 35
    assert row.att_allocator_free_bytes == 10 * MiB  # arena resident 50 - allocated 40
    assert row.att_interpreter_anon_bytes == 20 * MiB  # RssAnon 70 - arena resident 50
    assert row.att_file_bytes == 29 * MiB and row.att_shmem_bytes == 1 * MiB
    assert row.att_mapped_not_resident_bytes == 5 * MiB  # physical 55 - resident 50
    assert row.att_unexplained_bytes == 0 and row.plausible and row.implausible == ""
    assert np.isnan(row.att_anon_bytes) and np.isnan(row.att_page_cache_bytes)
    # the gaps between instruments are exact sums of parts
    assert "= file-backed 30.0 + non-malloc anon 20.0 − tcmalloc pages not resident 5.0" \
        in row.att_why


def test_without_a_heap_profile_the_anonymous_part_is_not_split():
    row = attribute(pd.DataFrame([_native(proc_brk_resident_bytes=None,
                                          tc_current_allocated_bytes=None,
                                          heap_inuse_end=None)])).iloc[0]
    assert row.att_anon_bytes == 70 * MiB and np.isnan(row.att_weights_bytes)
    assert row.att_unexplained_bytes == 0


def test_a_remainder_beyond_2_mib_and_2_percent_is_flagged():
    # RSS says 110 MiB but the kernel parts sum to 100: 10 MiB unexplained (> 2.2 MiB)
    rows = pd.DataFrame([_native(proc_rss_bytes=110 * MiB),
                         _native(proc_rss_bytes=int(101.5 * MiB), task_id=2, end_ns=2)])
    out = check(attribute(rows))
    assert out.att_unexplained_bytes.tolist() == [10 * MiB, 1.5 * MiB]
    assert out.plausible.tolist() == [False, True]
    assert "unexplained" in out.implausible[0]


def test_a_negative_part_is_flagged_by_name():
    # tcmalloc claims more allocated than its arena has resident: allocated pages untouched
    out = check(attribute(pd.DataFrame([_native(tc_current_allocated_bytes=60 * MiB)])))
    assert out.att_allocator_free_bytes[0] == -10 * MiB
    assert not out.plausible[0]
    assert "att_allocator_free_bytes < 0" in out.implausible[0]
    # within the tolerance it is not
    ok = check(attribute(pd.DataFrame([_native(tc_current_allocated_bytes=50.5 * MiB)])))
    assert ok.plausible[0]


def test_file_part_must_stay_put_between_windows_and_loads_match_weights():
    rows = pd.DataFrame([
        _native(task_id=1, end_ns=1),
        _native(task_id=2, end_ns=2, proc_rss_file_bytes=29 * MiB + 3 * MiB,
                proc_rss_bytes=103 * MiB),
        _native(task_id=3, end_ns=3, proc_rss_file_bytes=40 * MiB, proc_rss_bytes=111 * MiB),
        _native(task_id=4, end_ns=4, task_type="LOAD", param_bytes=10 * MiB,
                heap_inuse_delta=int(10.2 * MiB), proc_rss_file_bytes=40 * MiB,
                proc_rss_bytes=111 * MiB)])
    out = check(attribute(rows))
    assert out.chk_file_stable.tolist() == [True, True, False, True]
    assert out.chk_load_weights.isna()[:3].all() and out.chk_load_weights[3] == False  # noqa: E712
    assert out.implausible[3] == "load_weights"


def test_weights_in_use_follow_loads_and_execs_in_end_order():
    df = pd.DataFrame([
        _window(task_id=1, layer=0, task_type="LOAD", param_bytes=10, end_ns=1),
        _window(task_id=2, layer=1, task_type="LOAD", param_bytes=5, end_ns=2),
        _window(task_id=3, layer=0, task_type="EXEC", end_ns=3),
        _window(task_id=4, instance=1, layer=-1, task_type="LOAD", param_bytes=7, end_ns=4),
        _window(task_id=5, instance=1, layer=-1, task_type="EXEC", end_ns=5),
        _window(task_id=6, layer=1, task_type="EXEC", end_ns=6)])
    assert weights_in_use(df.iloc[::-1]).sort_index().tolist() == [10, 15, 5, 12, 5, 0]


def test_cgroup_window_attributes_the_charge():
    row = _native(cg_current_bytes=150 * MiB, cg_anon_bytes=71 * MiB, cg_file_bytes=70 * MiB,
                  cg_file_mapped_bytes=10 * MiB, cg_shmem_bytes=1 * MiB,
                  cg_kernel_bytes=8 * MiB, cg_sock_bytes=0, cg_swap_current_bytes=3 * MiB,
                  att_weights_in_use=20 * MiB)
    out = check(attribute(pd.DataFrame([row]))).iloc[0]
    assert out.att_outer == "cgroup memory.current"
    assert out.att_other_anon_bytes == 1 * MiB  # cgroup anon 71 - the process's 70
    assert out.att_file_bytes == 10 * MiB  # the cgroup's mapped files
    assert out.att_page_cache_bytes == 59 * MiB  # file 70 - mapped 10 - shmem 1
    assert out.att_kernel_bytes == 8 * MiB and out.att_swap_bytes == 3 * MiB
    parts = sum(out[p] for p in PARTS if pd.notna(out[p]))
    assert parts == 150 * MiB - 1 * MiB  # 1 MiB of memory.current not in memory.stat
    assert out.att_unexplained_bytes == 1 * MiB and out.plausible


def test_status_parts_and_mincore_counting():
    buf = (b"Name:\tpython\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nRssAnon:\t   512 kB\n"
           b"RssFile:\t   500 kB\nRssShmem:\t    12 kB\nVmSwap:\t     4 kB\n")
    assert status_parts(buf) == {"proc_rss_anon_bytes": 512 * 1024,
                                 "proc_rss_file_bytes": 500 * 1024,
                                 "proc_rss_shmem_bytes": 12 * 1024,
                                 "proc_swap_bytes": 4 * 1024}
    assert status_bytes(buf, b"\nVmRSS:") == sum(list(status_parts(buf).values())[:3])
    assert resident_pages(bytearray([1, 0, 1, 1, 0, 9]), 5) == 3
    stat = b"123 (a b) S " + b" ".join(str(i).encode() for i in range(4, 53))
    assert start_brk(stat) == 47


@pytest.mark.parametrize("env, expected", [({"LD_PRELOAD": "/x/libtcmalloc.so.4"}, True),
                                           ({}, False)])
def test_arena_residency_only_with_tcmalloc(env, expected):
    from engine.probes.process import tcmalloc_preloaded

    assert tcmalloc_preloaded(env) is expected

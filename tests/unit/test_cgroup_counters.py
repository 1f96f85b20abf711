"""Window counters against fake cgroup directories in tmp_path.

A fake file cannot reset a peak per fd as the kernel does; what is checked is that each
window writes its reset to its own fd, reads the values back at close, and computes the
deltas, the flags and the None-for-missing columns right. The test plays the kernel by
rewriting files between open_window and close_window.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from engine.probes import cgroup as cgroup_probe
from engine.probes.cgroup import COLUMNS, CgroupCounters

V2_STAT_KEYS = ("anon file kernel kernel_stack pagetables percpu sock vmalloc shmem file_mapped "
                "file_dirty file_writeback swapcached anon_thp inactive_anon active_anon "
                "inactive_file active_file unevictable slab_reclaimable slab_unreclaimable "
                "slab workingset_refault_anon workingset_refault_file workingset_activate_anon "
                "workingset_activate_file workingset_nodereclaim pswpin pswpout pgscan pgsteal "
                "pgfault pgmajfault pgrefill pgactivate pgdeactivate").split()
V1_STAT_KEYS = ("cache rss rss_huge shmem mapped_file dirty writeback swap pgpgin pgpgout "
                "pgfault pgmajfault inactive_anon active_anon inactive_file active_file "
                "unevictable").split()
EVENTS = "low 0\nhigh 0\nmax {max}\noom {oom}\noom_kill {oom}\noom_group_kill 0\n"
PRESSURE = ("some avg10=0.00 avg60=0.00 avg300=0.00 total={some}\n"
            "full avg10=0.00 avg60=0.00 avg300=0.00 total={full}\n")
OOM_CONTROL = "oom_kill_disable 0\nunder_oom 0\noom_kill {oom}\n"


def stat_text(keys, skip=(), **values: int) -> str:
    return "".join(f"{k} {values.get(k, 0)}\n" for k in keys if k not in skip)


def v1_stat_text(**values: int) -> str:
    local = stat_text(V1_STAT_KEYS, **values)
    totals = "".join(f"total_{k} {values.get('total_' + k, 0)}\n" for k in V1_STAT_KEYS)
    return (local + "hierarchical_memory_limit 536870912\n"
            "hierarchical_memsw_limit 9223372036854771712\n" + totals)


def write(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (path / name).write_text(text)  # truncates in place: kept-open fds see it
    return path


@pytest.fixture
def v2(tmp_path) -> Path:
    return write(tmp_path / "edgeprof-run", {
        "cgroup.controllers": "memory\n", "memory.current": "5000\n", "memory.peak": "9000\n",
        "memory.swap.current": "0\n", "memory.swap.peak": "0\n", "memory.max": "1048576\n",
        "memory.stat": stat_text(V2_STAT_KEYS, anon=1000, file=2000, pgmajfault=5),
        "memory.events": EVENTS.format(max=0, oom=0),
        "memory.pressure": PRESSURE.format(some=1234, full=567)})


@pytest.fixture
def v1(tmp_path) -> Path:
    return write(tmp_path / "edgeprof-run1", {
        "memory.limit_in_bytes": "536870912\n", "memory.usage_in_bytes": "4096\n",
        "memory.max_usage_in_bytes": "777777\n", "memory.memsw.usage_in_bytes": "8192\n",
        "memory.memsw.max_usage_in_bytes": "888888\n", "memory.failcnt": "0\n",
        "memory.oom_control": OOM_CONTROL.format(oom=0),
        "memory.stat": v1_stat_text(rss=10, total_rss=100, total_cache=50)})


@pytest.fixture
def write_opens(monkeypatch) -> list:
    """Every os.open with a write flag."""
    seen = []
    real = os.open

    def spy(path, flags, *args, **kwargs):
        if flags & (os.O_WRONLY | os.O_RDWR):
            seen.append(Path(path).name)
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    return seen


def test_v2_window_with_per_fd_peak(v2):
    c = CgroupCounters(v2, 2, kernel=(6, 12))
    assert c.windowed_peak
    w = c.open_window()
    assert (v2 / "memory.peak").read_text().startswith("reset")
    assert (v2 / "memory.swap.peak").read_text().startswith("reset")
    write(v2, {  # what the kernel would show at the window's end
        "memory.peak": "123456\n", "memory.swap.peak": "789\n", "memory.current": "100000\n",
        "memory.swap.current": "4096\n",
        "memory.stat": stat_text(V2_STAT_KEYS, anon=5096, file=10192, file_mapped=7, kernel=9,
                                 pgmajfault=7, pswpin=1, pswpout=4, workingset_refault_file=2,
                                 workingset_refault_anon=3),
        "memory.events": EVENTS.format(max=3, oom=1),
        "memory.pressure": PRESSURE.format(some=1334, full=617)})
    row = c.close_window(w)
    assert set(row) == set(COLUMNS)
    assert row == dict.fromkeys(COLUMNS) | {
        "cg_peak_bytes": 123456, "cg_peak_windowed": True, "cg_current_bytes": 100000,
        "cg_swap_current_bytes": 4096, "cg_swap_peak_bytes": 789,
        "cg_anon_delta": 4096, "cg_file_delta": 8192, "cg_file_mapped_delta": 7,
        "cg_kernel_delta": 9, "cg_pgmajfault_delta": 2, "cg_pswpin_delta": 1,
        "cg_pswpout_delta": 4, "cg_workingset_refault_file_delta": 2,
        "cg_workingset_refault_anon_delta": 3, "cg_events_max_delta": 3,
        "cg_oom_kill_delta": 1, "cg_psi_some_us": 100, "cg_psi_full_us": 50,
        # what the charge is made of at the window's end (every V2 key is written, 0 here)
        "cg_anon_bytes": 5096, "cg_file_bytes": 10192, "cg_file_mapped_bytes": 7,
        "cg_kernel_bytes": 9, "cg_shmem_bytes": 0, "cg_slab_bytes": 0,
        "cg_kernel_stack_bytes": 0, "cg_pagetables_bytes": 0, "cg_percpu_bytes": 0,
        "cg_sock_bytes": 0}
    c.close()


def test_v2_missing_keys_and_files_are_none(v2):
    (v2 / "memory.pressure").unlink()
    (v2 / "memory.swap.peak").unlink()
    (v2 / "memory.swap.current").unlink()
    write(v2, {"memory.stat": stat_text(V2_STAT_KEYS, skip=("pswpin", "pswpout"))})
    with CgroupCounters(v2, 2, kernel=(6, 6)) as c:
        row = c.close_window(c.open_window())
    assert row["cg_pswpin_delta"] is None and row["cg_pswpout_delta"] is None
    assert row["cg_anon_delta"] == 0
    for col in ("cg_psi_some_us", "cg_psi_full_us", "cg_swap_peak_bytes",
                "cg_swap_current_bytes"):
        assert row[col] is None


def test_v2_overlapping_windows_each_have_their_own_fd(v2, monkeypatch):
    resets = []  # like the kernel, a reset leaves the file's text alone
    monkeypatch.setattr(cgroup_probe, "_reset", lambda fd, value: resets.append(fd))
    c = CgroupCounters(v2, 2, kernel=(6, 12))
    a, b = c.open_window(), c.open_window()
    assert a.peak_fds["memory.peak"] != b.peak_fds["memory.peak"]
    assert sorted(resets) == sorted([*a.peak_fds.values(), *b.peak_fds.values()])
    a_fds = dict(a.peak_fds)
    c.close_window(a)
    again = c.open_window()  # reuses a closed window's fd instead of opening another
    assert again.peak_fds == a_fds
    c.close_window(b)
    c.close_window(again)
    errors = []

    def worker():
        try:
            for _ in range(200):
                row = c.close_window(c.open_window())
                assert row["cg_peak_windowed"] is True
        except Exception as exc:  # reported by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(c._pool["memory.peak"]) <= 8 + 2  # bounded by the concurrency seen
    before = len(os.listdir("/proc/self/fd"))
    c.close()
    assert len(os.listdir("/proc/self/fd")) < before


def test_v2_before_6_12_reads_the_monotone_peak(v2, write_opens):
    c = CgroupCounters(v2, 2, kernel=(6, 6))
    assert c.windowed_peak is False
    row = c.close_window(c.open_window())
    assert write_opens == [] and (v2 / "memory.peak").read_text() == "9000\n"
    assert row["cg_peak_bytes"] == 9000 and row["cg_peak_windowed"] is False
    c.close()


def test_inherited_cgroup_is_never_written(tmp_path, v2, write_opens):
    job = v2.rename(tmp_path / "job")  # not a cgroup edgeprof created
    c = CgroupCounters(job, 2, kernel=(6, 18))
    assert c.windowed_peak is False
    row = c.close_window(c.open_window())
    assert write_opens == [] and row["cg_peak_bytes"] == 9000
    c.close()


def test_v1_window_and_overlap(v1):
    c = CgroupCounters(v1, 1)
    assert c.windowed_peak
    a = c.open_window()
    assert (v1 / "memory.max_usage_in_bytes").read_text().startswith("0")
    assert (v1 / "memory.memsw.max_usage_in_bytes").read_text().startswith("0")
    write(v1, {"memory.max_usage_in_bytes": "65536\n", "memory.memsw.max_usage_in_bytes":
               "70000\n", "memory.usage_in_bytes": "60000\n", "memory.failcnt": "2\n",
               "memory.oom_control": OOM_CONTROL.format(oom=1),
               "memory.stat": v1_stat_text(rss=20, total_rss=4196, total_cache=1074,
                                           total_mapped_file=3, total_pgmajfault=9,
                                           total_swap=512)})
    row = c.close_window(a)
    assert row == dict.fromkeys(COLUMNS) | {
        "cg_peak_bytes": 65536, "cg_peak_windowed": True, "cg_memsw_peak_bytes": 70000,
        "cg_current_bytes": 60000, "cg_swap_current_bytes": 512,
        "cg_rss_delta": 4096, "cg_cache_delta": 1024, "cg_mapped_file_delta": 3,
        "cg_pgmajfault_delta": 9, "cg_oom_kill_delta": 1, "cg_failcnt_delta": 2,
        # the hierarchical totals under v2's part names; no kmem file here: kernel None
        "cg_anon_bytes": 4196, "cg_file_bytes": 1074, "cg_file_mapped_bytes": 3,
        "cg_shmem_bytes": 0}
    # the v1 reset is global: a window another window's reset ran inside is not windowed
    a, b = c.open_window(), c.open_window()
    assert c.close_window(a)["cg_peak_windowed"] is False
    assert c.close_window(b)["cg_peak_windowed"] is True
    c.close()


def test_v1_without_hierarchy_totals_uses_local_keys(v1):
    write(v1, {"memory.stat": stat_text(V1_STAT_KEYS, rss=10)})
    c = CgroupCounters(v1, 1)
    w = c.open_window()
    write(v1, {"memory.stat": stat_text(V1_STAT_KEYS, rss=110, swap=7)})
    row = c.close_window(w)
    assert row["cg_rss_delta"] == 100 and row["cg_swap_current_bytes"] == 7
    c.close()


def test_snapshot(v1, v2):
    with CgroupCounters(v2, 2, kernel=(6, 18)) as c:
        assert c.snapshot() == {"cg_current_bytes": 5000, "cg_swap_current_bytes": 0}
    with CgroupCounters(v1, 1) as c:
        assert c.snapshot() == {"cg_current_bytes": 4096, "cg_swap_current_bytes": 4096}


def test_v1_kernel_part_comes_from_kmem_usage(v1):
    write(v1, {"memory.kmem.usage_in_bytes": "8192\n"})
    with CgroupCounters(v1, 1) as c:
        row = c.close_window(c.open_window())
    assert row["cg_kernel_bytes"] == 8192 and row["cg_slab_bytes"] is None


def test_v2_kernel_part_is_summed_from_its_pieces_on_old_kernels(v2):
    write(v2, {"memory.stat": stat_text(V2_STAT_KEYS, skip=("kernel",), anon=4096, slab=300,
                                        kernel_stack=20, pagetables=10, percpu=2, vmalloc=1,
                                        sock=5)})
    with CgroupCounters(v2, 2, kernel=(5, 15)) as c:
        row = c.close_window(c.open_window())
    assert row["cg_kernel_bytes"] == 333 and row["cg_sock_bytes"] == 5
    assert row["cg_anon_bytes"] == 4096

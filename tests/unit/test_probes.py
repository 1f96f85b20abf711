"""Process-level probes against real processes: GNU time, VmHWM windows, the sampler,
the CPU profiler."""

from __future__ import annotations

import csv
import json
import mmap
import os
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from engine.errors import EdgeprofError
from engine.probes import gnutime, process
from engine.probes.cpuprofile import CpuProfile
from engine.probes.gnutime import gnu_time_argv, parse_gnu_time
from engine.probes.process import COLUMNS, ProcessWindow, hwm_rss, status_bytes, window_fields
from engine.probes.sampler import start_sampler

MiB = 2**20
needs_gnu_time = pytest.mark.skipif(not os.access(gnutime.GNU_TIME, os.X_OK),
                                    reason="GNU time missing: apt-get install time")


def _timed(tmp_path: Path, code: str) -> tuple[int, dict]:
    report = tmp_path / "time.txt"
    proc = subprocess.run(gnu_time_argv(str(report)) + [sys.executable, "-c", code])
    return proc.returncode, parse_gnu_time(report.read_text())


def _touch(nbytes: int) -> np.ndarray:
    """``nbytes`` of fresh memory, every page written: a mapping of its own, never pages
    the allocator kept from an earlier test, so all of it becomes resident here (and
    goes when the array does)."""
    arr = np.frombuffer(mmap.mmap(-1, nbytes), dtype=np.float64)
    arr[:] = 1.0
    return arr


# --- GNU time -------------------------------------------------------------------------

@needs_gnu_time
def test_gnu_time_report_of_a_real_allocation_and_exit_code(tmp_path):
    code = "import numpy as np, sys; a = np.ones(150 * 2**20 // 8); sys.exit(3)"
    rc, row = _timed(tmp_path, code)
    assert rc == 3 and row["gt_exit_status"] == 3 and row["gt_signal"] is None
    assert 150 * 2**20 <= row["gt_max_rss_bytes"] < 400 * 2**20
    assert row["gt_page_size"] == os.sysconf("SC_PAGE_SIZE")
    assert 0 < row["gt_wall_s"] < 30 and row["gt_user_s"] + row["gt_sys_s"] > 0
    assert row["gt_minor_faults"] > 0 and row["gt_cpu_percent"] >= 0
    assert all(isinstance(row[k], int) for k in ("gt_voluntary_cs", "gt_involuntary_cs",
                                                 "gt_fs_inputs", "gt_fs_outputs", "gt_swaps",
                                                 "gt_major_faults"))


@needs_gnu_time
def test_gnu_time_report_of_a_process_killed_by_a_signal(tmp_path):
    rc, row = _timed(tmp_path, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert rc == 128 + 9
    assert row["gt_signal"] == 9 and row["gt_exit_status"] is None  # the text says 0
    assert row["gt_max_rss_bytes"] > 0


@needs_gnu_time
def test_clear_refs_erases_the_peak_gnu_time_reports(tmp_path):
    """The documented quirk: resetting VmHWM also resets what wait4's ru_maxrss gets."""
    code = ("import numpy as np; a = np.ones(200 * 2**20 // 8); del a\n"
            "open('/proc/self/clear_refs', 'w').write('5')")
    _, row = _timed(tmp_path, code)
    assert row["gt_max_rss_bytes"] < 150 * 2**20


def test_parse_gnu_time_clock_formats_and_unknown_percent():
    text = ("\tPercent of CPU this job got: ?%\n"
            "\tElapsed (wall clock) time (h:mm:ss or m:ss): 1:02:03\n")
    row = parse_gnu_time(text)
    assert row["gt_wall_s"] == 3723.0 and row["gt_cpu_percent"] is None
    assert row["gt_max_rss_bytes"] is None
    assert parse_gnu_time("Elapsed (wall clock) time (h:mm:ss or m:ss): 2:05.50")[
        "gt_wall_s"] == 125.5


def test_gnu_time_argv_names_the_package_when_missing(monkeypatch):
    monkeypatch.setattr(gnutime, "GNU_TIME", "/nonexistent/time")
    with pytest.raises(EdgeprofError, match="apt-get install time"):
        gnu_time_argv("out.txt")


# --- ProcessWindow --------------------------------------------------------------------

def test_process_window_sees_an_allocation_in_its_peak_and_resets_it():
    w = ProcessWindow()
    w.open()
    a = _touch(64 * MiB)
    row = w.close()
    assert row["proc_hwm_windowed"] is True
    assert 63 * MiB <= row["proc_hwm_delta_bytes"] < 80 * MiB
    assert row["proc_rss_delta_bytes"] >= 63 * MiB and row["proc_minflt_delta"] > 0
    assert row["proc_hwm_bytes"] >= row["proc_rss_bytes"] and row["proc_swap_bytes"] is not None
    del a
    w = ProcessWindow()
    w.open()
    row2 = w.close()
    # without the reset VmHWM would still hold the freed array
    assert row2["proc_hwm_delta_bytes"] < 8 * MiB
    assert row2["proc_peak_so_far_bytes"] >= row["proc_hwm_bytes"]


def test_overlapping_windows_are_marked_and_never_underestimate():
    a, b = ProcessWindow(), ProcessWindow()
    a.open()
    x = _touch(32 * MiB)
    del x
    b.open()  # no reset: it would erase a's peak
    row_b = b.close()
    row_a = a.close()
    assert row_a["proc_hwm_windowed"] is False and row_b["proc_hwm_windowed"] is False
    assert row_a["proc_hwm_delta_bytes"] >= 31 * MiB
    c = ProcessWindow()
    c.open()
    assert c.close()["proc_hwm_windowed"] is True


def test_thread_cpu_is_the_calling_threads_and_faults_are_process_wide():
    w = ProcessWindow()
    w.open()
    hog = threading.Thread(target=lambda: _touch(32 * MiB))
    hog.start()
    hog.join()
    t_end = time.thread_time() + 0.05
    while time.thread_time() < t_end:
        pass
    row = w.close()
    assert 0.04e9 <= row["proc_thread_cpu_ns"] <= row["proc_cpu_ns"]
    assert row["proc_minflt_delta"] > 0  # the other thread's faults count
    other = ProcessWindow()
    other.open()
    result = {}
    closer = threading.Thread(target=lambda: result.update(other.close()))
    closer.start()
    closer.join()
    assert result["proc_thread_cpu_ns"] is None


def test_a_window_starts_at_its_threads_previous_end_only_while_the_rss_is_unchanged(
        monkeypatch):
    ProcessWindow().open(chain=False).close()  # a boundary to start from
    boundary = process._boundary
    monkeypatch.setattr(process, "_statm_rss", lambda: boundary[1])  # nothing changed
    first = ProcessWindow().open().close()
    assert first["proc_chained"] is True and first["proc_hwm_windowed"] is True
    assert first["proc_rss_delta_bytes"] == first["proc_rss_bytes"] - boundary[1]
    boundary = process._boundary
    monkeypatch.setattr(process, "_statm_rss", lambda: boundary[1] + 4096)  # it did
    assert ProcessWindow().open().close()["proc_chained"] is False
    monkeypatch.setattr(process, "_statm_rss", lambda: process._boundary[1])
    assert ProcessWindow().open(chain=False).close()["proc_chained"] is False
    other = {}
    opener = threading.Thread(target=lambda: other.update(ProcessWindow().open().close()))
    opener.start()
    opener.join()
    assert other["proc_chained"] is False  # another thread's window: read again


def test_memory_touched_between_windows_is_read_not_chained_over():
    ProcessWindow().open().close()
    a = _touch(48 * MiB)  # between two windows: the next one must not start at the last end
    row = ProcessWindow().open().close()
    assert row["proc_chained"] is False and abs(row["proc_rss_delta_bytes"]) < 8 * MiB
    del a
    row = ProcessWindow().open().close()  # freed in between: read again, peak reset
    assert row["proc_chained"] is False and row["proc_hwm_delta_bytes"] < 8 * MiB


def test_packed_columns_are_the_dict_columns():
    w = ProcessWindow().open()
    packed = w.close_packed()
    assert len(packed) == len(COLUMNS) and set(ProcessWindow().open().close()) == set(COLUMNS)


def test_status_fast_paths_agree_with_the_field_by_field_parse():
    real = Path("/proc/self/status").read_bytes()
    keys = (b"\nVmHWM:", b"\nVmRSS:", b"\nRssAnon:", b"\nRssFile:", b"\nRssShmem:",
            b"\nVmSwap:")
    for buf in (real[:cut] for cut in range(len(real) + 1)):  # cut anywhere, or whole
        assert window_fields(buf) == tuple(status_bytes(buf, k) for k in keys)
        assert hwm_rss(buf) == (status_bytes(buf, keys[0]), status_bytes(buf, keys[1]))


def test_status_of_a_kernel_without_the_rss_split():
    buf = (b"Name:\tpython\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nVmData:\t 1 kB\n"
           b"VmSwap:\t     4 kB\n")
    assert window_fields(buf) == (2048 * 1024, 1024 * 1024, None, None, None, 4096)
    assert hwm_rss(buf) == (2048 * 1024, 1024 * 1024)


def test_progress_lines_with_packed_process_columns_are_read_back_named(tmp_path):
    from engine.runner.folder import read_progress

    values = list(range(len(COLUMNS)))
    lines = [{"event": "end", "task_id": 1, "proc": values},
             {"event": "end", "task_id": 2, "proc": values[:-1]}]  # not a record: ends it
    (tmp_path / "progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    ends = read_progress(tmp_path)["end"]
    assert ends == [{"task_id": 1, **dict(zip(COLUMNS, values))}]


# --- sampler --------------------------------------------------------------------------

CHILD = """
import sys, time, numpy as np
sys.stdin.readline()  # allocate only once the sampler runs
t0 = time.perf_counter_ns()
a = np.ones(200 * 2**20 // 8)
t1 = time.perf_counter_ns()
time.sleep(0.5)
print(t0, t1)
"""


def test_perf_counter_and_monotonic_are_the_same_clock():
    impl = time.get_clock_info("perf_counter").implementation
    assert impl == time.get_clock_info("monotonic").implementation
    assert "CLOCK_MONOTONIC" in impl


@pytest.mark.timing  # its rate and how soon it notices the exit are wall-clock bounds
@needs_gnu_time
def test_sampler_follows_a_process_tree_and_stops_when_it_exits(tmp_path):
    out = tmp_path / "samples.csv"
    child = subprocess.Popen(gnu_time_argv(str(tmp_path / "t.txt"))
                             + [sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    sampler = start_sampler(child.pid, str(out), hz=100.0, uss=True)
    time.sleep(0.2)
    t0, t1 = map(int, child.communicate("go\n")[0].split())
    exited = time.monotonic_ns()
    time.sleep(0.3)  # let the sampler notice on its own
    stats = sampler.stop()
    rows = [{k: int(v) if v else None for k, v in r.items()} for r in csv.DictReader(open(out))]
    assert stats["ended"] == "pid gone" and stats["samples"] == len(rows) > 30
    assert 40 <= stats["achieved_hz"] <= 105 and stats["max_procs"] == 2
    assert 0 < stats["cpu_s"] < stats["duration_s"]
    assert rows[-1]["t_ns"] < exited + 50_000_000
    assert all(r["cg_current_bytes"] is None for r in rows)
    # t_ns and the child's perf_counter_ns are one clock: the rise lies between t0 and t1
    before = [r for r in rows if r["t_ns"] < t0]
    after = [r for r in rows if t1 < r["t_ns"] < t1 + 400_000_000]
    assert before and after
    assert max(r["rss_bytes"] for r in before) < 150 * MiB
    assert min(r["rss_bytes"] for r in after) >= 200 * MiB
    assert max(r["uss_bytes"] for r in after) >= 200 * MiB
    assert all(r["procs"] == 2 for r in after)


V2_DIR = {"cgroup.controllers": "memory\n"}  # what marks a cgroup v2 directory
V1_DIR = {"memory.limit_in_bytes": "9223372036854771712\n"}  # ... and a v1 memory one


@pytest.mark.parametrize("files, expected", [
    (V2_DIR | {"memory.current": "4096\n", "memory.swap.current": "8192\n"}, (4096, 8192)),
    (V1_DIR | {"memory.usage_in_bytes": "1000\n", "memory.memsw.usage_in_bytes": "1500\n"},
     (1000, 500)),
    (V1_DIR | {"memory.usage_in_bytes": "1000\n", "memory.memsw.usage_in_bytes": "900\n"},
     (1000, 0)),  # usage and memsw are charged apart: their difference is clamped at 0
    (V2_DIR | {"memory.current": "4096\n"}, (4096, None)),
])
def test_sampler_reads_cgroup_v1_and_v2_counters(tmp_path, files, expected):
    cg = tmp_path / "cg"
    cg.mkdir()
    for name, text in files.items():
        (cg / name).write_text(text)
    child = subprocess.Popen(["sleep", "30"])
    try:
        sampler = start_sampler(child.pid, str(tmp_path / "s.csv"), hz=50.0, cgroup_dir=str(cg))
    finally:
        child.kill()
        child.wait()
    assert sampler.stop()["samples"] > 0  # the first row is written before start returns
    rows = list(csv.DictReader(open(tmp_path / "s.csv")))
    got = (int(rows[0]["cg_current_bytes"]),
           int(rows[0]["cg_swap_current_bytes"]) if rows[0]["cg_swap_current_bytes"] else None)
    assert got == expected


def test_sampler_rejects_a_directory_that_is_not_a_memory_cgroup(tmp_path):
    with pytest.raises(EdgeprofError, match="not a memory cgroup"):
        start_sampler(os.getpid(), str(tmp_path / "s.csv"), cgroup_dir=str(tmp_path))
    (tmp_path / "cgroup.controllers").write_text("cpu\n")  # v2, without the memory controller
    with pytest.raises(EdgeprofError, match="not a memory cgroup"):
        start_sampler(os.getpid(), str(tmp_path / "s.csv"), cgroup_dir=str(tmp_path))


def test_sampler_stop_ends_sampling_of_a_live_process(tmp_path):
    child = subprocess.Popen(["sleep", "30"])
    try:
        sampler = start_sampler(child.pid, str(tmp_path / "s.csv"), hz=200.0)
        time.sleep(0.4)
        stats = sampler.stop()
    finally:
        child.kill()
        child.wait()
    assert stats["ended"] == "stopped" and stats["samples"] >= 10
    assert json.dumps(stats) and len(list(csv.reader(open(tmp_path / "s.csv")))) == \
        stats["samples"] + 1


# --- CPU profile ----------------------------------------------------------------------

def test_cpu_profile_writes_a_gperftools_profile(tmp_path):
    path = tmp_path / "cpu.prof"
    with CpuProfile(path):
        a = np.random.default_rng(0).random((400, 400))
        t_end = time.perf_counter() + 0.3
        while time.perf_counter() < t_end:
            a = a @ a
            a /= a.max()
    data = path.read_bytes()
    # legacy CPU profile header: 0, 3 (header words), 0 (version), period in us, 0
    assert struct.unpack("5q", data[:40]) == (0, 3, 0, 10_000, 0)
    assert len(data) > 40 + 3 * 8


def test_cpu_profile_unwritable_path_is_an_error(tmp_path):
    with pytest.raises(EdgeprofError, match="could not start"):
        with CpuProfile(tmp_path / "missing" / "cpu.prof"):
            pass


def test_the_statistics_of_a_sampler_whose_process_ends_at_once_are_read_whole(tmp_path):
    """A short-lived target makes the sampler print its statistics right after "ready";
    reading "ready" must not swallow the start of them."""
    import subprocess
    import sys

    from engine.probes.sampler import start_sampler

    for i in range(15):
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.01)"])
        sampler = start_sampler(proc.pid, str(tmp_path / f"s{i}.csv"), hz=200)
        proc.wait()
        stats = sampler.stop()
        # a target gone before the first tick leaves no sample, but whole statistics
        assert "error" not in stats and stats["samples"] >= 0 and "achieved_hz" in stats, stats


@pytest.fixture
def lean_windows():
    """Windows that end with statm and getrusage (process.configure(False))."""
    assert process.configure(False) is False  # pytest's own maxrss follows VmHWM
    yield
    process.configure(True)


def test_lean_windows_read_the_same_peak_as_status_windows(lean_windows):
    ProcessWindow().open(chain=False).close()
    w = ProcessWindow().open(chain=False)
    a = _touch(48 * MiB)
    del a
    row = w.close()
    assert row["proc_hwm_delta_bytes"] >= 47 * MiB  # freed before the end: only the peak
    assert abs(row["proc_rss_delta_bytes"]) < 8 * MiB
    status = Path("/proc/self/status").read_bytes()
    rss = status_bytes(status, b"\nVmRSS:")
    assert abs(row["proc_rss_bytes"] - rss) < 4 * MiB
    # anon is exact, file + shmem together, VmSwap not read
    assert row["proc_rss_anon_bytes"] + row["proc_rss_file_bytes"] == row["proc_rss_bytes"]
    assert row["proc_rss_shmem_bytes"] is None and row["proc_swap_bytes"] is None
    b = ProcessWindow().open(chain=False)
    assert b.close()["proc_hwm_delta_bytes"] < 8 * MiB  # the reset took


def test_lean_windows_are_refused_where_maxrss_does_not_follow_vmhwm(monkeypatch):
    real = process.resource.getrusage

    class Inherited:  # a maxrss left from a bigger image before exec
        def __init__(self, who):
            self._r = real(who)

        def __getattr__(self, name):
            return 64 * 2**20 if name == "ru_maxrss" else getattr(self._r, name)

    monkeypatch.setattr(process.resource, "getrusage", Inherited)
    try:
        assert process.configure(False) is True
        row = ProcessWindow().open(chain=False).close()
        assert row["proc_swap_bytes"] is not None  # status read as before
    finally:
        process.configure(True)

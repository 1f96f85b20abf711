"""The cgroup readers (engine.limits.cgroupfs) against fake cgroup directories in tmp_path.

Every file name and parse of the memory interface files lives in these readers; these
tests pin what each quantity reads and that what was not measured is None, never 0.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.limits import cgroupfs as fs
from engine.limits.cgroupfs import CgroupV1Reader, CgroupV2Reader, reader_for
from tests.unit.test_cgroup_counters import write

UNLIMITED = "9223372036854771712\n"  # v1's "no limit" with 4 KiB pages
EVENTS = "low 0\nhigh 0\nmax {max}\noom 0\noom_kill {oom_kill}\noom_group_kill 0\n"
PRESSURE = ("some avg10=0.00 avg60=0.00 avg300=0.00 total=1234\n"
            "full avg10=0.00 avg60=0.00 avg300=0.00 total=567\n")


@pytest.fixture
def v2(tmp_path) -> Path:
    return write(tmp_path / "v2" / "edgeprof-r", {
        "cgroup.controllers": "memory\n", "cgroup.kill": "",
        "memory.current": "5000\n", "memory.peak": "9000\n", "memory.swap.current": "300\n",
        "memory.swap.peak": "700\n", "memory.max": "1048576\n", "memory.swap.max": "max\n",
        "memory.stat": "anon 1000\nfile 2000\npgmajfault 5\n",
        "memory.events": EVENTS.format(max=3, oom_kill=5),
        "memory.events.local": EVENTS.format(max=0, oom_kill=1),
        "memory.swap.events": "high 0\nmax 2\nfail 0\n", "memory.pressure": PRESSURE})


@pytest.fixture
def v1(tmp_path) -> Path:
    return write(tmp_path / "v1" / "edgeprof-r", {
        "memory.limit_in_bytes": "536870912\n", "memory.memsw.limit_in_bytes": UNLIMITED,
        "memory.usage_in_bytes": "4096\n", "memory.memsw.usage_in_bytes": "8192\n",
        "memory.max_usage_in_bytes": "65536\n", "memory.memsw.max_usage_in_bytes": "70000\n",
        "memory.failcnt": "0\n", "memory.memsw.failcnt": "0\n",
        "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
        "memory.stat": ("rss 10\ncache 20\nswap 1\nhierarchical_memory_limit 536870912\n"
                        "total_rss 100\ntotal_cache 200\ntotal_swap 512\n")})


def test_reader_for_detects_the_version(v1, v2, tmp_path):
    assert isinstance(reader_for(v2), CgroupV2Reader) and reader_for(v2).version == 2
    assert isinstance(reader_for(v1), CgroupV1Reader) and reader_for(v1).version == 1
    assert isinstance(reader_for(tmp_path, 2), CgroupV2Reader)  # told, not detected
    with pytest.raises(fs.CgroupError, match="not a memory cgroup directory"):
        reader_for(tmp_path)


def test_v2_quantities(v2):
    r = CgroupV2Reader(v2)
    assert (r.current(), r.swap(), r.current_and_swap()) == (5000, 300, (5000, 300))
    assert (r.peak(), r.swap_peak(), r.memsw_peak()) == (9000, 700, None)
    assert (r.limit(), r.swap_limit(), r.memsw_limit()) == (1048576, None, None)  # "max"
    assert r.stat() == {"anon": 1000, "file": 2000, "pgmajfault": 5}
    assert r.events()["max"] == 3 and r.events()["oom_kill"] == 5
    assert r.events(local=True)["oom_kill"] == 1
    assert r.oom_kill_count() == 1  # memory.events.local: nested cgroups' OOMs do not count
    assert r.pressure() == {"some": 1234, "full": 567}
    assert r.LIMIT_EVENT == "max"


def test_v2_without_events_local_counts_the_hierarchical_file(v2):
    (v2 / "memory.events.local").unlink()  # Linux < 5.2
    assert CgroupV2Reader(v2).oom_kill_count() == 5


def test_missing_files_are_none_not_zero(v2, v1):
    for name in ("memory.current", "memory.swap.current", "memory.peak", "memory.swap.peak",
                 "memory.events", "memory.events.local", "memory.pressure", "memory.stat"):
        (v2 / name).unlink()
    r = CgroupV2Reader(v2)
    assert (r.current(), r.swap(), r.peak(), r.swap_peak()) == (None, None, None, None)
    assert r.oom_kill_count() is None
    assert (r.stat(), r.events(), r.pressure()) == ({}, {}, {})
    assert r.limit_reached() is False
    for name in ("memory.memsw.usage_in_bytes", "memory.failcnt"):
        (v1 / name).unlink()  # a kernel without swap accounting; a failcnt-less fake
    (v1 / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\n")  # < 4.13
    (v1 / "memory.stat").write_text("rss 10\n")
    r = CgroupV1Reader(v1)
    assert r.current_and_swap() == (4096, None) and r.swap(r.stat()) is None
    assert r.oom_kill_count() is None and "failcnt" not in r.events()


def test_v1_quantities(v1):
    r = CgroupV1Reader(v1)
    assert r.current_and_swap() == (4096, 4096)  # memsw - usage
    assert (r.peak(), r.memsw_peak(), r.swap_peak()) == (65536, 70000, None)
    assert (r.limit(), r.memsw_limit(), r.swap_limit()) == (536870912, None, None)
    assert r.events() == {"oom_kill_disable": 0, "under_oom": 0, "oom_kill": 2, "failcnt": 0}
    assert r.oom_kill_count() == 2 and r.pressure() == {}
    assert r.LIMIT_EVENT == "failcnt"


def test_v1_unlimited_sentinel_is_none(v1):
    (v1 / "memory.limit_in_bytes").write_text(UNLIMITED)
    assert CgroupV1Reader(v1).limit() is None
    assert fs.parse_limit(UNLIMITED) is None and fs.parse_limit("max\n") is None
    assert fs.parse_limit(None) is None and fs.parse_limit("") is None


def test_v1_swap_is_clamped_at_zero(v1):
    # usage and memsw are charged in separate batches: memsw can read below usage
    (v1 / "memory.memsw.usage_in_bytes").write_text("4000\n")
    r = CgroupV1Reader(v1)
    assert r.current_and_swap() == (4096, 0) and r.swap() == 0


def test_v1_stat_is_hierarchical_and_gives_exact_swap(v1):
    r = CgroupV1Reader(v1)
    stat = r.stat()
    assert (stat["rss"], stat["cache"], stat["swap"]) == (100, 200, 512)  # the total_* values
    assert not any(k.startswith("total_") for k in stat)
    assert r.swap(stat) == 512  # memory.stat's count beats the counters' difference
    (v1 / "memory.stat").write_text("rss 10\nswap 7\n")  # no use_hierarchy totals
    assert r.stat()["rss"] == 10 and r.swap(r.stat()) == 7


def test_limit_reached(v2, v1):
    r = CgroupV2Reader(v2)
    assert r.limit_reached() is True  # memory.events max 3
    write(v2, {"memory.events": EVENTS.format(max=0, oom_kill=0), "memory.peak": "1048575\n"})
    assert r.limit_reached() is False
    write(v2, {"memory.peak": "1048576\n"})  # the peak at memory.max
    assert r.limit_reached() is True
    r = CgroupV1Reader(v1)
    assert r.limit_reached() is False  # RAM binds (memsw unlimited); peak under it
    write(v1, {"memory.failcnt": "1\n"})
    assert r.limit_reached() is True
    write(v1, {"memory.failcnt": "0\n", "memory.memsw.limit_in_bytes": "70000\n"})
    assert r.limit_reached() is True  # RAM+swap binds: memsw peak at its limit
    write(v1, {"memory.memsw.max_usage_in_bytes": "10\n", "memory.failcnt": "3\n"})
    assert r.limit_reached() is False  # only the binding limit's counters count


def test_peak_reset_kernel_is_named_once(v2, v1):
    r = CgroupV2Reader(v2)
    assert fs.PEAK_FD_RESET_KERNEL == (6, 12)
    assert r.peak_reset(fs.PEAK_FD_RESET_KERNEL) == "fd" and r.peak_reset((6, 11)) is None
    assert r.features((6, 12)) == {
        "memory_peak": True, "peak_fd_reset": True, "swap_peak": True,
        "swap_accounting": True, "events_local": True, "cgroup_kill": True,
        "pressure": True}
    (v2 / "memory.peak").unlink()  # Linux < 5.19
    assert r.peak_reset((6, 18)) is None and r.features((6, 18))["peak_fd_reset"] is False
    assert CgroupV1Reader(v1).peak_reset((4, 19)) == "global"
    assert CgroupV1Reader(v1).features((4, 19)) == {
        "memory_peak": True, "swap_accounting": True, "oom_kill_count": True}


def test_effective_limit(tmp_path, v1):
    mount = write(tmp_path / "cg", {"cgroup.controllers": "memory\n"})  # root: no memory.max
    write(mount / "job", {"memory.max": f"{2**31}\n"})
    step = write(mount / "job" / "step", {"memory.max": "max\n"})
    assert CgroupV2Reader(step).effective_limit(mount) == (2**31, mount / "job")
    write(mount / "job" / "step", {"memory.max": f"{2**30}\n"})
    assert CgroupV2Reader(step).effective_limit(mount) == (2**30, step)
    # v1 says it itself: hierarchical_memory_limit, no walk
    assert CgroupV1Reader(v1).effective_limit(v1.parent) == (536870912, v1)
    write(v1, {"memory.stat": f"rss 0\nhierarchical_memory_limit {UNLIMITED}"})
    assert CgroupV1Reader(v1).effective_limit(v1.parent) == (None, None)


def test_snapshot_is_every_file_by_name(v2):
    snap = CgroupV2Reader(v2).snapshot()
    assert snap == {
        "memory.peak": 9000, "memory.swap.peak": 700, "memory.max": 1048576,
        "memory.swap.max": None, "memory.current": 5000, "memory.swap.current": 300,
        "memory.events": {"low": 0, "high": 0, "max": 3, "oom": 0, "oom_kill": 5,
                          "oom_group_kill": 0},
        "memory.swap.events": {"high": 0, "max": 2, "fail": 0},
        "memory.stat": {"anon": 1000, "file": 2000, "pgmajfault": 5}}


def test_kept_open_reads_through_its_fds(v2):
    (v2 / "memory.swap.current").unlink()
    before = len(os.listdir("/proc/self/fd"))
    with CgroupV2Reader(v2).kept_open(CgroupV2Reader.COUNTER_FILES) as r:
        assert len(os.listdir("/proc/self/fd")) == before + 1  # no fd for the absent file
        assert r.current_and_swap() == (5000, None)
        write(v2, {"memory.current": "123\n", "memory.swap.current": "9\n"})
        # the kept fd sees the new text; the file that was absent stays None (no syscall)
        assert r.current_and_swap() == (123, None)
        assert r.peak() == 9000  # not kept open: read by path as usual
    assert len(os.listdir("/proc/self/fd")) == before


def test_an_unreadable_kept_file_reads_as_none(tmp_path):
    # like memory.pressure with PSI disabled at boot: it exists but reading it fails
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        assert fs.pread_text(fd) is None and CgroupV2Reader.value_at(fd) is None
    finally:
        os.close(fd)
    assert fs.pread_text(None) is None


def test_a_large_file_is_read_whole(tmp_path):
    text = "".join(f"key{i} {i}\n" for i in range(3000))  # > one 16 KiB read
    (tmp_path / "memory.stat").write_text(text)
    with CgroupV2Reader(tmp_path).kept_open(["memory.stat"]) as r:
        assert len(r.stat()) == 3000 and r.stat()["key2999"] == 2999

"""Host load and CPU pinning of a run (engine.probes.hostload)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from engine.probes import hostload


@pytest.fixture
def cpus(monkeypatch, tmp_path):
    """Pretend the allowed CPUs are ``set``; claims go to a private lock folder."""
    monkeypatch.setattr(hostload.tempfile, "gettempdir", lambda: str(tmp_path))

    def allow(cpu_set: set[int]) -> None:
        monkeypatch.setattr(hostload.os, "sched_getaffinity", lambda pid: set(cpu_set))
    return allow


def test_the_child_gets_a_cpu_of_its_own_and_the_probes_the_others(cpus):
    cpus({0, 1, 2, 3})
    first = hostload.claim_cpus()
    assert (first.child, first.probes, first.reason) == ({3}, {0, 1, 2}, "")
    # a concurrent run never gets a claimed CPU, and keeps its probes off it
    second = hostload.claim_cpus()
    assert second.child == {2} and second.probes == {0, 1}
    first.close()
    second.close()
    assert hostload.claim_cpus().child == {3}  # released


def test_two_cpus_pin_one_run_and_the_next_runs_unpinned_with_the_reason(cpus):
    cpus({0, 1})
    first = hostload.claim_cpus()
    assert first.child == {1} and first.probes == {0}
    second = hostload.claim_cpus()
    assert second.child is None and "other runs' pinned children" in second.reason
    first.close()


def test_one_cpu_is_never_pinned(cpus):
    cpus({5})
    claim = hostload.claim_cpus()
    assert claim.child is None and claim.reason.startswith("one CPU allowed")


def test_busy_cpus_is_non_idle_cpu_time_over_wall_time():
    start = hostload.CpuSnapshot(t=100.0, busy_s=50.0, load1=0.5, own_s=2.0)
    end = hostload.CpuSnapshot(t=110.0, busy_s=65.0, load1=1.5, own_s=6.0)
    load = hostload.host_load(start, end)
    assert load["busy_cpus"] == 1.5 and load["load1_start"] == 0.5
    assert load["load1_end"] == 1.5 and load["cpus"] == os.cpu_count()
    # 15 busy CPU-seconds in 10 s, 4 of them the run's own
    assert load["own_cpus"] == 0.4 and load["other_cpus"] == 1.1
    unread = hostload.host_load(start, hostload.CpuSnapshot(110.0, None, None))
    assert unread["busy_cpus"] is None and unread["other_cpus"] is None


def _burn(seconds: float) -> None:
    t0 = time.process_time()
    while time.process_time() - t0 < seconds:
        sum(i * i for i in range(10_000))


BURN = "import time\nt0 = time.process_time()\nwhile time.process_time() - t0 < 0.6: pass"


def test_work_of_a_process_not_yet_reaped_is_other_work_and_a_reaped_childs_is_own():
    """The kernel's own accounting decides: a child still running at the end snapshot is
    not the run's (its time is not in getrusage yet), one waited for is."""
    start = hostload.snapshot()
    other = subprocess.Popen([sys.executable, "-c", BURN])
    _burn(0.3)
    while psutil.Process(other.pid).status() != psutil.STATUS_ZOMBIE:
        time.sleep(0.02)
    burnt = sum(psutil.Process(other.pid).cpu_times()[:2])
    end = hostload.snapshot()
    load, span = hostload.host_load(start, end), end.t - start.t
    assert burnt >= 0.55
    # ticks of 10 ms: allow for a few at each end
    assert load["other_cpus"] * span >= burnt - 0.1
    assert load["own_cpus"] * span < 0.3 + burnt / 2
    other.wait()
    start = hostload.snapshot()
    subprocess.run([sys.executable, "-c", BURN], check=True)
    end = hostload.snapshot()
    load = hostload.host_load(start, end)
    assert load["own_cpus"] * (end.t - start.t) >= 0.55


def test_a_snapshot_of_this_machine_is_plausible():
    a = hostload.snapshot()
    # /proc/stat counts in clock ticks (10 ms): burn enough CPU that several are counted
    t0 = time.process_time()
    while time.process_time() - t0 < 0.2:
        sum(i * i for i in range(10_000))
    b = hostload.snapshot()
    load = hostload.host_load(a, b)
    assert 0 < load["busy_cpus"] <= os.cpu_count() + 0.5

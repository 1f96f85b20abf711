"""What else the host's CPUs did during a run: load averages and busy CPUs from
/proc/loadavg and /proc/stat, read once at the start and once at the end (two reads of
small files: nothing during the run)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class CpuSnapshot:
    t: float  # time.monotonic()
    busy_s: float | None  # CPU-seconds all CPUs spent not idle since boot
    load1: float | None


def _busy_seconds() -> float | None:
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    ticks = [int(v) for v in fields[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    # guest time is already counted in user and nice
    busy = sum(ticks[:8]) - idle
    return busy / os.sysconf("SC_CLK_TCK")


def snapshot() -> CpuSnapshot:
    try:
        load1 = os.getloadavg()[0]
    except OSError:
        load1 = None
    return CpuSnapshot(time.monotonic(), _busy_seconds(), load1)


def host_load(start: CpuSnapshot, end: CpuSnapshot) -> dict:
    """``load1_start``/``load1_end`` (1-minute load averages) and ``busy_cpus``: how many
    CPUs were busy on average over the run, the run's own processes included (None
    where /proc/stat could not be read)."""
    span = end.t - start.t
    busy = None
    if start.busy_s is not None and end.busy_s is not None and span > 0:
        busy = round((end.busy_s - start.busy_s) / span, 3)
    return {"load1_start": start.load1, "load1_end": end.load1, "busy_cpus": busy,
            "cpus": os.cpu_count()}


def pin_cpus() -> tuple[set[int], set[int]]:
    """(the measured child's CPU, the others) out of this process's allowed CPUs: the
    child gets the last one to itself; the supervisor and the sampler share the rest
    (all of them on a single-CPU machine)."""
    allowed = os.sched_getaffinity(0)
    child = {max(allowed)}
    return child, (allowed - child) or allowed

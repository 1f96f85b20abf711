"""What else the host's CPUs did during a run: load averages and busy CPUs from
/proc/loadavg and /proc/stat, and this process's own CPU time with its reaped children's
(getrusage), read once at the start and once at the end (nothing during the run). The
host's busy CPUs less the run's own are the CPUs other work took: the load average cannot
tell them apart (it counts the run's own runnable threads, ~3 on a quiet 2-CPU machine)."""

from __future__ import annotations

import fcntl
import os
import resource
import tempfile
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class CpuSnapshot:
    t: float  # time.monotonic()
    busy_s: float | None  # CPU-seconds all CPUs spent not idle since boot
    load1: float | None
    own_s: float | None = None  # CPU-seconds of this process and its reaped children


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


def _own_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


def snapshot() -> CpuSnapshot:
    try:
        load1 = os.getloadavg()[0]
    except OSError:
        load1 = None
    return CpuSnapshot(time.monotonic(), _busy_seconds(), load1, _own_seconds())


def host_load(start: CpuSnapshot, end: CpuSnapshot) -> dict:
    """``load1_start``/``load1_end`` (1-minute load averages); ``busy_cpus``: how many
    CPUs were busy on average over the run, the run's own processes included;
    ``own_cpus``: the run's own (this process and the children it reaped before ``end``:
    take ``end`` after the last of them is waited for); ``other_cpus``: the rest, other
    work's. None where /proc/stat could not be read."""
    span = end.t - start.t
    busy = own = other = None
    if start.busy_s is not None and end.busy_s is not None and span > 0:
        busy = round((end.busy_s - start.busy_s) / span, 3)
        if start.own_s is not None and end.own_s is not None:
            own = round((end.own_s - start.own_s) / span, 3)
            # both count whole clock ticks: a short run's difference can dip below zero
            other = round(max(0.0, busy - own), 3)
    return {"load1_start": start.load1, "load1_end": end.load1, "busy_cpus": busy,
            "own_cpus": own, "other_cpus": other, "cpus": os.cpu_count()}


@dataclass
class CpuClaim:
    """CPUs for a pinned run: ``child`` alone for the measured child, ``probes`` for the
    supervisor and sampler; both None (and ``reason``) when it could not pin. The child's
    CPU stays claimed (an flock, released by the kernel even on SIGKILL) until
    ``close``, so concurrent runs on one machine never share it."""

    child: set[int] | None
    probes: set[int] | None
    reason: str
    _fd: int | None = None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _lock(cpu: int) -> int | None:
    fd = os.open(os.path.join(tempfile.gettempdir(), f"edgeprof-cpu{cpu}.lock"),
                 os.O_CREAT | os.O_RDWR, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def claim_cpus() -> CpuClaim:
    """The last allowed CPU no other run has claimed, for the measured child, if at least
    one other allowed CPU is free of claims for its probes."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        return CpuClaim(None, None, "one CPU allowed: the child shares it with its probes")
    for cpu in reversed(allowed):
        fd = _lock(cpu)
        if fd is None:
            continue
        free = []
        for other in allowed:
            if other != cpu:
                probe = _lock(other)  # free now: no other run's child there
                if probe is not None:
                    os.close(probe)
                    free.append(other)
        if free:
            return CpuClaim({cpu}, set(free), "", fd)
        os.close(fd)
        break
    return CpuClaim(None, None, "other runs' pinned children hold the CPUs")

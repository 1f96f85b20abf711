"""Waiting for the measured child, with a wall-clock timeout and a stall watch.

A run stalls when it stops moving for good: no task starts or ends, and neither its
memory nor its swap changes (user-mode Linux under heavy swap, docs/sandboxes.md: RSS,
memory.current and swap frozen for minutes while the sandbox spins). Such a run would
hold its slot until the timeout; the stall watch ends it after ``stall_s`` seconds of
standing still, as a timeout that says so.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from engine.limits.cgroupfs import reader_for
from engine.procs import wait_exit

POLL_S = 0.5  # how often the watch looks: a stall is minutes, a poll costs microseconds


class StallWatch:
    """What moves while a run makes progress: the size of its progress.jsonl (a line per
    task start and end), and the run's memory and swap as its cgroup counts them. A run
    without a cgroup is watched through its process tree's resident bytes and CPU time.
    Under a cgroup, CPU time is left out: a child stuck in the kernel's reclaim can
    still gain it."""

    def __init__(self, progress: Path, pid: int, cgroup_dir: Path | None = None,
                 cgroup_version: int | None = None) -> None:
        self.progress = Path(progress)
        self.pid = pid
        self.cgroup = None if cgroup_dir is None else reader_for(cgroup_dir, cgroup_version)

    def state(self) -> tuple:
        """A value that differs whenever the run moved."""
        try:
            size = self.progress.stat().st_size
        except FileNotFoundError:
            size = -1
        if self.cgroup is not None:
            return (size, *self.cgroup.current_and_swap())
        return (size, *self._tree_memory())

    def _tree_memory(self) -> tuple[int, float]:
        """Resident bytes and CPU seconds of the child's tree: without a cgroup nothing
        counts its swap, and a native run that computes is moving."""
        rss, cpu = 0, 0.0
        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return (0, 0.0)
        for proc in procs:
            try:
                times = proc.cpu_times()
                rss += proc.memory_info().rss
                cpu += times.user + times.system
            except psutil.Error:
                continue  # gone between the listing and the read
        return (rss, cpu)


@dataclass(frozen=True)
class WaitResult:
    code: int | None  # the child's exit status; None if it was still running
    why: str | None  # None (it ended), "timeout" or "stalled"


def wait_child(proc: subprocess.Popen, timeout_s: float | None = None,
               stall_s: float | None = None, watch: StallWatch | None = None,
               last_arrival_s: float = 0.0) -> WaitResult:
    """Wait for ``proc`` until it ends, ``timeout_s`` passes, or (with ``stall_s`` and a
    ``watch``) the run has not moved for ``stall_s`` seconds. Before the pipeline's last
    arrival (``last_arrival_s`` after the start) standing still is waiting, not a stall.
    The caller kills the child."""
    t0 = time.monotonic()
    deadline = None if timeout_s is None else t0 + timeout_s
    if stall_s is None or watch is None:
        try:
            return WaitResult(wait_exit(proc, timeout_s), None)
        except subprocess.TimeoutExpired:
            return WaitResult(None, "timeout")
    # the last arrival counts as a move: standing still before it is waiting
    last, moved = watch.state(), t0 + last_arrival_s
    while True:
        step = POLL_S if deadline is None else max(0.0, min(POLL_S, deadline - time.monotonic()))
        try:
            return WaitResult(wait_exit(proc, step), None)
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            return WaitResult(None, "timeout")
        state = watch.state()
        if state != last:
            last, moved = state, max(now, moved)
        elif now - moved >= stall_s:
            return WaitResult(None, "stalled")

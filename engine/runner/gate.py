"""What the measured child and its supervisor agree on without importing each other: the
gate that holds the child until the probes watch it, and the exit status of a child that
could not write its outputs. Its own module, so that the supervisor never imports the
child's runtime (numpy and the operators: a second or so of a sandbox run's start)."""

from __future__ import annotations

import os
import time
from pathlib import Path

# Set in a sandbox guest (engine.sandbox.job): no pipeline starts before the guest has
# been up this many seconds (/proc/uptime).
START_UPTIME_ENV = "EDGEPROF_START_AT_UPTIME"
PROC_UPTIME = Path("/proc/uptime")

# the child's exit code when it could not write its own files (sysexits' EX_IOERR): the
# supervisor then publishes nothing (a run without its record is no result)
WRITE_FAILED = 74


class StartGate:
    """Holds the measured child before its pipeline starts until the supervisor's probes
    watch it. The sampler's interpreter starts after the child's (it needs the child's
    PID), and on a loaded host it could start after a short pipeline had ended: the run's
    peak RSS would then be its exit's. A pipe: the child reads one byte before its t0
    (``await_start``); the supervisor writes it once the sampler has its first row."""

    def __init__(self) -> None:
        self.child_fd, self._write_fd = os.pipe()
        self._ours: list[int] = [self.child_fd, self._write_fd]

    def pass_fds(self) -> tuple[int, ...]:
        return (self.child_fd,)

    def started(self) -> None:
        """The child holds its end now: ours goes."""
        self._close(self.child_fd)

    def open(self) -> None:
        """Let the child's pipeline start: at once, or in a sandbox guest once the guest
        has been up as long as START_UPTIME_ENV says."""
        at = os.environ.get(START_UPTIME_ENV)
        if at:
            wait_for_uptime(float(at))
        try:
            os.write(self._write_fd, b"s")
        except BrokenPipeError:  # the child died before its pipeline (an OOM kill in its
            pass  # start-up): its end says so, not this write (twenty-fifth pass M3)
        self.close()

    def close(self) -> None:
        """The child reads end-of-file if it was not opened: it ends without running."""
        for fd in list(self._ours):
            self._close(fd)

    def _close(self, fd: int) -> None:
        if fd in self._ours:
            self._ours.remove(fd)
            os.close(fd)


def await_start(fd: int | None) -> None:
    """Wait at the gate (``StartGate``): none where the spec names no gate fd."""
    if fd is None:
        return
    with os.fdopen(fd, "rb", buffering=0) as gate:
        if gate.read(1) != b"s":
            raise SystemExit("error: the supervisor ended before the run could start")


def uptime() -> float:
    """Seconds the kernel has been up (PROC_UPTIME)."""
    return float(PROC_UPTIME.read_text().split()[0])


def wait_for_uptime(seconds: float) -> None:
    """Sleep until the kernel has been up ``seconds``."""
    left = seconds - uptime()
    if left > 0:
        time.sleep(left)

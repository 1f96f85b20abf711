"""Process lifetimes: a run's processes die with their parent, and what a dead owner left
behind is swept by the next run.

A supervisor that is SIGKILLed cannot clean up. So every process it starts (GNU time,
the measured child, the sampler, qemu) asks the kernel for SIGKILL when its parent dies
(``PR_SET_PDEATHSIG``; no root needed), and every temporary folder carries its owner's
PID in its name (``stamped_tempdir``) so that ``sweep`` can remove those whose owner is
gone.
"""

from __future__ import annotations

import ctypes
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


SUPERVISOR_ENV = "EDGEPROF_SUPERVISOR_PID"  # the run's supervisor, for its grandchildren


def die_with_parent(parent: int | None = None, grandparent: int | None = None) -> None:
    """Have the kernel SIGKILL this process when its parent dies (the parent *thread*:
    start children from the thread that lives as long as the run). Inherited by exec,
    not by fork: each process of a tree asks for itself. A parent that died before the
    request took effect has left this process reparented: if its parent is not the
    expected ``parent`` (or its parent's parent not ``grandparent``), die now."""
    if _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_PDEATHSIG): {os.strerror(err)}")
    ppid = os.getppid()
    if (parent is not None and ppid != parent) or (
            grandparent is not None and parent_of(ppid) != grandparent):
        os.kill(os.getpid(), signal.SIGKILL)


def parent_of(pid: int) -> int | None:
    try:  # the field after the command name, which may itself hold ") "
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def preexec(*more: Callable[[], None] | None) -> Callable[[], None]:
    """A Popen ``preexec_fn``: die with the parent (the process creating this closure),
    then each of ``more`` (e.g. joining the run's cgroup)."""
    steps = [f for f in more if f is not None]
    parent = os.getpid()

    def run() -> None:
        die_with_parent(parent)
        for step in steps:
            step()

    return run


def wait_exit(proc: subprocess.Popen, timeout: float | None) -> int:
    """``proc.wait(timeout)``, woken by the process's exit itself: Popen's wait with a
    timeout polls every 50 ms, so a run's wall took up to 50 ms past its child's end
    (25 ms on average). Linux's pidfd (5.3 and later) is readable once the process ends;
    without one, Popen's polling. Raises subprocess.TimeoutExpired as Popen does."""
    if timeout is None or proc.returncode is not None:
        return proc.wait()
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # an old kernel, or a process already reaped
        return proc.wait(timeout=timeout)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        if not poller.poll(max(0.0, timeout) * 1000):
            raise subprocess.TimeoutExpired(proc.args, timeout)
    finally:
        os.close(fd)
    return proc.wait()


def exit_now(code: int) -> NoReturn:
    """End a run's own process (the measured child, the sampler) once everything it writes
    is written and closed: its standard streams flushed, without the interpreter's
    teardown, which frees every module and array one by one (0.07-0.1 s for the child
    here, more in a sandbox) and would count in the run's wall time and the child's CPU
    time, measuring nothing of the pipeline."""
    import sys

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader gone, a stream closed: nothing to keep
            pass
    os._exit(code)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # no such pid (or none that could exist)
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def stamped_tempdir(prefix: str, parent: Path) -> Path:
    """A fresh folder ``<parent>/<prefix><pid>.<random>`` (mode 0700)."""
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}.", dir=parent))


def sweep(parent: Path, prefix: str) -> list[Path]:
    """Remove the ``stamped_tempdir``s with ``prefix`` in ``parent`` whose owner process is
    gone; returns what was removed."""
    pattern = re.compile(re.escape(prefix) + r"(\d+)\.[^./]+")
    removed = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return removed
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if m and int(m.group(1)) != os.getpid() and not alive(int(m.group(1))):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed

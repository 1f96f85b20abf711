"""Snakemake's SIGINT passed on to the jobs it runs locally.

Snakemake stops on a KeyboardInterrupt by waiting for its running jobs
(``JobScheduler.schedule``: ``self._executor.cancel()``, a thread pool's shutdown), and
only a Ctrl-C at a terminal reaches the jobs too (the whole foreground process group
gets it). A SIGINT to Snakemake's PID alone (``kill -INT``, a supervisor) left each job
running to its end, up to ``run.timeout_s``; a second SIGINT, while it waited, ended
Snakemake with the jobs still running (and a chain of tracebacks: the interrupt raised
again inside its cleanup). Here every SIGINT is passed on to the jobs, as a terminal
would, and only the first interrupts Snakemake: the later ones are passed on and it
keeps waiting for the jobs, which stop (the engine cleans up and exits 130). Its
SIGTERM handler (``engine.workflow.snakemake_api.exit_without_lock``) passes a SIGTERM on
the same way: Snakemake's own waits for the running jobs to finish. A job's shell ends at
once on a SIGTERM while what it runs cleans up, so Snakemake, on its way out, also waits
for every process it passed a signal on to (at most ``CLEANUP_WAIT_S``).
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from types import FrameType

import psutil

# set by forward_interrupts, in Snakemake's main process only
_FORWARDING = threading.Event()
# every process a signal was passed on to: Snakemake waits for them at its exit
_SIGNALLED: dict[int, psutil.Process] = {}
CLEANUP_WAIT_S = 60.0


def signal_jobs(sig: int) -> list[psutil.Process]:
    """Send ``sig`` to this process's descendants in its own process group (its jobs'
    shells and what they run, as a terminal's Ctrl-C reaches them; not a process that
    left the group, such as a sandbox kernel its run manages); those processes."""
    group = os.getpgrp()
    sent = []
    for child in psutil.Process().children(recursive=True):
        try:
            if os.getpgid(child.pid) == group:
                child.send_signal(sig)  # the process it listed, not a PID reused since
                sent.append(child)
        except (ProcessLookupError, psutil.Error):
            continue  # it ended meanwhile
    return sent


def pass_on(sig: int) -> None:
    """``signal_jobs(sig)`` in a Snakemake process where ``forward_interrupts`` was
    installed (nowhere else: not in a job's own Snakemake, nor in a test's process)."""
    if _FORWARDING.is_set():
        _SIGNALLED.update((p.pid, p) for p in signal_jobs(sig))


def wait_for_signalled(timeout_s: float = CLEANUP_WAIT_S) -> list[int]:
    """Wait until every process a signal was passed on to has ended (a job's engine
    removing its run folder's leftovers after its shell ended), at most ``timeout_s``;
    the PIDs still running then, said on stderr."""
    _, alive = psutil.wait_procs(list(_SIGNALLED.values()), timeout=timeout_s)
    left = sorted(p.pid for p in alive)
    if left:
        print(f"warning: {len(left)} job process(es) still running {timeout_s:g} s after "
              f"the signal: PID {', '.join(map(str, left))}", file=sys.stderr)
    return left


def _in_scheduler(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside Snakemake's scheduling loop (``JobScheduler.schedule``
    in snakemake/scheduling/job_scheduler.py), the one place it handles an interrupt."""
    while frame is not None:
        code = frame.f_code
        if code.co_name == "schedule" and code.co_filename.endswith("job_scheduler.py"):
            return True
        frame = frame.f_back
    return False


def forward_interrupts() -> bool:
    """Called in Snakemake's main process: from now on ``pass_on`` signals the jobs;
    and, in the main thread where SIGINT has Python's default handler (not ignored, as
    in a shell's background job), every SIGINT is passed on to the jobs, interrupting
    Snakemake at the first only. True if that SIGINT handler was installed."""
    _FORWARDING.set()
    atexit.register(wait_for_signalled)
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        return False
    interrupted = threading.Event()

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        pass_on(signal.SIGINT)
        if not interrupted.is_set():
            interrupted.set()
            if _in_scheduler(frame):
                raise KeyboardInterrupt  # its loop catches it, cancels and waits for the jobs
            # before its jobs start or after they ended (parsing, building the DAG, an
            # import), where Snakemake lets a KeyboardInterrupt out as a traceback and a
            # death by SIGINT: the same stop, unwinding its cleanups, in one line
            print("error: interrupted (no job was running)", file=sys.stderr)
            raise SystemExit(130)

    signal.signal(signal.SIGINT, on_sigint)
    return True

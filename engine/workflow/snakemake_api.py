"""Each input, params and resources function's parameters, told to Snakemake once per
workflow instead of once per call.

Snakemake inspects the signature of such a function every time it calls one
(``snakemake.common.get_function_params``: ``inspect.signature``, twice per call); the
paper sweep's plan makes about a million such calls. Two ways to pay that once:

- public: the function's ``__signature__`` (PEP 362), which ``inspect.signature`` returns
  without rebuilding it: about 3 us a call instead of about 24 us;
- private: ``snakemake.common.overwrite_function_params``, which Snakemake's
  ``get_function_params`` returns before calling ``inspect.signature`` at all: about
  0.4 us a call.

The private one is used only on the Snakemake versions it was checked on
(``PRIVATE_VERSIONS``); elsewhere only the public one, which keeps every answer right on
any Snakemake and costs a little time. ``tests/unit/test_snakemake_api.py`` fails on an
installed Snakemake outside that range or whose ``get_function_params`` no longer returns
what was set, so a Snakemake upgrade says when to look again.

And one repair, on the same versions (``coalesce_reevaluations``): Snakemake's scheduler
ends every pass by starting a timer that starts another pass (``--max-jobs-per-timespan``,
on by default at 100/1s), and every finished job starts a pass too, so each finished job
adds a chain of passes that never ends (snakemake/snakemake#3744). Measured on the default
run: Snakemake's own CPU grew with the jobs done, 0.22 CPU after 141 jobs, 0.79 after 291,
taking the CPUs the runs and their probes share. With one timer pending at a time (a
daemon, so it never holds Snakemake's exit back), a pass still follows every event and at
most one waits for the rate limit.
"""

from __future__ import annotations

import inspect
import signal
import threading
from collections.abc import Callable, Iterable

from engine.workflow.interrupt import pass_on

# [first, last) Snakemake versions whose get_function_params returns what
# overwrite_function_params set (read in snakemake/common/__init__.py of 9.17 and 9.27)
PRIVATE_VERSIONS = ((9, 17), (10, 0))


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for part in text.split(".")[:2]:
        digits = "".join(c for c in part if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def private_override() -> Callable | None:
    """Snakemake's ``overwrite_function_params`` where this Snakemake is one it was checked
    on, else None."""
    import snakemake

    low, high = PRIVATE_VERSIONS
    if not low <= _version(snakemake.__version__) < high:
        return None
    try:
        from snakemake.common import overwrite_function_params
    except ImportError:
        return None
    return overwrite_function_params


def declare_signatures(functions: Iterable[Callable]) -> bool:
    """Fix each function's parameters once (``__signature__``, and Snakemake's own override
    where ``private_override`` allows it); True if the override was used."""
    override = private_override()
    for function in functions:
        function.__signature__ = inspect.signature(function)
        if override is not None:
            override(function, function.__signature__.parameters)
    return override is not None


def coalesce_reevaluations() -> bool:
    """Make Snakemake's scheduler keep at most one reevaluation timer pending (a daemon
    thread) where ``private_override`` allows private use; True if it did."""
    if private_override() is None:
        return False
    from snakemake.scheduling.job_scheduler import JobScheduler

    if not hasattr(JobScheduler, "_schedule_reevalutation"):  # (sic: Snakemake's name)
        return False

    def schedule_reevaluation(self: JobScheduler, delay: float) -> None:
        pending = getattr(self, "_edgeprof_reevaluation", None)
        if pending is not None and pending.is_alive():
            return  # a pass follows within ``delay`` anyway
        timer = threading.Timer(delay, self._open_jobs.release)
        timer.daemon = True
        timer.start()
        self._edgeprof_reevaluation = timer

    JobScheduler._schedule_reevalutation = schedule_reevaluation
    return True


def exit_without_lock() -> bool:
    """Make Snakemake's SIGTERM handler set its flag without the scheduler's lock (where
    ``private_override`` allows private use; True if it did): the handler runs in the main
    thread, which may hold that lock while it selects jobs, and then waited on itself for
    good (a workflow hung 11 minutes after a SIGTERM, seen with gdb). A plain assignment
    needs no lock. It also passes the SIGTERM on to the running jobs
    (``engine.workflow.interrupt``): Snakemake's own let them run to their end."""
    if private_override() is None:
        return False
    from snakemake.scheduling.job_scheduler import JobScheduler

    if not hasattr(JobScheduler, "exit_gracefully"):
        return False

    def exit_gracefully(self: JobScheduler, *args: object) -> None:
        self._user_kill = "graceful"
        pass_on(signal.SIGTERM)
        self._open_jobs.release()

    JobScheduler.exit_gracefully = exit_gracefully
    return True

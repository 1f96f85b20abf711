"""Unwinding a run on a signal, shared by the host supervisor and the vm backend.

Inside ``signals_unwind()`` SIGINT, SIGTERM and SIGHUP raise ``Signalled``, so the
``finally`` blocks kill the run's processes (or qemu) and remove its files; the command
then reports ``Interrupted`` (exit 130). ``ignore_signals()`` is called once the cleanup
starts: the run is ending anyway, so a second Ctrl-C must not cut the cleanup short.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from engine.errors import EdgeprofError

UNWIND_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(EdgeprofError):
    """The run was stopped by a signal; nothing was written."""


class Signalled(BaseException):
    """Raised by the handler inside ``signals_unwind``; ``name`` is e.g. "SIGTERM"."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


_signalled = False  # a signal began unwinding a run: this process is ending


def _raise(signum: int, frame: object) -> None:
    global _signalled
    _signalled = True
    raise Signalled(signal.Signals(signum).name)


@contextmanager
def signals_unwind() -> Iterator[None]:
    """Turn UNWIND_SIGNALS into ``Signalled`` for the block (main thread only: Python
    delivers signals there; elsewhere this does nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, _raise) for sig in UNWIND_SIGNALS}
    try:
        yield
    finally:
        if not _signalled:  # after a signal the process is ending: see ignore_signals
            for sig, handler in old.items():
                signal.signal(sig, handler)


def ignore_signals() -> None:
    """Ignore UNWIND_SIGNALS while a run's cleanup goes on. ``signals_unwind`` restores
    the handlers afterwards, except when a signal started the unwinding: then the process
    is ending, and a second Ctrl-C arriving just after the cleanup must not turn exit 130
    into a death by signal."""
    if threading.current_thread() is threading.main_thread():
        for sig in UNWIND_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)

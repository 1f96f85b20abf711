"""Unwinding a run on a signal, shared by the host supervisor and the vm backend.

Inside ``signals_unwind()`` SIGINT, SIGTERM and SIGHUP (each unless the process was
started with it ignored, as ``nohup`` and a shell's background jobs do) raise
``Signalled``, so the
``finally`` blocks kill the run's processes (or qemu) and remove its files; the command
then reports ``Interrupted`` (exit 130). ``ignore_signals()`` is called once the cleanup
starts: the run is ending anyway, so a second Ctrl-C must not cut the cleanup short.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from engine.errors import EdgeprofError

UNWIND_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# after the callback that dropped a signal has returned (they take microseconds)
LOST_SIGNAL_DELAY_S = 0.01


class Interrupted(EdgeprofError):
    """The run was stopped by a signal; nothing was written."""


class Signalled(BaseException):
    """Raised by the handler inside ``signals_unwind``; ``name`` is e.g. "SIGTERM";
    ``committed``: the command had written its outputs whole before (``committed``)."""

    def __init__(self, name: str, committed: bool = False) -> None:
        super().__init__(name)
        self.name, self.committed = name, committed


_signalled = False  # a signal began unwinding a run: this process is ending
_committed = False  # the command's outputs are in place, whole (``committed``)
_caught: str | None = None  # the name of the signal that began it


def _raise(signum: int, frame: object) -> None:
    global _signalled, _caught
    _signalled, _caught = True, signal.Signals(signum).name
    # the first signal starts the unwinding; one arriving a few ms later, before any
    # cleanup code could say so, must not cut that cleanup short
    ignore_signals()
    raise Signalled(_caught, _committed)


def caught_signal() -> Signalled | None:
    """The signal that began unwinding this process, if one did: what an exception that
    surfaces afterwards in its place comes from (an extension module whose import the
    signal's exception interrupted reports an error of its own, e.g. a TypeError)."""
    return None if _caught is None else Signalled(_caught, _committed)


def redeliver_lost_signals(unraisable: object) -> None:
    """``sys.unraisablehook``: a signal's exception raised where Python can only print
    and drop it (a callback it runs around every fork, such as ``logging``'s lock release;
    a finalizer) would leave the signal unanswered, the handlers set to ignore the next
    one: the signal is sent again a moment later, to the handler it reached, where it can
    unwind the command. Anything else goes to Python's own hook."""
    exc = getattr(unraisable, "exc_value", None)
    if isinstance(exc, Signalled | KeyboardInterrupt):
        signum = (signal.Signals[exc.name] if isinstance(exc, Signalled)
                  else signal.SIGINT)
        if isinstance(exc, Signalled):
            signal.signal(signum, _raise)  # _raise ignored the rest before it raised
        resend = threading.Timer(LOST_SIGNAL_DELAY_S, signal.raise_signal, (signum,))
        resend.daemon = True
        resend.start()
        return
    sys.__unraisablehook__(unraisable)


def committed() -> None:
    """Called at the end of a command's commit (inside ``signals_deferred``): a signal
    held back during it is delivered next, and its exit 130 must say that the outputs
    were written whole, not that nothing was."""
    global _committed
    _committed = True


@contextmanager
def signals_unwind() -> Iterator[None]:
    """Turn UNWIND_SIGNALS into ``Signalled`` for the block (main thread only: Python
    delivers signals there; elsewhere this does nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # a signal this process was started with ignored stays ignored (nohup, a shell's
    # background job): the caller asked for the run to survive it
    old = {sig: signal.signal(sig, _raise) for sig in UNWIND_SIGNALS
           if signal.getsignal(sig) is not signal.SIG_IGN}
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


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold UNWIND_SIGNALS back for the block (a cleanup or a commit that must not be cut
    short: a machine's kill and its swap image's removal, a set of outputs moved in); one
    that arrived meanwhile is delivered when the block ends, to the handler before it.
    In the main thread the handlers themselves hold them: a signal mask is per thread,
    and the kernel hands a process's signal to any thread that does not block it (a
    BLAS thread), whose arrival Python then acts on in the main thread, mid-block."""
    if threading.current_thread() is not threading.main_thread():
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, UNWIND_SIGNALS)
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        return
    held: list[int] = []
    old = {sig: signal.signal(sig, lambda signum, frame: held.append(signum))
           for sig in UNWIND_SIGNALS if signal.getsignal(sig) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        if held:
            signal.raise_signal(held[0])

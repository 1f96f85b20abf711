"""The engine's messages on stderr, through the standard ``logging``: progress and
summaries at INFO (shown by default), warnings and notes at WARNING (shown under ``-q``
too), details at DEBUG (``-v``). A verb's result goes to stdout with print; an error is
engine.cli's one line, never through here, so no verbosity hides it."""

from __future__ import annotations

import logging
import sys

ROOT = "engine"  # every module logs to logging.getLogger(__name__), a child of this one
LEVELS = {-1: logging.WARNING, 0: logging.INFO, 1: logging.DEBUG}  # -q, default, -v


class _Stderr(logging.Handler):
    """Writes to the ``sys.stderr`` of the moment (a redirect or pytest's capture made after
    the handler was), a message a line, flushed at once (a job's log shows progress as it
    happens)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:  # a closed stderr: the message is lost, the verb goes on
            self.handleError(record)


def configure(verbosity: int) -> None:
    """Show the engine's messages at ``verbosity`` (-1 quiet, 0 default, 1 verbose) on
    stderr, once per process however often it is called."""
    logger = logging.getLogger(ROOT)
    logger.setLevel(LEVELS[max(-1, min(1, verbosity))])
    if not any(isinstance(h, _Stderr) for h in logger.handlers):
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
    logger.propagate = False  # a host application's root handlers do not print it twice

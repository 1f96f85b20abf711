"""For tests that signal a process they start: its SIGINT, SIGTERM and SIGHUP at their
defaults, whatever the test run itself inherited (a shell's background job starts with
SIGINT ignored, and children inherit that; the engine honours an inherited SIG_IGN, as
nohup-style tools do, so such a test would not be testing the signal)."""

from __future__ import annotations

import signal


def default_signals() -> None:
    """A ``preexec_fn``: the unwinding signals at their default dispositions."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)

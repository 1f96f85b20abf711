"""GNU time (``/usr/bin/time -v``) around the measured process, and its report parsed.

Max RSS quirks (GNU time 1.9, Linux; the first checked with a real run):

- ``Maximum resident set size`` is ``ru_maxrss`` from wait4: the peak of the *largest
  single process* of the waited-for tree, never a sum.
- The kernel takes the child's peak from ``mm->hiwater_rss`` at exit, which
  ``echo 5 > /proc/self/clear_refs`` resets. With the process probe on (it resets VmHWM
  at every task window), the figure is the peak since the last reset, not of the whole
  run: a python that touched 330 MB, reset, then exited is reported at ~31 MB. Use the
  process probe's running peak (``proc_peak_so_far_bytes``) for the whole run then.
- ``exec`` keeps the signal-level maxrss, so a wrapper's pre-exec peak carries over into
  the command's figure.
- GNU time <= 1.7 reported 4x too much (pages taken for KiB); fixed in 1.8.
- A process killed by a signal is reported with "Command terminated by signal N" and
  ``Exit status: 0`` (WEXITSTATUS of a signalled status), so ``gt_exit_status`` is None then.
"""

from __future__ import annotations

import os
import re

from engine.errors import EdgeprofError

GNU_TIME = "/usr/bin/time"

# -v label -> (column, conversion); sizes become bytes here, once
_FIELDS = {
    "User time (seconds)": ("gt_user_s", float),
    "System time (seconds)": ("gt_sys_s", float),
    "Percent of CPU this job got": ("gt_cpu_percent", float),
    "Maximum resident set size (kbytes)": ("gt_max_rss_bytes", lambda kib: int(kib) * 1024),
    "Major (requiring I/O) page faults": ("gt_major_faults", int),
    "Minor (reclaiming a frame) page faults": ("gt_minor_faults", int),
    "Voluntary context switches": ("gt_voluntary_cs", int),
    "Involuntary context switches": ("gt_involuntary_cs", int),
    "Swaps": ("gt_swaps", int),
    "File system inputs": ("gt_fs_inputs", int),
    "File system outputs": ("gt_fs_outputs", int),
    "Signals delivered": ("gt_signals_delivered", int),
    "Page size (bytes)": ("gt_page_size", int),
    "Exit status": ("gt_exit_status", int),
}
_WALL_LABEL = "Elapsed (wall clock) time (h:mm:ss or m:ss)"
_SIGNAL = re.compile(r"Command terminated by signal (\d+)")


def gnu_time_argv(output_path: str) -> list[str]:
    """The argv prefix that runs a command under GNU time, report written to output_path."""
    if not os.access(GNU_TIME, os.X_OK):
        raise EdgeprofError(f"GNU time is not installed at {GNU_TIME}: apt-get install time "
                            "(or turn the gnu_time probe off)")
    return [GNU_TIME, "-v", "-o", output_path]


def parse_gnu_time(text: str) -> dict:
    """Columns ``gt_*`` from a ``time -v`` report; fields missing from the text are None."""
    row: dict = {column: None for column, _ in _FIELDS.values()}
    row["gt_wall_s"] = None
    for line in text.splitlines():
        label, sep, value = line.strip().partition(": ")
        if not sep:
            continue
        value = value.strip().removesuffix("%")
        try:  # a report cut mid-value, or "?%" CPU when the elapsed time is 0: unknown
            if label == _WALL_LABEL:
                row["gt_wall_s"] = _clock_seconds(value)
            elif label in _FIELDS:
                column, kind = _FIELDS[label]
                row[column] = kind(value)
        except ValueError:
            pass
    m = _SIGNAL.search(text)
    row["gt_signal"] = int(m.group(1)) if m else None
    if row["gt_signal"] is not None:
        row["gt_exit_status"] = None
    return row


def _clock_seconds(value: str) -> float:
    """``h:mm:ss`` or ``m:ss.ss`` -> seconds."""
    seconds = 0.0
    for part in value.split(":"):
        seconds = seconds * 60 + float(part)
    return seconds

"""Each task's own page traffic under a limit, from the counters its window recorded.

A window's counters are the kernel's for the whole run (the guest's ``/proc/vmstat``,
or the cgroup's ``memory.stat``), so the windows of concurrent workers overlap and each
sees the other's pages too. Where the windows record the counters' values at their end
(``guest_*_end``, the start's being end - delta), the counter is known at every task
boundary of the run: between two consecutive boundaries the pages are shared equally by
the tasks running then (the simulator's shared swap device makes the same assumption),
and a task's traffic is the sum of its shares. Pages between windows (the dispatch gaps)
belong to no task and are reported as ``unattributed``. Without end values only windows
that overlap no other (``overlap == 0``) have traffic of their own: their deltas.

Columns out, per task: ``pages_in`` (swapped in), ``pages_out`` (swapped out),
``refaults`` (major faults beyond the pages swapped in: file pages read again).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

# (counter, its column prefix) per source, best first
SOURCES = {
    "guest": {"pages_in": "guest_pswpin", "pages_out": "guest_pswpout",
              "faults": "guest_pgmajfault"},
    "cgroup": {"pages_in": "cg_pswpin", "pages_out": "cg_pswpout",
               "faults": "cg_pgmajfault"},
}
TRAFFIC_COLUMNS = ["pages_in", "pages_out", "refaults"]


class TrafficError(ValueError):
    """A run whose windows cannot say which task caused which pages."""


def source_of(tasks: pd.DataFrame) -> str | None:
    """The counters the run's windows measured (``SOURCES``), or None."""
    for name, cols in SOURCES.items():
        delta = f"{cols['pages_in']}_delta"
        if delta in tasks and tasks[delta].notna().any():
            return name
    return None


def _shares(start: np.ndarray, end: np.ndarray, at_start: np.ndarray,
            at_end: np.ndarray) -> tuple[np.ndarray, float]:
    """Per window: its equal share of the counter's increase between every two
    consecutive boundaries it spans; and what fell between windows."""
    times = np.concatenate([start, end])
    values = np.concatenate([at_start, at_end]).astype(float)
    order = np.lexsort((values, times))
    times, values = times[order], values[order]
    # readings taken by two threads a moment apart may come out of order: the counter
    # only grows, so each reading is at least every earlier one
    values = np.maximum.accumulate(values)
    grid, first = np.unique(times, return_index=True)
    level = values[np.r_[first[1:] - 1, len(values) - 1]]  # the last reading at each time
    inc = np.diff(level)  # between grid[k] and grid[k + 1]
    a = np.searchsorted(grid, start)  # first interval of each window
    b = np.searchsorted(grid, end)  # one past its last
    running = np.zeros(len(grid))
    np.add.at(running, a, 1)
    np.add.at(running, b, -1)
    running = np.cumsum(running)[:-1]
    share = np.where(running > 0, inc / np.maximum(running, 1), 0.0)
    cum = np.r_[0.0, np.cumsum(share)]
    return cum[b] - cum[a], float(inc[running == 0].sum())


def task_traffic(tasks: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """The traffic of each task of one run (module docstring): a frame indexed like
    ``tasks`` with ``TRAFFIC_COLUMNS``, and facts about the attribution (source,
    unattributed pages, whether windows overlapped). TrafficError when the run's windows
    measured no counters, or overlap without end values."""
    source = source_of(tasks)
    if source is None:
        raise TrafficError("no window measured swap counters (a run without a limit "
                           "backend that reports them)")
    cols = SOURCES[source]
    overlapped = bool((tasks["overlap"].fillna(0) > 0).any())
    out = pd.DataFrame(index=tasks.index)
    facts = {"source": source, "overlapped": overlapped, "unattributed_pages": 0.0}
    start = tasks["start_ns"].to_numpy(dtype=float)
    end = tasks["end_ns"].to_numpy(dtype=float)
    for name, prefix in cols.items():
        delta = tasks[f"{prefix}_delta"].to_numpy(dtype=float)
        at_end = (tasks[f"{prefix}_end"].to_numpy(dtype=float)
                  if f"{prefix}_end" in tasks else None)
        if at_end is not None and np.isfinite(at_end).all() and np.isfinite(delta).all():
            out[name], lost = _shares(start, end, at_end - delta, at_end)
            facts["unattributed_pages"] += lost if name != "faults" else 0.0
        elif not overlapped:
            out[name] = delta
        else:
            raise TrafficError(f"windows overlap and record no {prefix}_end: which task "
                               f"caused which pages is unknown (tables of an older edgeprof)")
    out["refaults"] = (out.pop("faults") - out["pages_in"]).clip(lower=0)
    return out[TRAFFIC_COLUMNS], facts


def run_traffic(tasks: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """``task_traffic`` of every run in ``runs`` that has it: one row per task (run_id,
    task_id and its traffic); runs whose traffic cannot be attributed are left out."""
    frames = []
    by_run = tasks[tasks["run_id"].isin(runs["run_id"])].groupby("run_id", sort=False)
    for _, t in by_run:
        try:
            traffic, _ = task_traffic(t)
        except TrafficError:
            continue
        frames.append(pd.concat([t[["run_id", "task_id"]], traffic], axis=1))
    if not frames:
        return pd.DataFrame(columns=["run_id", "task_id", *TRAFFIC_COLUMNS])
    return pd.concat(frames, ignore_index=True)

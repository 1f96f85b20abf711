"""Assembling the per-run folder from what the measured child streamed.

The child appends one JSON line per task start/end, heap dump and finished network to
``progress.jsonl``; everything here is derived from that file (plus GNU time's report and
the heap dumps), so an OOM-killed or timed-out run still yields its tasks.csv, with the
tasks that were running when it ended named in meta.json. A task's end line carries the
process probe's columns as one list (``proc``), named here.
"""

from __future__ import annotations

import csv
from bisect import bisect_left, bisect_right
from collections import Counter
from pathlib import Path

from engine.files import naming, parse_json, sha256_file
from engine.probes.process import COLUMNS as PROC_COLUMNS
from engine.probes.process import PACKED_KEY
from engine.runner.meta import RunMeta

TASK_BASE = ["instance", "network", "layer", "layer_name", "layer_type", "layer_kind",
             "task_id", "task_type", "worker", "start_ns", "end_ns", "duration_ns", "cpu_ns",
             "overlap", "bytes_loaded", "param_bytes"]
NETWORK_COLUMNS = ["instance", "network", "arrival", "arrival_ns", "released_ns",
                   "init_start_ns", "end_ns", "waiting_ns", "execution_ns", "response_ns",
                   "complete"]


def read_child(folder: Path) -> dict | None:
    """The measured child's summary (child.json), or None when it wrote none, or none
    that can be read (killed while writing it)."""
    try:
        summary = parse_json((folder / "child.json").read_text())
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) and "status" in summary else None


def read_progress(folder: Path) -> dict:
    events = {"start": {}, "end": [], "heap": [], "network": [], "done": [], "begin": None}
    path = folder / "progress.jsonl"
    if not path.is_file():
        return events
    with open(path, "rb") as f:
        for line in f:
            # a line cut by a kill (or anything else that is not a record) ends the
            # stream: everything before it is intact
            try:
                rec = parse_json(line)
                kind = rec.pop("event")
                if kind == "start":
                    events["start"][rec["task_id"]] = rec
                elif kind == "begin":
                    events["begin"] = rec
                else:
                    if PACKED_KEY in rec:  # the process probe's columns, packed by the child
                        rec.update(zip(PROC_COLUMNS, rec.pop(PACKED_KEY), strict=True))
                    events[kind].append(rec)
            except (ValueError, AttributeError, KeyError, TypeError):
                break
    return events


def _overlaps(rows: list[dict]) -> None:
    """How many other tasks ran during each task's window (0: its probe windows are its
    own; >0: process-wide counters such as VmHWM mix in other tasks). Task j overlaps i
    unless it starts at or after i's end or ends at or before i's start: counted with
    two sorted arrays, O(n log n)."""
    starts = sorted(r["start_ns"] for r in rows)
    ends = sorted(r["end_ns"] for r in rows)
    # an empty window [x, x] counts as both "starts after" and "ends before" every empty
    # window at x (itself included), so those are added back once
    empty = Counter(r["start_ns"] for r in rows if r["start_ns"] == r["end_ns"])
    n = len(rows)
    for r in rows:
        s, e = r["start_ns"], r["end_ns"]
        after = n - bisect_left(starts, e)
        before = bisect_right(ends, s)
        itself = 0 if s == e else 1
        r["overlap"] = n - after - before + (empty[s] if s == e else 0) - itself


def write_tasks(folder: Path, ends: list[dict]) -> None:
    rows = sorted(ends, key=lambda r: (r["start_ns"], r["task_id"]))
    _overlaps(rows)
    extra = sorted({k for r in rows for k in r} - set(TASK_BASE))
    with naming(folder / "tasks.csv"), open(folder / "tasks.csv", "w", newline="") as f:
        w = csv.DictWriter(f, TASK_BASE + extra, restval="")
        w.writeheader()
        w.writerows(rows)


def write_networks(folder: Path, events: dict) -> None:
    rows = [dict(r, complete=True) for r in events["network"]]
    if not rows:  # the child died: rebuild what the task records and "done" events tell
        done = {r["instance"]: r["end_ns"] for r in events["done"]}
        by_inst: dict[int, dict] = {}
        for r in events["end"] + list(events["start"].values()):
            row = by_inst.setdefault(r["instance"], {"instance": r["instance"],
                                                     "network": r["network"],
                                                     "complete": r["instance"] in done,
                                                     "end_ns": done.get(r["instance"])})
            if r.get("task_type") == "INIT" and "start_ns" in r:
                row["init_start_ns"] = r["start_ns"]
        rows = [by_inst[k] for k in sorted(by_inst)]
    path = folder / "networks.csv"
    with naming(path), open(path, "w", newline="") as f:
        w = csv.DictWriter(f, NETWORK_COLUMNS, restval="")
        w.writeheader()
        w.writerows(rows)


def _tcmalloc_stats(folder: Path) -> dict[int, dict]:
    """tcmalloc's numeric properties per dump number (heap/tcmalloc.csv)."""
    path = folder / "heap" / "tcmalloc.csv"
    if not path.is_file():
        return {}
    with open(path, newline="") as f:
        return {int(r["dump"]): {k: v for k, v in r.items() if k.startswith("tc_")}
                for r in csv.DictReader(f)}


def write_heap(folder: Path, events: dict, tasks: dict[int, dict]) -> list[dict]:
    """heap/heap.csv: one row per dump, the parsed profile joined with the task it
    belongs to and tcmalloc's own counters at that moment."""
    from engine.probes.heap import parse_heap_profile

    stats = _tcmalloc_stats(folder)
    rows = []
    for rec in events["heap"]:
        path = folder / "heap" / f"heap.{rec['dump']:04d}.heap"
        if not path.is_file():
            continue  # the process died before the dump was written
        prof = parse_heap_profile(path)
        task = tasks.get(rec["task_id"], {})
        rows.append({"dump": rec["dump"], "task_id": rec["task_id"], "phase": rec["phase"],
                     "instance": task.get("instance"), "network": task.get("network"),
                     "layer": task.get("layer"), "layer_name": task.get("layer_name"),
                     "task_type": task.get("task_type"),
                     "inuse_bytes": prof["inuse_bytes"], "inuse_objects": prof["inuse_objects"],
                     "alloc_bytes": prof["alloc_bytes"], "alloc_objects": prof["alloc_objects"],
                     **stats.get(rec["dump"], {})})
    if rows:
        path = folder / "heap" / "heap.csv"
        with naming(path), open(path, "w", newline="") as f:
            w = csv.DictWriter(f, list(rows[0]), restval="")
            w.writeheader()
            w.writerows(rows)
    return rows


def run_peak_bytes(ends: list[dict], gnu_time: dict | None) -> int | None:
    """The run's resident high-water mark. GNU time's max RSS alone is too low when the
    per-window VmHWM resets (clear_refs 5) lowered the kernel's hiwater_rss, so the
    process probe's running maximum over all windows counts too."""
    values = [int(r["proc_peak_so_far_bytes"]) for r in ends
              if r.get("proc_peak_so_far_bytes") not in (None, "")]
    if gnu_time and gnu_time.get("gt_max_rss_bytes") is not None:
        values.append(gnu_time["gt_max_rss_bytes"])
    return max(values) if values else None


# the tables a run writes and tidy reads: each one's digest is in meta.json
DIGESTED = ("tasks.csv", "networks.csv", "samples.csv", "heap/heap.csv")


def assemble(folder: Path, meta: RunMeta) -> None:
    """Write tasks.csv, networks.csv and heap/heap.csv into ``folder``, fill in what
    ``meta`` learns from them, and write it as meta.json."""
    events = read_progress(folder)
    write_tasks(folder, events["end"])
    write_networks(folder, events)
    tasks = {r["task_id"]: r for r in events["end"]}
    tasks.update({k: v for k, v in events["start"].items() if k not in tasks})
    if events["heap"]:
        write_heap(folder, events, tasks)
    ended = {r["task_id"] for r in events["end"]}
    running = [v for k, v in sorted(events["start"].items()) if k not in ended]
    meta.running_at_end = [
        f"{r['instance']}:{r['network']} {r['task_type']}"
        + (f"_{r['layer']} {r['layer_name']}" if r["layer"] >= 0 else "") for r in running]
    meta.tasks_finished = len(ended)
    if events["begin"]:
        meta.t0_monotonic_ns = events["begin"]["t0_monotonic_ns"]
    meta.child = read_child(folder)
    gnu = folder / "gnu_time.txt"
    if gnu.is_file():
        from engine.probes.gnutime import parse_gnu_time

        meta.gnu_time = parse_gnu_time(gnu.read_text())
    meta.hwm_rss_bytes = run_peak_bytes(events["end"], meta.gnu_time)
    meta.table_digests = {name: sha256_file(folder / name) for name in DIGESTED
                          if (folder / name).is_file()}
    meta.write(folder)

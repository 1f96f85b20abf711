"""Per-layer memory reconciliation: every instrument side by side, residuals named.

One row per (run, instance, layer, phase) window, phase = the task type (INIT/LOAD/EXEC).
Instruments, from the outermost to the innermost:

- cgroup: window peak of the run's cgroup (``cg_peak_bytes``; includes page cache and
  kernel memory), swap, and deltas of memory.stat/events/PSI;
- process: VmHWM over the window (``proc_hwm_bytes``, reset with clear_refs) and VmRSS at
  its end (``proc_rss_bytes``);
- tcmalloc: physical bytes the allocator holds (``tc_physical_bytes``) at the window's end;
- heap profile: bytes in use by malloc at the window's start and end (``heap_inuse_*``);
- GNU time: the run's max RSS (one value per run, ``gt_max_rss_bytes``; ``hwm_rss_bytes``
  also counts the process probe's running maximum, see runner.folder.run_peak_bytes);
- expectation: the layer's weight bytes from the description (``param_bytes``).

Residuals: ``res_cgroup_minus_rss`` = page cache + kernel memory (minus pages owned by
other cgroups); ``res_rss_minus_tcmalloc`` = mapped files, libraries and non-malloc memory
(pymalloc arenas, thread stacks); ``res_tcmalloc_minus_heap`` = allocator caches, free
page heap, size-class rounding and metadata; ``res_load_vs_weights`` = heap growth over a
LOAD minus the layer's weight bytes (0 when loading makes no extra copy).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from engine.runner.meta import RunMeta

KEYS = ["instance", "network", "layer", "layer_name", "layer_kind", "task_type"]


def _tc_physical(df: pd.DataFrame) -> pd.Series:
    """tcmalloc's physical footprint: total_physical_bytes where the library reports it,
    else heap size minus the pages already returned to the OS."""
    if "tc_total_physical_bytes" in df and df["tc_total_physical_bytes"].notna().any():
        return df["tc_total_physical_bytes"]
    if "tc_heap_size_bytes" in df and "tc_pageheap_unmapped_bytes" in df:
        return df["tc_heap_size_bytes"] - df["tc_pageheap_unmapped_bytes"]
    return pd.Series(np.nan, index=df.index)


def reconcile_run(folder: str | Path) -> pd.DataFrame:
    """The reconciliation table of one run folder."""
    folder = Path(folder)
    meta = RunMeta.read(folder)
    tasks = pd.read_csv(folder / "tasks.csv")
    out = tasks.copy()
    heap_csv = folder / "heap" / "heap.csv"
    if heap_csv.is_file():
        heap = pd.read_csv(heap_csv)
        start = heap[heap.phase == "start"].set_index("task_id")
        end = heap[heap.phase == "end"].set_index("task_id")
        out = out.set_index("task_id")
        out["heap_inuse_start"] = start["inuse_bytes"]
        out["heap_inuse_end"] = end["inuse_bytes"]
        out["heap_alloc_delta"] = end["alloc_bytes"] - start["alloc_bytes"]
        tc_cols = [c for c in end.columns if c.startswith("tc_")]
        for c in tc_cols:
            out[c] = end[c]
        out = out.reset_index()
        out["heap_inuse_delta"] = out["heap_inuse_end"] - out["heap_inuse_start"]
        out["heap_freed"] = out["heap_alloc_delta"] - out["heap_inuse_delta"]
        out["tc_physical_bytes"] = _tc_physical(out)
    for col in ("cg_peak_bytes", "proc_hwm_bytes", "proc_rss_bytes", "heap_inuse_end",
                "tc_physical_bytes", "heap_inuse_delta"):
        if col not in out:
            out[col] = np.nan
    out["res_cgroup_minus_rss"] = out["cg_peak_bytes"] - out["proc_hwm_bytes"]
    out["res_rss_minus_tcmalloc"] = out["proc_rss_bytes"] - out["tc_physical_bytes"]
    out["res_tcmalloc_minus_heap"] = out["tc_physical_bytes"] - out["heap_inuse_end"]
    is_load = out["task_type"] == "LOAD"
    out["res_load_vs_weights"] = np.where(is_load, out["heap_inuse_delta"] - out["param_bytes"],
                                          np.nan)
    gnu = meta.gnu_time or {}
    out["gt_max_rss_bytes"] = gnu.get("gt_max_rss_bytes", np.nan)
    out["hwm_rss_bytes"] = np.nan if meta.hwm_rss_bytes is None else meta.hwm_rss_bytes
    out.insert(0, "run", folder.name)
    for key in ("policy", "limit_bytes", "backend", "limit_enforced", "termination",
                "emulated"):
        out[key] = getattr(meta, key)
    out["pipeline"] = meta.pipeline.name
    return out

"""Figure ``reconciliation``: every memory instrument over one run's windows, and
their residuals."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from engine.analysis.figures.common import (
    Tables,
    colors_for,
    drop_if_empty,
    instrument_lines,
    limit_text,
    network_boundaries,
    no_data,
    run_hwm_line,
)
from engine.units import MIB

LEVELS = [("cg_peak_bytes", "cgroup memory.peak (window)"),
          ("proc_hwm_bytes", "process VmHWM (window)"),
          ("proc_rss_bytes", "process VmRSS (window end)"),
          ("tc_physical_bytes", "tcmalloc physical bytes"),
          ("heap_inuse_end", "heap profile in-use (window end)")]


RESIDUALS = [("res_cgroup_minus_rss", "cgroup − RSS: page cache, kernel"),
             ("res_rss_minus_tcmalloc", "RSS − tcmalloc physical (mixed; see attribution)"),
             ("res_tcmalloc_minus_heap", "tcmalloc − heap: allocator caches"),
             ("res_load_vs_weights", "LOAD heap growth − weights: extra copies")]


def draw(tables: Tables, style: dict, context: dict) -> Figure:
    """Per-layer memory of the reconciliation run: every instrument per LOAD/EXEC window
    in execution order, GNU time's high-water mark, and the named residuals."""
    rec = tables.get("reconcile", pd.DataFrame())
    if not rec.empty:
        rec = rec[rec["task_type"].isin(["LOAD", "EXEC"])].sort_values("start_ns")
    if rec.empty:
        return no_data("Memory reconciliation", "no reconciliation run")
    cols = [c for c, _ in LEVELS + RESIDUALS] + ["hwm_rss_bytes"]
    colors = colors_for(cols, style)
    fig = Figure(figsize=(11, 6.5), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    handles = instrument_lines(top, rec, LEVELS, colors)
    # GNU time's max RSS is the kernel's hiwater_rss, which the per-window VmHWM resets
    # lower; hwm_rss_bytes is its maximum with the windows' peaks (runner.folder).
    handles.append(run_hwm_line(top, rec))
    # an empty frame reads as data; the legend still names what was not measured
    drop_if_empty(top, "no instrument measured in this run (probes off)")
    top.set_ylabel("memory (MiB)")
    top.legend(handles=handles, fontsize="x-small", loc="upper left", bbox_to_anchor=(1, 1))
    is_load = (rec["task_type"] == "LOAD").to_numpy()
    weights = bottom.bar(np.flatnonzero(is_load), rec.loc[is_load, "param_bytes"] / MIB,
                         width=1, color="0.8", label="layer weights (LOAD windows)")
    handles = [weights, *instrument_lines(bottom, rec, RESIDUALS, colors)]
    bottom.axhline(0, color="0.3", linewidth=0.6)
    bottom.set_ylabel("weights, residuals (MiB)")
    bottom.set_xlabel("LOAD/EXEC window, in execution order")
    bottom.legend(handles=handles, fontsize="x-small", loc="upper left", bbox_to_anchor=(1, 1))
    for ax in (top, bottom):
        if ax.axison:
            network_boundaries(ax, rec)
    first = rec.iloc[0]
    fig.suptitle(f"Memory reconciliation: {first['pipeline']} under {first['policy']}, "
                 f"limit {limit_text(first)}")
    return fig

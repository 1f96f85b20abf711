"""Figure ``attribution``: each window's memory split into the parts it belongs to."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from engine.analysis.figures.common import (
    Tables,
    instrument_lines,
    instrument_note,
    is_measured,
    limit_text,
    network_boundaries,
    no_data,
    run_hwm_line,
)
from engine.units import MIB

# Attribution parts, bottom of the stack first: (column, label, colour)
ATTRIBUTION = [
    ("att_weights_bytes", "weights in use", "#1f77b4"),
    ("att_activations_bytes", "activations, other heap since profiling", "#aec7e8"),
    ("att_malloc_baseline_bytes", "malloc'd before profiling (interpreter)", "#9edae5"),
    ("att_allocator_free_bytes", "tcmalloc free but resident", "#ff7f0e"),
    ("att_interpreter_anon_bytes", "anon outside malloc (pymalloc, stacks)", "#2ca02c"),
    ("att_anon_bytes", "anonymous (not split: no heap profile)", "#98df8a"),
    ("att_other_anon_bytes", "other processes' anon (cgroup)", "#c5b0d5"),
    ("att_file_bytes", "file-backed: libraries, mapped files", "#8c564b"),
    ("att_shmem_bytes", "shmem", "#e377c2"),
    ("att_page_cache_bytes", "page cache (cgroup)", "#bcbd22"),
    ("att_kernel_bytes", "kernel: slab, stacks, page tables, sock (cgroup)", "#7f7f7f"),
    ("att_unexplained_bytes", "unexplained", "#d62728"),
]


OUTSIDE = [("att_mapped_not_resident_bytes", "tcmalloc mapped, not resident (not in total)",
            "#ffbb78"),
           ("att_swap_bytes", "swap (not in total)", "#17becf")]


def draw(tables: Tables, style: dict, context: dict) -> Figure:
    """Every window's outermost measurement (cgroup memory.current at its end, else VmRSS)
    stacked by the named part each byte belongs to, the explicit remainder on top; hatched
    above: what is outside it (tcmalloc's untouched pages, swap). Lines: the outer value,
    the cgroup's window peak and the run's max RSS (GNU time + VmHWM windows)."""
    rec = tables.get("reconcile", pd.DataFrame())
    if not rec.empty:
        rec = rec[rec["task_type"].isin(["LOAD", "EXEC"])].sort_values("start_ns")
    if rec.empty:
        return no_data("Memory attribution", "no reconciliation run")
    rec = rec.reset_index(drop=True)
    for col in ("att_outer_bytes", "att_unexplained_bytes"):
        if col not in rec:
            rec[col] = np.nan
    fig = Figure(figsize=(12, 5.5), layout="constrained")
    ax = fig.subplots()
    x = np.arange(len(rec))
    pos, neg = np.zeros(len(rec)), np.zeros(len(rec))
    handles = []
    for col, label, color in ATTRIBUTION:
        if not is_measured(rec, col):
            continue
        v = rec[col].fillna(0).to_numpy() / MIB
        base = np.where(v >= 0, pos, neg)
        handles.append(ax.bar(x, v, bottom=base, width=1.0, color=color, label=label,
                              linewidth=0))
        pos += np.where(v >= 0, v, 0)
        neg += np.where(v < 0, v, 0)
    for col, label, color in OUTSIDE:
        if not is_measured(rec, col):
            continue
        v = rec[col].fillna(0).clip(lower=0).to_numpy() / MIB
        handles.append(ax.bar(x, v, bottom=pos, width=1.0, color="none", edgecolor=color,
                              hatch="////", linewidth=0, label=label))
        pos += v
    outer = rec.get("att_outer", pd.Series(dtype=object)).replace("", np.nan).dropna()
    outer_name = outer.iloc[0] if len(outer) else "outer"
    (line,) = ax.step(x, rec["att_outer_bytes"] / MIB, where="mid", color="black",
                      linewidth=1, label=f"{outer_name} (window end): the total")
    handles.append(line)
    handles += instrument_lines(ax, rec, [("cg_peak_bytes", "cgroup memory.peak (window)")],
                                 {"cg_peak_bytes": "firebrick"})
    handles.append(run_hwm_line(ax, rec))
    if "plausible" in rec and (~rec["plausible"].astype(bool)).any():
        bad = np.flatnonzero(~rec["plausible"].astype(bool).to_numpy())
        ax.plot(bad, np.full(len(bad), 0), "v", color="red", markersize=4, clip_on=False)
        handles.append(Line2D([], [], color="red", marker="v", linestyle="none",
                              label="window failing a plausibility check"))
    network_boundaries(ax, rec)
    ax.axhline(0, color="0.3", linewidth=0.6)
    ax.set_xlim(-0.5, len(rec) - 0.5)
    ax.set_ylabel("memory (MiB)")
    ax.set_xlabel("LOAD/EXEC window, in execution order")
    ax.legend(handles=handles, fontsize="x-small", loc="upper left", bbox_to_anchor=(1, 1))
    first = rec.iloc[0]
    rest = rec["att_unexplained_bytes"].abs().max() / MIB
    fig.suptitle(f"Memory attribution: {first['pipeline']} under {first['policy']}, limit "
                 f"{limit_text(first)}{' (emulated)' if first.get('emulated') else ''}"
                 + ("" if np.isnan(rest) else f"; largest unexplained remainder {rest:.1f} MiB"))
    if rec["att_outer_bytes"].isna().all():
        instrument_note(ax, "not measured: no process or cgroup counters in this run "
                             "(probes off)")
    return fig

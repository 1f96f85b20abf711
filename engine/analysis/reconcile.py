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

Attribution (``attribute``): the outermost measurement of each window (``att_outer_bytes``:
the cgroup's memory.current at the window's end when there is a cgroup, else VmRSS) split
into named parts, each from its own counter, with the remainder explicit:

- ``att_weights_bytes``: layer weights loaded and not yet freed (the description's weight
  bytes, LOAD adds, the layer's EXEC frees; checked against heap growth per LOAD);
- ``att_activations_bytes``: the rest of what was malloc'd since profiling started and is
  still in use (heap profile in-use at the end − weights): activations, inputs, outputs;
- ``att_malloc_baseline_bytes``: malloc'd before profiling started and still in use
  (tcmalloc current_allocated − heap profile in-use): the interpreter, imported modules;
- ``att_allocator_free_bytes``: tcmalloc's resident bytes it has not handed out (free
  spans, caches, metadata): resident bytes of its sbrk arena (``proc_brk_resident_bytes``,
  mincore) − current_allocated;
- ``att_interpreter_anon_bytes``: anonymous resident memory outside tcmalloc's arena
  (RssAnon − arena resident): pymalloc arenas, thread stacks, numpy's and libraries' own
  mmaps. Without a heap profile the anonymous part is not split (``att_anon_bytes``);
- ``att_file_bytes``: file-backed resident (libraries, mapped files): RssFile, or the
  cgroup's file_mapped; ``att_shmem_bytes``: RssShmem, or the cgroup's shmem;
- cgroup only: ``att_other_anon_bytes`` (cgroup anon − the process's RssAnon: other
  processes in the cgroup, GNU time), ``att_page_cache_bytes`` (file − file_mapped − shmem:
  page cache not mapped, e.g. the partial caffemodels read while loading),
  ``att_kernel_bytes`` (kernel + sock: slab, kernel stacks, page tables, socket buffers);
- ``att_unexplained_bytes``: outer − the sum of the parts above.

Outside the outer measurement, shown beside it: ``att_mapped_not_resident_bytes`` (tcmalloc
physical − arena resident: pages tcmalloc counts as physical that nobody touched yet, or
that were swapped out) and ``att_swap_bytes`` (cgroup swap, else VmSwap).

Plausibility (``chk_*``, and ``plausible`` / ``implausible`` per row): the remainder within
``max(UNEXPLAINED_ABS, UNEXPLAINED_REL × outer)``; no named part below −``NEGATIVE_TOL``;
the file-backed part within ``FILE_STABLE`` of the previous window's; heap growth over a
LOAD within ``LOAD_REL`` (or ``LOAD_ABS``) of the layer's weights.

Residuals: ``res_cgroup_minus_rss`` = page cache + kernel memory (minus pages owned by
other cgroups); ``res_rss_minus_tcmalloc`` = VmRSS − tcmalloc physical, kept for
comparison only: it mixes file-backed pages, non-malloc anonymous memory and (negatively)
tcmalloc's untouched pages, so it can shrink to ~0 while the libraries are still there;
the ``att_*`` parts separate them; ``res_tcmalloc_minus_heap`` = allocator caches, free
page heap, size-class rounding and metadata; ``res_load_vs_weights`` = heap growth over a
LOAD minus the layer's weight bytes (0 when loading makes no extra copy).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from engine.analysis.tidy import check_digests
from engine.runner.meta import RunMeta
from engine.units import MIB

KEYS = ["instance", "network", "layer", "layer_name", "layer_kind", "task_type"]
UNEXPLAINED_ABS = 2 * MIB  # the remainder may be this large ...
UNEXPLAINED_REL = 0.02  # ... or this share of the outer measurement, whichever is larger
NEGATIVE_TOL = 1 * MIB  # how far below 0 a named part may read (counter batching)
FILE_STABLE = 4 * MIB  # file-backed part: change allowed from one window to the next
LOAD_REL = 0.01  # heap growth over a LOAD: relative error allowed against the weights,
LOAD_ABS = 16 * 1024  # or this many bytes (a few Python objects per layer: ~3 KiB seen)

# Resident parts of the outer measurement (bottom of the stack first), and those beside it
PARTS = ["att_weights_bytes", "att_activations_bytes", "att_malloc_baseline_bytes",
         "att_allocator_free_bytes", "att_interpreter_anon_bytes", "att_anon_bytes",
         "att_other_anon_bytes", "att_file_bytes", "att_shmem_bytes", "att_page_cache_bytes",
         "att_kernel_bytes"]
BESIDE = ["att_mapped_not_resident_bytes", "att_swap_bytes"]


def _tc_physical(df: pd.DataFrame) -> pd.Series:
    """tcmalloc's physical footprint: total_physical_bytes where the library reports it,
    else heap size minus the pages already returned to the OS."""
    if "tc_total_physical_bytes" in df and df["tc_total_physical_bytes"].notna().any():
        return df["tc_total_physical_bytes"]
    if "tc_heap_size_bytes" in df and "tc_pageheap_unmapped_bytes" in df:
        return df["tc_heap_size_bytes"] - df["tc_pageheap_unmapped_bytes"]
    return pd.Series(np.nan, index=df.index)


def _col(df: pd.DataFrame, name: str) -> pd.Series:
    """A column as floats (NaN where missing or not measured)."""
    if name not in df:
        return pd.Series(np.nan, index=df.index)
    return pd.to_numeric(df[name], errors="coerce").astype(float)


def weights_in_use(df: pd.DataFrame) -> pd.Series:
    """Weight bytes loaded and not yet freed at each window's end, over all instances:
    a LOAD adds its layer's weight bytes, the layer's EXEC frees them (a whole-network
    EXEC frees all of its instance's). Windows are taken in order of their end."""
    loaded: dict[tuple, float] = {}
    out = pd.Series(np.nan, index=df.index)
    order = df.sort_values(["end_ns", "task_id"]).index if "end_ns" in df else df.index
    for i in order:
        row = df.loc[i]
        inst, layer, kind = row["instance"], row["layer"], row["task_type"]
        param = float(row.get("param_bytes", 0) or 0)
        if kind == "LOAD":
            loaded[(inst, layer)] = loaded.get((inst, layer), 0.0) + param
        elif kind == "EXEC":
            for key in [k for k in loaded if k[0] == inst and (layer < 0 or k[1] == layer)]:
                del loaded[key]
        out[i] = sum(loaded.values())
    return out


def attribute(df: pd.DataFrame) -> pd.DataFrame:
    """The ``att_*`` parts of every window (module docstring), from the probes' columns:
    proc_rss_{anon,file,shmem}_bytes, proc_brk_resident_bytes, tc_current_allocated_bytes,
    tc_physical_bytes, heap_inuse_end, weights (``att_weights_in_use``), and where a
    cgroup was measured cg_current_bytes and cg_{anon,file,file_mapped,shmem,kernel,sock}
    _bytes. Works on synthetic counters (tests) as on a run's table."""
    out = df.copy()
    anon, file_, shmem = (_col(df, f"proc_rss_{p}_bytes") for p in ("anon", "file", "shmem"))
    arena = _col(df, "proc_brk_resident_bytes")
    alloc, inuse = _col(df, "tc_current_allocated_bytes"), _col(df, "heap_inuse_end")
    weights = (_col(df, "att_weights_in_use") if "att_weights_in_use" in df
               else weights_in_use(df))
    split = arena.notna() & alloc.notna() & inuse.notna()
    out["att_weights_bytes"] = weights.where(split)
    out["att_activations_bytes"] = (inuse - weights).where(split)
    out["att_malloc_baseline_bytes"] = (alloc - inuse).where(split)
    out["att_allocator_free_bytes"] = (arena - alloc).where(split)
    out["att_interpreter_anon_bytes"] = (anon - arena).where(split)
    out["att_anon_bytes"] = anon.where(~split)
    cg_current = _col(df, "cg_current_bytes")
    cg = {p: _col(df, f"cg_{p}_bytes") for p in ("anon", "file", "file_mapped", "shmem",
                                                  "kernel", "sock")}
    has_cg = cg_current.notna() & cg["anon"].notna() & cg["file"].notna()
    # the process's anonymous part inside the cgroup's anon; no process probe: cg's anon
    out.loc[has_cg & anon.isna(), "att_anon_bytes"] = cg["anon"]
    out["att_other_anon_bytes"] = (cg["anon"] - anon).where(has_cg)
    mapped = cg["file_mapped"].fillna(0)
    out["att_file_bytes"] = mapped.where(has_cg, file_)
    out["att_shmem_bytes"] = cg["shmem"].fillna(0).where(has_cg, shmem)
    out["att_page_cache_bytes"] = (cg["file"] - mapped - cg["shmem"].fillna(0)).where(has_cg)
    out["att_kernel_bytes"] = (cg["kernel"].fillna(0) + cg["sock"].fillna(0)).where(has_cg)
    outer = cg_current.where(has_cg, _col(df, "proc_rss_bytes"))
    out["att_outer"] = np.where(has_cg, "cgroup memory.current", "VmRSS")
    out.loc[outer.isna(), "att_outer"] = ""
    out["att_outer_bytes"] = outer
    parts = out[PARTS].sum(axis=1, min_count=1)
    out["att_unexplained_bytes"] = (outer - parts).where(parts.notna())
    out["att_mapped_not_resident_bytes"] = (_col(df, "tc_physical_bytes") - arena)
    out["att_swap_bytes"] = _col(df, "cg_swap_current_bytes").where(
        has_cg, _col(df, "proc_swap_bytes"))
    out["att_weights_in_use"] = weights
    return out


def check(df: pd.DataFrame) -> pd.DataFrame:
    """Plausibility of the attribution per window (``chk_*`` True/False, NaN where it does
    not apply), ``plausible`` (every applicable check holds) and ``implausible`` (what
    failed, by name)."""
    out = df.copy()
    outer, rest = _col(df, "att_outer_bytes"), _col(df, "att_unexplained_bytes")
    bound = np.maximum(UNEXPLAINED_ABS, UNEXPLAINED_REL * outer)
    out["chk_unexplained"] = (rest.abs() <= bound).where(rest.notna())
    failed: list[list[str]] = [[] for _ in range(len(df))]
    nonneg = pd.Series(True, index=df.index)
    for part in PARTS + BESIDE:
        low = _col(df, part) < -NEGATIVE_TOL
        nonneg &= ~low
        for k in np.flatnonzero(low.to_numpy()):
            failed[k].append(f"{part} < 0")
    out["chk_parts_nonnegative"] = nonneg.where(outer.notna())
    file_ = _col(df, "att_file_bytes")
    windows = df["task_type"].isin(["LOAD", "EXEC"]) & file_.notna()
    stable = pd.Series(np.nan, index=df.index, dtype=object)
    if windows.any():
        order = df[windows].sort_values(["end_ns", "task_id"]).index
        steps = file_[order].diff().abs()
        stable[order] = (steps.fillna(0) <= FILE_STABLE)
    out["chk_file_stable"] = stable
    load = (df["task_type"] == "LOAD") & (_col(df, "param_bytes") > 0)
    err = (_col(df, "heap_inuse_delta") - _col(df, "param_bytes")).abs()
    allowed = np.maximum(LOAD_REL * _col(df, "param_bytes"), LOAD_ABS)
    out["chk_load_weights"] = (err <= allowed).where(
        load & err.notna())
    for name in ("chk_unexplained", "chk_file_stable", "chk_load_weights"):
        for k in np.flatnonzero((out[name] == False).to_numpy()):  # noqa: E712 (NaN: n/a)
            failed[k].append(name.removeprefix("chk_"))
    out["implausible"] = ["; ".join(f) for f in failed]
    out["plausible"] = [not f for f in failed]
    out["att_why"] = [why(row) for _, row in out.iterrows()]
    return out


def _mib(x: float) -> str:
    return f"{x / MIB:.1f}"


def why(row: pd.Series) -> str:
    """What each instrument saw and why neighbouring ones differ, for one window (exact
    identities of the parts: the gaps are sums of named parts)."""
    bits = []
    g = {k: row.get(k) for k in row.index}

    def have(*names: str) -> bool:
        return all(g.get(n) is not None and pd.notna(g.get(n)) for n in names)

    if have("cg_peak_bytes", "proc_hwm_bytes"):
        kernel = g.get("att_kernel_bytes")
        bits.append(f"cgroup peak {_mib(g['cg_peak_bytes'])} − VmHWM {_mib(g['proc_hwm_bytes'])}"
                    f" MiB: page cache {_mib(g.get('att_page_cache_bytes') or 0)}, kernel "
                    f"{_mib(kernel if kernel is not None and pd.notna(kernel) else 0)}, other "
                    f"processes' anon {_mib(g.get('att_other_anon_bytes') or 0)} at the end")
    if have("proc_rss_bytes", "tc_physical_bytes", "att_interpreter_anon_bytes",
            "att_mapped_not_resident_bytes", "proc_rss_file_bytes"):
        bits.append(f"VmRSS {_mib(g['proc_rss_bytes'])} − tcmalloc physical "
                    f"{_mib(g['tc_physical_bytes'])} = file-backed "
                    f"{_mib(g['proc_rss_file_bytes'] + (g.get('proc_rss_shmem_bytes') or 0))}"
                    f" + non-malloc anon {_mib(g['att_interpreter_anon_bytes'])} − tcmalloc "
                    f"pages not resident {_mib(g['att_mapped_not_resident_bytes'])}")
    if have("tc_physical_bytes", "heap_inuse_end", "att_allocator_free_bytes",
            "att_malloc_baseline_bytes", "att_mapped_not_resident_bytes"):
        bits.append(f"tcmalloc physical − heap in use {_mib(g['heap_inuse_end'])} = free but "
                    f"resident {_mib(g['att_allocator_free_bytes'])} + not resident "
                    f"{_mib(g['att_mapped_not_resident_bytes'])} + malloc'd before profiling "
                    f"{_mib(g['att_malloc_baseline_bytes'])}")
    if have("heap_inuse_delta") and g.get("task_type") == "LOAD" and (g.get("param_bytes") or 0):
        bits.append(f"heap growth {_mib(g['heap_inuse_delta'])} vs weights "
                    f"{_mib(g['param_bytes'])}")
    return "; ".join(bits)


def reconcile_run(folder: str | Path) -> pd.DataFrame:
    """The reconciliation table of one run folder."""
    folder = Path(folder)
    meta = RunMeta.read(folder)
    check_digests(folder, meta)  # the tables read here are the run's own
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
    return check(attribute(out))

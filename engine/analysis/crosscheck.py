"""The second kernel as referee: the same runs in user-mode Linux and in the qemu guest
(a stock Debian kernel), compared per cell (pipeline, policy, limit).

Per run it takes what the kernels themselves count, not the sampler's readings (a
sampler at 20 Hz sees a TCG run 10-100x more often per unit of work than a UML one):

- peak RAM: the measured process's VmHWM (``hwm_rss_bytes``);
- peak swap: the run cgroup's largest ``memory.swap.peak`` window
  (``cg_window_swap_peak_bytes``);
- pages swapped in and out: the guest's ``/proc/vmstat`` ``pswpin``/``pswpout`` over the
  job (``sandbox.vmstat_delta`` in meta.json: the whole guest, the run's process nearly all).

A cell's value in a sandbox is the median over its runs that ended ``ok``; the others
are counted in its termination column, never silently dropped, and a cell one sandbox
lacks is shown as missing there (``docs/sandboxes.md``, benchmarks/crosscheck.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from engine.analysis.report import markdown_table
from engine.limits import SANDBOXES
from engine.units import MIB, parse_size

CELL = ["pipeline", "policy", "limit"]
MAPS_WARN = 0.8  # of vm.max_map_count: the share past which tables flag a UML run
# metric -> (label, unit divisor, target: largest |uml/vm - 1| that counts as agreeing)
METRICS = {"peak_ram_bytes": ("peak RAM (MiB)", MIB, 0.05),
           "peak_swap_bytes": ("peak swap (MiB)", MIB, 0.10),
           "pswpin": ("pages swapped in", 1, None),
           "pswpout": ("pages swapped out", 1, None)}
RECORD_COLUMNS = ["sandbox", *CELL, "rep", "termination", "termination_detail",
                  *METRICS, "host_maps_peak", "host_max_map_count", "wall_s", "host_load1"]


def run_record(folder: str | Path) -> dict:
    """One run folder's record for the cross-check (its tidy row plus the guest's swap
    counters, which the tidy table does not carry in full)."""
    from engine.analysis.tidy import tidy_run
    from engine.runner.meta import RunMeta

    folder = Path(folder)
    row = tidy_run(folder)["runs"].iloc[0]
    vmstat = (RunMeta.read(folder).sandbox or {}).get("vmstat_delta") or {}
    return {"sandbox": row["sandbox"], "pipeline": row["pipeline"], "policy": row["policy"],
            "limit": row["limit"], "rep": row["rep"], "termination": row["termination"],
            "termination_detail": row["termination_detail"] or "",
            "peak_ram_bytes": row["hwm_rss_bytes"],
            "peak_swap_bytes": row["cg_window_swap_peak_bytes"],
            "pswpin": vmstat.get("pswpin", math.nan),
            "pswpout": vmstat.get("pswpout", math.nan),
            "host_maps_peak": row["host_maps_peak"],
            "host_max_map_count": row["host_max_map_count"], "wall_s": row["wall_s"],
            "host_load1": row["host_load1_start"]}


def _terminations(runs: pd.DataFrame) -> str:
    """'ok 2/2', or each ending counted with the first detail of the runs that did not
    finish (a timeout at the mapping cap says so)."""
    if runs.empty:
        return "not run"
    counts = runs["termination"].value_counts()
    text = ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: kv[0] != "ok"))
    text = f"{text} of {len(runs)}"
    details = [d for d in runs.loc[runs["termination"] != "ok", "termination_detail"] if d]
    if details:
        text += f" ({details[0][:80]})"
    return text.replace("|", "/")


def compare(records: pd.DataFrame) -> pd.DataFrame:
    """One row per cell found in either sandbox: per metric the median of each sandbox's
    finished runs (NaN where it has none), and ``<metric>_ratio`` uml / vm; the runs and
    terminations of each sandbox."""
    rows = []
    for cell, runs in records.groupby(CELL, sort=False):
        row = dict(zip(CELL, cell))
        for sb in SANDBOXES:
            mine = runs[runs["sandbox"] == sb]
            ok = mine[mine["termination"] == "ok"]
            row[f"{sb}_runs"] = len(mine)
            row[f"{sb}_ok"] = len(ok)
            row[f"{sb}_termination"] = _terminations(mine)
            for metric in METRICS:
                row[f"{sb}_{metric}"] = (float(ok[metric].median()) if len(ok)
                                         and ok[metric].notna().any() else math.nan)
            maps = mine["host_maps_peak"].dropna()
            row[f"{sb}_host_maps_peak"] = float(maps.max()) if len(maps) else math.nan
            cap = mine["host_max_map_count"].dropna()
            row[f"{sb}_host_max_map_count"] = float(cap.min()) if len(cap) else math.nan
        for metric in METRICS:
            uml, vm = row[f"uml_{metric}"], row[f"vm_{metric}"]
            # 0 against 0 agrees exactly; x against 0 has no ratio
            row[f"{metric}_ratio"] = (1.0 if uml == 0 and vm == 0 else
                                      uml / vm if vm else math.nan)
        rows.append(row)
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    order = out["limit"].map(lambda s: math.inf if s == "none" else parse_size(s))
    return (out.assign(_l=order).sort_values(["pipeline", "_l", "policy"])
            .drop(columns="_l").reset_index(drop=True))


def within(ratio: float, target: float) -> bool:
    """|ratio - 1| <= target, a float's rounding short of it counting as in (121 / 110
    is 1.1000000000000001)."""
    return abs(ratio - 1) <= target + 1e-9


def _value(x: float, div: float) -> str:
    return "missing" if not math.isfinite(x) else f"{x / div:,.0f}"


def _pair(row: pd.Series, metric: str) -> str:
    """'uml / vm (±d %)'; a side without a finished run reads 'missing'."""
    _, div, target = METRICS[metric]
    uml, vm = (_value(row[f"{sb}_{metric}"], div) for sb in SANDBOXES)
    ratio = row[f"{metric}_ratio"]
    if not math.isfinite(ratio):
        return f"{uml} / {vm}"
    mark = "" if target is None or within(ratio, target) else " ✗"
    return f"{uml} / {vm} ({(ratio - 1) * 100:+.1f} %{mark})"


def _maps(row: pd.Series) -> str:
    """UML's most host mappings of a guest process; past 80 % of the host's cap it says
    so, as every table does (docs/sandboxes.md)."""
    maps, cap = row["uml_host_maps_peak"], row["uml_host_max_map_count"]
    if not math.isfinite(maps):
        return "n/a"
    if math.isfinite(cap) and maps > MAPS_WARN * cap:
        return f"{maps:,.0f} ⚠ {maps / cap:.0%} of the cap"
    return f"{maps:,.0f}"


def markdown(table: pd.DataFrame) -> str:
    """The cross-check as the Markdown table docs/sandboxes.md carries: uml / vm per
    metric with uml's difference from the referee (✗: outside the target), the runs'
    terminations in each sandbox and UML's most host mappings."""
    header = ["pipeline", "policy", "limit", *(METRICS[m][0] + ": uml / vm" for m in METRICS),
              "uml runs", "vm runs", "uml host maps (most)"]
    rows = []
    for _, r in table.iterrows():
        rows.append([r["pipeline"], r["policy"], r["limit"],
                     *(_pair(r, m) for m in METRICS),
                     r["uml_termination"], r["vm_termination"], _maps(r)])
    return markdown_table(header, rows)


def agreement(table: pd.DataFrame) -> dict[str, tuple[int, int]]:
    """Per metric with a target: (cells within it, cells with both sides measured)."""
    out = {}
    for metric, (_, _, target) in METRICS.items():
        if target is None:
            continue
        ratios = table[f"{metric}_ratio"].dropna()
        out[metric] = (sum(within(r, target) for r in ratios), len(ratios))
    return out

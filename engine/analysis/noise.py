"""Is the host too noisy for its results to mean much? Said after a workflow, in every
figure's caption, and before a sweep (``python -m engine doctor``).

After: the noise floor of identical native runs (its median makespan CV) above
``CV_LIMIT``, or other work taking ``OTHER_CPUS_LIMIT`` CPUs or more during the runs while
less than one CPU was idle (each run records the host's busy CPUs and its own; the load
average counts the run's own threads too), each warned with its numbers: then the
machine, not the policies, may decide a result.
Before: the load, the CPU frequency governors, the transparent hugepage mode and swap,
each with what it means for the results.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pandas as pd

CV_LIMIT = 0.10  # median makespan CV of identical native runs; ~3.5 % on a quiet machine
# CPUs other work took during a run (its busy CPUs less the run's own), median over the
# native runs: warned when at least this much, with less than one CPU left idle
OTHER_CPUS_LIMIT = 0.5
BUSY_WINDOW_S = 1.0  # how long doctor watches the CPUs
NEAR_MAP_CAP = 0.8  # a uml run's peak host mappings past this share of the cap is warned


def run_warnings(runs: pd.DataFrame, noise_floor: pd.DataFrame) -> list[str]:
    """The warnings a finished campaign's tables give (empty when the host was quiet and
    every run computed what its siblings did)."""
    out = []
    if "outputs_agree" in runs and runs["outputs_agree"].eq(False).any():
        bad = runs.loc[runs["outputs_agree"].eq(False), "run_id"].astype(str)
        out.append(f"{len(bad)} run(s) computed other outputs than the other runs of their "
                   f"pipeline and repetition ({', '.join(bad[:3])}"
                   f"{', ...' if len(bad) > 3 else ''}): their sandbox or machine corrupted "
                   f"them; their numbers are not to be trusted")
    crashed = runs.loc[runs["termination"].eq("error"), "run_id"].astype(str) \
        if "termination" in runs else pd.Series(dtype=str)
    if len(crashed):
        out.append(f"{len(crashed)} run(s) crashed ({', '.join(crashed[:3])}"
                   f"{', ...' if len(crashed) > 3 else ''}): recorded as ended 'error', "
                   f"left out of the times and counted in the summaries' runs_not_ok; "
                   f"such a run stays so (a sandbox that did not start is one): to measure "
                   f"it anew, remove its run folder and its tidy set and run the workflow "
                   f"again")
    if {"host_maps_peak", "host_max_map_count"} <= set(runs):
        near = runs[runs["host_maps_peak"] > NEAR_MAP_CAP * runs["host_max_map_count"]]
        if len(near):
            worst = near.loc[near["host_maps_peak"].idxmax()]
            out.append(f"{len(near)} user-mode Linux run(s) held over "
                       f"{100 * NEAR_MAP_CAP:.0f} % of the host's mapping cap "
                       f"(vm.max_map_count) in a guest process ({worst['run_id']}: "
                       f"{int(worst['host_maps_peak'])} of {int(worst['host_max_map_count'])}): "
                       f"at the cap a guest process stalls (docs/sandboxes.md)")
    if not noise_floor.empty:
        native = noise_floor[(noise_floor["mode"] == "native")
                             & (noise_floor["metric"] == "makespan")]
        if not native.empty and native["cv_median"].iloc[0] > CV_LIMIT:
            r = native.iloc[0]
            out.append(f"noisy host: identical native runs vary by {100 * r['cv_median']:.0f} % "
                       f"(median makespan CV over {int(r['cells'])} cells, 95 % CI "
                       f"{100 * r['cv_ci_low']:.0f}-{100 * r['cv_ci_high']:.0f} %; a quiet "
                       f"machine: about 3.5 %): speed-ups within about "
                       f"{141 * r['cv_median']:.0f} % of 1 are noise")
    if not runs.empty and {"host_other_cpus", "host_busy_cpus"} <= set(runs):
        native = runs[~runs["emulated"].astype(bool)] if "emulated" in runs else runs
        other, busy = native["host_other_cpus"].dropna(), native["host_busy_cpus"].dropna()
        # the CPUs of the host that ran them, as the runs recorded (not this machine's)
        recorded = (native["host_cpus"] if "host_cpus" in native else pd.Series(dtype=float))
        recorded = recorded[recorded.between(1, 1e6)]  # a count of CPUs, or not recorded
        host_cpus = int(recorded.median()) if len(recorded) else (os.cpu_count() or 1)
        if len(other) and len(busy) and other.median() >= OTHER_CPUS_LIMIT \
                and host_cpus - busy.median() < 1:
            load = pd.concat([native.get("host_load1_start", pd.Series(dtype=float)),
                              native.get("host_load1_end", pd.Series(dtype=float))]).dropna()
            said = f"; 1-minute load {load.median():.1f}" if len(load) else ""
            out.append(f"loaded host: other work took {other.median():.1f} CPUs during the "
                       f"runs (median; up to {other.max():.1f}) and left less than one of "
                       f"the {host_cpus} CPUs idle{said}: it shared the CPUs with the runs")
    return out


def table_warnings(tables_dir: str | os.PathLike, required: bool = False) -> list[str]:
    """``run_warnings`` of the aggregate tables in ``tables_dir``: [] before they exist,
    or (``required``: a user named them) an EdgeprofError naming what is wrong."""
    from engine.files import read_table

    folder = Path(tables_dir)
    runs_path, floor_path = folder / "runs.parquet", folder / "noise_floor.parquet"
    if not required and not (runs_path.is_file() and floor_path.is_file()):
        return []
    fix = "name a campaign's aggregate tables (results/tables)"
    return run_warnings(read_table(runs_path, fix, ["run_id", "termination", "child_cpus"]),
                        read_table(floor_path, fix, ["metric", "cv_median"]))


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def host_checks() -> list[tuple[str, bool | None, str]]:
    """(what, fine, what it means) for this host, now: ``doctor``'s lines; ``fine`` None
    is a note on what this host cannot do, not on how quiet it is."""
    cpus = os.cpu_count() or 1
    checks = []
    load1, load5, _ = os.getloadavg()
    # said, not judged: it counts runnable threads of any priority, idle ones waiting on
    # a disk too; the CPUs other work keeps busy (below) is the verdict
    checks.append((f"load average {load1:.2f} (1 min), {load5:.2f} (5 min) on {cpus} CPUs",
                   True, ""))
    from engine.probes.hostload import host_load, snapshot

    start = snapshot()
    time.sleep(BUSY_WINDOW_S)
    other = host_load(start, snapshot())["other_cpus"]
    if other is not None:
        checks.append((f"CPUs other work keeps busy: {other:.2f} of {cpus} (over "
                       f"{BUSY_WINDOW_S:.0f} s)", other < OTHER_CPUS_LIMIT,
                       "a run shares the CPUs with it: times vary with it; wait for a "
                       "quiet machine, or compare only runs interleaved in one sweep (a "
                       f"campaign warns at {OTHER_CPUS_LIMIT} with no CPU idle)"))
    governors = {_read(str(p)) for p in
                 Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_governor")}
    governors.discard(None)
    if governors:
        fixed = governors <= {"performance"}
        checks.append((f"CPU frequency governor: {', '.join(sorted(governors))}", fixed,
                       "frequency scaling changes a task's speed with the load: set "
                       "'performance' for timing sweeps"))
    else:
        checks.append(("CPU frequency governor: not readable (a VM's virtual CPUs)", True,
                       ""))
    thp = _read("/sys/kernel/mm/transparent_hugepage/enabled") or "unknown"
    mode = thp.split("[")[1].split("]")[0] if "[" in thp else thp
    checks.append((f"transparent hugepages: {mode}", mode != "always",
                   "'always' gives numpy and Caffe huge pages whose first touch can stall "
                   "on a VM (benchmarks/bench_first_touch.py); runs ask for 4 KiB pages, "
                   "but 'always' overrides that"))
    from engine.limits.umlhost import load_uml, map_count_note, max_map_count

    maps, built = max_map_count(), load_uml()
    note = map_count_note(maps, built.probe_maps if built else None)
    # a limit on what the uml sandbox can run, not on how quiet the host is: a note
    checks.append((f"vm.max_map_count: {maps if maps is not None else 'unreadable'}"
                   + (f" ({note})" if note else ""), True if note is None else None, ""))
    swap = next((int(line.split()[1]) for line in (_read("/proc/meminfo") or "").splitlines()
                 if line.startswith("SwapTotal:")), 0)
    checks.append((f"host swap: {swap // 1024} MiB", True,
                   "" if swap == 0 else "unconstrained native runs never need it; a "
                   "sandbox's swap is its own"))
    return checks

"""One run folder as tidy tables, checked against the run's own record.

``tidy_run`` turns one run folder into four tables (runs, tasks, networks, samples), each
row carrying the run's identity, so that tables of many runs concatenate without joins.
Every probe column and file is optional: a quantity that was not measured is NaN, never
zero. A run that did not finish (termination memory / timeout / error) keeps its rows;
only the quantities it could not produce are NaN. A table that is not the one the run
wrote (its digest, its row count, what its rows name) is refused, naming it.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd

from engine.errors import EdgeprofError
from engine.runner.folder import NETWORK_COLUMNS
from engine.runner.meta import RunMeta, mmap_threshold
from engine.units import format_size

TIDY_TABLES = ("runs", "tasks", "networks", "samples")
# Columns that say which run a row belongs to, repeated in every tidy table.
IDENTITY = ["run_id", "pipeline", "policy", "limit", "limit_enforced", "backend", "emulated",
            "sandbox", "runtime", "rep", "termination"]
SAMPLE_VALUES = ["rss_bytes", "uss_bytes", "swap_bytes", "cg_current_bytes",
                 "cg_swap_current_bytes"]
NS = 1e9


def limit_label(limit_bytes: int | None) -> str:
    """'none' for an unconstrained run, else the limit as users write it ('512M')."""
    return "none" if limit_bytes is None else format_size(int(limit_bytes))


def _rep(folder: Path) -> int | None:
    m = re.fullmatch(r"rep(\d+)", folder.name)
    return int(m.group(1)) if m else None


def _batch_folder(folder: Path) -> bool:
    """Whether a run's folder is one of a batch axis's (``runs_b4/p000/linear/none/rep0``,
    engine.workflow.plan.batch_kind): its id then names its batch, as another batch's
    run of the same pipeline, policy, limit and repetition is another run."""
    parents = folder.parents
    return (_rep(folder) is not None and len(parents) > 3
            and re.fullmatch(r".+_b\d+", parents[3].name) is not None)


def _identity(meta: RunMeta, folder: Path) -> dict:
    pipeline = meta.pipeline.name
    limit = limit_label(meta.limit_bytes)
    rep = _rep(folder)
    sandbox = sandbox_of(meta)
    run_id = (f"{pipeline}/{meta.policy}/{limit}"
              + ("" if sandbox == "none" else f"/{sandbox}")
              + ("" if meta.runtime == "lean" else f"/{meta.runtime}")
              + (f"/b{meta.batch}" if _batch_folder(folder) else "")
              + ("" if rep is None else f"/rep{rep}"))
    return {"run_id": run_id, "pipeline": pipeline, "policy": meta.policy, "limit": limit,
            "limit_enforced": bool(meta.limit_enforced), "backend": meta.backend,
            "emulated": bool(meta.emulated), "sandbox": sandbox, "runtime": meta.runtime,
            "batch": meta.batch,  # None: each network's deploy batch
            "rep": rep, "termination": meta.termination,
            # False for a probe-overhead twin (--no-probes): never a probed run's stand-in
            "probed": bool((meta.probes or {}).get("process", True)),
            # which record: the model's trained_on names its runs by it
            "record_digest": record_digest(folder)}


def sandbox_of(meta: RunMeta) -> str:
    """Which sandbox kernel ran the run: uml, vm (qemu), or none (the host's)."""
    if meta.sandbox:
        return meta.sandbox.get("kernel", "vm")  # records from before uml existed: qemu
    return "none"


def _with_identity(df: pd.DataFrame, ident: dict) -> pd.DataFrame:
    ids = pd.DataFrame({k: [v] * len(df) for k, v in ident.items()}, index=df.index)
    # a run outside .../repN has no repetition; a deploy batch is NA
    ids = ids.astype({"rep": "Int64", "batch": "Int64"})
    return pd.concat([ids, df], axis=1)


def _read_csv(path: Path) -> pd.DataFrame:
    if not path.is_file() or path.stat().st_size == 0:
        return pd.DataFrame()
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) != b"\n":  # every writer ends its rows with a newline
            raise EdgeprofError(f"{path} ends in the middle of a row: truncated; rerun the run")
    try:
        return pd.read_csv(path)
    except (ValueError, pd.errors.ParserError) as exc:
        raise EdgeprofError(f"{path} is not a readable table ({exc}); rerun the run") from None


def _check_rows(path: Path, df: pd.DataFrame, expected: int | None, field: str) -> None:
    """A table must hold the rows its run record counted: a truncated or emptied file is
    an error naming it, never a silently shorter result."""
    if expected is not None and len(df) != expected:
        raise EdgeprofError(f"{path} has {len(df)} rows but meta.json's {field} counts "
                            f"{expected}: the file was truncated or replaced; rerun the run")


def _networks(folder: Path, meta: RunMeta) -> pd.DataFrame:
    """networks.csv with a row for every network of the pipeline: a run that died early
    lists only the instances that started, so the others are added as incomplete."""
    df = _read_csv(folder / "networks.csv")
    names = meta.pipeline.networks
    if meta.termination == "ok":  # a finished run wrote a row for every network
        _check_rows(folder / "networks.csv", df, len(names), "pipeline.networks")
    all_instances = pd.DataFrame({"instance": range(len(names)), "network": names})
    if df.empty:
        df = all_instances.assign(complete=False)
    else:
        missing = all_instances[~all_instances["instance"].isin(df["instance"])]
        df = pd.concat([df, missing.assign(complete=False)], ignore_index=True)
    # a run ended before any network did (killed or timed out at its start) wrote the
    # header alone: its times are unknown, not absent columns
    for col in NETWORK_COLUMNS:
        if col not in df:
            df[col] = np.nan
    df["complete"] = df["complete"].astype(bool)
    return df.sort_values("instance", ignore_index=True)


def _samples(folder: Path, meta: RunMeta) -> pd.DataFrame:
    """samples.csv on the tasks' clock: t_s = seconds since the run's t0."""
    df = _read_csv(folder / "samples.csv")
    if df.empty:
        return df
    t0 = meta.t0_monotonic_ns or df["t_ns"].min()
    df["t_s"] = (df["t_ns"] - t0) / NS
    for col in SAMPLE_VALUES:
        df[col] = pd.to_numeric(df[col], errors="coerce") if col in df else np.nan
    return df


def _known(value: float | None) -> float:
    """None (not measured) as NaN; 0 stays 0."""
    return np.nan if value is None else value


def _col_max(df: pd.DataFrame, col: str) -> float:
    return df[col].max() if col in df and df[col].notna().any() else np.nan


def _col_mean(df: pd.DataFrame, col: str) -> float:
    return df[col].mean() if col in df and df[col].notna().any() else np.nan


def _run_row(meta: RunMeta, folder: Path, tasks: pd.DataFrame, networks: pd.DataFrame,
             samples: pd.DataFrame) -> dict:
    pipe = meta.pipeline
    finished = meta.termination == "ok" and bool(networks["complete"].all())
    makespan = (networks["end_ns"].max() - networks["arrival_ns"].min()) / NS
    gnu = meta.gnu_time or {}
    load = meta.host_load or {}
    return {
        **_identity(meta, folder),
        "size_bin": pipe.size_bin, "n_networks": len(pipe.networks),
        "networks": " ".join(pipe.networks), "arrival_mode": pipe.arrival_mode,
        "param_bytes": pipe.param_bytes, "policy_family": meta.policy_family,
        "workers": meta.workers, "limit_bytes": meta.limit_bytes,
        "swap_bytes": meta.swap_bytes,
        "limit_enforced_why": _enforced_why(meta),
        "outputs_sha256": (meta.child or {}).get("outputs_sha256"),
        "termination_detail": meta.termination_detail,
        "running_at_end": "; ".join(meta.running_at_end),
        "networks_complete": int(networks["complete"].sum()),
        "tasks_finished": len(tasks),
        "makespan_s": makespan if finished else np.nan,
        "mean_response_s": networks["response_ns"].mean() / NS if finished else np.nan,
        "wall_s": _known(meta.wall_s),
        # CPU time of the measured child (GNU time: user + sys, its threads included)
        # (None in the report of a child killed before GNU time could write its times)
        "cpu_s": _known(gnu.get("gt_user_s")) + _known(gnu.get("gt_sys_s")),
        "started_at": _known(meta.started_at),
        "host_load1_start": _known(load.get("load1_start")),
        "host_load1_end": _known(load.get("load1_end")),
        "host_busy_cpus": _known(load.get("busy_cpus")),
        # CPUs other work took over the run (busy less the run's own); NaN where not recorded
        "host_other_cpus": _known(load.get("other_cpus")),
        "host_cpus": _known(load.get("cpus")),
        "cpu_pinned": bool((meta.cpu_affinity or {}).get("pinned", False)),
        # --pin-cpu given (pinned or not: other runs may hold the CPUs); NA: not recorded
        "cpu_pin_asked": (meta.cpu_affinity or {}).get("asked"),
        # the CPUs the measured child could run on (its workers share them)
        "child_cpus": len((meta.cpu_affinity or {}).get("child") or []) or np.nan,
        # the run's settings, which the workflow's aggregate checks against its config
        "seed": meta.seed, "blas_threads": meta.blas_threads,
        "sample_hz": float((meta.probes or {}).get("sample_hz") or 0),
        **{probe: bool((meta.probes or {}).get(probe, False))
           for probe in ("heap_profile", "cpu_profile", "sample_uss")},
        "timeout_s": _known(meta.timeout_s), "stall_s": _known(meta.stall_s),
        "budget_bytes": _known(meta.budget_bytes),
        "estimates": None if meta.estimates is None else json.dumps(meta.estimates,
                                                                    sort_keys=True),
        "pipeline_sha256": meta.pipeline.sha256,
        # description file name -> its SHA-256 (it pins the weights): the split it read
        "descriptions": json.dumps({Path(path).name: meta.description_sha256.get(net)
                                    for net, path in sorted(meta.description_files.items())},
                                   sort_keys=True),
        # numpy's transparent-hugepage advice in the child and the malloc settings it ran
        # with (engine.runner.supervise), which the workflow's aggregate checks
        "numpy_hugepages": (meta.child or {}).get("numpy_hugepage_advice"),
        "glibc_tunables": (meta.child or {}).get("glibc_tunables"),
        "mmap_threshold": _known(mmap_threshold((meta.child or {}).get("glibc_tunables"))),
        "gt_max_rss_bytes": _known(gnu.get("gt_max_rss_bytes")),
        "hwm_rss_bytes": _known(meta.hwm_rss_bytes),
        "gt_user_s": gnu.get("gt_user_s", np.nan), "gt_sys_s": gnu.get("gt_sys_s", np.nan),
        "gt_major_faults": gnu.get("gt_major_faults", np.nan),
        **{f"{stat}_{col}": fn(samples, col) for col in SAMPLE_VALUES
           for stat, fn in (("mean", _col_mean), ("peak", _col_max))},
        "n_samples": len(samples),
        # Window counters are per task; the run's value is the largest window.
        "cg_window_peak_bytes": _col_max(tasks, "cg_peak_bytes"),
        "cg_window_swap_peak_bytes": _col_max(tasks, "cg_swap_peak_bytes"),
        "proc_hwm_bytes": _col_max(tasks, "proc_hwm_bytes"),
        "guest_pswpout": _known(((meta.sandbox or {}).get("vmstat_delta") or {}).get(
            "pswpout")),
        # uml: the most host mappings a guest process held, against the host's cap
        # (docs/sandboxes.md); NaN for other runs and records from before it was counted
        "host_maps_peak": _known((meta.sandbox or {}).get("host_maps_peak")),
        "host_max_map_count": _known((meta.sandbox or {}).get("host_max_map_count")),
        "page_bytes": page_bytes(meta),
    }


# Machines whose base page is 4 KiB whatever the kernel: what a run recorded before its
# record held the page size (schema 4 and older) counted in such pages.
FOUR_KIB_MACHINES = {"x86_64", "i386", "i686"}


def page_bytes(meta: RunMeta) -> float:
    """Bytes of a page of the kernel that counted the run's swap and fault counters (the
    tasks' ``*_pswpin_delta`` and ``*_pgmajfault_delta``, ``guest_pswpout``): the
    sandbox's guest for a run in one, else the host. NaN if the record cannot tell."""
    facts = ((meta.sandbox or {}).get("guest") if meta.sandbox is not None
             else meta.host) or {}
    if facts.get("page_size"):
        return float(facts["page_size"])
    return 4096.0 if facts.get("machine") in FOUR_KIB_MACHINES else np.nan


SWAP_EVIDENCE = ["guest_pswpout", "cg_window_swap_peak_bytes", "peak_swap_bytes",
                 "peak_cg_swap_current_bytes"]


def _enforced_why(meta: RunMeta) -> str:
    """Why the run's limit bound it or not, in words (meta.json's ``limits`` has the
    backend's facts): "" for an unconstrained run."""
    if meta.limit_bytes is None:
        return ""
    limits = meta.limits or {}
    if meta.limit_enforced:
        where = limits.get("cgroup") or limits.get("guest_backend") or meta.backend
        return f"enforced by {meta.backend}" + (f" ({where})" if where != meta.backend else "")
    return str(limits.get("unenforced_reason") or "not enforced (no reason recorded)")


def _swapped(row: dict) -> bool | None:
    """Whether any instrument saw the run's pages in swap (pages swapped out in the guest,
    a cgroup swap peak, the process's VmSwap); None when none of them was measured."""
    seen = [row[k] for k in SWAP_EVIDENCE if not pd.isna(row.get(k, np.nan))]
    return any(v > 0 for v in seen) if seen else None


def check_digests(folder: Path, meta: RunMeta) -> None:
    """Every table the run recorded a digest of must be that table, byte for byte; and,
    in a record with digests, a table it has none of was put there after the run."""
    from engine.files import sha256_file
    from engine.runner.folder import DIGESTED

    if meta.table_digests:
        planted = [name for name in DIGESTED
                   if name not in meta.table_digests and (folder / name).exists()]
        if planted:
            raise EdgeprofError(f"{folder / planted[0]} is no table this run wrote (meta.json "
                                f"has no digest of it): put there after the run; remove it "
                                f"or rerun the run")
    for name, digest in meta.table_digests.items():
        path = folder / name
        if not path.is_file():
            from engine.files import file_kind

            raise EdgeprofError(f"{path}, a table this run wrote, is {file_kind(path)} now, "
                                f"not a regular file; restore it or rerun the run")
        if sha256_file(path) != digest:
            raise EdgeprofError(f"{path} is not the table this run wrote (its SHA-256 "
                                f"differs from meta.json's table_digests): replaced or "
                                f"edited; rerun the run")


def _check_identity(folder: Path, meta: RunMeta, tasks: pd.DataFrame,
                    networks: pd.DataFrame) -> None:
    """The tables' content against the run record (runs written before table digests,
    and whatever a digest cannot say): each instance's network in pipeline order, the
    instances within the pipeline, the workers within the policy's."""
    names = meta.pipeline.networks
    for path, df in ((folder / "tasks.csv", tasks), (folder / "networks.csv", networks)):
        if df.empty or not {"instance", "network"} <= set(df):
            continue
        inst = df["instance"].astype(int)
        if (inst < 0).any() or (inst >= len(names)).any():
            raise EdgeprofError(f"{path} has instances outside this run's {len(names)} "
                                f"networks: not this run's table; rerun the run")
        expected = inst.map(dict(enumerate(names)))
        wrong = df["network"] != expected
        if wrong.any():
            row = df[wrong].iloc[0]
            raise EdgeprofError(f"{path}: instance {int(row['instance'])} is "
                                f"{row['network']}, but this run's pipeline "
                                f"{meta.pipeline.name} has {names[int(row['instance'])]} "
                                f"there: not this run's table; rerun the run")
    if "worker" in tasks and meta.workers is not None and not tasks.empty:
        if int(tasks["worker"].max()) >= meta.workers:
            raise EdgeprofError(f"{folder / 'tasks.csv'} has tasks on worker "
                                f"{int(tasks['worker'].max())}, but {meta.policy} has "
                                f"{meta.workers}: not this run's table; rerun the run")


def tidy_run(folder: str | os.PathLike) -> dict[str, pd.DataFrame]:
    """The tidy tables (runs, tasks, networks, samples) of one run folder, each checked
    against the run record: its digest, its row count, and what its rows say."""
    folder = Path(folder)
    meta = RunMeta.read(folder)
    check_digests(folder, meta)
    tasks = _read_csv(folder / "tasks.csv")
    _check_rows(folder / "tasks.csv", tasks, meta.tasks_finished, "tasks_finished")
    networks = _networks(folder, meta)
    _check_identity(folder, meta, tasks, networks)
    samples = _samples(folder, meta)
    _check_rows(folder / "samples.csv", samples, (meta.sampler or {}).get("samples"),
                "sampler.samples")
    row = _run_row(meta, folder, tasks, networks, samples)
    row["swapped"] = _swapped(row)
    runs = pd.DataFrame([row])
    # Nullable integers: a missing repetition or limit (None = unconstrained / swap max)
    # stays NA in every run's table, so the tables of many runs concatenate cleanly.
    runs = runs.astype({"rep": "Int64", "limit_bytes": "Int64", "swap_bytes": "Int64",
                        "batch": "Int64"})
    ident = _identity(meta, folder)
    return {"runs": runs, "tasks": _with_identity(tasks, ident),
            "networks": _with_identity(networks, ident),
            "samples": _with_identity(samples, ident)}


def record_digest(run: Path) -> str | None:
    """The ``record_digest`` of the run record in ``run`` (None: unreadable)."""
    from engine.files import parse_json, read_regular

    try:
        record = parse_json(read_regular(run / "meta.json", "run record", 2**26))
    except (OSError, ValueError):
        return None
    return record.get("record_digest") if isinstance(record, dict) else None

"""Tidy tables from run folders, and the campaign's aggregate tables.

``tidy_run`` turns one run folder into four tables (runs, tasks, networks, samples), each
row carrying the run's identity, so that tables of many runs concatenate without joins.
``aggregate`` stacks the tidy tables of a campaign, adds the reconciliation table and the
speed-up over Bulk. Every probe column and file is optional: a quantity that was not
measured is NaN, never zero. A run that did not finish (termination memory / timeout /
error) keeps its rows; only the quantities it could not produce are NaN.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from engine.errors import EdgeprofError
from engine.files import atomic_path
from engine.runner.folder import NETWORK_COLUMNS
from engine.runner.meta import RunMeta, mmap_threshold
from engine.units import format_size

TIDY_TABLES = ("runs", "tasks", "networks", "samples")
# Columns that say which run a row belongs to, repeated in every tidy table.
IDENTITY = ["run_id", "pipeline", "policy", "limit", "limit_enforced", "backend", "emulated",
            "sandbox", "runtime", "rep", "termination"]
SAMPLE_VALUES = ["rss_bytes", "uss_bytes", "swap_bytes", "cg_current_bytes",
                 "cg_swap_current_bytes"]
# Enough points to draw a run's memory curve; the aggregate keeps at most this many per run.
MAX_SAMPLES_PER_RUN = 2000
NS = 1e9


def limit_label(limit_bytes: int | None) -> str:
    """'none' for an unconstrained run, else the limit as users write it ('512M')."""
    return "none" if limit_bytes is None else format_size(int(limit_bytes))


def _rep(folder: Path) -> int | None:
    m = re.fullmatch(r"rep(\d+)", folder.name)
    return int(m.group(1)) if m else None


def _identity(meta: RunMeta, folder: Path) -> dict:
    pipeline = meta.pipeline.name
    limit = limit_label(meta.limit_bytes)
    rep = _rep(folder)
    sandbox = sandbox_of(meta)
    run_id = (f"{pipeline}/{meta.policy}/{limit}"
              + ("" if sandbox == "none" else f"/{sandbox}")
              + ("" if meta.runtime == "lean" else f"/{meta.runtime}")
              + ("" if rep is None else f"/rep{rep}"))
    return {"run_id": run_id, "pipeline": pipeline, "policy": meta.policy, "limit": limit,
            "limit_enforced": bool(meta.limit_enforced), "backend": meta.backend,
            "emulated": bool(meta.emulated), "sandbox": sandbox, "runtime": meta.runtime,
            "rep": rep, "termination": meta.termination,
            # False for a probe-overhead twin (--no-probes): never a probed run's stand-in
            "probed": bool((meta.probes or {}).get("process", True)),
            # which record: the aggregate matches it to the run folder's (set_folders)
            "record_digest": _record_digest(folder)}


def sandbox_of(meta: RunMeta) -> str:
    """Which sandbox kernel ran the run: uml, vm (qemu), or none (the host's)."""
    if meta.vm:
        return meta.vm.get("sandbox", "vm")  # vm records from before uml existed
    return "none"


def _with_identity(df: pd.DataFrame, ident: dict) -> pd.DataFrame:
    ids = pd.DataFrame({k: [v] * len(df) for k, v in ident.items()}, index=df.index)
    ids["rep"] = ids["rep"].astype("Int64")  # a run outside .../repN has no repetition
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
        "batch": meta.batch,  # None: each network's deploy batch
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
        "guest_pswpout": _known(((meta.vm or {}).get("vmstat_delta") or {}).get("pswpout")),
        # uml: the most host mappings a guest process held, against the host's cap
        # (docs/sandboxes.md); NaN for other runs and records from before it was counted
        "host_maps_peak": _known((meta.vm or {}).get("host_maps_peak")),
        "host_max_map_count": _known((meta.vm or {}).get("host_max_map_count")),
        "page_bytes": page_bytes(meta),
    }


# Machines whose base page is 4 KiB whatever the kernel: what a run recorded before its
# record held the page size (schema 4 and older) counted in such pages.
FOUR_KIB_MACHINES = {"x86_64", "i386", "i686"}


def page_bytes(meta: RunMeta) -> float:
    """Bytes of a page of the kernel that counted the run's swap and fault counters (the
    tasks' ``*_pswpin_delta`` and ``*_pgmajfault_delta``, ``guest_pswpout``): the
    sandbox's guest for a run in one, else the host. NaN if the record cannot tell."""
    facts = ((meta.vm or {}).get("guest") if meta.vm is not None else meta.host) or {}
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


TIDY_DIGESTS = "digests.json"  # each tidy table's SHA-256, as tidy wrote it


def write_tidy(tables: dict[str, pd.DataFrame], out_dir: str | os.PathLike) -> None:
    """One Parquet file per tidy table in ``out_dir``, and their SHA-256s
    (``TIDY_DIGESTS``), which ``read_tidy`` checks."""
    from engine.files import sha256_file, write_text_atomic

    digests = {}
    for name, df in tables.items():
        with atomic_path(Path(out_dir) / f"{name}.parquet") as tmp:
            df.to_parquet(tmp)
        digests[f"{name}.parquet"] = sha256_file(Path(out_dir) / f"{name}.parquet")
    write_text_atomic(Path(out_dir) / TIDY_DIGESTS, json.dumps(digests, indent=1))


def _check_tidy(folder: Path, fix: str = "remove the folder and tidy the run again") -> None:
    """Each tidy table of ``folder`` is the one tidy wrote (its SHA-256): a table copied
    from another run or edited by hand is refused, naming it and ``fix``."""
    from engine.files import parse_json, read_regular, sha256_file

    try:
        digests = parse_json(read_regular(folder / TIDY_DIGESTS, "digest file", 2**20))
    except (OSError, ValueError):
        raise EdgeprofError(f"{folder} has no readable {TIDY_DIGESTS} (its tables' "
                            f"SHA-256s); {fix}") from None
    if not isinstance(digests, dict):
        raise EdgeprofError(f"{folder / TIDY_DIGESTS} is not tidy's record of its tables' "
                            f"SHA-256s (a JSON object); {fix}")
    for name in TIDY_TABLES:
        path = folder / f"{name}.parquet"
        if digests.get(path.name) != sha256_file(path):
            raise EdgeprofError(f"{path} is not the table tidy wrote (its SHA-256 differs); "
                                f"{fix}")


def check_table_outputs(out_dir: str | os.PathLike, names: Iterable[str],
                        files: Iterable[str] = ()) -> None:
    """Every place ``write_tables`` would write (``<name>.csv`` and ``.parquet`` per name,
    and ``files``) takes a file: checked before the work, one line naming the first that
    does not."""
    from engine.files import check_output_file

    out = Path(out_dir)
    try:
        for name in names:
            for ext in ("csv", "parquet"):
                check_output_file(out / f"{name}.{ext}", "an output table")
        for name in files:
            check_output_file(out / name, "an output file")
    except ValueError as exc:
        raise EdgeprofError(str(exc)) from None


def write_tables(tables: dict[str, pd.DataFrame], out_dir: str | os.PathLike,
                 texts: dict[str, str] | None = None) -> None:
    """``<name>.csv`` and ``<name>.parquet`` per table, and each of ``texts`` (file name ->
    its text), moved into place together (every target checked first, so a folder in one's
    place leaves none of them half a set)."""
    from engine.files import made_folder, naming, staged

    out = Path(out_dir)
    check_table_outputs(out, tables, texts or {})
    # a failed writer (a full disk) leaves no --out it created; an interrupted one none of
    # the set. pyarrow's and pandas' write errors carry no file name: each names the file
    # it was writing, as the user will find it (not the hidden staging folder)
    with made_folder(out), staged(out, ".tables.") as tmp:
        for name, df in tables.items():
            with naming(out / f"{name}.csv"):
                df.to_csv(tmp / f"{name}.csv", index=False)
            with naming(out / f"{name}.parquet"):
                df.to_parquet(tmp / f"{name}.parquet", index=False)
        for name, text in (texts or {}).items():
            with naming(out / name):
                (tmp / name).write_text(text)


def downsample(samples: pd.DataFrame, max_rows: int = MAX_SAMPLES_PER_RUN) -> pd.DataFrame:
    """At most ``max_rows`` samples per run: consecutive samples are merged into buckets
    keeping each value's maximum, so that memory peaks survive the thinning."""
    if samples.empty:
        return samples

    def thin(run: pd.DataFrame) -> pd.DataFrame:
        if len(run) <= max_rows:
            return run
        bucket = np.arange(len(run)) * max_rows // len(run)
        values = [c for c in SAMPLE_VALUES if c in run]
        first = run.groupby(bucket).first()
        first[values] = run[values].groupby(bucket).max()
        return first

    parts = [thin(run.sort_values("t_ns")) for _, run in samples.groupby("run_id", sort=False)]
    return pd.concat(parts, ignore_index=True)


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def tidy_run_table(tidy_dir: str | os.PathLike) -> pd.DataFrame:
    """The runs table of one tidy folder (checked as ``read_tidy`` checks it)."""
    _check_tidy(Path(tidy_dir))
    return pd.read_parquet(Path(tidy_dir) / "runs.parquet")


def set_folders(set_dir: str | os.PathLike, reps: int, probed: bool = True,
                runs_dir: str | os.PathLike | None = None,
                settings: Mapping[str, object] | None = None,
                pipeline_file: str | os.PathLike | None = None,
                split_dir: str | os.PathLike | None = None) -> list[Path]:
    """The per-run tidy folders of one run set's tidy folder
    (``tidy/<kind>/<pipeline>/<policy id>/<limit>``, as the workflow lays it out): exactly
    ``rep0`` .. ``rep<reps - 1>``, each holding the run its path names (pipeline, policy,
    limit, repetition, and probed or not), made with the set's ``settings``
    (``check_settings``) from the campaign's ``pipeline_file`` and the descriptions in its
    ``split_dir`` (``check_inputs``: not another campaign's pipeline of that name, nor
    another split's weights) and, given the run set's folder ``runs_dir``, the
    very run recorded there (its record's digest: not another campaign's run). A
    folder missing, one too many, a run tidied into another's place or redone by hand
    with other flags is refused, naming it and what to remove so that the workflow
    measures or tidies it anew: the aggregate would silently drop, add or misplace a run."""
    folder = Path(set_dir)
    fix = f"remove {folder} and run the workflow again (it tidies the set anew)"
    expected = [f"rep{i}" for i in range(reps)]
    try:
        present = sorted(e.name for e in folder.iterdir() if not e.name.startswith("."))
    except OSError as exc:
        raise EdgeprofError(f"cannot read the tidy folder {folder}: {exc.strerror}; "
                            f"{fix}") from None
    missing, stray = sorted(set(expected) - set(present)), sorted(set(present) - set(expected))
    if missing or stray:
        said = "; ".join(filter(None, [missing and f"no {', '.join(missing)}",
                                       stray and f"{', '.join(stray)} is not one of its "
                                                 f"{reps} runs"]))
        raise EdgeprofError(f"{folder}: {said}; {fix}")
    pipeline, policy_id, limit = folder.parts[-3:]
    for i, name in enumerate(expected):
        _check_tidy(folder / name, fix)
        runs = pd.read_parquet(folder / name / "runs.parquet")
        row = runs.iloc[0] if len(runs) == 1 else None
        # the run itself is wrong: measure it anew, and tidy it anew (the tidy set is
        # one output: Snakemake redoes it only when it is gone)
        run = None if runs_dir is None else Path(runs_dir) / name
        redo = (f"remove {run if run else 'its run folder'} and {folder}, and run the "
                f"workflow again: it measures the run anew")
        if (row is None or row["pipeline"] != pipeline or row["limit"] != limit
                or str(row["policy"]).replace(":", "_") != policy_id or row["rep"] != i):
            held = "no single run" if row is None else row["run_id"]
            # tidied from the run folder of its place: the run there is another (a redo)
            redone = (row is not None and run is not None
                      and row.get("record_digest") == _record_digest(run))
            raise EdgeprofError(f"{folder / name} holds {held}, not "
                                f"{pipeline}/{policy_id}/{limit}/rep{i}: "
                                + (f"the run in {run} is another run (redone by hand?); "
                                   f"{redo}" if redone else
                                   f"another run's tables copied into its place; {fix}"))
        if run is not None:
            _check_source(folder / name, run, row, fix, redo)
            _check_rederived(folder / name, run, fix)
        if bool(row.get("probed", True)) != probed:
            raise EdgeprofError(f"run {row['run_id']} was made "
                                f"{'without' if probed else 'with'} its probes, where the "
                                f"config's {'has them' if probed else 'is the unprobed twin'} "
                                f"(redone by hand?); {redo}")
        check_inputs(row, pipeline_file, split_dir, redo)
        if settings is not None:
            check_settings(runs, settings, redo)
    return [folder / name for name in expected]


@functools.lru_cache(maxsize=4096)
def _file_digest(path: str) -> str | None:
    """A pipeline or description file's SHA-256 (None: unreadable), once per aggregate:
    every run of a set reads the same pipeline, every run of a campaign the same few
    descriptions."""
    from engine.files import sha256_file

    try:
        return sha256_file(path)
    except OSError:
        return None


def check_inputs(row: Mapping, pipeline_file: str | os.PathLike | None,
                 split_dir: str | os.PathLike | None, fix: str) -> None:
    """The run of the runs-table ``row`` read the campaign's own pipeline file and network
    descriptions (their SHA-256s; a description holds its weights' digests): not another
    campaign's pipeline of the same name, nor another split's weights."""
    if pipeline_file is not None:
        ours = _file_digest(str(pipeline_file))
        if ours is None:
            raise EdgeprofError(f"cannot read the pipeline {pipeline_file}; run the workflow "
                                f"again (it draws the pipelines anew)")
        if row.get("pipeline_sha256") != ours:
            raise EdgeprofError(f"run {row['run_id']} ran another pipeline than "
                                f"{pipeline_file} (another campaign's, or another pipeline "
                                f"of that name); {fix}")
    if split_dir is None:
        return
    for name, digest in json.loads(row.get("descriptions") or "{}").items():
        if digest != _file_digest(str(Path(split_dir) / name)):
            raise EdgeprofError(f"run {row['run_id']} read another {name} than {split_dir}'s "
                                f"(other weights: another seed's split, or split again "
                                f"since); {fix}")


def _check_source(tidied: Path, run: Path, row: pd.Series, fix: str, redo: str) -> None:
    """The per-run tidy folder ``tidied`` holds the tables of the run folder ``run`` (its
    record's digest)."""
    if not (run / "meta.json").is_file():
        raise EdgeprofError(f"{run}, the run {tidied} was tidied from, is gone (or holds no "
                            f"meta.json); {redo}")
    recorded = _record_digest(run)
    if recorded is None:
        raise EdgeprofError(f"{run}/meta.json, the record of the run {tidied} was tidied "
                            f"from, is unreadable (cut short or edited); {redo}")
    if row.get("record_digest") != recorded:
        raise EdgeprofError(f"{tidied} holds the tables of another run than {run} (their "
                            f"records differ: another campaign's, or the run was redone "
                            f"since); {fix}")


def _check_rederived(tidied: Path, run: Path, fix: str) -> None:
    """Each table of the per-run tidy folder ``tidied`` holds what tidying its run folder
    ``run`` gives now: a table edited or cut short after tidy wrote it is refused even
    when its digest file was rewritten to match (the run's record is the one source)."""
    import io

    for name, fresh in tidy_run(run).items():
        buf = io.BytesIO()
        fresh.to_parquet(buf)  # the same round trip as the stored table's
        if not pd.read_parquet(tidied / f"{name}.parquet").equals(pd.read_parquet(buf)):
            raise EdgeprofError(f"{tidied / name}.parquet is not what tidying {run} gives "
                                f"(edited or cut short since); {fix}")


def _record_digest(run: Path) -> str | None:
    from engine.files import parse_json, read_regular

    try:
        record = parse_json(read_regular(run / "meta.json", "run record", 2**26))
    except (OSError, ValueError):
        return None
    return record.get("record_digest") if isinstance(record, dict) else None


def read_tidy(tidy_dirs: Iterable[str | os.PathLike]) -> dict[str, pd.DataFrame]:
    """The tidy tables (``TIDY_TABLES``) of these per-run tidy folders, concatenated."""
    parts: dict[str, list[pd.DataFrame]] = {name: [] for name in TIDY_TABLES}
    for d in tidy_dirs:
        _check_tidy(Path(d))
        for name in TIDY_TABLES:
            parts[name].append(pd.read_parquet(Path(d) / f"{name}.parquet"))
    return {name: _concat(frames) for name, frames in parts.items()}


# Runs compared for the speed-up: same pipeline, repetition and (enforced) limit, in the
# same execution mode (a native run is never paired with an emulated one).
SPEEDUP_KEY = ["pipeline", "limit", "limit_enforced", "emulated", "sandbox", "runtime", "rep"]
# ... and for the slowdown under a limit: the same policy unconstrained, same mode.
SLOWDOWN_KEY = ["pipeline", "policy", "emulated", "sandbox", "runtime", "rep"]


def _speedup_reason(row: pd.Series) -> str:
    if row["termination"] != "ok":
        return f"{row['policy']} ended '{row['termination']}'"
    if pd.isna(row["bulk_termination"]):
        return "bulk limit enforced differently" if row["bulk_elsewhere"] else "no bulk run"
    if row["bulk_termination"] != "ok":
        return f"bulk ended '{row['bulk_termination']}'"
    return ""


def _slowdown_reason(row: pd.Series) -> str:
    if row["limit"] == "none":
        return ""
    if row["termination"] != "ok":
        return f"{row['policy']} ended '{row['termination']}'"
    if pd.isna(row["unconstrained_termination"]):
        return "no unconstrained run"
    if row["unconstrained_termination"] != "ok":
        return f"unconstrained ended '{row['unconstrained_termination']}'"
    return ""


def with_runtime(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its ``runtime`` and ``sandbox`` columns; tables written before runs had
    them ran the lean runtime, emulated ones in the qemu guest."""
    if df.empty:
        return df
    if "runtime" not in df:
        df = df.assign(runtime="lean")
    if "sandbox" not in df:
        df = df.assign(sandbox=df["emulated"].map({True: "vm", False: "none"}))
    return df


def speedup_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per pipeline x limit x repetition x policy (one pair per repetition): makespan,
    speed-up over Bulk (bulk makespan / policy makespan, the two runs of one interleaved
    block) and slowdown under the limit (makespan / the same policy's unconstrained
    makespan in the same repetition and execution mode). NaN, with the reason, when a run
    of the pair did not finish."""
    runs = with_runtime(runs)
    cols = SPEEDUP_KEY + ["size_bin", "n_networks", "param_bytes", "limit_bytes", "policy",
                          "policy_family", "workers", "termination", "makespan_s"]
    extra = ["bulk_makespan_s", "bulk_termination", "speedup", "reason",
             "unconstrained_makespan_s", "unconstrained_termination", "slowdown",
             "slowdown_reason"]
    if runs.empty:
        return pd.DataFrame(columns=cols + extra)
    bulk = runs.loc[runs["policy"] == "bulk", SPEEDUP_KEY + ["makespan_s", "termination"]]
    bulk = bulk.rename(columns={"makespan_s": "bulk_makespan_s",
                                "termination": "bulk_termination"})
    out = runs[cols].merge(bulk, on=SPEEDUP_KEY, how="left")
    out["speedup"] = out["bulk_makespan_s"] / out["makespan_s"]
    # a bulk run of the same block whose limit was enforced differently (under inherit)
    loose = [k for k in SPEEDUP_KEY if k != "limit_enforced"]
    any_bulk = runs.loc[runs["policy"] == "bulk", loose].drop_duplicates().assign(
        bulk_elsewhere=True)
    out = out.merge(any_bulk, on=loose, how="left")
    out["bulk_elsewhere"] = out["bulk_elsewhere"].eq(True)
    out["reason"] = out.apply(_speedup_reason, axis=1)
    base = runs.loc[runs["limit"] == "none", SLOWDOWN_KEY + ["makespan_s", "termination"]]
    base = base.rename(columns={"makespan_s": "unconstrained_makespan_s",
                                "termination": "unconstrained_termination"})
    out = out.merge(base, on=SLOWDOWN_KEY, how="left")
    out["slowdown"] = out["makespan_s"] / out["unconstrained_makespan_s"]
    out["slowdown_reason"] = out.apply(_slowdown_reason, axis=1)
    out = out.drop(columns="bulk_elsewhere")
    return out.sort_values(SPEEDUP_KEY + ["policy"], ignore_index=True)


# What the summaries aggregate over repetitions: times over the finished runs only (a
# killed run's time is censored: counted in runs_not_ok and named on the figures),
# memory over every run that measured it (an OOM-killed run's peak is real data, at
# the limit; leaving it out would bias the peaks down).
TIME_METRICS = ["makespan_s", "wall_s", "cpu_s"]
MEMORY_METRICS = ["peak_rss_bytes", "mean_rss_bytes", "peak_swap_bytes", "mean_swap_bytes",
                  "hwm_rss_bytes", "cg_window_peak_bytes", "cg_window_swap_peak_bytes"]
# A cell: one policy on one pipeline (or size bin) under one limit, in one execution mode.
CELL = ["emulated", "sandbox", "runtime", "limit", "limit_enforced", "size_bin", "policy"]


def _levels(df: pd.DataFrame, value: str, prefix: str) -> pd.DataFrame:
    """``stats.summarize`` per pipeline (over its repetitions) and per size bin (over its
    pipelines and their repetitions), stacked with a ``level`` column."""
    from engine.analysis.stats import ci_scope, summarize

    per_pipeline = summarize(df, CELL + ["pipeline"], value, prefix=prefix)
    per_bin = summarize(df, CELL, value, cluster="pipeline", prefix=prefix)
    per_bin["pipeline"] = ""
    # what a size bin's CI is about: pipelines of that size, or only the bin's own
    k = (df.dropna(subset=[value]).groupby(CELL, dropna=False)["pipeline"].nunique()
         .rename("k").reset_index())
    per_bin = per_bin.merge(k, on=CELL, how="left")
    per_bin[f"{prefix}_ci_scope"] = per_bin["k"].fillna(0).astype(int).map(ci_scope)
    per_bin = per_bin.drop(columns="k")
    return pd.concat([per_pipeline.assign(level="pipeline"), per_bin.assign(level="size_bin")],
                     ignore_index=True)


def _count_levels(df: pd.DataFrame, **agg: tuple) -> pd.DataFrame:
    """``df.groupby(...).agg(**agg)`` per pipeline and per size bin, stacked like
    ``_levels`` (a size bin's pipeline is "")."""
    parts = [df.groupby(CELL + (["pipeline"] if level == "pipeline" else []), dropna=False)
             .agg(**agg).reset_index()
             .assign(level=level, **({} if level == "pipeline" else {"pipeline": ""}))
             for level in ("pipeline", "size_bin")]
    return pd.concat(parts, ignore_index=True)


def _merge_levels(parts: list[pd.DataFrame]) -> pd.DataFrame:
    key = ["level", *CELL, "pipeline"]
    out = parts[0]
    for part in parts[1:]:
        out = out.merge(part, on=key, how="outer")
    return out.sort_values(key, ignore_index=True)[key + [c for c in out if c not in key]]


def _most_frequent(values: pd.Series) -> str:
    """The most frequent non-null value of a group ("" when none): why its runs ended."""
    values = values.dropna()
    return str(values.mode().iloc[0]) if len(values) else ""


def summary_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Every time and memory metric of the finished runs: median and 95 % CI per policy,
    pipeline and limit (over repetitions) and per size bin (over pipelines and
    repetitions), with how many runs did not finish."""
    runs = with_runtime(runs)
    if runs.empty:
        return pd.DataFrame()
    runs = runs.assign(pipeline=runs["pipeline"].astype(str))
    ok = runs[runs["termination"] == "ok"]
    parts = [_levels(ok, col, col) for col in TIME_METRICS if col in ok]
    parts += [_levels(runs, col, col) for col in MEMORY_METRICS if col in runs]
    runs = runs.assign(not_ok=runs["termination"] != "ok",
                       ended=runs["termination"].where(runs["termination"] != "ok"),
                       swap_seen=runs["swapped"].eq(True) if "swapped" in runs else False)
    if "limit_enforced_why" not in runs:
        runs = runs.assign(limit_enforced_why="")
    runs = runs.assign(outputs_differ=runs["outputs_agree"].eq(False)
                       if "outputs_agree" in runs else False)
    counts = _count_levels(runs, runs=("run_id", "size"), runs_not_ok=("not_ok", "sum"),
                           ended=("ended", _most_frequent),
                           runs_swapped=("swap_seen", "sum"),
                           runs_outputs_differ=("outputs_differ", "sum"),
                           limit_enforced_why=("limit_enforced_why", _most_frequent))
    return _merge_levels([*parts, counts])


def speedup_summary(pairs: pd.DataFrame) -> pd.DataFrame:
    """The paired ratios of ``speedup_table`` per cell: the median speed-up over Bulk and
    slowdown under the limit with their 95 % CIs, and whether each CI excludes 1
    (``*_significance``: higher, lower, no difference, too few runs)."""
    pairs = with_runtime(pairs)
    from engine.analysis.stats import significance

    if pairs.empty:
        return pd.DataFrame()
    pairs = pairs.assign(pipeline=pairs["pipeline"].astype(str),
                         missing=pairs["speedup"].isna(),
                         why=pairs["reason"].where(pairs["reason"] != ""),
                         slow_missing=pairs["slowdown"].isna() & (pairs["limit"] != "none"),
                         slow_why=pairs["slowdown_reason"].where(
                             pairs["slowdown_reason"] != ""))
    parts = [_levels(pairs, "speedup", "speedup"), _levels(pairs, "slowdown", "slowdown")]
    # why speed-ups are missing: the policy's own end, or Bulk's ("bulk ended 'memory'")
    parts.append(_count_levels(pairs, pairs_missing=("missing", "sum"),
                               missing_why=("why", _most_frequent),
                               slowdown_pairs_missing=("slow_missing", "sum"),
                               slowdown_missing_why=("slow_why", _most_frequent)))
    out = _merge_levels(parts)
    for name in ("speedup", "slowdown"):
        out[f"{name}_significance"] = [
            significance(lo, hi, n) for lo, hi, n in
            zip(out[f"{name}_ci_low"], out[f"{name}_ci_high"], out[f"{name}_n"].fillna(0))]
    out.loc[out["policy"] == "bulk", "speedup_significance"] = ""  # bulk over itself
    out.loc[out["limit"] == "none", "slowdown_significance"] = ""
    return out


def noise_floor_table(runs: pd.DataFrame) -> pd.DataFrame:
    """The spread of identical repeated runs per execution mode (stats.noise_floor)."""
    from engine.analysis.stats import noise_floor

    if runs.empty:
        return pd.DataFrame()
    ok = with_runtime(runs[runs["termination"] == "ok"])
    ok = ok.assign(execution_mode=execution_mode(ok))
    return noise_floor(ok, ["pipeline", "policy", "limit", "limit_enforced"],
                       {"makespan": "makespan_s", "cpu time": "cpu_s",
                        "run max RSS": "hwm_rss_bytes", "sampled peak RSS": "peak_rss_bytes"},
                       mode="execution_mode")


def execution_mode(runs: pd.DataFrame) -> pd.Series:
    """Each run's execution mode as tables and figures name it: native or emulated with
    the sandbox that ran it (``emulated (uml)``), and the runtime where it is not the
    default (``native, caffe runtime``): runs of two modes are never aggregated
    together."""
    runs = with_runtime(runs)
    mode = ("emulated (" + runs["sandbox"].astype(str) + ")").where(runs["emulated"],
                                                                    "native")
    return mode.where(runs["runtime"] == "lean",
                      mode + ", " + runs["runtime"].astype(str) + " runtime")


PAIR_KEY = ["pipeline", "policy", "limit", "emulated", "sandbox", "runtime", "rep"]


def probe_overhead_table(runs: pd.DataFrame, unprobed: pd.DataFrame) -> pd.DataFrame:
    """Probed runs paired with their unprobed twins (same pipeline, policy, repetition,
    started next to each other): per pair the overhead (probed / unprobed makespan - 1)
    and its cost per task boundary; per pipeline and over all pipelines the median with
    its 95 % CI and whether the CI excludes no overhead."""
    runs, unprobed = with_runtime(runs), with_runtime(unprobed)
    from engine.analysis.stats import bootstrap_ci, cluster_bootstrap_ci, significance

    cols = ["pipeline", "pairs", "pairs_missing", "overhead_pct_median",
            "overhead_pct_ci_low", "overhead_pct_ci_high", "per_task_ms_median",
            "per_task_ms_ci_low", "per_task_ms_ci_high", "significance"]
    if runs.empty or unprobed.empty:
        return pd.DataFrame(columns=cols)
    twin = unprobed[PAIR_KEY + ["makespan_s"]].rename(
        columns={"makespan_s": "unprobed_makespan_s"})
    pairs = runs[PAIR_KEY + ["makespan_s", "tasks_finished"]].merge(twin, on=PAIR_KEY)
    missing = pairs[["makespan_s", "unprobed_makespan_s"]].isna().any(axis=1)
    missing_by = missing.groupby(pairs["pipeline"].astype(str)).sum()
    pairs = pairs[~missing].copy()
    pairs["ratio"] = pairs["makespan_s"] / pairs["unprobed_makespan_s"]
    # per task: its window opens and closes the per-window probes (two boundaries), and
    # the difference includes the 100 Hz sampler and GNU time, which --no-probes drops too
    pairs["per_task_ms"] = ((pairs["makespan_s"] - pairs["unprobed_makespan_s"]) * 1e3
                            / pairs["tasks_finished"])
    rows = []
    groups = [(str(p), g) for p, g in pairs.groupby("pipeline")] + [("all", pairs)]
    for name, g in groups:
        if name == "all":
            ratio = cluster_bootstrap_ci(g["ratio"], g["pipeline"])
            per = cluster_bootstrap_ci(g["per_task_ms"], g["pipeline"])
            n_missing = int(missing.sum())
        else:
            ratio, per = bootstrap_ci(g["ratio"]), bootstrap_ci(g["per_task_ms"])
            n_missing = int(missing_by.get(name, 0))
        sig = significance(ratio[1], ratio[2], len(g))
        rows.append([name, len(g), n_missing, *[(r - 1) * 100 for r in ratio], *per,
                     {"higher": "overhead", "lower": "faster with probes"}.get(sig, sig)])
    return pd.DataFrame(rows, columns=cols)


def _reconcile(reconcile_dir: str | os.PathLike | None,
               settings: Mapping[str, object] | None = None,
               inputs: tuple[str | os.PathLike, str | os.PathLike] | None = None
               ) -> pd.DataFrame:
    """The reconciliation table of the reconciliation run, checked (given ``settings``,
    its pipeline, policy, limit and heap profile among them, and ``inputs``: the pipeline
    file and split folder, as ``check_inputs``) to be the run the workflow asks for."""
    from engine.analysis.reconcile import reconcile_run

    if reconcile_dir is None:
        return pd.DataFrame()
    redo = f"remove {reconcile_dir} and run the workflow again (it redoes the reconciliation run)"
    if not (Path(reconcile_dir) / "meta.json").is_file():
        raise EdgeprofError(f"the reconciliation run {reconcile_dir} holds no meta.json; {redo}")
    if settings is not None or inputs is not None:
        runs = tidy_run(reconcile_dir)["runs"].assign(rep=0)
        if inputs is not None:
            check_inputs(runs.iloc[0], *inputs, redo)
        if settings is not None:
            check_settings(runs, settings, redo)
    return reconcile_run(reconcile_dir)


# Runs that must compute the same bits: one pipeline and input seed (repetition) on one
# kind of machine. Every policy and both runtimes give bit-identical outputs, natively and
# in UML alike (the same CPU; the uml backend sets the host's BLAS kernels); the qemu
# guest's TCG CPU uses other kernels, so its runs agree among themselves.
AGREE_KEY = ["pipeline", "rep", "sandbox"]


def outputs_agree(runs: pd.DataFrame) -> pd.Series:
    """Per run: whether its outputs are the ones the other finished runs of its
    ``AGREE_KEY`` group computed (the most common digest); NA where it finished no
    pipeline or no other run can tell. A run that computed other bits than its siblings
    (a sandbox's memory corrupted under pressure, say) is never a silent result."""
    if "outputs_sha256" not in runs:
        return pd.Series(pd.NA, index=runs.index, dtype="boolean")
    runs = with_runtime(runs)
    digests = runs["outputs_sha256"].where(runs["termination"] == "ok")
    common = digests.groupby([runs[k] for k in AGREE_KEY], dropna=False).transform(
        lambda d: d.mode().iloc[0] if d.notna().sum() >= 2 else pd.NA)
    agree = (digests == common).astype("boolean")
    return agree.where(digests.notna() & common.notna(), pd.NA)


# settings a run takes from its environment, not its flags: redoing it in the same
# environment gives the same run
# settings the measured child reports in its summary, which a child killed by the limit
# or the timeout never wrote: for such a run they are unknown, not other settings
ENV_SETTINGS = {"numpy_hugepages": "NUMPY_MADVISE_HUGEPAGE", "mmap_threshold": "GLIBC_TUNABLES"}


def check_settings(runs: pd.DataFrame, expected: Mapping[str, object], fix: str) -> None:
    """Every run was made with the settings the workflow asks for (``expected``: column ->
    value, None for "not set"; ``seed`` is repetition 0's, each repetition adds its
    number): a run redone by hand with other settings
    (another batch, runtime, sandbox, swap, ...) is refused, naming it, the setting and
    ``fix``, instead of being compared as the config's run. What only the measured child
    reports (``ENV_SETTINGS``) is unknown for a run whose child was killed, and passes."""
    def missing(value: object) -> bool:  # None, NaN or pd.NA (an unset batch)
        return value is None or bool(pd.api.types.is_scalar(value) and pd.isna(value))

    def same(value: object, want: object) -> bool:
        if want is None or missing(value):
            return missing(value) and want is None
        if isinstance(want, bool):
            return isinstance(value, (bool, np.bool_)) and bool(value) == want
        if isinstance(want, str):
            return str(value) == want
        return float(value) == float(want)

    for row in runs.itertuples(index=False):
        checks = dict(expected)
        if "seed" in checks:
            checks["seed"] = int(checks["seed"]) + int(row.rep)
        for col, want in checks.items():
            value = getattr(row, col, None)
            if col in ENV_SETTINGS and missing(value) and want is not None:
                continue  # the child wrote no summary (killed): unknown
            if not same(value, want):
                said, wanted = ("unset" if missing(v) else repr(v.item() if isinstance(
                    v, np.generic) else v) for v in (value, want))
                env = ENV_SETTINGS.get(col)
                why = (f"{env} in the workflow's environment?); unset it, then " if env
                       else "redone by hand?); ")
                raise EdgeprofError(f"run {row.run_id} was made with {col} {said}, not the "
                                    f"config's {wanted} ({why}{fix}")


def _refuse_copies(runs: pd.DataFrame) -> None:
    """One run reached through two folders (a copy, a link) would count twice: runs that
    started at the same instant are one."""
    if runs.empty or "started_at" not in runs:
        return
    known = runs.dropna(subset=["started_at"])
    twice = known[known.duplicated("started_at", keep=False)]
    if not twice.empty:
        ids = sorted(twice["run_id"].astype(str))
        raise EdgeprofError(f"runs {', '.join(ids[:4])} are one run (the same start, to the "
                            f"microsecond): a copy or a link of a run folder; aggregate each "
                            f"run once")


def aggregate(tidy_dirs: Iterable[str | os.PathLike],
              reconcile_dir: str | os.PathLike | None,
              unprobed_dirs: Iterable[str | os.PathLike] = (),
              reconcile_settings: Mapping[str, object] | None = None,
              reconcile_inputs: tuple[str | os.PathLike, str | os.PathLike] | None = None
              ) -> dict[str, pd.DataFrame]:
    """The campaign's tables: runs, tasks, networks, samples (at most
    MAX_SAMPLES_PER_RUN per run), reconcile (its run checked against
    ``reconcile_settings`` and ``reconcile_inputs``, as ``_reconcile``), speedup (per
    pair), and the statistics
    over repetitions: summary, speedup_summary, noise_floor, probe_overhead (the probed
    runs against the unprobed twins in ``unprobed_dirs``)."""
    tables = read_tidy(tidy_dirs)
    tables["samples"] = downsample(tables["samples"])
    tables["reconcile"] = _reconcile(reconcile_dir, reconcile_settings, reconcile_inputs)
    runs = tables["runs"]
    _refuse_copies(runs)
    if not runs.empty:  # the order the runs really started in (runs.started_at)
        runs["run_order"] = runs["started_at"].rank(method="first").astype("Int64")
        runs["outputs_agree"] = outputs_agree(runs)
    tables["speedup"] = speedup_table(runs)
    tables["summary"] = summary_table(runs)
    tables["speedup_summary"] = speedup_summary(tables["speedup"])
    tables["noise_floor"] = noise_floor_table(runs)
    unprobed = [tidy_run_table(d) for d in unprobed_dirs]
    tables["probe_overhead"] = probe_overhead_table(runs, _concat(unprobed))
    return tables

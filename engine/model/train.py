"""Training the model: the direct fits (``engine.model.fit``), then the two parameters
only the simulator can see, per execution mode, against the measured medians of the
training runs (unconstrained, finished):

- ``parallel_cpus``: the CPUs' worth of progress tasks computing at the same time make
  together (at most the child's CPUs: less by what time-slicing costs them, context
  switches, caches evicted, the GIL, or in a guest by what the host really gives its
  virtual CPUs). Chosen by golden-section search between 0.2 and the child's CPUs to
  minimise the squared log error of the makespan of the multi-worker policies' runs;
  without such runs it stays the child's CPUs.
- ``baseline_bytes``: the runtime's resident memory beyond what the memory replay
  counts: the interpreter, numpy and the engine (``start_rss_bytes``, measured at the
  first task) plus what the allocator keeps of freed blocks as the run goes. Measured
  as the median over the training cells of measured peak RSS - the replay's peak
  (never below 0); its 5-95 % spread over them is ``baseline_spread_bytes``.

The pipelines come from the networks table (each instance's arrival), so training needs
only the tables and the network descriptions.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from engine.caffe.splitter import Description, description_index
from engine.errors import EdgeprofError
from engine.files import read_table
from engine.model.fit import fit, mode_keys, run_batches
from engine.model.params import Model, ModeModel, batch_value
from engine.model.predict import NetworksByBatch, predict
from engine.schedule.pipelines import Arrival, Pipeline
from engine.schedule.policies import parse_policy
from engine.units import format_swap

log = logging.getLogger(__name__)

GOLDEN = (math.sqrt(5) - 1) / 2


def unknown_arrivals(networks: pd.DataFrame) -> set[str]:
    """The runs whose networks rows lack an arrival: a run that failed before its guest
    started (or was killed before it wrote them) says nothing of its pipeline's shape."""
    lacking = networks["arrival"].isna() | networks["arrival_ns"].isna()
    return set(networks.loc[lacking, "run_id"].astype(str))


def pipelines_from_networks(networks: pd.DataFrame) -> dict[str, Pipeline]:
    """Each pipeline as its runs saw it: instances in order, grouped by arrival, from its
    first run whose arrivals are all known; a pipeline no such run has is left out (its
    runs ran nothing to predict against)."""
    out = {}
    known = networks[~networks["run_id"].astype(str).isin(unknown_arrivals(networks))]
    for name, rows in known.groupby("pipeline"):
        first = rows[rows["run_id"] == rows["run_id"].iloc[0]].sort_values("instance")
        arrivals: dict[int, Arrival] = {}
        for r in first.itertuples():
            a = arrivals.setdefault(int(r.arrival), Arrival(float(r.arrival_ns) / 1e9, []))
            a.networks.append(str(r.network))
        out[str(name)] = Pipeline(str(name), [arrivals[k] for k in sorted(arrivals)])
    return out


CELL_KEY = ["pipeline", "policy", "limit", "batch"]  # batch NA: the deploy batch
# Swap is compared where both the prediction and the measurement reach a MiB: below it a
# ratio measures the instruments' resolution (a few pages), not the model.
SWAP_FLOOR_BYTES = 2**20


def measured_cells(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (pipeline, policy, limit, batch) of one execution mode: the median makespan of the
    finished runs with its 95 % CI (``stats.summarize``), the median slowdown over the
    same policy unconstrained (paired per repetition: ``summaries.speedup_table``), and over
    every run that measured them (killed ones included, as the summary table does) the
    median resident high-water mark, cgroup window peak and pages swapped out; the median
    peak swap (the most any instrument saw of the run in swap: the cgroup's swap peak,
    the sampled VmSwap) of the finished runs, or where none finished of all (each up to
    its kill); whether a run was OOM-killed. A cell every run of which was killed has no
    makespan."""
    from engine.analysis.stats import summarize
    from engine.analysis.summaries import speedup_table

    def col(name: str) -> pd.Series:
        return runs[name] if name in runs else pd.Series(np.nan, index=runs.index)

    runs = runs.assign(pipeline=runs["pipeline"].astype(str), batch=run_batches(runs),
                       swap_out_bytes=col("guest_pswpout") * col("page_bytes"),
                       oom=runs["termination"] == "memory", ok=runs["termination"] == "ok",
                       cg_window_peak_bytes=col("cg_window_peak_bytes"),
                       peak_swapped_bytes=pd.concat(
                           [col("cg_window_swap_peak_bytes"), col("peak_swap_bytes")],
                           axis=1).max(axis=1))
    # a run killed part-way swapped only until its kill: where a run of the cell finished,
    # the cell's peak swap is its finished runs' (twenty-second held-out pass H1: two
    # early kills made a finished 74 MiB read 10 MiB)
    runs["finished_swapped_bytes"] = runs["peak_swapped_bytes"].where(runs["ok"])
    cells = (runs.groupby(CELL_KEY, dropna=False)
             .agg(limit_bytes=("limit_bytes", "first"), swap_bytes=("swap_bytes", "first"),
                  workers=("workers", "first"), runs=("run_id", "size"),
                  runs_ok=("ok", "sum"), measured_oom=("oom", "any"),
                  measured_hwm_rss_bytes=("hwm_rss_bytes", "median"),
                  measured_cg_peak_bytes=("cg_window_peak_bytes", "median"),
                  measured_swap_out_bytes=("swap_out_bytes", "median"),
                  all_peak_swap_bytes=("peak_swapped_bytes", "median"),
                  finished_peak_swap_bytes=("finished_swapped_bytes", "median"),
                  measured_max_swap_bytes=("peak_swapped_bytes", "max"))
             .reset_index())
    cells["measured_peak_swap_bytes"] = cells.pop("finished_peak_swap_bytes").fillna(
        cells.pop("all_peak_swap_bytes"))
    times = summarize(runs[runs["ok"]], CELL_KEY, "makespan_s", prefix="measured_makespan")
    times = times.rename(columns={"measured_makespan_median": "measured_makespan_s"})
    pairs = speedup_table(runs)
    slow = (pairs[pairs["limit"] != "none"].groupby(CELL_KEY, dropna=False)["slowdown"]
            .median()
            .rename("measured_slowdown").reset_index())
    return (cells.merge(times.drop(columns="measured_makespan_n"), on=CELL_KEY, how="left")
            .merge(slow, on=CELL_KEY, how="left"))


def golden_min(f: Callable[[float], float], lo: float, hi: float, steps: int = 18) -> float:
    a, b = lo, hi
    c, d = b - GOLDEN * (b - a), a + GOLDEN * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(steps):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - GOLDEN * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + GOLDEN * (b - a)
            fd = f(d)
    return (a + b) / 2


def calibrate(mode: ModeModel, cells: pd.DataFrame, pipelines: dict[str, Pipeline],
              networks: NetworksByBatch) -> ModeModel:
    """Sets ``mode.parallel_cpus`` and ``mode.baseline_bytes`` from the unconstrained
    cells (each at its batch)."""
    free = cells[(cells["limit"] == "none") & cells["measured_makespan_s"].notna()]
    multi = free[free["workers"] > 1]
    if not multi.empty:
        def loss(cpus: float) -> float:
            mode.parallel_cpus = cpus
            err = [math.log(predict(mode, pipelines[r.pipeline], networks[r.batch], r.policy)[0]
                            .makespan_s / r.measured_makespan_s) for r in multi.itertuples()]
            return float(np.sum(np.square(err)))

        mode.parallel_cpus = round(golden_min(loss, 0.2, max(mode.cpus, 0.2)), 4)
    mode.baseline_bytes = 0.0
    gaps = [r.measured_hwm_rss_bytes - predict(mode, pipelines[r.pipeline],
                                               networks[r.batch], r.policy)[0].peak_ram_bytes
            for r in free.itertuples()
            if np.isfinite(r.measured_hwm_rss_bytes) and r.pipeline in pipelines]
    mode.baseline_bytes = max(float(np.median(gaps)), 0.0) if gaps else mode.start_rss_bytes
    if len(gaps) >= 2:
        lo, mid, hi = np.percentile(gaps, [5, 50, 95])
        mode.baseline_spread_bytes = [float(min(lo - mid, 0.0)), float(max(hi - mid, 0.0))]
    mode.swap_scale, mode.swap_scale_from = 1.0, None
    ratios = []
    # a cell no run of which finished swapped only until its kill: a need cut short
    for r in cells[(cells["limit"] != "none") & (cells["runs_ok"] > 0)].itertuples():
        if not (r.measured_peak_swap_bytes >= SWAP_FLOOR_BYTES and r.pipeline in pipelines):
            continue
        shortfall = predict(mode, pipelines[r.pipeline], networks[r.batch], r.policy,
                            int(r.limit_bytes))[0].peak_swap_bytes
        if shortfall >= SWAP_FLOOR_BYTES:
            ratios.append(r.measured_peak_swap_bytes / shortfall)
    if ratios:
        mode.swap_scale = round(float(np.median(ratios)), 4)
        mode.swap_scale_from = mode.key
    return mode


def startup_floor(runs: pd.DataFrame) -> tuple[float | None, str]:
    """The largest limit at which a run was OOM-killed before its first task started
    (``tasks_finished`` 0, nothing running: the engine's own start-up) and no run at it
    or below got past its start-up (finished, timed out, or was killed in a task): near
    the floor such kills are a matter of chance (sixteenth held-out pass M1), so only
    where none got through is a run killed; and the most swap those killed runs had
    (format_swap; "max" where one had no cap), up to which the kill holds. (None, "max"):
    no such limit."""
    if not {"tasks_finished", "running_at_end", "limit_bytes"} <= set(runs):
        return None, "max"
    limited = runs[runs["limit_bytes"].notna()]
    running = limited["running_at_end"].fillna("").astype(str).str.strip()
    at_start = ((limited["termination"] == "memory") & (limited["tasks_finished"] == 0)
                & (running == ""))
    # a run that ended in error (its sandbox never started) says nothing either way
    through = limited[~at_start & (limited["termination"] != "error")]["limit_bytes"]
    lowest_through = through.min() if len(through) else np.inf
    dead = limited[at_start & (limited["limit_bytes"] < lowest_through)]
    if dead.empty:
        return None, "max"
    swaps = dead["swap_bytes"] if "swap_bytes" in dead else pd.Series([np.nan])
    most = "max" if swaps.isna().any() else format_swap(int(swaps.max()))
    return float(dead["limit_bytes"].max()), most


def kill_limit(runs: pd.DataFrame) -> float | None:
    """The largest limit at which a run was OOM-killed (at any moment), or None."""
    killed = runs.loc[runs["termination"] == "memory", "limit_bytes"].dropna() \
        if "limit_bytes" in runs else pd.Series(dtype=float)
    return float(killed.max()) if len(killed) else None


def share_sandbox_facts(modes: list[ModeModel]) -> None:
    """What a mode could not measure itself, from the modes of its runtime whose kernel
    did (a sandbox, which paged and killed): a mode without cells that swapped (native:
    its runs cannot be limited here; a sandbox's with swap 0) takes the swap scale of one
    fitted on its own; a mode without limited runs of its own takes the largest start-up
    floor and kill limit among them (``kills_from`` names them)."""
    def limited(mode: ModeModel) -> bool:
        return any(c["limit"] != "none" for c in mode.measured)

    for mode in modes:
        kin = [m for m in modes if m is not mode and m.runtime == mode.runtime]
        scaled = next((m for m in kin if m.swap_scale_from == m.key), None)
        if mode.swap_scale_from is None and scaled is not None:
            mode.swap_scale, mode.swap_scale_from = scaled.swap_scale, scaled.key
        if limited(mode):
            continue
        donors = [m for m in kin if limited(m)]
        mode.kills_from = [m.key for m in donors if m.kill_limit_bytes is not None]
        known = [m.kill_limit_bytes for m in donors if m.kill_limit_bytes is not None]
        if known:
            mode.kill_limit_bytes = max([*known, mode.kill_limit_bytes or 0.0])
        floors = [m for m in donors if m.startup_floor_bytes is not None]
        if floors:  # the highest floor, with the swap its kills had
            top = max(floors, key=lambda m: m.startup_floor_bytes)
            if top.startup_floor_bytes > (mode.startup_floor_bytes or 0.0):
                mode.startup_floor_bytes = top.startup_floor_bytes
                mode.startup_floor_swap = top.startup_floor_swap


def training_cells(runs: pd.DataFrame) -> list[dict]:
    """One mode's runs as advise shows a pipeline the model was fitted on: per (pipeline
    file, policy, limit, batch, swap) the median makespan of the finished runs with its 95 % CI,
    the median peak swap (``measured_cells``), whether any run was OOM-killed, how many
    runs; the pipeline file by its SHA-256 (None in tables older than the record: such a
    cell is never matched, a name says nothing across campaigns). Campaigns that ran the
    same file (the same seed) pool its runs in one cell, named by each campaign's name
    of it (twenty-seventh held-out pass H1: advise showed the first campaign's cell and
    hid the other's runs, and said every run was OOM-killed where one had finished)."""
    from engine.units import format_swap

    names = runs["pipeline"].astype(str)
    sha = (runs["pipeline_sha256"] if "pipeline_sha256" in runs
           else pd.Series(None, index=runs.index, dtype=object))
    swap = runs["swap_bytes"].map(lambda b: format_swap(None if pd.isna(b) else int(b)))
    # a cell's key: its file (or, unrecorded, its name) and its swap, which campaigns may
    # set apart under one limit
    key = sha.fillna("name " + names).astype(str) + " swap " + swap
    label = names.groupby(key).agg(lambda s: " + ".join(sorted(set(s))))
    file_sha = sha.groupby(key).first().dropna()
    runs = runs.assign(pipeline=key)
    cells = measured_cells(runs)
    # how the runs that did not finish ended (memory: OOM-killed; error: e.g. a sandbox
    # that never started; timeout)
    failed = runs[runs["termination"] != "ok"]
    ended = {(str(p), str(pol), str(lim), batch_value(b)):
             {str(k): int(v) for k, v in g["termination"].value_counts().items()}
             for (p, pol, lim, b), g in failed.groupby(
                 [failed[k] for k in CELL_KEY[:3]] + [run_batches(failed)], dropna=False)}

    def number(value: float) -> float | None:
        return float(value) if pd.notna(value) else None

    return [{"pipeline": label[c.pipeline], "pipeline_sha256": file_sha.get(c.pipeline),
             "policy": str(c.policy), "limit": str(c.limit), "batch": batch_value(c.batch),
             "swap": format_swap(None if pd.isna(c.swap_bytes) else int(c.swap_bytes)),
             "runs": int(c.runs), "runs_ok": int(c.runs_ok), "oom": bool(c.measured_oom),
             "ended": ended.get((str(c.pipeline), str(c.policy), str(c.limit),
                                 batch_value(c.batch)), {}),
             "makespan_s": number(c.measured_makespan_s),
             "makespan_ci": ([float(c.measured_makespan_ci_low),
                              float(c.measured_makespan_ci_high)]
                             if pd.notna(c.measured_makespan_ci_low)
                             and pd.notna(c.measured_makespan_ci_high) else None),
             "peak_swap_bytes": number(c.measured_peak_swap_bytes),
             # the most any run swapped: whether the cell's swap cap bound any run
             "max_swap_bytes": number(c.measured_max_swap_bytes)}
            for c in cells.itertuples()]


def train(runs: pd.DataFrame, tasks: pd.DataFrame, networks: pd.DataFrame,
          descriptions: dict[str, Description], policies: list[str] | None = None) -> Model:
    """Fit every execution mode and runtime of ``runs`` and calibrate each through the
    simulator."""
    model = fit(runs, tasks, descriptions, policies)
    pipelines = pipelines_from_networks(networks[networks["run_id"].isin(runs["run_id"])])
    keys = mode_keys(runs)
    for name, mode in model.modes.items():
        calibrate(mode, measured_cells(runs[keys == name]), pipelines,
                  NetworksByBatch(descriptions, mode.runtime))
        mode.measured = training_cells(runs[keys == name])
        mode.startup_floor_bytes, mode.startup_floor_swap = startup_floor(runs[keys == name])
        mode.kill_limit_bytes = kill_limit(runs[keys == name])
    share_sandbox_facts(list(model.modes.values()))
    for policy in model.policies:
        parse_policy(policy)  # a policy name this engine no longer knows fails here
    return model


Paths = str | os.PathLike | list[str | os.PathLike]
Tables = tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict[str, Description]]


def read_tables(tables_dir: Paths, models_dir: Paths) -> Tables:
    """The runs, tasks and networks tables of an aggregate (Parquet) and the descriptions
    of the networks they ran; a missing table names the stage that writes it. Several
    campaigns (a list of table folders, each with its split folder, or one for all):
    their tables together, each pipeline and run named after its campaign (the table
    folder's parent: ``fidelity:p000``), since two campaigns' ``p000`` are other
    pipelines; a network's description is the first campaign's that has it."""
    dirs = [tables_dir] if isinstance(tables_dir, (str, os.PathLike)) else list(tables_dir)
    models = [models_dir] if isinstance(models_dir, (str, os.PathLike)) else list(models_dir)
    models = models * len(dirs) if len(models) == 1 else models
    if len(models) != len(dirs):
        raise EdgeprofError(f"{len(dirs)} table folders and {len(models)} --split folders: "
                            f"give one split folder, or one per table folder")
    parts = [_read_campaign(d, m) for d, m in zip(dirs, models)]
    if len(parts) == 1:
        return parts[0]
    labels = [Path(d).resolve().parent.name for d in dirs]
    if len(set(labels)) < len(labels):
        raise EdgeprofError(f"table folders {', '.join(map(str, dirs))} do not name their "
                            f"campaigns apart (their parent folders: {', '.join(labels)})")
    # the same run (its id and start time) in two folders: a campaign given twice, or a
    # copy of one, would count its runs twice and narrow every CI
    seen: dict[tuple, str] = {}
    for d, (runs, *_) in zip(dirs, parts):
        if "started_at" not in runs:
            continue
        known = runs[runs["started_at"].notna()]
        for key in zip(known["run_id"].astype(str), known["started_at"].astype(str)):
            if seen.setdefault(key, str(d)) != str(d):
                raise EdgeprofError(f"--tables {seen[key]} and {d} hold the same run "
                                    f"({key[0]}, started {key[1]}): give each campaign once")
    frames: list[list[pd.DataFrame]] = [[], [], []]
    descriptions: dict[str, Description] = {}
    for label, (runs, tasks, networks, descs) in zip(labels, parts):
        for i, df in enumerate((runs, tasks, networks)):
            frames[i].append(df.assign(pipeline=label + ":" + df["pipeline"].astype(str),
                                       run_id=label + ":" + df["run_id"].astype(str)))
        for name, desc in descs.items():
            descriptions.setdefault(name, desc)
    runs, tasks, networks = (pd.concat(f, ignore_index=True) for f in frames)
    return runs, tasks, networks, descriptions


# what the fit reads of each table (engine.model.fit, calibrate above)
RUN_COLUMNS = ("run_id", "pipeline", "policy", "limit", "termination", "networks",
               "makespan_s", "hwm_rss_bytes")
TASK_COLUMNS = ("run_id", "network", "instance", "layer", "task_type", "start_ns", "end_ns",
                "duration_ns", "overlap")
NETWORK_COLUMNS = ("run_id", "pipeline", "instance", "network", "arrival", "arrival_ns")


def _read_campaign(tables_dir: str | os.PathLike, models_dir: str | os.PathLike) -> Tables:
    folder = Path(tables_dir)
    frames = []
    for name in ("runs", "tasks", "networks"):
        frames.append(read_table(folder / f"{name}.parquet", f"run the workflow's aggregate "
                                 f"stage (snakemake {folder}/{name}.parquet)"))
    runs, tasks, networks = frames
    for table, name, columns in ((runs, "runs", RUN_COLUMNS), (tasks, "tasks", TASK_COLUMNS),
                                 (networks, "networks", NETWORK_COLUMNS)):
        lacking = sorted(set(columns) - set(table.columns))
        if lacking:
            raise EdgeprofError(f"{folder}/{name}.parquet has no {', '.join(lacking)} column: "
                                f"not the aggregate stage's table; rerun it")
    finished = tasks[tasks["run_id"].isin(runs.loc[runs["termination"] == "ok", "run_id"])]
    for column in ("duration_ns", "start_ns", "end_ns"):  # the times the fit reads
        bad = finished[column].isna() | (finished[column] < 0)
        if bad.any():
            raise EdgeprofError(f"{folder}/tasks.parquet: {int(bad.sum())} task(s) of "
                                f"finished runs have no or a negative {column}; rerun the "
                                f"tidy and aggregate stages")
    _check_arrivals(networks, runs, folder)
    if runs.empty:
        raise EdgeprofError(f"{folder}/runs.parquet holds no runs to fit a model on")
    old = sorted({"batch", "child_cpus", "page_bytes"} - set(runs.columns))
    if old:
        raise EdgeprofError(f"{folder}/runs.parquet has no {', '.join(old)} column: tables "
                            f"of an older edgeprof; rerun the tidy and aggregate stages")
    index = description_index(models_dir)
    missing = sorted(set(runs["networks"].str.split().explode()) - set(index))
    if missing:
        raise EdgeprofError(f"no description for {', '.join(missing)} in {models_dir}: "
                            f"point --split at the split stage's output")
    descriptions = {n: Description.load(index[n]) for n in
                    set(runs["networks"].str.split().explode())}
    return runs, tasks, networks, descriptions


def _check_arrivals(networks: pd.DataFrame, runs: pd.DataFrame, folder: Path) -> None:
    """EdgeprofError when a finished run's networks rows lack an arrival: only a run
    that never started may (``unknown_arrivals`` skips those); a finished one would be
    skipped too and silently move the calibration (its baseline)."""
    done = networks[networks["run_id"].isin(runs.loc[runs["termination"] == "ok", "run_id"])]
    for column in ("arrival", "arrival_ns"):
        bad = done.loc[done[column].isna(), "run_id"].astype(str)
        if not bad.empty:
            raise EdgeprofError(f"{folder}/networks.parquet: {bad.nunique()} finished run(s) "
                                f"have no {column} (e.g. {sorted(bad)[0]}); rerun the tidy "
                                f"and aggregate stages")


# what calibrate fits each mode's parallel CPUs and baseline on: without them it would
# fall back to its defaults and still say it fitted
MEASURED = {"makespan_s": "the makespan", "hwm_rss_bytes": "the peak RSS"}


def check_measured(runs: pd.DataFrame, tables_dir: Paths) -> None:
    """EdgeprofError naming the column when a mode's finished unconstrained runs have
    no value at all in one of the ``MEASURED`` columns."""
    from engine.files import flat_paths

    free = runs[(runs["termination"] == "ok") & (runs["limit"] == "none")]
    for key, part in free.groupby(mode_keys(free)):
        for column, what in MEASURED.items():
            if part[column].isna().all():
                # --no-probes runs never measure it: rerunning the tidy stage cannot help
                unprobed = "probed" in part and not part["probed"].astype(bool).any()
                fix = ("they ran with --no-probes, which does not measure it: fit on runs "
                       "made with the probes (without --no-probes)" if unprobed
                       else "rerun the tidy and aggregate stages")
                raise EdgeprofError(f"{', '.join(flat_paths(tables_dir))}: no {key} run that "
                                    f"finished unconstrained has a {column} ({what}): the "
                                    f"fit needs it; {fix}")


def fit_model_files(tables_dir: Paths, models_dir: Paths, out: str | os.PathLike,
                    policies: list[str] | None = None) -> Model:
    """``fit-model``: train on the tables in ``tables_dir``, write the model file."""
    runs, tasks, networks, descriptions = read_tables(tables_dir, models_dir)
    check_measured(runs, tables_dir)
    model = train(runs, tasks, networks, descriptions, policies)
    if not model.modes:  # nothing for advise to predict with: no file rather than an empty one
        folders = tables_dir if isinstance(tables_dir, list) else [tables_dir]
        said = {col: runs[col].astype(str).value_counts().to_dict()
                for col in ("termination", "limit") if col in runs}
        # each mode's own reason, with its fix (twentieth held-out pass D1: runs of no
        # single-worker policy read "needs unconstrained runs that finished" beside 14)
        why = "; ".join(f"{key}: {reason}" for key, reason in sorted(model.unfitted.items()))
        why = why or "a mode needs unconstrained runs (limit none) that finished, with tasks"
        raise EdgeprofError(f"{', '.join(map(str, folders))}: no mode could be fitted: "
                            f"{why}; these runs: {said or 'none'}")
    for key, reason in sorted(model.unfitted.items()):  # said, not only kept in the file
        log.warning(f"warning: {key}: not fitted: {reason}; advise --mode cannot answer "
                    f"for it")
    model.write(out)
    return model

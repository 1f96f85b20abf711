"""Native-speed time under a limit, reconstructed from measurements.

This project's machines cannot limit a native run; a sandbox can (a real kernel with
its own cgroup and swap) but distorts one phase (TCG slows compute 15-63x, user-mode
Linux slows page faults). Each phase is taken where it is measured undistorted:

- a task's **compute**: its native unconstrained time (the median of the same task's
  windows that ran alone, ``overlap == 0``: same instance of the pipeline, layer and task
  type, over the pipeline's native unconstrained runs of every policy, since a layer's
  work does not depend on the policy; the run's first INIT also builds the input image),
  plus the dispatch gap measured in the same runs (``engine.model.fit.dispatch_gap``:
  it grows with the host's load as the task times do);
- its **page traffic** under the limit: pages swapped in and out and other major faults,
  measured in the sandbox's real kernel in the same runtime, pipeline, policy and limit
  (``engine.model.traffic``: each task's own share);
- a **device's per-page costs** (``engine.model.devices``).

The policy's real task graph is replayed with them on the simulator's virtual clock
(``engine.model.simulate``): swap waits take no CPU, concurrent waits share one device,
concurrent computing shares the CPUs as the native mode's model calibrated
(``parallel_cpus``), masa's admission budget is the limit. A cell whose sandbox runs were
all OOM-killed is reconstructed as killed.

A task's time is the median over the repetitions of its median in each repetition (over
that repetition's runs of every policy), its traffic the median over the limited runs.
The 95 % CI resamples the repetitions of both measured parts: each bootstrap draw takes
the native repetitions and the sandbox's limited runs with replacement, takes those
medians over the drawn ones and replays; the CI is the 2.5-97.5 % range of the draws.

**Validation** where every part is measured: the sandbox's own limited makespans rebuilt
from the sandbox's unconstrained task times, its page traffic and its per-page costs
fitted on its other pipelines' limited runs (``engine.model.fit.fit_swap_cost``: the
pipeline being rebuilt is never in that fit). Its MAPE, with a bootstrap CI over
pipelines, says how much of a limited makespan this decomposition explains.

**The swap-cost axis**: each native reconstruction replayed over per-page costs from
1 us to 10 ms (``COST_GRID``, the same cost in and out), each policy's speed-up over Bulk
per size bin (the median over the bin's pipelines of Bulk's makespan / the policy's) and
the costs where it crosses 1 or where the fastest policy changes (bisected).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import brentq

from engine.analysis.stats import cell_seed, cluster_mean_ci, summarize
from engine.caffe.splitter import Description
from engine.model.devices import Device
from engine.model.fit import (
    at_batch,
    dispatch_gap,
    execution_modes,
    fit_swap_cost,
    run_batches,
    runtimes,
)
from engine.model.params import Model, ModeModel, SwapCost, batch_name, batch_value, mode_key
from engine.model.simulate import simulate
from engine.model.traffic import TRAFFIC_COLUMNS, run_traffic
from engine.model.train import Paths, pipelines_from_networks
from engine.schedule.pipelines import Pipeline
from engine.schedule.plan import plan
from engine.schedule.policies import parse_policy
from engine.units import PAGE_SIZE, format_swap

log = logging.getLogger(__name__)

COST_GRID = np.logspace(-6, -2, 17)  # seconds per 4 KiB page: 1 us .. 10 ms, 4 per decade
WORK_KEY = ["instance", "layer", "task_type"]
# a cell of runs (batch NA: each network's deploy batch)
CELL = ["mode", "runtime", "pipeline", "policy", "limit", "batch"]
CI_LOW, CI_HIGH = 2.5, 97.5
# a crossover's tolerance in log cost: 1e-4 = 0.01 % of the cost per page
ROOT_XTOL = 1e-4

# what reconstruct-model writes (the command checks each place up front)
RECONSTRUCT_TABLES = ("reconstruction", "reconstruction_validation", "reconstruction_scores",
                      "swap_cost_curves", "swap_cost_crossovers")


class ReconstructionError(ValueError):
    """A cell whose measurements cannot be combined (a task never timed natively)."""


@dataclass
class Compute:
    """What each task costs without a limit, and how concurrent tasks share the CPU."""

    work: dict[tuple[int, int, str], float]  # (instance, layer, task type) -> seconds
    parallel_cpus: float
    gap_s: float


def solo_work(tasks: pd.DataFrame) -> dict[tuple[int, int, str], float]:
    """Median seconds per (instance, layer, task type) of one pipeline's runs over the
    tasks that ran alone; a task that never ran alone, over all of its windows."""
    t = tasks.assign(seconds=tasks["duration_ns"] / 1e9,
                     alone=tasks["overlap"].fillna(0) == 0)
    t = t.sort_values("alone")  # a key's solo median wins below
    out: dict[tuple[str, int, str], float] = {}
    for alone in (False, True):
        part = t[t["alone"] == alone]
        med = part.groupby(WORK_KEY)["seconds"].median()
        out.update({(int(i), int(layer), str(k)): float(v)
                    for (i, layer, k), v in med.items()})
    return out


class Replay:
    """One pipeline under one policy, planned once (the graph, arrivals and admission
    keys), replayed with per-task arrays of seconds."""

    def __init__(self, pipeline: Pipeline, policy: str, descriptions: dict[str, Description],
                 parallel_cpus: float, gap_s: float, limit_bytes: int | None = None) -> None:
        self.pipeline, self.policy = pipeline, parse_policy(policy)
        self.planned = plan(pipeline, self.policy, descriptions)
        self.keys = [(t.instance, t.layer, t.kind.name) for t in self.planned.graph.tasks]
        self.nets = {i.id: i.network for i in self.planned.instances}
        self.arrivals = {i: t / 1e9 for i, t in self.planned.arrivals_ns.items()}
        self.parallel_cpus, self.gap_s, self.limit_bytes = parallel_cpus, gap_s, limit_bytes

    def work_of(self, work: dict[tuple[int, int, str], float]) -> np.ndarray:
        """Each task's seconds from a (instance, layer, task type) table; NaN where it
        has none."""
        return np.array([work.get(k, np.nan) for k in self.keys])

    def check(self, work: np.ndarray) -> None:
        missing = np.flatnonzero(~np.isfinite(work))
        if len(missing):
            i, layer, kind = self.keys[missing[0]]
            raise ReconstructionError(f"{self.pipeline.name}: no unconstrained run timed "
                                      f"{kind} of instance {i} ({self.nets[i]}) layer {layer}")

    def makespan(self, work: np.ndarray, waits: np.ndarray | None = None,
                 gap_s: float | None = None) -> float:
        """The makespan with ``work`` seconds of computing per task, ``gap_s`` after it
        (default: the model's) and ``waits`` seconds of swap before it."""
        self.check(work)
        seconds = work + (self.gap_s if gap_s is None else gap_s)
        result = simulate(self.planned.graph, self.policy, self.arrivals,
                          lambda t: seconds[t.id], budget=self.limit_bytes,
                          network_time=self.planned.network_time, cpus=self.parallel_cpus,
                          on_start=None if waits is None else (lambda t: waits[t.id]))
        return result.makespan_s


def _per_page(cost: SwapCost) -> np.ndarray:
    # an unknown cost (None) is one no page was moved for; a cell that moves such pages
    # is refused first (``unpriced``)
    return np.array([c or 0.0 for c in (cost.per_page_in_s, cost.per_page_out_s,
                                        cost.per_major_fault_s)])


def unpriced(cell: Cell, cost: SwapCost) -> str:
    """Why ``cell``'s traffic cannot be priced with ``cost`` ("" when it can)."""
    return cost.unknown(*cell.pages.sum(axis=(0, 1)))


def replay(pipeline: Pipeline, policy: str, descriptions: dict[str, Description],
           compute: Compute, traffic: dict[int, np.ndarray] | None = None,
           cost: SwapCost | None = None, limit_bytes: int | None = None) -> float:
    """The makespan of ``pipeline`` under ``policy`` with these task times and, under a
    limit, each task's traffic (task id -> pages in, out, refaults) waiting for
    ``cost`` per page before it computes."""
    r = Replay(pipeline, policy, descriptions, compute.parallel_cpus, compute.gap_s,
               limit_bytes)
    waits = None
    if traffic and cost is not None:
        pages = np.zeros((len(r.keys), 3))
        for tid, v in traffic.items():
            pages[tid] = v
        waits = pages @ _per_page(cost)
    return r.makespan(r.work_of(compute.work), waits)


@dataclass
class Cell:
    """One (pipeline, policy, limit) to rebuild: per repetition of the unconstrained
    runs each task's time (the median over that repetition's runs of its windows that
    ran alone), per finished limited run each task's traffic."""

    replay: Replay
    limit: str
    work: np.ndarray  # (repetitions, tasks) seconds
    gaps: np.ndarray  # (repetitions,) the dispatch gap, seconds
    pages: np.ndarray  # (limited runs, tasks, 3): pages in, out, refaults

    def makespan(self, cost: SwapCost | None, reps: np.ndarray | None = None,
                 runs: np.ndarray | None = None) -> float:
        """With the given repetitions and limited runs (all: None): each task's time and
        the gap the median over the repetitions, its traffic the median over the runs
        (no cost: unconstrained)."""
        reps = slice(None) if reps is None else reps
        pages = self.pages if runs is None else self.pages[runs]
        waits = None if cost is None else np.median(pages, axis=0) @ _per_page(cost)
        return self.replay.makespan(np.nanmedian(self.work[reps], axis=0), waits,
                                    float(np.nanmedian(self.gaps[reps])))


def estimate(cell: Cell, cost: SwapCost, resamples: int) -> tuple[float, float, float]:
    """(makespan, CI low, CI high): all repetitions, and the bootstrap over both parts'
    repetitions (module docstring)."""
    point = cell.makespan(cost)
    rng = np.random.default_rng(cell_seed((cell.replay.pipeline.name, cell.replay.policy.name,
                                           cell.limit)))
    nc, nt = len(cell.work), len(cell.pages)
    draws = [cell.makespan(cost, rng.integers(0, nc, nc), rng.integers(0, nt, nt))
             for _ in range(resamples if nc * nt > 1 else 0)]
    if not draws:
        return point, np.nan, np.nan
    lo, hi = np.percentile(draws, [CI_LOW, CI_HIGH])
    return point, float(lo), float(hi)


# ---- which runs make a cell ----

def _ok(runs: pd.DataFrame) -> pd.DataFrame:
    return runs[runs["termination"] == "ok"]


def _reps(runs: pd.DataFrame, tasks: pd.DataFrame) -> list[tuple[int, pd.DataFrame]]:
    """(repetition, the tasks of all its runs) of ``runs``."""
    t = tasks[tasks["run_id"].isin(runs["run_id"])]
    rep_of = runs.set_index("run_id")["rep"]
    reps = t["run_id"].map(rep_of)
    return [(int(rep), g) for rep, g in t.groupby(reps, sort=True)]


@dataclass
class Campaign:
    """The tables split by execution mode and runtime, with each limited run's
    traffic."""

    runs: pd.DataFrame
    tasks: pd.DataFrame
    pipelines: dict[str, Pipeline]
    descriptions: dict[str, Description]
    traffic: pd.DataFrame  # run_id, task_id, TRAFFIC_COLUMNS of the limited runs

    @classmethod
    def of(cls, runs: pd.DataFrame, tasks: pd.DataFrame, networks: pd.DataFrame,
           descriptions: dict[str, Description]) -> Campaign:
        runs = runs[runs["limit_enforced"].astype(bool) | (runs["limit"] == "none")]
        runs = runs.assign(pipeline=runs["pipeline"].astype(str), mode=execution_modes(runs),
                           runtime=runtimes(runs), batch=run_batches(runs))
        limited = _ok(runs[runs["limit"] != "none"])
        return cls(runs, tasks, pipelines_from_networks(networks), descriptions,
                   run_traffic(tasks, limited))

    def free(self, mode: str, runtime: str, pipeline: str, batch: object) -> pd.DataFrame:
        r = self.runs
        return _ok(r[(r["mode"] == mode) & (r["runtime"] == runtime)
                     & (r["pipeline"] == pipeline) & (r["limit"] == "none")
                     & at_batch(r, batch)])

    def limited_cells(self) -> pd.DataFrame:
        """The sandboxes' limited cells: mode, runtime, pipeline, policy, limit, batch, its
        limit bytes, swap bytes (missing: unlimited), runs, finished runs, OOM-killed runs."""
        r = self.runs[(self.runs["mode"] != "native") & (self.runs["limit"] != "none")]
        if "pipeline_sha256" not in r:  # tables of runs older than the record
            r = r.assign(pipeline_sha256=None)
        return (r.assign(ok=r["termination"] == "ok", oom=r["termination"] == "memory")
                .groupby(CELL, dropna=False)
                .agg(limit_bytes=("limit_bytes", "first"),
                     pipeline_sha256=("pipeline_sha256", "first"),
                     swap_bytes=("swap_bytes", "first"), runs=("run_id", "size"),
                     runs_ok=("ok", "sum"), runs_oom=("oom", "sum"),
                     size_bin=("size_bin", "first"))
                .reset_index())

    def cell(self, row, compute_mode: str, mode_model: ModeModel) -> Cell | str:
        """The cell of a limited sandbox cell ``row``, its task times from
        ``compute_mode``'s unconstrained runs; or why it cannot be rebuilt."""
        free = self.free(compute_mode, row.runtime, row.pipeline, row.batch)
        if free.empty:
            return (f"no {compute_mode} unconstrained run of {row.pipeline} ({row.runtime}, "
                    f"batch {batch_name(batch_value(row.batch))})")
        r = self.runs
        lim = _ok(r[(r["mode"] == row.mode) & (r["runtime"] == row.runtime)
                    & (r["pipeline"] == row.pipeline) & (r["policy"] == row.policy)
                    & (r["limit"] == row.limit) & at_batch(r, row.batch)])
        traffic = self.traffic[self.traffic["run_id"].isin(lim["run_id"])]
        if traffic.empty:
            return "no finished limited run whose traffic each task can be given"
        replay_ = Replay(self.pipelines[row.pipeline], row.policy, self.descriptions,
                         mode_model.parallel_cpus, mode_model.gap_s, int(row.limit_bytes))
        work, gaps = self.rep_work(free, replay_)
        n = len(replay_.keys)
        pages = []
        for _, t in traffic.groupby("run_id", sort=True):
            a = np.zeros((n, 3))
            a[t["task_id"].to_numpy(dtype=int)] = t[TRAFFIC_COLUMNS].to_numpy(dtype=float)
            pages.append(a)
        return Cell(replay_, row.limit, work, gaps, np.array(pages))

    def rep_work(self, free: pd.DataFrame, replay_: Replay) -> tuple[np.ndarray, np.ndarray]:
        """Per repetition of the unconstrained runs ``free``: each task's time (its
        median over the repetition's runs, the windows that ran alone) and the dispatch
        gap (the mean end-to-start of its single-worker runs: measured with the same
        host load as the task times; the model's where none ran)."""
        work, gaps = [], []
        for rep, t in _reps(free, self.tasks):
            work.append(replay_.work_of(solo_work(t)))
            gap = dispatch_gap(free[free["rep"] == rep], t)
            gaps.append(gap if (free[free["rep"] == rep]["workers"] == 1).any()
                        else replay_.gap_s)
        return np.array(work), np.array(gaps)


# ---- the three products ----

RECONSTRUCTION_COLUMNS = [
    "sandbox", "runtime", "pipeline", "pipeline_sha256", "size_bin", "policy", "limit",
    "batch", "swap", "device",
    "per_page_in_s", "per_page_out_s", "native_makespan_s", "native_makespan_ci_low",
    "native_makespan_ci_high", "oom", "sandbox_runs", "sandbox_runs_ok",
    "native_unconstrained_s", "replayed_unconstrained_s", "note"]


def _free_median(free: pd.DataFrame, policy: str) -> float:
    times = free.loc[free["policy"] == policy, "makespan_s"].dropna()
    return float(times.median()) if len(times) else np.nan


def reconstruct_native(campaign: Campaign, model: Model, devices: list[Device],
                       resamples: int, progress: Callable[[str], None] = lambda s: None
                       ) -> pd.DataFrame:
    """Every sandbox limited cell at native speed on each device (module docstring),
    beside the measured native unconstrained makespan and its replay without a limit (a
    check of the replay itself)."""
    rows = []
    cells = campaign.limited_cells()
    for i, row in enumerate(cells.itertuples()):
        progress(f"native-speed reconstruction: cell {i + 1}/{len(cells)}")
        base = {"sandbox": row.mode, "runtime": row.runtime, "pipeline": row.pipeline,
                "pipeline_sha256": row.pipeline_sha256, "size_bin": row.size_bin,
                "policy": row.policy, "limit": row.limit, "batch": batch_value(row.batch),
                "swap": format_swap(None if pd.isna(row.swap_bytes) else int(row.swap_bytes)),
                "sandbox_runs": row.runs,
                "sandbox_runs_ok": row.runs_ok}
        native = model.modes.get(mode_key("native", row.runtime))
        if native is None:
            rows.append({**base, "note": f"no native {row.runtime} model fitted"})
            continue
        free = campaign.free("native", row.runtime, row.pipeline, row.batch)
        measured_free = _free_median(free, row.policy)
        if row.runs_ok == 0:  # killed only where every run was (seventeenth pass M2)
            killed = row.runs_oom == row.runs
            rows += [{**base, "device": d.name, "oom": killed,
                      "native_unconstrained_s": measured_free, "note": _none_finished(row)}
                     for d in devices]
            continue
        cell = campaign.cell(row, "native", native)
        if isinstance(cell, str):
            rows.append({**base, "note": cell})
            continue
        try:
            replayed_free = Cell(Replay(cell.replay.pipeline, row.policy,
                                        campaign.descriptions, cell.replay.parallel_cpus,
                                        cell.replay.gap_s), "none", cell.work, cell.gaps,
                                 cell.pages).makespan(None)
            for d in devices:
                t, lo, hi = estimate(cell, d.swap_cost(), resamples)
                rows.append({**base, "device": d.name, "per_page_in_s": d.per_page_in_s,
                             "per_page_out_s": d.per_page_out_s, "native_makespan_s": t,
                             "native_makespan_ci_low": lo, "native_makespan_ci_high": hi,
                             "oom": False, "native_unconstrained_s": measured_free,
                             "replayed_unconstrained_s": replayed_free,
                             "note": _some_unfinished(row)})
        except ReconstructionError as exc:
            rows.append({**base, "note": str(exc)})
    return pd.DataFrame(rows, columns=RECONSTRUCTION_COLUMNS)


VALIDATION_COLUMNS = [
    "sandbox", "runtime", "pipeline", "policy", "limit", "batch", "runs_ok",
    "measured_makespan_s", "measured_makespan_ci_low", "measured_makespan_ci_high",
    "rebuilt_makespan_s", "rebuilt_makespan_ci_low", "rebuilt_makespan_ci_high",
    "error_pct", "per_page_in_s", "per_page_out_s", "per_major_fault_s", "cost_fitted_on",
    "note"]


def other_pipelines(runs: pd.DataFrame, pipeline: str) -> pd.DataFrame:
    """The runs of pipelines other than ``pipeline``, told apart by the pipeline file's
    SHA-256 where the tables carry it (read together, two campaigns' copies of one
    pipeline are ``a:p000`` and ``b:p000``), else by name."""
    ident = runs["pipeline"].astype(str)
    if "pipeline_sha256" in runs:
        ident = runs["pipeline_sha256"].where(runs["pipeline_sha256"].notna(), ident)
    own = set(ident[runs["pipeline"].astype(str) == pipeline])
    return runs[~ident.isin(own)]


def validate(campaign: Campaign, model: Model, resamples: int,
             progress: Callable[[str], None] = lambda s: None) -> pd.DataFrame:
    """The sandboxes' own limited makespans rebuilt from their unconstrained task times,
    their traffic and per-page costs fitted on the other pipelines (module docstring);
    and, with no limit, each sandbox's and the native unconstrained makespans replayed
    from their own task times (the replay alone)."""
    rows = []
    runs, tasks = campaign.runs, campaign.tasks
    tasks_s = tasks.assign(duration_s=tasks["duration_ns"] / 1e9)
    cells = campaign.limited_cells()
    measured = summarize(_ok(runs), CELL, "makespan_s", prefix="m").set_index(CELL)
    costs: dict[tuple[str, str, str], tuple[SwapCost | None, str]] = {}
    for i, row in enumerate(cells.itertuples()):
        progress(f"validation in the sandbox: cell {i + 1}/{len(cells)}")
        key = (row.mode, row.runtime, row.pipeline, row.policy, row.limit, row.batch)
        m = measured.loc[key] if key in measured.index else None
        base = {"sandbox": row.mode, "runtime": row.runtime, "pipeline": row.pipeline,
                "policy": row.policy, "limit": row.limit, "batch": batch_value(row.batch),
                "runs_ok": row.runs_ok,
                "measured_makespan_s": np.nan if m is None else m["m_median"],
                "measured_makespan_ci_low": np.nan if m is None else m["m_ci_low"],
                "measured_makespan_ci_high": np.nan if m is None else m["m_ci_high"]}
        sandbox = model.modes.get(mode_key(row.mode, row.runtime))
        if sandbox is None or row.runs_ok == 0:
            rows.append({**base, "note": "no sandbox model" if sandbox is None
                         else _none_finished(row)})
            continue
        ckey = (row.mode, row.runtime, row.pipeline)
        if ckey not in costs:
            same = runs[(runs["mode"] == row.mode) & (runs["runtime"] == row.runtime)]
            others = other_pipelines(same, row.pipeline)
            cost = fit_swap_cost(others, tasks_s)
            where = f"{others['pipeline'].nunique()} other pipeline(s)"
            if cost is None:  # no other pipeline ran limited: in-sample, and said so
                cost, where = fit_swap_cost(same, tasks_s), "all pipelines (in-sample)"
            costs[ckey] = (cost, where)
        cost, where = costs[ckey]
        cell = campaign.cell(row, row.mode, sandbox)
        if cost is None or isinstance(cell, str) or unpriced(cell, cost):
            rows.append({**base, "note": "no per-page cost could be fitted" if cost is None
                         else cell if isinstance(cell, str) else unpriced(cell, cost)})
            continue
        try:
            t, lo, hi = estimate(cell, cost, resamples)
        except ReconstructionError as exc:
            rows.append({**base, "note": str(exc)})
            continue
        rows.append({**base, "rebuilt_makespan_s": t, "rebuilt_makespan_ci_low": lo,
                     "rebuilt_makespan_ci_high": hi,
                     "error_pct": (t / base["measured_makespan_s"] - 1) * 100,
                     "per_page_in_s": cost.per_page_in_s, "per_page_out_s": cost.per_page_out_s,
                     "per_major_fault_s": cost.per_major_fault_s, "cost_fitted_on": where,
                     "note": _some_unfinished(row)})
    # the replay alone: unconstrained makespans from their own task times
    free_cells = _ok(runs[runs["limit"] == "none"]).groupby(
        ["mode", "runtime", "pipeline", "policy", "batch"], dropna=False).size().index
    for mode, runtime, pipeline, policy, batch in free_cells:
        mm = model.modes.get(mode_key(mode, runtime))
        m = measured.loc[(mode, runtime, pipeline, policy, "none", batch)]
        base = {"sandbox": mode, "runtime": runtime, "pipeline": pipeline, "policy": policy,
                "limit": "none", "batch": batch_value(batch), "runs_ok": int(m["m_n"]),
                "measured_makespan_s": m["m_median"],
                "measured_makespan_ci_low": m["m_ci_low"],
                "measured_makespan_ci_high": m["m_ci_high"]}
        if mm is None:
            continue
        try:
            r = Replay(campaign.pipelines[pipeline], policy, campaign.descriptions,
                       mm.parallel_cpus, mm.gap_s)
            work, gaps = campaign.rep_work(campaign.free(mode, runtime, pipeline, batch), r)
            t = Cell(r, "none", work, gaps, np.zeros((1, len(r.keys), 3))).makespan(None)
        except ReconstructionError as exc:
            rows.append({**base, "note": str(exc)})
            continue
        rows.append({**base, "rebuilt_makespan_s": t,
                     "error_pct": (t / m["m_median"] - 1) * 100, "note": ""})
    return pd.DataFrame(rows, columns=VALIDATION_COLUMNS)


SCORE_COLUMNS = ["sandbox", "runtime", "scope", "metric", "value", "ci_low", "ci_high", "n",
                 "pipelines", "target", "met", "note"]
VALIDATION_TARGET = 15.0  # % MAPE of the rebuilt limited makespans


def repetition_noise(runs: pd.DataFrame) -> pd.DataFrame:
    """Per mode, runtime, pipeline, policy, limit and batch, each finished run's makespan
    against the median of the cell's other repetitions (|x / median - 1|, %): what even
    a perfect rebuild would miss of a single repetition, the measurements' own noise."""
    rows = []
    ok = _ok(runs).dropna(subset=["makespan_s"])
    for key, g in ok.groupby(CELL, dropna=False):
        m = g["makespan_s"].to_numpy()
        for i in range(len(m)):
            others = np.delete(m, i)
            if len(others):
                rows.append((*key[:-1], batch_value(key[-1]),
                             abs(m[i] / np.median(others) - 1) * 100))
    return pd.DataFrame(rows, columns=["sandbox", "runtime", "pipeline", "policy", "limit",
                                       "batch", "error_pct"])


def validation_scores(table: pd.DataFrame, noise: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per sandbox and runtime: the MAPE of the rebuilt limited makespans (and of the
    unconstrained replay) with a bootstrap CI over pipelines, against the target; beside
    them the repetitions' own noise (``repetition_noise``) in the same cells."""
    rows = []
    if noise is not None and not noise.empty:
        cells = table.dropna(subset=["error_pct"])[["sandbox", "runtime", "pipeline",
                                                     "policy", "limit", "batch"]]
        noise = noise.merge(cells, on=list(cells.columns))
        for (sandbox, runtime), g in noise.groupby(["sandbox", "runtime"]):
            for scope, part in (("limited", g[g["limit"] != "none"]),
                                ("unconstrained", g[g["limit"] == "none"])):
                if part.empty:
                    continue
                value, lo, hi = cluster_mean_ci(part["error_pct"], part["pipeline"],
                                                seed=cell_seed((sandbox, runtime, scope, 1)))
                rows.append({"sandbox": sandbox, "runtime": runtime, "scope": scope,
                             "metric": "repetition noise %", "value": value, "ci_low": lo,
                             "ci_high": hi, "n": len(part),
                             "pipelines": part["pipeline"].nunique(), "target": np.nan,
                             "met": None, "note": "a repetition's makespan against the "
                             "median of the cell's others: what a perfect rebuild misses"})
    done = table.dropna(subset=["error_pct"])
    for (sandbox, runtime), g in done.groupby(["sandbox", "runtime"]):
        for scope, part in (("limited", g[g["limit"] != "none"]),
                            ("unconstrained", g[g["limit"] == "none"])):
            if part.empty:
                continue
            value, lo, hi = cluster_mean_ci(part["error_pct"].abs(), part["pipeline"],
                                            seed=cell_seed((sandbox, runtime, scope)))
            target = VALIDATION_TARGET if scope == "limited" else np.nan
            rows.append({"sandbox": sandbox, "runtime": runtime, "scope": scope,
                         "metric": "makespan MAPE %", "value": value, "ci_low": lo,
                         "ci_high": hi, "n": len(part), "pipelines": part["pipeline"].nunique(),
                         "target": target,
                         "met": bool(value <= target) if np.isfinite(target) else None,
                         "note": "mean over cells; CI: pipelines resampled"})
    return pd.DataFrame(rows, columns=SCORE_COLUMNS)


def _root_log(f: Callable[[float], float], lo: float, hi: float) -> float:
    """A root of f between lo and hi (f changes sign; a grid's neighbours), by Brent's
    method in log cost (``scipy.optimize.brentq``) to ROOT_XTOL: on the swap-cost axis
    brentq called f 6-7 times where 8 bisection steps called it 9 and left up to 1.1e-3
    in log cost (benchmarks/bench_numerics.py).
    The ends are passed exactly, so their simulations come from the grid's cache. NaN
    when an end is not finite (a makespan that could not be rebuilt): no sign to follow."""
    if not (np.isfinite(f(lo)) and np.isfinite(f(hi))):
        return math.nan
    ulo, uhi = math.log(lo), math.log(hi)
    root = brentq(lambda u: f(lo if u == ulo else hi if u == uhi else math.exp(u)),
                  ulo, uhi, xtol=ROOT_XTOL)
    return math.exp(root)


def _speedup_of(makespan: Callable[[tuple, float], float], by_policy: dict[str, list[tuple]]
                ) -> Callable[[str, float], tuple[float, int]]:
    """policy, cost -> (the median over pipelines of Bulk's makespan / the policy's, the
    pipelines it is taken over)."""
    bulk = {k[4]: k for k in by_policy["bulk"]}

    def speedup(policy: str, c: float) -> tuple[float, int]:
        ratios = [makespan(bulk[k[4]], c) / makespan(k, c)
                  for k in by_policy[policy] if k[4] in bulk]
        ratios = [r for r in ratios if np.isfinite(r)]
        return (float(np.median(ratios)), len(ratios)) if ratios else (np.nan, 0)

    return speedup


def cost_curves(campaign: Campaign, model: Model, grid: np.ndarray = COST_GRID,
                progress: Callable[[str], None] = lambda s: None
                ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(curves, crossovers): per sandbox, runtime, limit, size bin, policy and per-page
    cost, the median over the bin's pipelines of the speed-up over Bulk at native speed;
    and the costs where a policy's curve crosses 1 and where the fastest policy
    changes. A curve is rebuilt from its policy's runs that finished: each row, and each
    crossover, carries how many of the policy's runs there did not (``runs``,
    ``runs_not_ok``; twenty-third held-out pass M1: a policy killed in 2 of 3 runs was
    drawn as beating Bulk, unmarked, and one killed in every run was left out unsaid);
    a policy none of whose runs finished has rows with no speed-up."""
    cells = campaign.limited_cells()
    # the batch as its name ("deploy", "4"): a key that sorts and indexes like the others
    cells = cells.assign(batch_name=cells["batch"].map(lambda b: batch_name(batch_value(b))))
    value_of = dict(zip(cells["batch_name"], cells["batch"].map(batch_value)))
    ended = (cells.assign(not_ok=cells["runs"] - cells["runs_ok"])
             .groupby(["mode", "runtime", "limit", "size_bin", "batch_name", "policy"])
             [["runs", "not_ok"]].sum())
    cells = cells[cells["runs_ok"] > 0]
    built: dict[tuple, Cell] = {}
    for row in cells.itertuples():
        native = model.modes.get(mode_key("native", row.runtime))
        cell = campaign.cell(row, "native", native) if native is not None else "no model"
        if not isinstance(cell, str):
            built[(row.mode, row.runtime, row.limit, row.size_bin, row.batch_name,
                   row.pipeline, row.policy)] = cell
    cache: dict[tuple, float] = {}

    def makespan(key: tuple, c: float) -> float:
        if (key, c) not in cache:
            try:
                cost = SwapCost(c, c, c, 0, "axis", PAGE_SIZE)
                cache[(key, c)] = built[key].makespan(cost)
            except ReconstructionError:
                cache[(key, c)] = np.nan
        return cache[(key, c)]

    groups: dict[tuple, dict[str, list[tuple]]] = {}
    for key in built:
        groups.setdefault(key[:5], {}).setdefault(key[6], []).append(key)
    curves, crossings = [], []
    for gi, (group, by_policy) in enumerate(sorted(groups.items())):
        progress(f"swap-cost axis: group {gi + 1}/{len(groups)}")
        here = ended.loc[group]
        counts = {p: (int(r.runs), int(r.not_ok)) for p, r in here.iterrows()}
        # no Bulk run finished: no speed-up to rebuild, its rows empty and a crossover row
        # saying so (twenty-fifth pass M2: the limit was dropped)
        speedup = _speedup_of(makespan, by_policy) if "bulk" in by_policy else None
        for policy in sorted(counts):
            values = ([speedup(policy, c) for c in grid] if speedup and policy in by_policy
                      else [(np.nan, 0)] * len(grid))
            curves += [{"sandbox": group[0], "runtime": group[1], "limit": group[2],
                        "size_bin": group[3], "batch": value_of[group[4]], "policy": policy,
                        "per_page_s": c,
                        "speedup_over_bulk": v, "pipelines": n, "runs": counts[policy][0],
                        "runs_not_ok": counts[policy][1]}
                       for c, (v, n) in zip(grid, values)]
            if speedup is None or policy == "bulk" or policy not in by_policy:
                continue
            for (c0, (v0, _)), (c1, (v1, _)) in zip(zip(grid, values),
                                                    zip(grid[1:], values[1:])):
                if np.isfinite(v0) and np.isfinite(v1) and (v0 - 1) * (v1 - 1) < 0:
                    at = _root_log(lambda c, p=policy, f=speedup: f(p, c)[0] - 1, c0, c1)
                    crossings.append({"sandbox": group[0], "runtime": group[1],
                                      "limit": group[2], "size_bin": group[3],
                                      "batch": value_of[group[4]],
                                      "what": f"{policy} against bulk",
                                      "from": policy if v0 > 1 else "bulk",
                                      "to": "bulk" if v0 > 1 else policy, "per_page_s": at,
                                      "not_finished": _not_finished(counts, "bulk", policy)})
        if speedup is None:
            crossings.append({"sandbox": group[0], "runtime": group[1], "limit": group[2],
                              "size_bin": group[3], "batch": value_of[group[4]],
                              "what": "no Bulk run finished",
                              "from": "bulk", "to": "bulk", "per_page_s": np.nan,
                              "not_finished": _not_finished(counts, *sorted(counts))})
            continue
        best = [max(by_policy, key=lambda p, c=c: np.nan_to_num(speedup(p, c)[0], nan=-1))
                for c in grid]
        for (c0, b0), (c1, b1) in zip(zip(grid, best), zip(grid[1:], best[1:])):
            if b0 != b1:
                at = _root_log(lambda c, a=b0, b=b1, f=speedup: f(a, c)[0] - f(b, c)[0],
                             c0, c1)
                crossings.append({"sandbox": group[0], "runtime": group[1], "limit": group[2],
                                  "size_bin": group[3], "batch": value_of[group[4]],
                                  "what": "fastest policy",
                                  "from": b0, "to": b1, "per_page_s": at,
                                  "not_finished": _not_finished(counts, b0, b1)})
    cols = ["sandbox", "runtime", "limit", "size_bin", "batch", "what", "from", "to",
            "per_page_s", "not_finished"]
    return pd.DataFrame(curves), pd.DataFrame(crossings, columns=cols)


def _not_finished(counts: dict[str, tuple[int, int]], *policies: str) -> str:
    """Of ``policies``, the runs that did not finish (counts: policy -> (runs, not ok))."""
    return "; ".join(f"{p}: {counts[p][1]} of {counts[p][0]} runs did not finish"
                     for p in policies if counts[p][1])


def _some_unfinished(row: object) -> str:
    """A rebuilt or validated cell's note: how many of its sandbox runs did not finish
    (its time is the others'), or nothing (twenty-seventh held-out pass L3: the
    validation said nothing, and scored against the one survivor)."""
    if row.runs_ok == row.runs:
        return ""
    return (f"{int(row.runs - row.runs_ok)} of {int(row.runs)} sandbox runs did not finish "
            f"({int(row.runs_oom)} OOM-killed)")


def _none_finished(row: object) -> str:
    """Why a sandbox cell has nothing to rebuild: its runs were all OOM-killed, or none
    finished for another reason too (a timeout is no kill: on a device it might end)."""
    if row.runs_oom == row.runs:
        return "every sandbox run under this limit was OOM-killed"
    return (f"no sandbox run under this limit finished ({int(row.runs_oom)} of "
            f"{int(row.runs)} OOM-killed; the others timed out or ended in error)")


def reconstruct_files(tables_dir: Paths, models_dir: Paths, model_path: str, out_dir: str,
                      resamples: int = 200) -> dict[str, pd.DataFrame]:
    """``reconstruct-model``: the native-speed reconstruction on every named device
    profile, its validation in the sandboxes and the swap-cost axis, written to
    ``out_dir`` (reconstruction, reconstruction_validation, reconstruction_scores,
    swap_cost_curves, swap_cost_crossovers as CSV + Parquet)."""
    from pathlib import Path

    from engine.analysis.tablefiles import write_tables
    from engine.model.devices import PROFILES
    from engine.model.train import read_tables

    runs, tasks, networks, descriptions = read_tables(tables_dir, models_dir)
    model = Model.read(model_path)
    campaign = Campaign.of(runs, tasks, networks, descriptions)
    table = reconstruct_native(campaign, model, list(PROFILES.values()), resamples,
                               log.info)
    check = validate(campaign, model, resamples, log.info)
    curves, crossovers = cost_curves(campaign, model, progress=log.info)
    tables = dict(zip(RECONSTRUCT_TABLES, (
        table, check, validation_scores(check, repetition_noise(campaign.runs)), curves,
        crossovers), strict=True))
    write_tables(tables, Path(out_dir))
    return tables

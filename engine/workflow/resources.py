"""What a job asks a cluster for: memory, runtime, and for a run under ``inherit`` a SLURM
job step of its own."""

from __future__ import annotations

import argparse
import functools
import math
import shlex

from engine.runtime.bound import ENGINE_BASELINE_MB, graph_bound_bytes, run_bound_mb
from engine.sandbox.config import default_ram
from engine.units import parse_size
from engine.workflow.args import join_words
from engine.workflow.plan import SANDBOXES, UNLIMITED, Config, run_backend

UNLIMITED_MEM_MB = 8192  # an unconstrained run whose networks the plan cannot bound
# What a SLURM run job needs besides its run's own step: the executor plugin's two
# Snakemake interpreters (the jobstep executor in the batch step, the job itself in step
# 0), each of which loads this workflow as the planning process does, and two srun
# clients, a shell and the batch script (SLURM_JOB_SHELLS_MB, about 12 MiB each).
SLURM_JOB_SHELLS_MB = 64
# a job's interpreter holds more than the planner once it has loaded the workflow (the
# executor plugin, its one job): on the test cluster the batch step and step 0 peaked at
# 546 MiB where the planner held 175 MiB (1.38 times two of it, the shells aside)
RESERVE_MARGIN = 1.6


@functools.lru_cache(maxsize=64)
def network_bound_bytes(name: str, batch: int | None, runtime: str) -> tuple[int, int]:
    """``graph_bound_bytes`` of one instance of zoo network ``name`` at ``batch`` (None:
    its deploy batch): from the zoo's prototxt alone, so the plan can ask before anything
    is split."""
    from engine.caffe import graph, zoo

    return graph_bound_bytes(graph.build_graph(zoo.deploy_net(name), batch=batch,
                                               source=name), runtime)


def pipelines_networks(args: str, names: list[str]) -> dict[str, list[str]]:
    """Pipeline name -> its networks, as ``python -m engine pipelines <args>`` draws them
    from ``names`` (the same parser and generator; the arrival times do not change which
    networks are drawn). Empty for empty ``args``."""
    if not args:
        return {}
    from engine.commands import pipelines as command
    from engine.schedule.pipelines import generate_pipelines

    parser = argparse.ArgumentParser()
    command.add_parser(parser.add_subparsers())
    a = parser.parse_args(["pipelines", "--split", ".", "--out", ".", *shlex.split(args)])
    drawn = generate_pipelines(a.seed, a.count, dict.fromkeys(a.networks or names, 1),
                               tuple(a.length), {"mode": "batch"}, prefix=a.prefix)
    return {p.name: p.networks() for p in drawn}


def unconstrained_mem_mb(networks: list[str], batch: int | None, runtime: str,
                         workers: int) -> int:
    """MiB an unconstrained run of ``networks`` may use: the bound of every instance's
    held bytes, the ``workers`` largest transients on top (one task per worker at once),
    the engine's baseline, and a margin; ``UNLIMITED_MEM_MB`` when a network is not the
    zoo's (a user model: no prototxt at planning)."""
    from engine.caffe import zoo

    if not networks or any(n not in zoo.ZOO for n in networks):
        return UNLIMITED_MEM_MB
    return run_bound_mb((network_bound_bytes(n, batch, runtime) for n in networks), workers)


def job_reserve_mb(workflow_rss_bytes: int) -> int:
    """MiB a run job asks for beside its run's step: two Snakemake interpreters of
    ``workflow_rss_bytes`` each (the resident size of the process planning the workflow,
    measured once its rules are loaded: a job's interpreters load the same workflow and
    config, and their DAG is one job), the shells, and a margin (``RESERVE_MARGIN``)."""
    return math.ceil(RESERVE_MARGIN * 2 * workflow_rss_bytes / 2**20) + SLURM_JOB_SHELLS_MB


def run_step_mem_mb(config: Config, limit: str, in_sandbox: bool,
                    unconstrained_mb: int = UNLIMITED_MEM_MB) -> int | None:
    """MiB of the run's own SLURM job step (``srun --mem``) under ``inherit``: exactly its
    limit (``unconstrained_mb``, its networks' bound, for an unconstrained run), so the
    step's cgroup, where a SLURM with task/cgroup enforces memory, holds the engine's
    processes alone under exactly that limit, and the workflow's own processes stay
    outside it. None for the other backends, which set (or emulate) the limit
    themselves."""
    if run_backend(config, limit, in_sandbox) != "inherit":
        return None
    return unconstrained_mb if limit == UNLIMITED else parse_size(limit) // 2**20


def run_mem_mb(config: Config, limit: str, in_sandbox: bool, reserve_mb: int,
               unconstrained_mb: int = UNLIMITED_MEM_MB) -> int:
    """Memory (MiB) a run job asks for: the run's own and, whatever the backend, the
    workflow's own processes beside it (``reserve_mb``: ``job_reserve_mb``). Under
    ``inherit`` the run gets a job step of exactly its limit (``run_step_mem_mb``); a
    backend that sets its own cgroup needs the limit and, outside it, the supervisor and
    sampler (``ENGINE_BASELINE_MB``); an unconstrained run its networks' bound
    (``unconstrained_mb``: ``unconstrained_mem_mb``, the engine's baseline included); a VM
    its guest RAM (``default_ram``: limit, or for an unconstrained run its bound, + 768
    MiB, at least 1 GiB) and qemu's own ~300 MiB."""
    step = run_step_mem_mb(config, limit, in_sandbox, unconstrained_mb)
    if step is not None:
        return step + reserve_mb
    mib = None if limit == UNLIMITED else parse_size(limit) // 2**20
    if run_backend(config, limit, in_sandbox) in SANDBOXES:
        # the guest's RAM as the run sizes it; a pipeline the plan cannot bound (a user's
        # model) is unknown until its split exists: BASELINE_RAM
        bound = None if mib is not None or unconstrained_mb == UNLIMITED_MEM_MB else (
            unconstrained_mb * 2**20)
        guest = default_ram(None if mib is None else mib * 2**20, bound) // 2**20
        return guest + 512 + reserve_mb
    return reserve_mb + (unconstrained_mb if mib is None else mib + ENGINE_BASELINE_MB)


def slurm_step_prefix(mem_mb: int | None) -> str:
    """Shell words that run the command after them (``python -m engine run ... --out D``)
    in a SLURM job step of its own with ``--mem=<mem_mb>M``, when inside a SLURM job;
    outside one (a local run) the command runs as it is. ``--overlap`` lets the step start
    beside step 0, which holds the job's resources while it waits for it. A run folder
    that was written is the run's result even when srun reports the step's OOM kill with
    a failing exit code. Empty for ``None`` (no step)."""
    if mem_mb is None:
        return ""
    srun = join_words(["srun", "--quiet", "--ntasks=1", "--nodes=1", "--cpus-per-task=1",
                  "--overlap", f"--mem={mem_mb}M"])
    return (
        'edgeprof_step() { if [ -z "${SLURM_JOB_ID:-}" ] || ! command -v srun >/dev/null;'
        ' then "$@"; return; fi; rc=0; ' + srun + ' "$@" || rc=$?; out=; prev=;'
        ' for a; do [ "$prev" = --out ] && out=$a; prev=$a; done;'
        ' if [ "$rc" -ne 0 ] && [ -f "$out/meta.json" ]; then rc=0; fi; return "$rc"; };'
        " edgeprof_step ")


def run_runtime_min(run: Config) -> int:
    """Minutes a run job asks for: the engine's own timeout and five minutes' margin."""
    return block_runtime_min(run, 1)


def block_runtime_min(run: Config, runs: int) -> int:
    """Minutes a job of ``runs`` runs one after the other asks for: each run's timeout and
    five minutes' margin."""
    return int(run["timeout_s"] // 60) * runs + 5

"""What a job asks a cluster for: memory, runtime, and for a run under ``inherit`` a SLURM
job step of its own."""

from __future__ import annotations

from engine.units import parse_size
from engine.workflow.args import join_words
from engine.workflow.plan import SANDBOXES, UNLIMITED, Config, run_backend

UNLIMITED_MEM_MB = 8192  # what an unconstrained run may use (its step's --mem under inherit)
# MiB a SLURM run job needs besides its run's own step: the batch script, the executor
# plugin's two Snakemake interpreters (the jobstep executor in the batch step and the job
# itself in step 0, ~170 MiB each), two srun clients and a shell. Measured per job with
# sacct's MaxRSS of the batch step and step 0 (README, "Running the paper sweep on
# SLURM"), rounded up.
SLURM_JOB_OVERHEAD_MB = 512


def run_step_mem_mb(config: Config, limit: str, in_vm: bool) -> int | None:
    """MiB of the run's own SLURM job step (``srun --mem``) under ``inherit``: exactly its
    limit (``UNLIMITED_MEM_MB`` for an unconstrained run), so the step's cgroup, where a
    SLURM with task/cgroup enforces memory, holds the engine's processes alone under
    exactly that limit, and the workflow's own processes stay outside it. None for the
    other backends, which set (or emulate) the limit themselves."""
    if run_backend(config, limit, in_vm) != "inherit":
        return None
    return UNLIMITED_MEM_MB if limit == UNLIMITED else parse_size(limit) // 2**20


def run_mem_mb(config: Config, limit: str, in_vm: bool) -> int:
    """Memory (MiB) a run job asks for. Under ``inherit`` the run gets a job step of exactly
    its limit (``run_step_mem_mb``) and the job asks for that plus the workflow's own
    processes (``SLURM_JOB_OVERHEAD_MB``); a backend that sets its own cgroup needs room
    above the limit for the supervisor and sampler; a VM needs its guest RAM (limit + 768
    MiB, at least 1 GiB) and qemu's own ~300 MiB."""
    step = run_step_mem_mb(config, limit, in_vm)
    if step is not None:
        return step + SLURM_JOB_OVERHEAD_MB
    mib = None if limit == UNLIMITED else parse_size(limit) // 2**20
    if run_backend(config, limit, in_vm) in SANDBOXES:
        guest = 4096 if mib is None else max(1024, mib + 768)  # engine.vm.run.plan's RAM
        return guest + 512
    return UNLIMITED_MEM_MB if mib is None else mib + 1024


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

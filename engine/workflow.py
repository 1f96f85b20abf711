"""What the Snakemake workflow (workflow/rules/common.smk) computes from its config.

Pure functions: validated config dicts in, command-line argument strings, job lists and
resource numbers out. Nothing here imports Snakemake, probes the host (no systemctl, no
qemu) or touches a file, so building the DAG stays cheap on a submit host and the rules
stay thin. Which runs go to the vm backend is a config choice (``vm.enabled``), never
decided by looking at the machine.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from engine.schedule.policies import parse_policy
from engine.units import parse_size

Config = Mapping[str, Any]

UNLIMITED = "none"  # the limit label of the unconstrained runs


def _join(args: Iterable[object]) -> str:
    return shlex.join(str(a) for a in args)


# --- which runs exist, and where they run --------------------------------------------------


def pipeline_names(count: int, prefix: str = "p") -> list[str]:
    """``p000``, ``p001``, ... (the names ``python -m engine pipelines --prefix`` writes)."""
    return [f"{prefix}{i:03d}" for i in range(count)]


def policy_ids(policies: Iterable[str]) -> dict[str, str]:
    """Path-safe policy id -> canonical policy name (``partial:2`` -> ``partial_2``)."""
    names = [parse_policy(p).name for p in policies]
    return {name.replace(":", "_"): name for name in names}


def vm_enabled(config: Config) -> bool:
    """Whether the limited runs go to the vm backend, on the ``vm:`` block's pipelines and
    limits (``vm.enabled``; a config without a ``vm:`` block runs none in the VM)."""
    return bool((config.get("vm") or {}).get("enabled", False))


def vm_pipeline_names(config: Config) -> list[str]:
    """The ``vNNN`` pipelines of the ``vm:`` block, when it is enabled."""
    return pipeline_names(config["vm"]["pipelines"]["count"], "v") if vm_enabled(config) else []


def run_sets(config: Config) -> list[tuple[list[str], list[str]]]:
    """(pipelines, limits) pairs whose product is every run (times policies and reps).

    With ``vm.enabled`` the main pipelines run only unconstrained (natively) and the limited
    runs are the vm pipelines under the vm limits (emulated runs are 15-60x slower);
    otherwise the main pipelines run under every limit of ``run.limits``."""
    main = pipeline_names(config["pipelines"]["count"])
    if vm_enabled(config):
        return [(main, [UNLIMITED]), (vm_pipeline_names(config), list(config["vm"]["limits"]))]
    return [(main, [str(limit) for limit in config["run"]["limits"]])]


def run_backend(config: Config, limit: str) -> str:
    """The ``--backend`` of a run under ``limit``: unconstrained runs stay native (``none``
    where ``run.backend`` is ``vm``), limited runs go to ``vm`` when ``vm.enabled``, else
    they use ``run.backend``."""
    backend = config["run"]["backend"]
    if limit == UNLIMITED:
        return "none" if backend == "vm" else backend
    return "vm" if vm_enabled(config) else backend


def runs_in_vm(config: Config, limit: str) -> bool:
    """Whether a run under ``limit`` runs in the guest (so needs the built guest)."""
    return run_backend(config, limit) == "vm"


# --- command-line arguments ------------------------------------------------------------------


def limit_args(config: Config, limit: str) -> str:
    """``python -m engine run``'s limit, swap and backend flags for a run under ``limit``."""
    backend = run_backend(config, limit)
    if limit == UNLIMITED:
        return _join(["--backend", backend])
    return _join(["--limit", limit, "--swap", config["run"]["swap"], "--backend", backend])


def batch_args(run: Config) -> str:
    """``--batch N``, or nothing to keep each network's deploy batch (``batch: null``)."""
    return "" if run["batch"] is None else _join(["--batch", run["batch"]])


def run_options(run: Config) -> str:
    """The settings every run shares (only these, so editing e.g. the limit list reruns
    only the new runs)."""
    return _join(["--blas-threads", run["blas_threads"], "--timeout", run["timeout_s"],
                  "--sample-hz", run["sample_hz"]])


def arrival_args(arrival: Config) -> str:
    """``{mode: poisson, rate: 2}`` -> ``--arrival poisson --rate 2``."""
    args: list[object] = []
    for key, value in arrival.items():
        args += [f"--{'arrival' if key == 'mode' else key}", value]
    return _join(args)


def pipelines_args(config: Config, networks: Iterable[str]) -> str:
    """``python -m engine pipelines``'s arguments for the main pipelines (``pNNN``), drawn
    from ``networks`` (display names)."""
    cfg = config["pipelines"]
    return " ".join(filter(None, [
        _join(["--count", cfg["count"], "--seed", config["seed"], "--length", *cfg["length"]]),
        arrival_args(cfg["arrival"]),
        _join(["--bins", *cfg["bins_mib"], "--networks", *networks]),
    ]))


def vm_pipelines_args(config: Config) -> str:
    """The same for the vm block's smaller pipelines (``vNNN``, batch arrival, its own
    networks); empty when the vm block is not enabled."""
    if not vm_enabled(config):
        return ""
    cfg = config["vm"]["pipelines"]
    return _join(["--count", cfg["count"], "--seed", config["seed"], "--prefix", "v",
                  "--length", *cfg["length"], "--bins", *config["pipelines"]["bins_mib"],
                  "--networks", *cfg["networks"]])


# --- cluster resources -----------------------------------------------------------------------

UNLIMITED_MEM_MB = 8192


def run_mem_mb(config: Config, limit: str) -> int:
    """Memory (MiB) a run job asks for. Under ``inherit`` the job's own limit is the run's
    limit, so it asks for exactly that (the supervisor and sampler, ~100 MB, share it); a
    backend that sets its own cgroup needs room above the limit for them; a VM needs its
    guest RAM (limit + 768 MiB, at least 1 GiB) and qemu's own ~300 MiB."""
    if limit == UNLIMITED:
        return UNLIMITED_MEM_MB
    mib = parse_size(limit) // 2**20
    backend = run_backend(config, limit)
    if backend == "vm":
        return max(1024, mib + 768) + 512
    return mib if backend == "inherit" else mib + 1024


def run_runtime_min(run: Config) -> int:
    """Minutes a run job asks for: the engine's own timeout and five minutes' margin."""
    return int(run["timeout_s"] // 60) + 5


# --- the jobs' environment -------------------------------------------------------------------


def job_environ(environ: Mapping[str, str], interpreter: str, project: str,
                under_conda: bool) -> dict[str, str]:
    """PATH and PYTHONPATH for the jobs, so a rule's ``python -m engine`` means the right
    interpreter and this checkout's engine without putting either into params.

    Without conda, the directory of ``interpreter`` (the Python running Snakemake, e.g.
    .venv/bin) goes first on PATH, so ``python`` is that venv's even when it is not
    activated; under ``--software-deployment-method conda`` the rule's activated
    environment comes first anyway, so PATH is left alone. ``project`` (the checkout the
    workflow runs from) goes first on PYTHONPATH in both cases, so every job, shell rules
    and scripts alike, imports the engine whose code fingerprints its params carry."""
    def prepend(entry: str, current: str | None) -> str:
        parts = [p for p in (current or "").split(os.pathsep) if p and p != entry]
        return os.pathsep.join([entry, *parts])

    env = {"PYTHONPATH": prepend(project, environ.get("PYTHONPATH"))}
    if not under_conda:
        env["PATH"] = prepend(os.path.dirname(interpreter), environ.get("PATH"))
    return env

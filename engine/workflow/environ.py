"""The environment the workflow's jobs run in."""

from __future__ import annotations

import os
from collections.abc import Mapping


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


# What a user may set in the environment that changes what a sandbox run measures (the
# guest's RAM, swap device, CPUs, accelerator, UML's ascending faults and its userspace
# mode; engine.vm.run.VmConfig.from_env, engine.vm.uml), not where its caches are or how
# long it may take: a sandbox run's params carry them, so changing one reruns those runs.
SANDBOX_SETTINGS = ("EDGEPROF_VM_RAM", "EDGEPROF_VM_SWAP_DEVICE", "EDGEPROF_VM_SD_CARD",
                    "EDGEPROF_VM_SMP", "EDGEPROF_VM_ACCEL", "EDGEPROF_VM_ASCEND",
                    "EDGEPROF_UML_USERSPACE")


def sandbox_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """The SANDBOX_SETTINGS set (non-empty) in ``environ``, by name."""
    return {name: environ[name] for name in sorted(SANDBOX_SETTINGS) if environ.get(name)}

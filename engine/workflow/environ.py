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


# What a user may set in the environment that changes what a sandbox run measures: the
# guest's settings (engine.sandbox.config.SandboxConfig, from its ENV_NAMES) that sandbox
# reads, and UML's userspace mode. A sandbox run's params carry those that differ from the defaults,
# so changing one reruns those runs (and writing a default out, unsetting it, or setting
# one the sandbox ignores, none). The timeouts change no measurement.
GUEST_SETTINGS = {"uml": ("ram", "swap_device", "ascend"),
                  "vm": ("ram", "swap_device", "sd_card", "smp", "accel")}


def sandbox_settings(environ: Mapping[str, str], sandbox: str) -> dict[str, object]:
    """The GUEST_SETTINGS of ``sandbox`` ("uml" or "vm") that ``environ`` sets to other
    than their defaults, and under uml its userspace mode if set; a bad value, or one the
    sandbox cannot honour, raises EdgeprofError naming the variable (before any job: a job
    would otherwise fail after Snakemake removed its old run)."""
    from engine.sandbox.config import USERSPACE_MODES, SandboxConfig, uml_userspace

    parsed, default = SandboxConfig.from_env(dict(environ)), SandboxConfig()
    parsed.refuse_unsupported(sandbox)
    out: dict[str, object] = {name: getattr(parsed, name) for name in GUEST_SETTINGS[sandbox]
                              if getattr(parsed, name) != getattr(default, name)}
    if sandbox == "uml" and uml_userspace(environ) != USERSPACE_MODES[0]:
        out["uml_userspace"] = uml_userspace(environ)
    return out

"""``uml`` and ``vm``: the run goes to a sandbox kernel with its own cgroup v2 and swap
device (``engine.sandbox``): a user-mode Linux kernel run as a host process, or a throwaway
qemu guest. This session only marks that: the supervisor of this process starts nothing,
and ``runs_elsewhere`` tells the caller to hand the run to the sandbox. ``auto`` falls
back to them when a limit is asked for and nothing on the host can enforce it: to uml
where it is built and works on this host, else to the vm when qemu is installed."""

from __future__ import annotations

import shutil

from engine.errors import EdgeprofError
from engine.limits.base import LimitRequest, Session
from engine.limits.umlhost import load_uml, why_none

QEMU = "qemu-system-x86_64"


def qemu_installed() -> bool:
    return shutil.which(QEMU) is not None


class SandboxSession(Session):
    runs_elsewhere = True
    # the guest's cgroup2 session sets and reports the limit; the run's record says
    # whether it was enforced there

    def __init__(self, request: LimitRequest) -> None:
        super().__init__(request)
        self.enforced = request.limit_bytes is not None


class QemuSession(SandboxSession):
    backend = "vm"


class UmlSession(SandboxSession):
    backend = "uml"


def uml_status() -> tuple[bool, str]:
    """(True, kernel) when a user-mode Linux kernel was built and works on this host
    (reads the build's record; boots nothing), else (False, why)."""
    built = load_uml()
    if built is not None:
        return True, f"Linux {built.kernel_version} ({built.suite})"
    return False, why_none() or "not built"


def sandbox_session(request: LimitRequest) -> SandboxSession:
    """The session of an explicitly chosen ``uml`` or ``vm`` backend (``request.backend``)."""
    if request.backend == "uml":
        ok, why = uml_status()
        if not ok:
            raise EdgeprofError(f"uml: {why}; build it with python -m engine.sandbox build, or use "
                                f"--backend vm")
        return UmlSession(request)
    return QemuSession(request)

"""``vm``: the run goes to a throwaway qemu guest with its own cgroup v2 and swap device
(``engine.vm``). This session only marks that: the supervisor of this process starts
nothing, and ``runs_elsewhere`` tells the caller to hand the run to the guest. ``auto``
falls back to it when a limit is asked for, nothing on the host can enforce it and qemu
is installed."""

from __future__ import annotations

import shutil

from engine.limits.base import LimitRequest, Session

QEMU = "qemu-system-x86_64"


def qemu_installed() -> bool:
    return shutil.which(QEMU) is not None


class VmSession(Session):
    backend = "vm"
    runs_elsewhere = True
    # the guest's cgroup2 session sets and reports the limit; the run's record says
    # whether it was enforced there

    def __init__(self, request: LimitRequest) -> None:
        super().__init__(request)
        self.enforced = request.ram_bytes is not None

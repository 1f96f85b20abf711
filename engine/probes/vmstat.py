"""Guest-wide swap and fault counters per task window, from ``/proc/vmstat``.

Linux 6.12's per-cgroup memory.stat has no pswpin/pswpout, so inside the VM guest the
swap traffic of a LOAD/EXEC window comes from /proc/vmstat. It is exact for the run
because the guest runs nothing else (the supervisor and sampler barely fault or swap).
The cgroup's own workingset_refault_anon stays in the cgroup columns as a cross-check.

Each window also records the counters' values at its end (``guest_*_end``): windows of
concurrent workers overlap, and a delta alone cannot say how much of the traffic fell
before, during or after another window; the values at every window's start and end
place it between any two task boundaries (``engine.model.traffic``).
"""

from __future__ import annotations

import os
from pathlib import Path

GUEST_ENV = "EDGEPROF_IN_SANDBOX"  # set to "1" for a sandbox's guest processes
WINDOW_KEYS = ("pswpin", "pswpout", "pgmajfault")
COLUMNS = (tuple(f"guest_{k}_delta" for k in WINDOW_KEYS)
           + tuple(f"guest_{k}_end" for k in WINDOW_KEYS))
PROC_VMSTAT = Path("/proc/vmstat")


def in_guest() -> bool:
    """Whether this process runs inside the vm backend's guest."""
    return os.environ.get(GUEST_ENV) == "1"


def read_vmstat(keys: tuple[str, ...] | None = None,
                path: Path = PROC_VMSTAT) -> dict[str, int]:
    """``keys`` of /proc/vmstat (all when None); a line without a number is skipped (the
    key then reads as unknown)."""
    out = {}
    with open(path, "rb") as f:
        for line in f:
            key, _, value = line.decode(errors="replace").partition(" ")
            if (keys is None or key in keys) and value.strip().isdecimal():
                out[key] = int(value)
    return out


class VmstatWindows:
    """A window probe (open() -> token, close(token) -> columns) for the run's tasks."""

    def __init__(self, path: Path = PROC_VMSTAT) -> None:
        self.path = path

    def open(self) -> dict[str, int]:
        return read_vmstat(WINDOW_KEYS, self.path)

    def close(self, before: dict[str, int]) -> dict[str, int | None]:
        after = read_vmstat(WINDOW_KEYS, self.path)
        return {**{f"guest_{k}_delta": after[k] - before[k] if k in after and k in before
                   else None for k in WINDOW_KEYS},
                **{f"guest_{k}_end": after.get(k) for k in WINDOW_KEYS}}

"""What every limit backend provides to the run supervisor."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LimitRequest:
    """A run's memory limit as ``run --limit/--swap/--backend`` asked for it: parsed once,
    by the argument parser (engine.commands.run), and carried under these names to the
    cgroup's files and into the run record (``limit_bytes``, ``swap_bytes``, ``backend``)."""

    limit_bytes: int | None = None  # None: no RAM limit asked for
    swap_bytes: int | None = None  # swap allowed on top of the limit; None: unlimited ("max")
    backend: str = "none"  # how it is enforced (engine.limits.BACKENDS)


class Session:
    """One run's confinement. Subclasses override what their backend can do; the defaults
    are those of a run with no cgroup at all."""

    backend = "none"
    enforced = False
    cgroup_dir: Path | None = None
    cgroup_version: int | None = None
    runs_elsewhere = False  # True: the caller hands the run to another machine (the vm)

    def __init__(self, request: LimitRequest) -> None:
        self.request = request
        self.notes: dict = {}  # backend-specific facts for meta.json (why unenforced, ...)

    def command_prefix(self) -> list[str]:
        """argv words to put before the measured command (e.g. systemd-run)."""
        return []

    def preexec(self) -> Callable[[], None] | None:
        """Runs in the forked child before exec (e.g. join the run's cgroup)."""
        return None

    def attach_pid(self, pid: int) -> None:
        """Called with the child's PID once it has started."""

    def oom_kills(self) -> int | None:
        """Processes the kernel OOM-killed inside the run's cgroup; None where nothing
        counts them (no cgroup, or a kernel without the count)."""
        return None

    def hit_limit(self) -> bool:
        """Whether memory use reached the limit (the OOM fallback for old kernels)."""
        return False

    def kill_all(self) -> None:
        """Kill every process left in the run's cgroup."""

    def close(self) -> None:
        """Kill survivors and remove what the session created."""

    def metadata(self) -> dict:
        return {"backend": self.backend, "enforced": self.enforced,
                "cgroup_dir": None if self.cgroup_dir is None else str(self.cgroup_dir),
                "cgroup_version": self.cgroup_version,
                "limit_bytes": self.request.limit_bytes, "swap_bytes": self.request.swap_bytes,
                **self.notes}

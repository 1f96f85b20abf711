"""``cgroup2``: a fresh child cgroup per run under a delegated v2 root.

Limits as BenchExec sets them (memory.max, memory.swap.max, memory.oom.group=1 so an OOM
kills the whole run), the child joins before exec, and the cgroup is killed and removed at
the end.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

from engine.limits import cgroupfs as fs
from engine.limits.base import LimitRequest, Session


def oom_kill_count(cg: Path) -> int:
    """Processes OOM-killed in ``cg`` itself: memory.events.local, as BenchExec reads it, so
    OOMs in nested child cgroups do not count; memory.events on kernels without it."""
    text = fs.read_optional(cg / "memory.events.local")
    if text is None:
        text = fs.read_optional(cg / "memory.events")
    return fs.parse_keyed(text).get("oom_kill", 0)


def limit_reached(cg: Path) -> bool:
    """memory.peak at memory.max, or the kernel counted an attempt to exceed memory.max."""
    limit_text = fs.read_optional(cg / "memory.max")
    peak_text = fs.read_optional(cg / "memory.peak")
    limit = fs.parse_limit(limit_text) if limit_text else None
    if limit is not None and peak_text and int(peak_text) >= limit:
        return True
    return fs.parse_keyed(fs.read_optional(cg / "memory.events")).get("max", 0) > 0


def features(cg: Path, kernel: tuple[int, int]) -> dict[str, bool]:
    """Which counters this kernel gives (decides what CgroupCounters can window)."""
    has_peak = (cg / "memory.peak").is_file()
    return {"memory_peak": has_peak,
            "peak_fd_reset": has_peak and kernel >= (6, 12),
            "swap_peak": (cg / "memory.swap.peak").is_file(),
            "swap_accounting": (cg / "memory.swap.max").is_file(),
            "events_local": (cg / "memory.events.local").is_file(),
            "cgroup_kill": (cg / "cgroup.kill").is_file(),
            "pressure": (cg / "memory.pressure").is_file()}


class Cgroup2Session(Session):
    backend = "cgroup2"
    cgroup_version = 2

    def __init__(self, request: LimitRequest, run_id: str, root: Path,
                 kernel: tuple[int, int] | None = None) -> None:
        super().__init__(request)
        if "memory" not in fs.controllers(root):
            raise fs.CgroupError(
                f"cgroup2: the memory controller is not available in {root}/cgroup.controllers"
                f" (it is not delegated here, or bound to a v1 hierarchy); delegate a subtree"
                f" with it and set {fs.ROOT_ENV}, or use --backend systemd/vm/none")
        _enable_memory(root)
        cg = root / f"{fs.RUN_PREFIX}{run_id}"
        fs.make_cgroup(cg)
        self.cgroup_dir = cg
        self._closed = False
        try:
            self._configure(cg)
        except BaseException:
            fs.remove_cgroup(cg)  # still empty: nothing has joined yet
            raise
        self.notes.update(root=str(root),
                          features=features(cg, kernel or fs.kernel_version()))

    def _configure(self, cg: Path) -> None:
        req = self.request
        if req.ram_bytes is not None:
            fs.write_value(cg / "memory.max", req.ram_bytes)
        if req.swap_bytes is not None:
            if (cg / "memory.swap.max").is_file():
                fs.write_value(cg / "memory.swap.max", req.swap_bytes)
                self.notes["swap_limited"] = True
            else:
                # without swap accounting the kernel charges no swap to the cgroup at all
                self.notes["swap_limited"] = False
                self.notes["swap_reason"] = ("no memory.swap.max: kernel without swap "
                                             "accounting; swap is not limited")
        fs.write_value(cg / "memory.oom.group", 1)
        self.enforced = req.ram_bytes is not None
        # the kernel rounds limits to pages: record what it actually applied
        self.notes["memory_max"] = fs.parse_limit(fs.read_text(cg / "memory.max"))
        swap_text = fs.read_optional(cg / "memory.swap.max")
        self.notes["memory_swap_max"] = fs.parse_limit(swap_text) if swap_text else None

    def preexec(self) -> Callable[[], None]:
        return fs.join_preexec([self.cgroup_dir / "cgroup.procs"])

    def oom_kills(self) -> int:
        return oom_kill_count(self.cgroup_dir)

    def hit_limit(self) -> bool:
        return limit_reached(self.cgroup_dir)

    def kill_all(self) -> None:
        cg = self.cgroup_dir
        if self._closed or not cg.is_dir():
            return
        if (cg / "cgroup.kill").is_file():  # Linux >= 5.14: the kernel kills the subtree
            fs.write_value(cg / "cgroup.kill", 1)
            return
        # freeze first so no process can fork or exit (and free its PID) while we kill
        fs.write_value(cg / "cgroup.freeze", 1)
        try:
            fs.sigkill_pids(fs.subtree_bottom_up(cg))
        finally:
            fs.write_value(cg / "cgroup.freeze", 0)

    def close(self) -> None:
        if self._closed:
            return
        self.kill_all()
        self._closed = True
        dirs = fs.subtree_bottom_up(self.cgroup_dir) if self.cgroup_dir.is_dir() else []
        fs.wait_empty(dirs)
        problem = fs.remove_subtree(self.cgroup_dir)
        if problem:
            warnings.warn(f"cgroup2: {problem}", stacklevel=2)


def _enable_memory(root: Path) -> None:
    """Children of ``root`` get memory.* files only if root's subtree_control has memory."""
    if "memory" in fs.read_text(root / "cgroup.subtree_control").split():
        return
    try:
        fs.write_value(root / "cgroup.subtree_control", "+memory")
    except fs.CgroupError as exc:
        raise fs.CgroupError(
            f"cgroup2: {exc}; a cgroup with processes of its own cannot enable controllers "
            f"for children (no-internal-processes rule): set {fs.ROOT_ENV} to an empty "
            f"delegated cgroup") from None

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

V2 = fs.CgroupV2Reader


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
        self._reader = V2(cg)
        self._closed = False
        try:
            self._configure(cg)
        except BaseException:
            fs.remove_cgroup(cg)  # still empty: nothing has joined yet
            raise
        self.notes.update(root=str(root),
                          features=self._reader.features(kernel or fs.kernel_version()))

    def _configure(self, cg: Path) -> None:
        req = self.request
        if req.limit_bytes is not None:
            fs.write_value(cg / V2.LIMIT, req.limit_bytes)
        if req.swap_bytes is not None:
            if self._reader.has(V2.SWAP_LIMIT):
                fs.write_value(cg / V2.SWAP_LIMIT, req.swap_bytes)
                self.notes["swap_limited"] = True
            else:
                # without swap accounting the kernel charges no swap to the cgroup at all
                self.notes["swap_limited"] = False
                self.notes["swap_reason"] = (f"no {V2.SWAP_LIMIT}: kernel without swap "
                                             f"accounting; swap is not limited")
        fs.write_value(cg / V2.OOM_GROUP, 1)
        self.enforced = req.limit_bytes is not None
        # the kernel rounds limits to pages: record what it actually applied
        self.notes["memory_max"] = self._reader.limit()
        self.notes["memory_swap_max"] = self._reader.swap_limit()

    def preexec(self) -> Callable[[], None]:
        return fs.join_preexec([self.cgroup_dir / "cgroup.procs"])

    def oom_kills(self) -> int | None:
        return self._reader.oom_kill_count()

    def hit_limit(self) -> bool:
        return self._reader.limit_reached()

    def kill_all(self) -> None:
        cg = self.cgroup_dir
        if self._closed or not cg.is_dir():
            return
        if self._reader.has(V2.KILL):  # Linux >= 5.14: the kernel kills the subtree
            fs.write_value(cg / V2.KILL, 1)
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

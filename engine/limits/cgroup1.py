"""``cgroup1``: a fresh cgroup per run on a v1 memory hierarchy (EdgeCaffe's own setup:
``cgcreate -g memory:..``, limit_in_bytes, memsw.limit_in_bytes), optionally mirrored in a
v1 freezer hierarchy so survivors can be killed without racing forks."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from pathlib import Path

from engine.limits import cgroupfs as fs
from engine.limits.base import LimitRequest, Session

V1 = fs.CgroupV1Reader


class Cgroup1Session(Session):
    backend = "cgroup1"
    cgroup_version = 1

    def __init__(self, request: LimitRequest, run_id: str, root: Path,
                 freezer_root: Path | None = None) -> None:
        super().__init__(request)
        name = f"{fs.RUN_PREFIX}{run_id}"
        self.cgroup_dir = root / name
        self.freezer_dir = None if freezer_root is None else freezer_root / name
        self._reader = V1(self.cgroup_dir)
        self._closed = False
        fs.make_cgroup(self.cgroup_dir)
        try:
            if self.freezer_dir is not None:
                fs.make_cgroup(self.freezer_dir)
            self._configure(self.cgroup_dir)
        except BaseException:
            for d in (self.cgroup_dir, self.freezer_dir):
                if d is not None and d.is_dir():
                    fs.remove_cgroup(d)  # still empty: nothing has joined yet
            raise
        self.notes.update(root=str(root), freezer_dir=None if self.freezer_dir is None
                          else str(self.freezer_dir),
                          oom_kill_count=self._reader.oom_kill_count() is not None,
                          features=self._reader.features(fs.kernel_version()))

    def _configure(self, cg: Path) -> None:
        req = self.request
        if req.limit_bytes is not None:
            fs.write_value(cg / V1.LIMIT, req.limit_bytes)
        swap_reason = None
        if req.swap_bytes is None:
            swap_reason = "no swap limit requested"
        elif req.limit_bytes is None:
            swap_reason = "v1 limits swap only as RAM+swap; no RAM limit was requested"
        elif not self._reader.has(V1.MEMSW_LIMIT):
            swap_reason = (f"no {V1.MEMSW_LIMIT}: kernel without swap accounting "
                           f"(boot with swapaccount=1)")
        else:
            # memsw counts RAM+swap: the swap allowance sits on top of the RAM limit
            fs.write_value(cg / V1.MEMSW_LIMIT, req.limit_bytes + req.swap_bytes)
        self.notes["swap_limited"] = swap_reason is None
        if swap_reason:
            self.notes["swap_reason"] = swap_reason
        self.enforced = req.limit_bytes is not None
        # the kernel rounds limits to pages: record what it actually applied
        self.notes["limit_in_bytes"] = self._reader.limit()
        self.notes["memsw_limit_in_bytes"] = self._reader.memsw_limit()

    def _dirs(self) -> list[Path]:
        return [d for d in (self.cgroup_dir, self.freezer_dir) if d is not None]

    def preexec(self) -> Callable[[], None]:
        files = []
        for d in self._dirs():
            # cgroup.procs moves the whole process; very old hierarchies only have tasks
            procs = d / "cgroup.procs"
            files.append(procs if procs.is_file() else d / "tasks")
        return fs.join_preexec(files)

    def oom_kills(self) -> int | None:
        # v1 counts OOM kills only since Linux 4.13: None before
        return self._reader.oom_kill_count()

    def hit_limit(self) -> bool:
        # the OOM fallback for kernels without an oom_kill count
        return self._reader.limit_reached()

    def kill_all(self) -> None:
        if self._closed or not self.cgroup_dir.is_dir():
            return
        dirs = [d for cg in self._dirs() for d in fs.subtree_bottom_up(cg)]
        if self.freezer_dir is None:
            # no freezer: a process may fork between our read and our kill, so repeat
            for _ in range(50):
                if not fs.sigkill_pids(dirs):
                    return
                time.sleep(0.01)
            return
        state = self.freezer_dir / "freezer.state"
        fs.write_value(state, "FROZEN")
        try:
            deadline = time.monotonic() + 1.0
            while fs.read_text(state).strip() != "FROZEN" and time.monotonic() < deadline:
                time.sleep(0.005)
            fs.sigkill_pids(dirs)
        finally:
            fs.write_value(state, "THAWED")  # frozen tasks die only once thawed

    def close(self) -> None:
        if self._closed:
            return
        self.kill_all()
        self._closed = True
        dirs = [d for cg in self._dirs() if cg.is_dir() for d in fs.subtree_bottom_up(cg)]
        fs.wait_empty(dirs)
        for cg in self._dirs():
            problem = fs.remove_subtree(cg)
            if problem:
                warnings.warn(f"cgroup1: {problem}", stacklevel=2)

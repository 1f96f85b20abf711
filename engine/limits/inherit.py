"""``inherit``: the limit someone else already set on this process's cgroup (a SLURM job's
``--mem``, a container's memory limit). Reads only; never writes a cgroup file, so the
run shares the cgroup (and its counters) with the supervisor itself."""

from __future__ import annotations

from pathlib import Path

from engine.limits import cgroupfs as fs
from engine.limits.base import LimitRequest, Session


def effective_limit(own: fs.OwnCgroup) -> tuple[int | None, Path | None]:
    """The tightest memory limit over the cgroup and its ancestors, and where it is set.
    Limits are hierarchical, so a parent's limit binds the child too."""
    if own.version == 1:
        # v1 computes this itself (hierarchical_memory_limit), no walk needed
        stat = fs.parse_keyed(fs.read_optional(own.path / "memory.stat"))
        if "hierarchical_memory_limit" in stat:
            limit = stat["hierarchical_memory_limit"]
            return (None, None) if limit >= fs.V1_UNLIMITED else (limit, own.path)
    name = "memory.max" if own.version == 2 else "memory.limit_in_bytes"
    best: tuple[int | None, Path | None] = (None, None)
    path = own.path
    while True:
        text = fs.read_optional(path / name)  # the root cgroup has no limit file
        limit = fs.parse_limit(text) if text else None
        if limit is not None and (best[0] is None or limit < best[0]):
            best = (limit, path)
        if path == own.mount.mount_point or path.parent == path:
            return best
        path = path.parent


class InheritSession(Session):
    backend = "inherit"

    def __init__(self, request: LimitRequest, mountinfo: Path = fs.PROC_MOUNTINFO,
                 proc_cgroup: Path = fs.PROC_CGROUP) -> None:
        super().__init__(request)
        own = fs.own_cgroup("memory", mountinfo, proc_cgroup)
        if own is None:
            raise fs.CgroupError(f"inherit: this process's memory cgroup is not visible "
                                 f"({proc_cgroup} vs. the mounts in {mountinfo})")
        self.cgroup_dir = own.path
        self.cgroup_version = own.version
        limit, where = effective_limit(own)
        self.limit_bytes = limit
        # A run labelled with a limit must never have had more memory than that: a looser
        # inherited limit leaves the requested one unenforced; a tighter one is noted.
        self.enforced = limit is not None and (request.ram_bytes is None
                                               or limit <= request.ram_bytes)
        self.notes.update(inherited_limit_bytes=limit,
                          limit_set_in=None if where is None else str(where),
                          requested_ram_bytes=request.ram_bytes)
        if limit is None:
            self.notes["unenforced_reason"] = f"no finite memory limit on {own.path} or above"
        elif not self.enforced:
            self.notes["unenforced_reason"] = (
                f"the inherited limit ({limit} bytes, set in {where}) is above the requested "
                f"{request.ram_bytes} bytes; ask the scheduler for exactly the limit "
                f"(SLURM --mem)")
        elif request.ram_bytes is not None and request.ram_bytes != limit:
            self.notes["limit_mismatch"] = (f"requested {request.ram_bytes} bytes, the "
                                            f"inherited limit is {limit} bytes")
        self._base = self._counts()

    def _counts(self) -> dict[str, int]:
        """Cumulative OOM-kill and limit-hit counters; the run's share is the delta."""
        cg = self.cgroup_dir
        if self.cgroup_version == 2:
            events = fs.parse_keyed(fs.read_optional(cg / "memory.events"))
            return {"oom_kill": events.get("oom_kill", 0), "limit": events.get("max", 0)}
        oom = fs.parse_keyed(fs.read_optional(cg / "memory.oom_control"))
        failcnt = fs.read_optional(cg / "memory.failcnt")
        return {"oom_kill": oom.get("oom_kill", 0), "limit": int(failcnt) if failcnt else 0}

    def oom_kills(self) -> int:
        return self._counts()["oom_kill"] - self._base["oom_kill"]

    def hit_limit(self) -> bool:
        return self.enforced and self._counts()["limit"] > self._base["limit"]

    # kill_all/close stay no-ops: the cgroup holds the supervisor too; the supervisor kills
    # the run's process group itself.

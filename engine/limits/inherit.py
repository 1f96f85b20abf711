"""``inherit``: the limit someone else already set on this process's cgroup (a SLURM job's
``--mem``, a container's memory limit). Reads only; never writes a cgroup file, so the
run shares the cgroup (and its counters) with the supervisor itself."""

from __future__ import annotations

from pathlib import Path

from engine.limits import cgroupfs as fs
from engine.limits.base import LimitRequest, Session


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
        self._reader = fs.reader_for(own.path, own.version)
        limit, where = self._reader.effective_limit(own.mount.mount_point)
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

    def _counts(self) -> dict[str, int | None]:
        """Cumulative OOM-kill and limit-hit counters (None where the kernel has none); the
        run's share is the delta."""
        events = self._reader.events()
        return {"oom_kill": events.get("oom_kill"),
                "limit": events.get(self._reader.LIMIT_EVENT)}

    def _delta(self, key: str) -> int | None:
        before, now = self._base[key], self._counts()[key]
        return None if before is None or now is None else now - before

    def oom_kills(self) -> int | None:
        return self._delta("oom_kill")

    def hit_limit(self) -> bool:
        hits = self._delta("limit")
        return self.enforced and hits is not None and hits > 0

    # kill_all/close stay no-ops: the cgroup holds the supervisor too; the supervisor kills
    # the run's process group itself.

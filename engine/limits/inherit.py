"""``inherit``: the limit someone else already set on this process's cgroup (a SLURM job
step's ``--mem``, a container's memory limit). Reads only; never writes a cgroup file.

Two separate questions, each recorded in meta.json's ``limits``:

- **Is the requested limit enforced?** Only when a finite limit at most the requested one
  binds this process (on its cgroup or an ancestor). When none does (SLURM without cgroup
  plugins, SLURM's default) or it is looser, the run is recorded with
  ``limit_enforced: false`` and ``unenforced_reason``; that is never an error.
- **Are the cgroup counters the run's?** Only when this process's cgroup (with its child
  cgroups) holds this process alone when the run starts, and the requested limit binds
  it: e.g. the engine started as its own ``srun --mem=<limit>`` step. Otherwise the
  counters would mix in other processes (a whole node's, or Snakemake's), so the session
  has no ``cgroup_dir``: every cgroup column is null (not measured) and
  ``cgroup_counters_not_measured`` says why.

The measured child gets ``oom_score_adj`` 1000, so an OOM in a cgroup it shares with the
supervisor and sampler kills the child, and the supervisor lives to record termination
``memory``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from engine.limits import cgroupfs as fs
from engine.limits.base import LimitRequest, Session

OOM_SCORE_ADJ = b"1000"  # raising one's own score needs no privilege


def _oom_first() -> None:
    """preexec: make the measured child the OOM killer's first choice (os calls only)."""
    try:
        fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
    except OSError:
        return
    try:
        os.write(fd, OOM_SCORE_ADJ)
    except OSError:
        pass
    finally:
        os.close(fd)


def _ours(pid: int, me: int) -> bool:
    """``pid`` is this process or one of its threads (a v1 ``tasks`` file lists threads)."""
    return pid == me or (me == os.getpid() and Path(f"/proc/self/task/{pid}").exists())


def foreign_processes(cgroup: Path, me: int) -> list[int]:
    """PIDs in ``cgroup`` and its child cgroups other than ``me``."""
    found = []
    for d in fs.subtree_bottom_up(cgroup):
        try:
            found += [p for p in fs.procs(d) if not _ours(p, me)]
        except OSError:  # a child cgroup removed meanwhile
            continue
    return sorted(set(found))


def _describe(pids: list[int], limit: int = 3) -> str:
    names = []
    for pid in pids[:limit]:
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            comm = "?"
        names.append(f"{pid} ({comm})")
    more = f" and {len(pids) - limit} more" if len(pids) > limit else ""
    return ", ".join(names) + more


def open_inherit(request: LimitRequest, mountinfo: Path = fs.PROC_MOUNTINFO,
                 proc_cgroup: Path = fs.PROC_CGROUP) -> Session:
    """An inherit session; where no memory cgroup is visible at all, one that records why
    (nothing to inherit is a fact about the host, never an error)."""
    try:
        return InheritSession(request, mountinfo, proc_cgroup)
    except fs.CgroupError as exc:
        return NoCgroupSession(request, str(exc))


class NoCgroupSession(Session):
    """inherit where this process's memory cgroup cannot be seen: no limit, no counters."""

    backend = "inherit"

    def __init__(self, request: LimitRequest, why: str) -> None:
        super().__init__(request)
        self.notes.update(unenforced_reason=why, cgroup_counters_not_measured=why)


class InheritSession(Session):
    backend = "inherit"

    def __init__(self, request: LimitRequest, mountinfo: Path = fs.PROC_MOUNTINFO,
                 proc_cgroup: Path = fs.PROC_CGROUP, pid: int | None = None) -> None:
        super().__init__(request)
        own = fs.own_cgroup("memory", mountinfo, proc_cgroup)
        if own is None:
            raise fs.CgroupError(f"inherit: this process's memory cgroup is not visible "
                                 f"({proc_cgroup} vs. the mounts in {mountinfo})")
        me = os.getpid() if pid is None else pid
        self._own = own.path
        self._own_reader = fs.reader_for(own.path, own.version)
        limit, where = self._own_reader.effective_limit(own.mount.mount_point)
        if limit is not None:
            where = self._nearest_with(own, limit) or where
        self.limit_bytes = limit
        # A run labelled with a limit must never have had more memory than that: a looser
        # inherited limit leaves the requested one unenforced; a tighter one is noted.
        self.enforced = limit is not None and (request.limit_bytes is None
                                               or limit <= request.limit_bytes)
        self.notes.update(inherited_limit_bytes=limit,
                          limit_set_in=None if where is None else str(where),
                          requested_ram_bytes=request.limit_bytes, own_cgroup=str(own.path))
        if limit is None:
            self.notes["unenforced_reason"] = (
                f"no finite memory limit on {own.path} or above (a scheduler that does not "
                f"enforce memory, e.g. SLURM without task/cgroup)")
        elif not self.enforced:
            self.notes["unenforced_reason"] = (
                f"the inherited limit ({limit} bytes, set in {where}) is above the requested "
                f"{request.limit_bytes} bytes; ask the scheduler for exactly the limit "
                f"(SLURM --mem)")
        elif request.limit_bytes is not None and request.limit_bytes != limit:
            self.notes["limit_mismatch"] = (f"requested {request.limit_bytes} bytes, the "
                                            f"inherited limit is {limit} bytes")
        # the cgroup that carries the limit: where hitting it is counted
        self._limit_reader = (fs.reader_for(where, own.version)
                              if self.enforced and where is not None else None)
        if self.enforced and where is not None and where != own.path:
            shared = foreign_processes(where, me)
            shared = [p for p in shared if p not in set(foreign_processes(own.path, me))]
            if shared:
                self.notes["limit_shared_with"] = (
                    f"{len(shared)} other process(es) in {where}, outside this run's "
                    f"cgroup: {_describe(shared)}")
        why = self._why_not_measured(own, me, request)
        if why is None:
            self.cgroup_dir, self.cgroup_version = own.path, own.version
            self.notes["cgroup_counters"] = f"measured in {own.path}"
        else:
            self.notes["cgroup_counters_not_measured"] = why
        self._base = self._counts()

    def _why_not_measured(self, own: fs.OwnCgroup, me: int,
                          request: LimitRequest) -> str | None:
        """Why this cgroup's counters would not be the run's alone (None: they are)."""
        if request.limit_bytes is not None and not self.enforced:
            return f"the requested limit is not enforced: {self.notes['unenforced_reason']}"
        if own.path == own.mount.mount_point:
            return f"this process is in the root cgroup ({own.path}): the whole machine's"
        others = foreign_processes(own.path, me)
        if others:
            return (f"{own.path} holds {len(others)} other process(es) besides this run "
                    f"({_describe(others)}); run the engine in a cgroup of its own (its own "
                    f"SLURM job step: srun --mem=<limit>)")
        return None

    @staticmethod
    def _nearest_with(own: fs.OwnCgroup, limit: int) -> Path | None:
        """The cgroup nearest to ours, from ours up, whose own limit is ``limit`` (v1's
        hierarchical_memory_limit says the value but not where it is set)."""
        path = own.path
        while True:
            if fs.reader_for(path, own.version).limit() == limit:
                return path
            if path == own.mount.mount_point or path.parent == path:
                return None
            path = path.parent

    def preexec(self) -> Callable[[], None] | None:
        return _oom_first

    def _counts(self) -> dict[str, int | None]:
        """Cumulative OOM-kill counter of the run's own cgroup (only when its counters are
        the run's) and limit-hit counter of the cgroup with the limit (None where there is
        none); the run's share is the delta."""
        out: dict[str, int | None] = {"oom_kill": None, "limit": None}
        if self.cgroup_dir is not None:
            out["oom_kill"] = self._own_reader.events().get("oom_kill")
        if self._limit_reader is not None:
            out["limit"] = self._limit_reader.events().get(self._limit_reader.LIMIT_EVENT)
        return out

    def _delta(self, key: str) -> int | None:
        before, now = self._base[key], self._counts()[key]
        return None if before is None or now is None else now - before

    def oom_kills(self) -> int | None:
        return self._delta("oom_kill")

    def hit_limit(self) -> bool:
        hits = self._delta("limit")
        return self.enforced and hits is not None and hits > 0

    # kill_all/close stay no-ops: the cgroup is not ours; the supervisor kills the run's
    # process group itself.

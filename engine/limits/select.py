"""Opening a named backend, and ``auto``'s choice among them.

``auto`` tries, in order: (a) the cgroup root the user designated with
``EDGEPROF_CGROUP_ROOT``; (b) a systemd user manager; (c) a finite limit inherited from
the process's own cgroup; (d) when a limit is asked for, the uml backend if a user-mode
Linux kernel is built and works here, else the vm backend if qemu is installed; (e) no
limit, marked unenforced with the reason. It never
creates a cgroup outside the designated root, and without one it writes nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from engine.errors import EdgeprofError
from engine.limits import cgroupfs as fs
from engine.limits.base import LimitRequest, Session
from engine.limits.cgroup1 import Cgroup1Session
from engine.limits.cgroup2 import Cgroup2Session
from engine.limits.inherit import InheritSession, open_inherit
from engine.limits.none import NoneSession
from engine.limits.sandbox import QEMU, QemuSession, UmlSession, qemu_installed, uml_status
from engine.limits.systemd import SystemdSession, user_manager_status

_ALTERNATIVES = "or use --backend systemd/vm/none"


def open_backend(backend: str, request: LimitRequest, run_id: str,
                 allow_unenforced: bool = False, *, env: Mapping[str, str] | None = None,
                 mountinfo: Path = fs.PROC_MOUNTINFO,
                 proc_cgroup: Path = fs.PROC_CGROUP) -> Session:
    """A session for ``backend`` (any of BACKENDS but "none"). Raises EdgeprofError naming
    the problem and the fix when the backend is unusable here, or when a RAM limit was
    requested, cannot be enforced, and ``allow_unenforced`` is False. ``inherit`` never
    raises for that: it applies no limit, it only finds one or not, so a limit it cannot
    find is recorded (``enforced`` False and the reason), as under ``auto``."""
    env = os.environ if env is None else env
    if backend == "auto":
        session = _auto(request, run_id, allow_unenforced, env, mountinfo, proc_cgroup)
    elif backend in ("cgroup2", "cgroup1"):
        version = int(backend[-1])
        root = _cgroup_root(version, env, mountinfo, proc_cgroup)
        session = _cgroup_session(version, request, run_id, root, env)
    elif backend == "systemd":
        ok, why = user_manager_status(env, mountinfo)
        if not ok:
            raise EdgeprofError(f"systemd: {why}; use --backend cgroup2 with {fs.ROOT_ENV}, "
                                f"inherit, vm or none")
        session = SystemdSession(request, run_id, allow_unenforced)
    elif backend == "inherit":
        return open_inherit(request, mountinfo, proc_cgroup)
    else:
        raise EdgeprofError(f"unknown limit backend '{backend}'")
    if request.limit_bytes is not None and not session.enforced and not allow_unenforced:
        reason = session.notes.get("unenforced_reason", "no limit could be set")
        session.close()
        raise EdgeprofError(
            f"{session.backend}: a RAM limit of {request.limit_bytes} bytes was requested but "
            f"cannot be enforced: {reason}. Set {fs.ROOT_ENV} to a delegated cgroup "
            f"directory, use --backend systemd or vm, or run without --limit")
    return session


def _cgroup_session(version: int, request: LimitRequest, run_id: str, root: Path,
                    env: Mapping[str, str]) -> Session:
    if version == 2:
        return Cgroup2Session(request, run_id, root)
    freezer = env.get(fs.FREEZER_ENV)
    return Cgroup1Session(request, run_id, root, Path(freezer) if freezer else None)


def _cgroup_root(version: int, env: Mapping[str, str], mountinfo: Path,
                 proc_cgroup: Path) -> Path:
    """Where an explicitly chosen cgroup1/cgroup2 backend creates its run cgroup: the
    designated root, else next to (v2) or under (v1) the process's own cgroup."""
    name = f"cgroup{version}"
    designated = fs.designated_root(env)
    if designated is not None:
        _check_designated(designated, version)
        return designated
    own = fs.own_cgroup("memory", mountinfo, proc_cgroup)
    if own is None:
        raise EdgeprofError(f"{name}: no memory cgroup hierarchy is visible to this process "
                            f"(see {mountinfo}); {_ALTERNATIVES}")
    if own.version != version:
        raise EdgeprofError(f"{name}: the memory controller is on cgroup v{own.version} "
                            f"here, not v{version}; use --backend cgroup{own.version}, "
                            f"{_ALTERNATIVES}")
    # v2 forbids processes in a cgroup whose children use controllers, so the run cgroup
    # becomes a sibling of ours (the root cgroup is exempt); v1 allows nesting under it.
    root = own.path
    if version == 2 and own.path != own.mount.mount_point:
        root = own.path.parent
    procs = root / "cgroup.procs"
    if not fs.writable(root) or not os.access(procs, os.W_OK):
        raise EdgeprofError(f"{name}: {root} is not writable by uid {os.getuid()}; delegate "
                            f"a subtree and set {fs.ROOT_ENV}=<that directory>, "
                            f"{_ALTERNATIVES}")
    return root


def _check_designated(root: Path, version: int | None) -> int:
    """The cgroup version of ``root``, once it is known to be a writable cgroup directory
    of ``version`` (None: either)."""
    where = f"{fs.ROOT_ENV}={root}"
    if not root.is_dir():
        raise EdgeprofError(f"{where} does not exist; create and delegate it, or unset it")
    found = fs.dir_version(root)
    if found is None:
        raise EdgeprofError(f"{where} is not a cgroup directory (no cgroup.controllers or "
                            f"memory.limit_in_bytes in it); point it at a delegated cgroup")
    if version is not None and found != version:
        raise EdgeprofError(f"{where} is a cgroup v{found} directory; use --backend "
                            f"cgroup{found} or auto")
    if not fs.writable(root):
        raise EdgeprofError(f"{where} is not writable by uid {os.getuid()}; delegate it "
                            f"(chown the directory and its cgroup.procs) or unset it")
    return found


def _auto(request: LimitRequest, run_id: str, allow_unenforced: bool,
          env: Mapping[str, str], mountinfo: Path, proc_cgroup: Path) -> Session:
    skipped = []
    session: Session | None = None
    designated = fs.designated_root(env)
    if designated is not None:
        # the user designated it: a broken root is an error, not a silent fallback
        version = _check_designated(designated, None)
        session = _cgroup_session(version, request, run_id, designated, env)
    else:
        skipped.append(f"cgroup: {fs.ROOT_ENV} is unset (no delegated cgroup designated)")
    if session is None:
        ok, why = user_manager_status(env, mountinfo)
        if ok:
            session = SystemdSession(request, run_id, allow_unenforced)
        else:
            skipped.append(f"systemd: {why}")
    if session is None:
        try:
            inherited = InheritSession(request, mountinfo, proc_cgroup)
        except fs.CgroupError as exc:
            skipped.append(f"inherit: {exc}")
        else:
            if inherited.enforced:
                session = inherited
            else:
                skipped.append(f"inherit: {inherited.notes['unenforced_reason']}")
    if session is None and request.limit_bytes is not None:
        ok, why = uml_status()
        if ok:
            session = UmlSession(request)
        else:
            skipped.append(f"uml: {why}")
    if session is None and request.limit_bytes is not None:
        if qemu_installed():
            session = QemuSession(request)
        else:
            skipped.append(f"vm: {QEMU} is not installed (apt-get install qemu-system-x86)")
    if session is None:
        session = NoneSession(request)
        session.notes["unenforced_reason"] = (
            f"no delegated cgroup ({fs.ROOT_ENV} unset), no usable systemd user manager and "
            f"no inherited memory limit; set {fs.ROOT_ENV} or use the vm backend")
    session.notes["auto"] = {"chosen": session.backend, "skipped": skipped}
    return session

"""Finding and touching cgroup filesystems.

Everything that locates a cgroup takes the ``/proc`` files as parameters so tests can hand
in fake ones. The only write primitives are ``write_value`` and ``remove_cgroup``; the
backends call them only on cgroups they created under a root the user designated.
"""

from __future__ import annotations

import os
import platform
import re
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from engine.errors import EdgeprofError

ROOT_ENV = "EDGEPROF_CGROUP_ROOT"  # delegated dir under which run cgroups are created
FREEZER_ENV = "EDGEPROF_CGROUP_FREEZER_ROOT"  # optional v1 freezer dir for reliable kills
PROC_MOUNTINFO = Path("/proc/self/mountinfo")
PROC_CGROUP = Path("/proc/self/cgroup")
RUN_PREFIX = "edgeprof-"  # every cgroup this project creates is named so
# v1 reports "no limit" as PAGE_COUNTER_MAX pages (9223372036854771712 with 4 KiB pages)
V1_UNLIMITED = 2**62


class CgroupError(EdgeprofError):
    """A cgroup file that could not be read or written; the message names file and fix."""


@dataclass(frozen=True)
class Mount:
    mount_point: Path
    root: str  # the hierarchy path mounted there ("/" unless a namespace or bind mount)
    fstype: str  # "cgroup" (v1) or "cgroup2"
    super_options: frozenset[str]  # v1: the controllers bound to this hierarchy

    @property
    def version(self) -> int:
        return 2 if self.fstype == "cgroup2" else 1


@dataclass(frozen=True)
class OwnCgroup:
    """The process's cgroup in the hierarchy that carries the memory controller."""

    path: Path  # directory under the mount point
    version: int
    mount: Mount


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(path: Path = PROC_MOUNTINFO) -> list[Mount]:
    """cgroup and cgroup2 mounts listed in a ``/proc/<pid>/mountinfo`` file."""
    mounts = []
    for line in read_text(path).splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        mounts.append(Mount(Path(_unescape(fields[4])), _unescape(fields[3]), tail[0],
                            frozenset(tail[2].split(","))))
    return mounts


def parse_proc_cgroup(path: Path = PROC_CGROUP) -> dict[str, str]:
    """``/proc/<pid>/cgroup`` as controller -> path; the v2 line ``0::/p`` is key ``""``.
    A v1 line naming several controllers (``cpu,cpuacct``) gives one key per controller."""
    out = {}
    for line in read_text(path).splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            out[""] = parts[2]
        else:
            for name in parts[1].split(","):
                out[name] = parts[2]
    return out


def _under_mount(mount: Mount, cg_path: str) -> Path | None:
    """Where ``cg_path`` (as /proc/self/cgroup shows it) lives under ``mount``."""
    rel = os.path.relpath(cg_path, mount.root)
    if rel == ".":
        return mount.mount_point
    if rel.startswith(".."):  # outside what this mount shows (another namespace)
        return None
    return mount.mount_point / rel


def own_cgroup(controller: str = "memory", mountinfo: Path = PROC_MOUNTINFO,
               proc_cgroup: Path = PROC_CGROUP) -> OwnCgroup | None:
    """The process's cgroup for ``controller``: the v1 hierarchy that has it bound, else the
    unified (v2) one. None when neither is mounted or visible here."""
    mounts = parse_mountinfo(mountinfo)
    paths = parse_proc_cgroup(proc_cgroup)
    if controller in paths:  # a v1 hierarchy owns the controller (hybrid or legacy mode)
        for mount in mounts:
            if mount.version == 1 and controller in mount.super_options:
                where = _under_mount(mount, paths[controller])
                if where is not None:
                    return OwnCgroup(where, 1, mount)
    if "" in paths:
        for mount in mounts:
            if mount.version == 2:
                where = _under_mount(mount, paths[""])
                if where is not None:
                    return OwnCgroup(where, 2, mount)
    return None


def v1_mount(controller: str, mountinfo: Path = PROC_MOUNTINFO) -> Mount | None:
    for mount in parse_mountinfo(mountinfo):
        if mount.version == 1 and controller in mount.super_options:
            return mount
    return None


def v2_mount(mountinfo: Path = PROC_MOUNTINFO) -> Mount | None:
    for mount in parse_mountinfo(mountinfo):
        if mount.version == 2:
            return mount
    return None


def dir_version(path: Path) -> int | None:
    """2 for a cgroup v2 directory, 1 for a v1 memory-controller directory, else None.
    Decided by the interface files (as the kernel names them), so it works on any mount."""
    if (path / "cgroup.controllers").is_file():
        return 2
    if (path / "memory.limit_in_bytes").is_file():
        return 1
    return None


def controllers(path: Path) -> set[str]:
    """Controllers available in a v2 cgroup (its ``cgroup.controllers``)."""
    return set(read_text(path / "cgroup.controllers").split())


def writable(path: Path) -> bool:
    return os.access(path, os.W_OK | os.X_OK)


def designated_root(env: Mapping[str, str]) -> Path | None:
    value = env.get(ROOT_ENV)
    return Path(value) if value else None


def kernel_version(release: str | None = None) -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", release or platform.release())
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def read_text(path: Path) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError as exc:
        raise CgroupError(f"cannot read {path}: {exc.strerror or exc}") from None


def read_optional(path: Path) -> str | None:
    """The file's text, or None if it does not exist (an older kernel or a missing
    controller)."""
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CgroupError(f"cannot read {path}: {exc.strerror or exc}") from None


def parse_limit(text: str) -> int | None:
    """A limit or counter value; None for v2 "max" and v1's "unlimited" sentinel."""
    text = text.strip()
    if text == "max":
        return None
    value = int(text)
    return None if value >= V1_UNLIMITED else value


def parse_keyed(text: str | None) -> dict[str, int]:
    """Flat keyed files (memory.stat, memory.events, memory.oom_control): "key value" lines."""
    if not text:
        return {}
    words = text.split()
    return {k: int(v) for k, v in zip(words[::2], words[1::2]) if v.lstrip("-").isdigit()}


def parse_psi(text: str | None) -> dict[str, int]:
    """``memory.pressure`` as {"some": total_us, "full": total_us}."""
    out = {}
    for line in (text or "").splitlines():
        kind, _, rest = line.partition(" ")
        m = re.search(r"\btotal=(\d+)", rest)
        if m:
            out[kind] = int(m.group(1))
    return out


def write_value(path: Path, value: str | int) -> None:
    """Write one value to a cgroup interface file (one write call, as the kernel wants)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    except OSError as exc:
        raise CgroupError(_write_problem(path, exc)) from None
    try:
        os.write(fd, str(value).encode())
    except OSError as exc:
        raise CgroupError(f"cannot write {value!r} to {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _write_problem(path: Path, exc: OSError) -> str:
    if isinstance(exc, PermissionError):
        return (f"cannot write {path}: permission denied for uid {os.getuid()}; the cgroup "
                f"subtree must be delegated to this user (set {ROOT_ENV} to a delegated "
                f"directory)")
    if isinstance(exc, FileNotFoundError):
        return f"cannot write {path}: no such file (controller not enabled here?)"
    return f"cannot write {path}: {exc.strerror or exc}"


def remove_cgroup(path: Path) -> None:
    """Remove a cgroup. On cgroupfs a directory's interface files are virtual, so a plain
    rmdir is all it takes (and all that is ever right: it fails while processes remain)."""
    os.rmdir(path)


def procs(path: Path) -> list[int]:
    """PIDs in a cgroup (``cgroup.procs``, or ``tasks`` on a v1 hierarchy without it)."""
    text = read_optional(path / "cgroup.procs")
    if text is None:
        text = read_optional(path / "tasks") or ""
    return [int(p) for p in text.split()]


def subtree_bottom_up(path: Path) -> list[Path]:
    """``path`` and its child cgroups, deepest first (the order rmdir needs)."""
    dirs = [Path(d) for d, _, _ in os.walk(path)]
    return sorted(dirs, key=lambda p: len(p.parts), reverse=True)


def make_cgroup(path: Path) -> None:
    """Create a cgroup (the kernel fills in its interface files)."""
    try:
        os.mkdir(path)
    except FileExistsError:
        raise CgroupError(f"{path} already exists; a run with this id is live or was left "
                          f"behind (rmdir it once it holds no processes)") from None
    except OSError as exc:
        raise CgroupError(_write_problem(path, exc)) from None


def join_preexec(procs_files: list[Path]) -> Callable[[], None]:
    """A preexec_fn that moves the forked child into the cgroups before it execs, so the
    measured program never runs (or allocates) outside them. Writing "0" means "the
    writing process" to the kernel; only os-level calls run in the forked child."""
    targets = [os.fsencode(p) for p in procs_files]

    def join() -> None:
        for target in targets:
            try:
                fd = os.open(target, os.O_WRONLY)
                try:
                    os.write(fd, b"0")
                finally:
                    os.close(fd)
            except OSError as exc:
                # Popen only reports "Exception occurred in preexec_fn"; say which file
                os.write(2, b"edgeprof: cannot join cgroup via " + target + b": "
                         + str(exc.strerror).encode() + b"\n")
                raise

    return join


def sigkill_pids(dirs: list[Path]) -> int:
    """SIGKILL every process listed in ``dirs``; returns how many were signalled."""
    count = 0
    for d in dirs:
        for pid in procs(d):
            try:
                os.kill(pid, signal.SIGKILL)
                count += 1
            except ProcessLookupError:
                pass
    return count


def wait_empty(dirs: list[Path], timeout_s: float = 5.0) -> bool:
    """Poll until no process is left in ``dirs`` (killed processes take a moment to exit)."""
    deadline = time.monotonic() + timeout_s
    while any(d.is_dir() and procs(d) for d in dirs):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def remove_subtree(path: Path) -> str | None:
    """rmdir a run cgroup and its children; the problem as text if it failed."""
    if not path.is_dir():
        return None
    try:
        for d in subtree_bottom_up(path):
            remove_cgroup(d)
    except OSError as exc:
        return (f"could not remove {path}: {exc.strerror or exc}; rmdir it once its "
                f"processes are gone")
    return None

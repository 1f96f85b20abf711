"""Finding, reading and touching cgroup filesystems.

Everything that locates a cgroup takes the ``/proc`` files as parameters so tests can hand
in fake ones. ``CgroupV2Reader`` and ``CgroupV1Reader`` own every memory interface file:
its name and how it is parsed (``reader_for(path, version)`` picks one). The only write
primitives are ``write_value`` and ``remove_cgroup``; the backends call them only on
cgroups they created under a root the user designated.
"""

from __future__ import annotations

import os
import platform
import re
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from engine.errors import EdgeprofError

ROOT_ENV = "EDGEPROF_CGROUP_ROOT"  # delegated dir under which run cgroups are created
FREEZER_ENV = "EDGEPROF_CGROUP_FREEZER_ROOT"  # optional v1 freezer dir for reliable kills
PROC_MOUNTINFO = Path("/proc/self/mountinfo")
PROC_CGROUP = Path("/proc/self/cgroup")
RUN_PREFIX = "edgeprof-"  # every cgroup this project creates is named so
# v1 reports "no limit" as PAGE_COUNTER_MAX pages (9223372036854771712 with 4 KiB pages)
V1_UNLIMITED = 2**62
# the first Linux whose memory.peak keeps a peak per open file, reset by writing to that fd
PEAK_FD_RESET_KERNEL = (6, 12)
_READ_SIZE = 16384  # memory.stat is ~2-4 KiB; the other files are a line


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
    if not cg_path:  # a line cut short: no path to place
        return None
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
    if (path / CgroupV1Reader.LIMIT).is_file():
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
    except UnicodeDecodeError:
        raise CgroupError(f"{path} is not text; not a cgroup or /proc file") from None
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
    except UnicodeDecodeError:
        raise CgroupError(f"{path} is not text; not a cgroup file") from None
    except OSError as exc:
        raise CgroupError(f"cannot read {path}: {exc.strerror or exc}") from None


def parse_limit(text: str | None) -> int | None:
    """A limit or counter value; None for a missing or empty file, v2 "max" and v1's
    "unlimited" sentinel."""
    text = (text or "").strip()
    if not text or text == "max":
        return None
    try:
        value = int(text)
    except ValueError:
        raise CgroupError(f"{text[:40]!r} is not a cgroup counter or limit") from None
    return None if value >= V1_UNLIMITED else value


def parse_keyed(text: str | None) -> dict[str, int]:
    """Flat keyed files (memory.stat, memory.events, memory.oom_control): "key value" lines."""
    if not text:
        return {}
    words = text.split()
    out = {}
    for key, value in zip(words[::2], words[1::2]):
        # the kernel writes ASCII decimal; anything else is not a count: unknown
        if value.isascii() and value.removeprefix("-").isdigit():
            out[key] = int(value)
    return out


def parse_psi(text: str | None) -> dict[str, int]:
    """``memory.pressure`` as {"some": total_us, "full": total_us}."""
    out = {}
    for line in (text or "").splitlines():
        kind, _, rest = line.partition(" ")
        m = re.search(r"\btotal=(\d+)", rest)
        if m:
            out[kind] = int(m.group(1))
    return out


def pread_text(fd: int | None) -> str | None:
    """The whole file through a kept-open fd (a pread at offset 0 makes cgroupfs generate
    it afresh); None without an fd or if it cannot be read (memory.pressure with PSI
    disabled at boot exists but fails to read)."""
    if fd is None:
        return None
    try:
        data = os.pread(fd, _READ_SIZE, 0)
        while data and len(data) % _READ_SIZE == 0:
            more = os.pread(fd, _READ_SIZE, len(data))
            if not more:
                break
            data += more
    except OSError:
        return None
    return data.decode(errors="replace")  # garbage then fails its parse, as CgroupError


class OpenFiles:
    """Read-only fds kept open on some files of one cgroup, so that repeated reads cost a
    pread each, not an open/read/close. A name asked for but absent reads as None without
    a system call."""

    def __init__(self, path: Path, names: Iterable[str]) -> None:
        self.fds: dict[str, int | None] = {}
        try:
            for name in names:
                if name not in self.fds:
                    self.fds[name] = _open_if_present(path / name)
        except BaseException:
            self.close()
            raise

    def __contains__(self, name: str) -> bool:
        return name in self.fds

    def read(self, name: str) -> str | None:
        return pread_text(self.fds[name])

    def close(self) -> None:
        fds, self.fds = self.fds, {}
        for fd in fds.values():
            if fd is not None:
                os.close(fd)


def _open_if_present(path: Path) -> int | None:
    try:
        return os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None


class CgroupReader:
    """The memory interface files of one cgroup: their names (class attributes, ``None``
    where this version has no such file) and how each is read and parsed, in one place
    per cgroup version as in BenchExec's cgroups module. What was not measured is None,
    never 0: a file this kernel or configuration lacks, a key it does not report.

    A reader opens each file when asked; ``kept_open(names)`` gives one that reads those
    files through fds it keeps (for the per-window probe and the 100 Hz sampler)."""

    version: ClassVar[int]
    CURRENT: ClassVar[str]  # RAM (and kernel memory) charged now
    PEAK: ClassVar[str]  # its high-water mark
    SWAP_PEAK: ClassVar[str | None] = None  # swap's high-water mark (v2)
    MEMSW_PEAK: ClassVar[str | None] = None  # that of RAM + swap together (v1)
    LIMIT: ClassVar[str]  # the RAM limit
    STAT: ClassVar[str] = "memory.stat"
    PRESSURE: ClassVar[str | None] = None  # PSI (v2)
    COUNTER_FILES: ClassVar[tuple[str, ...]]  # what current_and_swap() reads
    EVENT_FILES: ClassVar[tuple[str, ...]]  # what events() reads
    PEAK_FILES: ClassVar[tuple[str, ...]]  # resettable high-water marks, RAM first
    PEAK_RESET: ClassVar[bytes]  # written to a peak file to reset it
    LIMIT_EVENT: ClassVar[str]  # the events() key that counts hits of the limit
    VALUE_FILES: ClassVar[tuple[str, ...]]  # single-value files, for snapshot()
    KEYED_FILES: ClassVar[tuple[str, ...]]  # "key value" files, for snapshot()

    def __init__(self, path: Path, files: OpenFiles | None = None) -> None:
        self.path = Path(path)
        self._files = files

    def kept_open(self, names: Iterable[str]) -> CgroupReader:
        """A reader of the same cgroup that reads ``names`` through kept-open fds (other
        files as usual). Close it when done."""
        return type(self)(self.path, OpenFiles(self.path, names))

    def close(self) -> None:
        if self._files is not None:
            self._files.close()

    def __enter__(self) -> CgroupReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def has(self, name: str) -> bool:
        return (self.path / name).is_file()

    def read(self, name: str) -> str | None:
        """A file's text; None if it does not exist."""
        if self._files is not None and name in self._files:
            return self._files.read(name)
        return read_optional(self.path / name)

    def value(self, name: str | None) -> int | None:
        return None if name is None else parse_limit(self.read(name))

    @staticmethod
    def value_at(fd: int | None) -> int | None:
        """A single-value file read through an fd of the caller's own (a window's peak fd,
        which must stay its own to keep its own peak)."""
        return parse_limit(pread_text(fd))

    def keyed(self, name: str) -> dict[str, int]:
        return parse_keyed(self.read(name))

    def current(self) -> int | None:
        return self.value(self.CURRENT)

    def peak(self) -> int | None:
        return self.value(self.PEAK)

    def limit(self) -> int | None:
        return self.value(self.LIMIT)

    def swap_peak(self) -> int | None:
        """High-water mark of swap alone (v2 only)."""
        return None

    def memsw_peak(self) -> int | None:
        """High-water mark of RAM + swap together (v1 only)."""
        return None

    def swap_limit(self) -> int | None:
        """The swap limit on top of RAM (v2 only: v1 limits RAM + swap, memsw_limit)."""
        return None

    def memsw_limit(self) -> int | None:
        """The RAM + swap limit (v1 only)."""
        return None

    def current_and_swap(self) -> tuple[int | None, int | None]:
        """Usage and swap now, from the counters alone (one read of each file)."""
        raise NotImplementedError

    def swap(self, stat: dict[str, int] | None = None) -> int | None:
        """Swap in use now; ``stat``, a memory.stat already read, may spare a read."""
        return self.current_and_swap()[1]

    def stat(self) -> dict[str, int]:
        """memory.stat, counting the cgroup's children too."""
        return self.keyed(self.STAT)

    # memory.stat keys that partition the charge (``charge_parts``), per version
    PART_KEYS: ClassVar[dict[str, str]] = {}
    KERNEL_KEYS: ClassVar[tuple[str, ...]] = ()  # summed when there is no "kernel" key
    PART_FILES: ClassVar[tuple[str, ...]] = ()  # files charge_parts reads besides STAT

    def charge_parts(self, stat: dict[str, int]) -> dict[str, int | None]:
        """What the cgroup's charge (``current()``) is made of, from a memory.stat already
        read (``stat()``): anon, file (all page cache, shmem and mapped files included),
        file_mapped, shmem, kernel (slab, kernel stacks, page tables, percpu, ...), its
        pieces slab/kernel_stack/pagetables/percpu, and sock (socket buffers, not part of
        kernel). None where this kernel does not report a part."""
        out: dict[str, int | None] = {part: stat.get(key) for part, key in
                                      self.PART_KEYS.items()}
        if out.get("kernel") is None and self.KERNEL_KEYS:
            pieces = [stat[k] for k in self.KERNEL_KEYS if k in stat]
            out["kernel"] = sum(pieces) if pieces else None
        return out

    def events(self, local: bool = False) -> dict[str, int]:
        """Cumulative event counters ("oom_kill" and LIMIT_EVENT among them); ``local``:
        without those of child cgroups, where the kernel can tell."""
        raise NotImplementedError

    def pressure(self) -> dict[str, int]:
        """PSI stall time in us, {"some": .., "full": ..}; {} without PSI."""
        return {}

    def oom_kill_count(self) -> int | None:
        """Processes the kernel OOM-killed in this cgroup itself; None if not counted."""
        return self.events(local=True).get("oom_kill")

    def limit_reached(self) -> bool:
        """Whether usage reached the binding limit (the OOM fallback of old kernels)."""
        raise NotImplementedError

    def peak_reset(self, kernel: tuple[int, int]) -> str | None:
        """How the peak can be reset: "fd" (per open file), "global" (for every reader)
        or None (it cannot)."""
        raise NotImplementedError

    def features(self, kernel: tuple[int, int]) -> dict[str, bool]:
        """Which counters this kernel gives here (for meta.json)."""
        raise NotImplementedError

    def effective_limit(self, top: Path) -> tuple[int | None, Path | None]:
        """The tightest memory limit over this cgroup and its ancestors up to ``top`` (the
        mount point), and where it is set: limits are hierarchical, so a parent's binds."""
        best: tuple[int | None, Path | None] = (None, None)
        path = self.path
        while True:
            limit = type(self)(path).limit()  # the root cgroup has no limit file
            if limit is not None and (best[0] is None or limit < best[0]):
                best = (limit, path)
            if path == top or path.parent == path:
                return best
            path = path.parent

    def snapshot(self) -> dict:
        """Every value and keyed file present, parsed, by file name (the vm job's record)."""
        snap: dict = {}
        for name in self.VALUE_FILES:
            text = self.read(name)
            if text is not None:
                snap[name] = parse_limit(text)
        for name in self.KEYED_FILES:
            text = self.read(name)
            if text is not None:
                snap[name] = parse_keyed(text)
        return snap


class CgroupV2Reader(CgroupReader):
    version = 2
    CURRENT = "memory.current"
    SWAP_CURRENT = "memory.swap.current"
    PEAK = "memory.peak"
    SWAP_PEAK = "memory.swap.peak"  # Linux >= 6.5
    LIMIT = "memory.max"
    SWAP_LIMIT = "memory.swap.max"  # only with swap accounting
    OOM_GROUP = "memory.oom.group"  # 1: an OOM kills the whole cgroup
    EVENTS = "memory.events"  # hierarchical: counts the children's events too
    EVENTS_LOCAL = "memory.events.local"  # Linux >= 5.2
    SWAP_EVENTS = "memory.swap.events"
    PRESSURE = "memory.pressure"
    KILL = "cgroup.kill"  # Linux >= 5.14
    COUNTER_FILES = (CURRENT, SWAP_CURRENT)
    EVENT_FILES = (EVENTS,)
    PEAK_FILES = (PEAK, SWAP_PEAK)
    PEAK_RESET = b"reset"  # any non-empty string
    LIMIT_EVENT = "max"  # times usage was about to go over memory.max
    VALUE_FILES = (PEAK, SWAP_PEAK, LIMIT, SWAP_LIMIT, CURRENT, SWAP_CURRENT)
    KEYED_FILES = (EVENTS, SWAP_EVENTS, CgroupReader.STAT)
    # memory.current = anon + file + kernel + sock (cgroup-v2.rst, "memory.stat"); "kernel"
    # exists since Linux 5.18, older kernels give its pieces
    PART_KEYS = {"anon": "anon", "file": "file", "file_mapped": "file_mapped",
                 "shmem": "shmem", "kernel": "kernel", "slab": "slab",
                 "kernel_stack": "kernel_stack", "pagetables": "pagetables",
                 "percpu": "percpu", "sock": "sock"}
    KERNEL_KEYS = ("slab", "kernel_stack", "pagetables", "sec_pagetables", "percpu",
                   "vmalloc")

    def current_and_swap(self) -> tuple[int | None, int | None]:
        return self.current(), self.value(self.SWAP_CURRENT)

    def swap(self, stat: dict[str, int] | None = None) -> int | None:
        return self.value(self.SWAP_CURRENT)

    def swap_peak(self) -> int | None:
        return self.value(self.SWAP_PEAK)

    def swap_limit(self) -> int | None:
        return self.value(self.SWAP_LIMIT)

    def events(self, local: bool = False) -> dict[str, int]:
        # memory.events.local, as BenchExec reads the OOM count, leaves out OOMs in nested
        # cgroups; kernels without it only have the hierarchical file
        text = self.read(self.EVENTS_LOCAL) if local else None
        return parse_keyed(text if text is not None else self.read(self.EVENTS))

    def pressure(self) -> dict[str, int]:
        try:
            return parse_psi(self.read(self.PRESSURE))
        except CgroupError:  # PSI disabled at boot: the file exists but cannot be read
            return {}

    def limit_reached(self) -> bool:
        """memory.peak at memory.max, or the kernel counted an attempt to exceed it."""
        limit, peak = self.limit(), self.peak()
        if limit is not None and peak is not None and peak >= limit:
            return True
        return self.events().get(self.LIMIT_EVENT, 0) > 0

    def peak_reset(self, kernel: tuple[int, int]) -> str | None:
        return "fd" if self.has(self.PEAK) and kernel >= PEAK_FD_RESET_KERNEL else None

    def features(self, kernel: tuple[int, int]) -> dict[str, bool]:
        return {"memory_peak": self.has(self.PEAK),
                "peak_fd_reset": self.peak_reset(kernel) == "fd",
                "swap_peak": self.has(self.SWAP_PEAK),
                "swap_accounting": self.has(self.SWAP_LIMIT),
                "events_local": self.has(self.EVENTS_LOCAL),
                "cgroup_kill": self.has(self.KILL),
                "pressure": self.has(self.PRESSURE)}


class CgroupV1Reader(CgroupReader):
    version = 1
    CURRENT = "memory.usage_in_bytes"
    MEMSW_CURRENT = "memory.memsw.usage_in_bytes"  # RAM + swap; memsw.* needs swapaccount
    PEAK = "memory.max_usage_in_bytes"
    MEMSW_PEAK = "memory.memsw.max_usage_in_bytes"
    LIMIT = "memory.limit_in_bytes"
    MEMSW_LIMIT = "memory.memsw.limit_in_bytes"
    FAILCNT = "memory.failcnt"  # times usage hit limit_in_bytes
    MEMSW_FAILCNT = "memory.memsw.failcnt"
    OOM_CONTROL = "memory.oom_control"  # has an oom_kill line since Linux 4.13
    COUNTER_FILES = (CURRENT, MEMSW_CURRENT)
    EVENT_FILES = (OOM_CONTROL, FAILCNT)
    PEAK_FILES = (PEAK, MEMSW_PEAK)
    PEAK_RESET = b"0"  # any value resets the peak to the current usage
    LIMIT_EVENT = "failcnt"
    VALUE_FILES = (PEAK, MEMSW_PEAK, LIMIT, MEMSW_LIMIT, CURRENT, MEMSW_CURRENT, FAILCNT,
                   MEMSW_FAILCNT)
    KEYED_FILES = (OOM_CONTROL, CgroupReader.STAT)
    KMEM_CURRENT = "memory.kmem.usage_in_bytes"  # kernel memory (not in memory.stat)
    # usage_in_bytes = rss + cache (+ kernel memory where kmem is accounted)
    PART_KEYS = {"anon": "rss", "file": "cache", "file_mapped": "mapped_file",
                 "shmem": "shmem"}
    PART_FILES = (KMEM_CURRENT,)

    def charge_parts(self, stat: dict[str, int]) -> dict[str, int | None]:
        out = super().charge_parts(stat)
        out["kernel"] = self.value(self.KMEM_CURRENT)
        return out

    def current_and_swap(self) -> tuple[int | None, int | None]:
        usage, memsw = self.current(), self.value(self.MEMSW_CURRENT)
        # v1 has no swap counter. Usage and memsw are charged in separate per-CPU batches,
        # so their difference can dip below 0 with no swap in use: clamp it.
        swap = None if usage is None or memsw is None else max(memsw - usage, 0)
        return usage, swap

    def swap(self, stat: dict[str, int] | None = None) -> int | None:
        # memory.stat's swap is exact; the counters' difference is only the fallback
        if stat is not None and "swap" in stat:
            return stat["swap"]
        return self.current_and_swap()[1]

    def memsw_peak(self) -> int | None:
        return self.value(self.MEMSW_PEAK)

    def memsw_limit(self) -> int | None:
        return self.value(self.MEMSW_LIMIT)

    def stat(self) -> dict[str, int]:
        """memory.stat with the hierarchical ``total_*`` values under the plain names where
        the kernel gives them, so that it counts the children as v2's does."""
        raw = self.keyed(self.STAT)
        out = {k: v for k, v in raw.items() if not k.startswith("total_")}
        out.update((k.removeprefix("total_"), v) for k, v in raw.items()
                   if k.startswith("total_"))
        return out

    def events(self, local: bool = False) -> dict[str, int]:
        # the oom_control counters and failcnt are the cgroup's own: local either way
        out = self.keyed(self.OOM_CONTROL)
        failcnt = self.value(self.FAILCNT)
        if failcnt is not None:
            out[self.LIMIT_EVENT] = failcnt
        return out

    def limit_reached(self) -> bool:
        """The binding limit (RAM+swap if set, else RAM) was hit: failcnt > 0 or
        max_usage >= limit."""
        for limit_file, failcnt_file, peak_file in (
                (self.MEMSW_LIMIT, self.MEMSW_FAILCNT, self.MEMSW_PEAK),
                (self.LIMIT, self.FAILCNT, self.PEAK)):
            limit = self.value(limit_file)
            if limit is None:
                continue
            failcnt, peak = self.value(failcnt_file), self.value(peak_file)
            return (failcnt or 0) > 0 or (peak is not None and peak >= limit)
        return False

    def peak_reset(self, kernel: tuple[int, int]) -> str | None:
        return "global" if self.has(self.PEAK) else None

    def features(self, kernel: tuple[int, int]) -> dict[str, bool]:
        return {"memory_peak": self.has(self.PEAK),
                "swap_accounting": self.has(self.MEMSW_LIMIT),
                "oom_kill_count": self.oom_kill_count() is not None}

    def effective_limit(self, top: Path) -> tuple[int | None, Path | None]:
        # v1 computes this itself (hierarchical_memory_limit), no walk needed
        stat = self.stat()
        if "hierarchical_memory_limit" in stat:
            limit = stat["hierarchical_memory_limit"]
            return (None, None) if limit >= V1_UNLIMITED else (limit, self.path)
        return super().effective_limit(top)


def reader_for(path: Path, version: int | None = None) -> CgroupReader:
    """The reader of the cgroup at ``path``: of ``version``, or as its files say."""
    if version is None:
        version = dir_version(Path(path))
    if version == 2:
        return CgroupV2Reader(path)
    if version == 1:
        return CgroupV1Reader(path)
    raise CgroupError(f"{path} is not a memory cgroup directory (neither "
                      f"cgroup.controllers (v2) nor {CgroupV1Reader.LIMIT} (v1) in it)")


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

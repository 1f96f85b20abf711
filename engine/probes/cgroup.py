"""Per-task cgroup counters: the peak, end values and deltas of one LOAD/EXEC window.

Windows may overlap (several worker threads), so nothing here is shared per window except
read-only fds. On cgroup v2 with Linux >= 6.12 every window gets its own fd on
``memory.peak`` (and ``memory.swap.peak``) and resets it: the kernel keeps a peak per open
file, so overlapping windows each see their own high-water mark. Older v2 kernels only give
the monotone peak since the cgroup was created (``cg_peak_windowed`` False). On v1 the
reset of ``max_usage_in_bytes`` is global: a window's peak is valid only if no other window
reset it meanwhile, and ``cg_peak_windowed`` says so per row.

Peaks are reset only in cgroups this project created (named ``edgeprof-*``): an inherited
cgroup (``--backend inherit``) belongs to someone else and is only read.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from engine.limits.cgroupfs import RUN_PREFIX, kernel_version, parse_keyed, parse_psi

COLUMNS = (
    "cg_peak_bytes", "cg_peak_windowed", "cg_current_bytes", "cg_swap_current_bytes",
    "cg_swap_peak_bytes", "cg_memsw_peak_bytes",
    "cg_anon_delta", "cg_file_delta", "cg_file_mapped_delta", "cg_kernel_delta",
    "cg_rss_delta", "cg_cache_delta", "cg_mapped_file_delta",
    "cg_pgmajfault_delta", "cg_pswpin_delta", "cg_pswpout_delta",
    "cg_workingset_refault_file_delta", "cg_workingset_refault_anon_delta",
    "cg_events_max_delta", "cg_failcnt_delta", "cg_oom_kill_delta",
    "cg_psi_some_us", "cg_psi_full_us",
)
_V2_STAT = ("anon", "file", "file_mapped", "kernel", "pgmajfault", "pswpin", "pswpout",
            "workingset_refault_file", "workingset_refault_anon")
_V1_STAT = ("rss", "cache", "mapped_file", "pgmajfault")
_READ_SIZE = 16384  # memory.stat is ~2-4 KiB; the small files are a line


def _pread(fd: int | None) -> bytes | None:
    """The whole file through a kept-open fd (pread at 0 regenerates a cgroup file)."""
    if fd is None:
        return None
    try:
        data = os.pread(fd, _READ_SIZE, 0)
        while len(data) % _READ_SIZE == 0 and data:
            more = os.pread(fd, _READ_SIZE, len(data))
            if not more:
                break
            data += more
        return data
    except OSError:  # e.g. PSI disabled at boot: the file exists but cannot be read
        return None


def _int(data: bytes | None) -> int | None:
    if not data or data.strip() == b"max":
        return None
    return int(data)


def _delta(before: dict[str, int], after: dict[str, int], key: str) -> int | None:
    if key in before and key in after:
        return after[key] - before[key]
    return None


def _reset(fd: int, value: bytes) -> None:
    # cgroup files ignore the offset, but a fake (regular) file should be overwritten
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, value)


@dataclass
class _Window:
    peak_fds: dict[str, int] = field(default_factory=dict)  # v2: this window's own fds
    generation: int = 0  # v1: resets of max_usage so far, when this window reset it
    stat: dict[str, int] = field(default_factory=dict)
    events: dict[str, int] = field(default_factory=dict)
    psi: dict[str, int] = field(default_factory=dict)


class CgroupCounters:
    """Window counters of the cgroup at ``cgroup_dir`` (``version`` 1 or 2)."""

    def __init__(self, cgroup_dir: Path, version: int, *, allow_reset: bool | None = None,
                 kernel: tuple[int, int] | None = None) -> None:
        self.dir = Path(cgroup_dir)
        self.version = version
        if allow_reset is None:
            allow_reset = self.dir.name.startswith(RUN_PREFIX)
        kernel = kernel or kernel_version()
        self._lock = threading.Lock()
        self._fds: dict[str, int] = {}
        self._pool: dict[str, list[int]] = {}
        self._generation = 0
        if version == 2:
            self._peak_files = [n for n in ("memory.peak", "memory.swap.peak")
                                if (self.dir / n).is_file()]
            self.windowed_peak = (allow_reset and kernel >= (6, 12)
                                  and "memory.peak" in self._peak_files)
            shared = ["memory.current", "memory.swap.current", "memory.stat", "memory.events",
                      "memory.pressure"]
            if not self.windowed_peak:
                shared += self._peak_files  # read the monotone value
            self._pool = {n: [] for n in self._peak_files} if self.windowed_peak else {}
        else:
            self._peak_files = [n for n in ("memory.max_usage_in_bytes",
                                            "memory.memsw.max_usage_in_bytes")
                                if (self.dir / n).is_file()]
            self.windowed_peak = allow_reset and "memory.max_usage_in_bytes" in self._peak_files
            shared = ["memory.usage_in_bytes", "memory.memsw.usage_in_bytes", "memory.stat",
                      "memory.oom_control", "memory.failcnt", *self._peak_files]
            if self.windowed_peak:
                for name in self._peak_files:
                    self._fds["reset:" + name] = os.open(self.dir / name, os.O_WRONLY)
        for name in shared:
            if (self.dir / name).is_file():
                self._fds[name] = os.open(self.dir / name, os.O_RDONLY)

    def _read(self, name: str) -> bytes | None:
        return _pread(self._fds.get(name))

    def _keyed(self, name: str) -> dict[str, int]:
        data = self._read(name)
        return parse_keyed(data.decode()) if data else {}

    def _baseline(self, window: _Window) -> None:
        window.stat = self._keyed("memory.stat")
        if self.version == 2:
            window.events = self._keyed("memory.events")
            data = self._read("memory.pressure")
            window.psi = parse_psi(data.decode()) if data else {}
        else:
            window.events = self._keyed("memory.oom_control")
            failcnt = _int(self._read("memory.failcnt"))
            if failcnt is not None:
                window.events["failcnt"] = failcnt

    def open_window(self) -> _Window:
        """Start a window: reset its peak and take the cumulative counters."""
        window = _Window()
        if self.version == 2 and self.windowed_peak:
            for name in self._peak_files:
                with self._lock:
                    pool = self._pool[name]
                    fd = pool.pop() if pool else None
                if fd is None:
                    fd = os.open(self.dir / name, os.O_RDWR)
                _reset(fd, b"reset")
                window.peak_fds[name] = fd
        elif self.version == 1 and self.windowed_peak:
            with self._lock:
                for name in self._peak_files:
                    _reset(self._fds["reset:" + name], b"0")
                self._generation += 1
                window.generation = self._generation
        self._baseline(window)
        return window

    def close_window(self, window: _Window) -> dict:
        """End a window: its columns (every name in COLUMNS; None where not available)."""
        return self._close_v2(window) if self.version == 2 else self._close_v1(window)

    def _close_v2(self, window: _Window) -> dict:
        row: dict = dict.fromkeys(COLUMNS)
        peak_fds = window.peak_fds
        row["cg_peak_bytes"] = _int(_pread(peak_fds.get("memory.peak"))
                                    if peak_fds else self._read("memory.peak"))
        row["cg_swap_peak_bytes"] = _int(_pread(peak_fds.get("memory.swap.peak"))
                                         if peak_fds else self._read("memory.swap.peak"))
        row["cg_peak_windowed"] = bool(peak_fds)
        if peak_fds:
            with self._lock:
                for name, fd in peak_fds.items():
                    self._pool[name].append(fd)
        row["cg_current_bytes"] = _int(self._read("memory.current"))
        row["cg_swap_current_bytes"] = _int(self._read("memory.swap.current"))
        end = _Window()
        self._baseline(end)
        for key in _V2_STAT:
            row[f"cg_{key}_delta"] = _delta(window.stat, end.stat, key)
        row["cg_events_max_delta"] = _delta(window.events, end.events, "max")
        row["cg_oom_kill_delta"] = _delta(window.events, end.events, "oom_kill")
        row["cg_psi_some_us"] = _delta(window.psi, end.psi, "some")
        row["cg_psi_full_us"] = _delta(window.psi, end.psi, "full")
        return row

    def _close_v1(self, window: _Window) -> dict:
        row: dict = dict.fromkeys(COLUMNS)
        row["cg_peak_bytes"] = _int(self._read("memory.max_usage_in_bytes"))
        row["cg_memsw_peak_bytes"] = _int(self._read("memory.memsw.max_usage_in_bytes"))
        with self._lock:  # checked after the read: a reset in between marks it invalid
            row["cg_peak_windowed"] = (self.windowed_peak
                                       and window.generation == self._generation)
        row["cg_current_bytes"] = _int(self._read("memory.usage_in_bytes"))
        end = _Window()
        self._baseline(end)
        for key in _V1_STAT:
            # total_* covers the run cgroup's children too, like v2's memory.stat
            name = f"total_{key}" if f"total_{key}" in end.stat else key
            row[f"cg_{key}_delta"] = _delta(window.stat, end.stat, name)
        row["cg_swap_current_bytes"] = end.stat.get("total_swap", end.stat.get("swap"))
        row["cg_oom_kill_delta"] = _delta(window.events, end.events, "oom_kill")
        row["cg_failcnt_delta"] = _delta(window.events, end.events, "failcnt")
        return row

    def snapshot(self) -> dict[str, int | None]:
        """Current usage and swap for the sampler (two counter reads, no memory.stat)."""
        if self.version == 2:
            return {"cg_current_bytes": _int(self._read("memory.current")),
                    "cg_swap_current_bytes": _int(self._read("memory.swap.current"))}
        usage = _int(self._read("memory.usage_in_bytes"))
        memsw = _int(self._read("memory.memsw.usage_in_bytes"))
        swap = None if usage is None or memsw is None else max(memsw - usage, 0)
        return {"cg_current_bytes": usage, "cg_swap_current_bytes": swap}

    def close(self) -> None:
        with self._lock:
            fds = list(self._fds.values()) + [fd for p in self._pool.values() for fd in p]
            self._fds, self._pool = {}, {n: [] for n in self._pool}
        for fd in fds:
            os.close(fd)

    def __enter__(self) -> CgroupCounters:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

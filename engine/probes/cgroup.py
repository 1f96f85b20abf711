"""Per-task cgroup counters: the peak, end values and deltas of one LOAD/EXEC window.

End values include what the charge is made of (``cg_<part>_bytes``: anon, file,
file_mapped, shmem, kernel and its pieces, sock), from the memory.stat read that the
deltas need anyway: no extra read per boundary (v1: one more for kmem usage).

Windows may overlap (several worker threads), so nothing here is shared per window except
read-only fds. Where the kernel resets the peak per open file (cgroup v2, Linux >=
``PEAK_FD_RESET_KERNEL``) every window gets its own fd on the peak files and resets it, so
overlapping windows each see their own high-water mark. Older v2 kernels only give the
monotone peak since the cgroup was created (``cg_peak_windowed`` False). On v1 the peak
reset is global: a window's peak is valid only if no other window reset it meanwhile, and
``cg_peak_windowed`` says so per row.

Peaks are reset only in cgroups this project created (named ``edgeprof-*``): an inherited
cgroup (``--backend inherit``) belongs to someone else and is only read. Which files are
read and how they parse is ``engine.limits.cgroupfs``'s reader; this module keeps them open
and windows them.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from engine.limits.cgroupfs import RUN_PREFIX, CgroupReader, kernel_version, reader_for

# what the charge is made of at the window's end (CgroupReader.charge_parts)
PARTS = ("anon", "file", "file_mapped", "shmem", "kernel", "slab", "kernel_stack",
         "pagetables", "percpu", "sock")
COLUMNS = (
    "cg_peak_bytes", "cg_peak_windowed", "cg_current_bytes", "cg_swap_current_bytes",
    "cg_swap_peak_bytes", "cg_memsw_peak_bytes",
    "cg_anon_delta", "cg_file_delta", "cg_file_mapped_delta", "cg_kernel_delta",
    "cg_rss_delta", "cg_cache_delta", "cg_mapped_file_delta",
    "cg_pgmajfault_delta", "cg_pswpin_delta", "cg_pswpout_delta",
    "cg_workingset_refault_file_delta", "cg_workingset_refault_anon_delta",
    "cg_events_max_delta", "cg_failcnt_delta", "cg_oom_kill_delta",
    "cg_psi_some_us", "cg_psi_full_us",
    *(f"cg_{part}_bytes" for part in PARTS),
)
# the memory.stat keys with a delta column, per cgroup version
_STAT_KEYS = {2: ("anon", "file", "file_mapped", "kernel", "pgmajfault", "pswpin", "pswpout",
                  "workingset_refault_file", "workingset_refault_anon"),
              1: ("rss", "cache", "mapped_file", "pgmajfault")}


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
    peak_fds: dict[str, int] = field(default_factory=dict)  # per-fd reset: its own fds
    generation: int = 0  # global reset: resets of the peak so far, when this window reset it
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
        reader = reader_for(self.dir, version)
        reset = reader.peak_reset(kernel or kernel_version()) if allow_reset else None
        self.windowed_peak = reset is not None
        self._per_fd = reset == "fd"
        self._peak_files = [n for n in reader.PEAK_FILES if reader.has(n)]
        self._reset_value = reader.PEAK_RESET
        self._lock = threading.Lock()
        # per-fd reset: closed windows' peak fds, reused by the next windows
        self._pool: dict[str, list[int]] = {}
        if self._per_fd:
            self._pool = {n: [] for n in self._peak_files}
        self._reset_fds: dict[str, int] = {}  # global reset: one write fd per peak file
        self._generation = 0
        shared = [*reader.COUNTER_FILES, reader.STAT, *reader.EVENT_FILES, *reader.PART_FILES]
        if reader.PRESSURE is not None:
            shared.append(reader.PRESSURE)
        if not self._per_fd:
            shared += self._peak_files  # read the shared (monotone or globally reset) value
        self._reader: CgroupReader = reader.kept_open(shared)
        if reset == "global":
            for name in self._peak_files:
                self._reset_fds[name] = os.open(self.dir / name, os.O_WRONLY)

    def _baseline(self, window: _Window) -> None:
        window.stat = self._reader.stat()
        window.events = self._reader.events()
        window.psi = self._reader.pressure()

    def open_window(self) -> _Window:
        """Start a window: reset its peak and take the cumulative counters."""
        window = _Window()
        if self._per_fd:
            for name in self._peak_files:
                with self._lock:
                    pool = self._pool[name]
                    fd = pool.pop() if pool else None
                if fd is None:
                    fd = os.open(self.dir / name, os.O_RDWR)
                _reset(fd, self._reset_value)
                window.peak_fds[name] = fd
        elif self.windowed_peak:
            with self._lock:
                for fd in self._reset_fds.values():
                    _reset(fd, self._reset_value)
                self._generation += 1
                window.generation = self._generation
        self._baseline(window)
        return window

    def close_window(self, window: _Window) -> dict:
        """End a window: its columns (every name in COLUMNS; None where not available)."""
        r = self._reader
        row: dict = dict.fromkeys(COLUMNS)
        if self._per_fd:
            fds = window.peak_fds
            row["cg_peak_bytes"] = r.value_at(fds.get(r.PEAK))
            row["cg_swap_peak_bytes"] = r.value_at(fds.get(r.SWAP_PEAK))
            row["cg_memsw_peak_bytes"] = r.value_at(fds.get(r.MEMSW_PEAK))
            row["cg_peak_windowed"] = True
            with self._lock:
                for name, fd in fds.items():
                    self._pool[name].append(fd)
        else:
            row["cg_peak_bytes"] = r.peak()
            row["cg_swap_peak_bytes"] = r.swap_peak()
            row["cg_memsw_peak_bytes"] = r.memsw_peak()
            with self._lock:  # checked after the read: a reset in between marks it invalid
                row["cg_peak_windowed"] = (self.windowed_peak
                                           and window.generation == self._generation)
        row["cg_current_bytes"] = r.current()
        end = _Window()
        self._baseline(end)
        row["cg_swap_current_bytes"] = r.swap(end.stat)
        for part, value in r.charge_parts(end.stat).items():
            if part in PARTS:
                row[f"cg_{part}_bytes"] = value
        for key in _STAT_KEYS[self.version]:
            row[f"cg_{key}_delta"] = _delta(window.stat, end.stat, key)
        row["cg_events_max_delta"] = _delta(window.events, end.events, "max")
        row["cg_failcnt_delta"] = _delta(window.events, end.events, "failcnt")
        row["cg_oom_kill_delta"] = _delta(window.events, end.events, "oom_kill")
        row["cg_psi_some_us"] = _delta(window.psi, end.psi, "some")
        row["cg_psi_full_us"] = _delta(window.psi, end.psi, "full")
        return row

    def snapshot(self) -> dict[str, int | None]:
        """Current usage and swap (two counter reads, no memory.stat)."""
        current, swap = self._reader.current_and_swap()
        return {"cg_current_bytes": current, "cg_swap_current_bytes": swap}

    def close(self) -> None:
        with self._lock:
            fds = [*self._reset_fds.values(), *(fd for p in self._pool.values() for fd in p)]
            self._reset_fds, self._pool = {}, {n: [] for n in self._pool}
        self._reader.close()
        for fd in fds:
            os.close(fd)

    def __enter__(self) -> CgroupCounters:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

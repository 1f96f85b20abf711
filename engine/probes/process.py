"""Per-window process counters of the calling process: peak RSS, RSS, swap, rusage.

Peak RSS per window comes from VmHWM after ``echo 5 > /proc/self/clear_refs`` (which
sets it to the current RSS). That reset is process-global, so windows of concurrent
worker threads cannot each have their own peak: the reset happens only when a window
opens while no other is open, and every window that shared time with another is marked
``proc_hwm_windowed = False``. Its VmHWM is then the process peak since the busy period
began: an upper bound of the peak during the window, never an underestimate.

Resetting VmHWM also erases the run's peak from what the kernel later hands GNU time
(see ``engine.probes.gnutime``); ``proc_peak_so_far_bytes`` keeps it: the maximum of all
VmHWM readings, taken before every reset.

Column scopes: ``proc_thread_*`` are RUSAGE_THREAD of the thread that opened and closed
the window; the other ``proc_*`` deltas are RUSAGE_SELF, i.e. the whole process (faults
and I/O of BLAS helpers and of concurrent windows included).
"""

from __future__ import annotations

import os
import resource
import threading

_lock = threading.Lock()
_open_windows: set[ProcessWindow] = set()
_peak_so_far = 0
_fds: dict[str, int] = {}


def _fd(name: str, flags: int) -> int:
    # Kept open: one pread/write per boundary instead of open+read+close.
    if name not in _fds:
        _fds[name] = os.open(f"/proc/self/{name}", flags)
    return _fds[name]


def _status() -> tuple[int, int, int | None]:
    """(VmHWM, VmRSS, VmSwap) in bytes from one read of /proc/self/status."""
    buf = os.pread(_fd("status", os.O_RDONLY), 8192, 0)
    return (status_bytes(buf, b"\nVmHWM:"), status_bytes(buf, b"\nVmRSS:"),
            status_bytes(buf, b"\nVmSwap:"))


def status_bytes(buf: bytes, key: bytes) -> int | None:
    """A ``kB`` field of /proc/<pid>/status content, in bytes (None if absent)."""
    start = buf.find(key)
    if start < 0:
        return None
    start += len(key)
    end = buf.find(b"kB", start)
    if end < 0:  # cut between the key and its unit
        return None
    try:
        return int(buf[start:end]) * 1024
    except ValueError:
        return None


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)


class ProcessWindow:
    """One task window: ``open()`` at its start, ``close()`` -> ``proc_*`` columns."""

    __slots__ = ("_overlapped", "_rss_open", "_self0", "_thread0", "_thread_id")

    def open(self) -> None:
        global _peak_so_far
        with _lock:
            self._overlapped = bool(_open_windows)
            for other in _open_windows:
                other._overlapped = True
            _open_windows.add(self)
            hwm, self._rss_open, _ = _status()
            _peak_so_far = max(_peak_so_far, hwm)
            if not self._overlapped:
                os.write(_fd("clear_refs", os.O_WRONLY), b"5")
        self._thread_id = threading.get_ident()
        self._self0 = resource.getrusage(resource.RUSAGE_SELF)
        self._thread0 = resource.getrusage(resource.RUSAGE_THREAD)

    def close(self) -> dict:
        global _peak_so_far
        thread1 = resource.getrusage(resource.RUSAGE_THREAD)
        self1 = resource.getrusage(resource.RUSAGE_SELF)
        with _lock:
            hwm, rss, swap = _status()
            _peak_so_far = max(_peak_so_far, hwm)
            peak = _peak_so_far
            _open_windows.discard(self)
        s0, t0 = self._self0, self._thread0
        same_thread = threading.get_ident() == self._thread_id
        return {
            "proc_hwm_bytes": hwm,
            "proc_hwm_delta_bytes": hwm - self._rss_open,
            "proc_hwm_windowed": not self._overlapped,
            "proc_rss_bytes": rss,
            "proc_rss_delta_bytes": rss - self._rss_open,
            "proc_swap_bytes": swap,
            "proc_peak_so_far_bytes": peak,
            "proc_minflt_delta": self1.ru_minflt - s0.ru_minflt,
            "proc_majflt_delta": self1.ru_majflt - s0.ru_majflt,
            "proc_inblock_delta": self1.ru_inblock - s0.ru_inblock,
            "proc_oublock_delta": self1.ru_oublock - s0.ru_oublock,
            "proc_cpu_ns": _ns(self1.ru_utime + self1.ru_stime - s0.ru_utime - s0.ru_stime),
            "proc_thread_cpu_ns": _ns(thread1.ru_utime + thread1.ru_stime - t0.ru_utime
                                      - t0.ru_stime) if same_thread else None,
            "proc_thread_sys_ns": _ns(thread1.ru_stime - t0.ru_stime) if same_thread else None,
        }

"""Per-window process counters of the calling process: peak RSS, RSS, swap, rusage.

Peak RSS per window comes from VmHWM after ``echo 5 > /proc/self/clear_refs`` (which
sets it to the current RSS). That reset is process-global, so windows of concurrent
worker threads cannot each have their own peak: the reset happens only while no window
is open (when the last open window closes, right after its read, or when a window opens
while no other is open), and every window that shared time with another is marked
``proc_hwm_windowed = False``. Its VmHWM is then the process peak since the busy period
began: an upper bound of the peak during the window, never an underestimate.

Both ends of a window run at every task boundary, inside the measured run, so they do as
little as they can. When a thread opens a window right after its own previous window
closed (one worker: every task but the first) and /proc/self/statm shows the same RSS as
that close read, the window starts from that boundary's readings instead of reading
/proc/self/status and getrusage again (``proc_chained``): its peak, RSS and rusage deltas
then also cover the few microseconds between the two tasks, in which the RSS did not
change. That halves the status reads and the getrusage calls (each system call costs
3-4 us between real tasks, against 0.4 us in a tight loop); where the RSS did change, the
window reads and resets as above. ``close_packed`` gives the columns as a tuple in ``COLUMNS``
order, which the measured child writes to progress.jsonl as one list (engine.runner.folder
names them again): encoding twenty names per task costs more than the values.

Resetting VmHWM also erases the run's peak from what the kernel later hands GNU time
(see ``engine.probes.gnutime``); ``proc_peak_so_far_bytes`` keeps it: the maximum of all
VmHWM readings, taken before every reset.

Kernel parts of RSS at the window's end, from the same read of /proc/self/status:
``proc_rss_anon_bytes`` (RssAnon: heap, pymalloc arenas, thread stacks, anonymous mmaps),
``proc_rss_file_bytes`` (RssFile: libraries and other mapped files) and
``proc_rss_shmem_bytes`` (RssShmem); VmRSS is their sum. Runs that need neither the
split nor VmSwap per window (no limit, no heap profile) end their windows with statm
and getrusage instead (``configure``): there ``proc_rss_file_bytes`` is file + shmem and
``proc_rss_shmem_bytes`` and ``proc_swap_bytes`` are unknown. /proc/self/smaps_rollup would
give the same split from a page-table walk but costs 230-310 us a read against 3.4 us for
status (measured, 320 MiB process, kernel 6.18), so it is not read per boundary.

With tcmalloc preloaded (heap profiling) the program break region ([heap]) is the
allocator's arena (gperftools takes memory with sbrk first), and ``proc_brk_bytes`` /
``proc_brk_resident_bytes`` give its size and how much of it is resident (one mincore()
over it; about 60 us for a 320 MiB heap). That is what separates tcmalloc's resident
bytes from its "physical" ones, which include pages it handed out or took from the
system but nobody touched yet. Without tcmalloc (glibc puts large blocks in their own
mmaps) the columns are left empty.

Column scopes: ``proc_thread_*`` are RUSAGE_THREAD of the thread that opened and closed
the window; the other ``proc_*`` deltas are RUSAGE_SELF, i.e. the whole process (faults
and I/O of BLAS helpers and of concurrent windows included).
"""

from __future__ import annotations

import ctypes
import os
import resource
import threading

from engine.units import PAGE_SIZE

_lock = threading.Lock()
_open_windows: set[ProcessWindow] = set()
_peak_so_far = 0
_fds: dict[str, int] = {}
# (thread, RSS bytes, RUSAGE_SELF, RUSAGE_THREAD) of the last close that left no window
# open and reset VmHWM after its read: where that thread's next window may start
_boundary: tuple | None = None


def _fd(name: str, flags: int) -> int:
    # Kept open: one pread/write per boundary instead of open+read+close.
    if name not in _fds:
        _fds[name] = os.open(f"/proc/self/{name}", flags)
    return _fds[name]


# /proc/self/status fields read at a window's end -> column
STATUS_PARTS = {b"\nRssAnon:": "proc_rss_anon_bytes", b"\nRssFile:": "proc_rss_file_bytes",
                b"\nRssShmem:": "proc_rss_shmem_bytes", b"\nVmSwap:": "proc_swap_bytes"}
# the kB lines from VmHWM to VmSwap, as Linux >= 4.5 prints them
_BLOCK = [b"VmHWM:", b"VmRSS:", b"RssAnon:", b"RssFile:", b"RssShmem:", b"VmData:", b"VmStk:",
          b"VmExe:", b"VmLib:", b"VmPTE:", b"VmSwap:"]
_WINDOW_KEYS = (b"\nVmHWM:", b"\nVmRSS:", *STATUS_PARTS)


def _status_buf() -> bytes:
    return os.pread(_fd("status", os.O_RDONLY), 8192, 0)


def _statm() -> tuple[int, int]:
    """(VmRSS, RssFile + RssShmem) in bytes from /proc/self/statm (the same counters as
    status, a quarter of the cost to read)."""
    fields = os.pread(_fd("statm", os.O_RDONLY), 256, 0).split(b" ", 3)
    return int(fields[1]) * PAGE_SIZE, int(fields[2]) * PAGE_SIZE


def _statm_rss() -> int:
    return _statm()[0]


# getrusage reads the RSS counters (file, anon, shmem) without summing their per-CPU
# parts, so its maxrss may lag VmHWM by each counter's batch on every CPU (seen: 88 KiB)
_CPUS = os.cpu_count() or 1
MAXRSS_SLACK = 3 * max(32, 2 * _CPUS) * _CPUS * PAGE_SIZE
# Whether a window's end reads /proc/self/status (VmHWM, the RSS split into anon, file
# and shmem, VmSwap) or only statm and getrusage (``configure``).
_status = [True]


def configure(status: bool) -> bool:
    """``status=False``: windows end with /proc/self/statm and the getrusage call they
    make anyway, whose ``ru_maxrss`` is VmHWM (the kernel's hiwater_rss, which the
    clear_refs reset lowers too): one system call and its parse fewer per task, at the
    price of the file/shmem split (file + shmem and anon stay) and VmSwap. That holds
    only while the process's own maxrss from before its exec is below its RSS, so it is
    checked here: after a reset both must agree within ``MAXRSS_SLACK`` (getrusage's
    reading of the RSS counters is approximate by up to that much; so are the lean
    windows' peaks), else status reads stay on. Returns whether they are on."""
    if not status:
        with _lock:
            os.write(_fd("clear_refs", os.O_WRONLY), b"5")
            before, _ = hwm_rss(_status_buf())
            maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            after, _ = hwm_rss(_status_buf())
        status = (before is None
                  or not before - MAXRSS_SLACK <= maxrss <= after + MAXRSS_SLACK)
    _status[0] = status
    return status


def hwm_rss(buf: bytes) -> tuple[int | None, int | None]:
    """(VmHWM, VmRSS) in bytes of a /proc/<pid>/status content."""
    start = buf.find(b"\nVmHWM:")
    if start >= 0:  # fast path: the two lines are adjacent
        tok = buf[start:start + 80].split()
        if len(tok) > 5 and tok[3] == b"VmRSS:" and tok[5] == b"kB":
            try:
                return int(tok[1]) * 1024, int(tok[4]) * 1024
            except ValueError:
                pass
    return status_bytes(buf, b"\nVmHWM:"), status_bytes(buf, b"\nVmRSS:")


def window_fields(buf: bytes) -> tuple[int | None, ...]:
    """(VmHWM, VmRSS, RssAnon, RssFile, RssShmem, VmSwap) in bytes of a /proc/<pid>/status
    content. Fast path (every window's end pays for this parse): the block from VmHWM to
    VmSwap split once, when its lines are those of ``_BLOCK``; else each one looked up."""
    start = buf.find(b"\nVmHWM:")
    end = buf.find(b"kB", buf.find(b"\nVmSwap:", start)) if start >= 0 else -1
    if end > start:
        tok = buf[start:end].split()
        if tok[0::3] == _BLOCK:
            try:
                return (int(tok[1]) * 1024, int(tok[4]) * 1024, int(tok[7]) * 1024,
                        int(tok[10]) * 1024, int(tok[13]) * 1024, int(tok[31]) * 1024)
            except ValueError:
                pass
    return tuple(status_bytes(buf, key) for key in _WINDOW_KEYS)


def status_parts(buf: bytes) -> dict[str, int | None]:
    """RssAnon, RssFile, RssShmem and VmSwap of a /proc/<pid>/status content, as the
    ``proc_*`` columns (None where the kernel does not report the field)."""
    return {col: status_bytes(buf, key) for key, col in STATUS_PARTS.items()}


def tcmalloc_preloaded(env: dict | None = None) -> bool:
    """Whether this process runs with (gperftools') tcmalloc preloaded."""
    return "libtcmalloc" in (os.environ if env is None else env).get("LD_PRELOAD", "")


def start_brk(stat: bytes) -> int:
    """Where the program break region begins: field 47 of /proc/<pid>/stat."""
    fields = stat[stat.rindex(b")") + 2:].split()
    return int(fields[47 - 3])


def resident_pages(vec: bytes | bytearray, n: int) -> int:
    """Resident pages in the first ``n`` bytes of a mincore() vector. Only bit 0 is
    defined; Linux writes 0 or 1, so counting zeros (no copy) is exact there."""
    return n - vec.count(0, 0, n)


class BrkResidency:
    """Size and resident bytes of the program break region, by mincore()."""

    def __init__(self) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._libc.sbrk.restype = ctypes.c_void_p
        self._libc.sbrk.argtypes = [ctypes.c_ssize_t]
        self._libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        with open("/proc/self/stat", "rb") as f:
            self._start = start_brk(f.read())
        self._page = PAGE_SIZE
        self._vec = bytearray(0)

    def read(self) -> tuple[int, int] | None:
        """(size, resident bytes); None if mincore failed."""
        end = self._libc.sbrk(0) or self._start
        n = max(0, (end - self._start + self._page - 1) // self._page)
        if n == 0:
            return 0, 0
        if len(self._vec) < n:
            self._vec = bytearray(n + 8192)  # room to grow without a new buffer each time
        vec = (ctypes.c_char * len(self._vec)).from_buffer(self._vec)
        if self._libc.mincore(self._start, n * self._page, vec) != 0:
            return None
        return n * self._page, resident_pages(self._vec, n) * self._page


_brk: list[BrkResidency | None] = []


def _brk_reader() -> BrkResidency | None:
    if not _brk:
        _brk.append(BrkResidency() if tcmalloc_preloaded() else None)
    return _brk[0]


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


COLUMNS = ("proc_hwm_bytes", "proc_hwm_delta_bytes", "proc_hwm_windowed", "proc_chained",
           "proc_rss_bytes", "proc_rss_delta_bytes", "proc_rss_anon_bytes",
           "proc_rss_file_bytes", "proc_rss_shmem_bytes", "proc_swap_bytes", "proc_brk_bytes",
           "proc_brk_resident_bytes", "proc_peak_so_far_bytes", "proc_minflt_delta",
           "proc_majflt_delta", "proc_inblock_delta", "proc_oublock_delta", "proc_cpu_ns",
           "proc_thread_cpu_ns", "proc_thread_sys_ns")
PACKED_KEY = "proc"  # progress.jsonl: the COLUMNS values as one list


class ProcessWindow:
    """One task window: ``open()`` at its start, ``close()`` -> ``proc_*`` columns."""

    __slots__ = ("_chained", "_overlapped", "_rss_open", "_self0", "_thread0", "_thread_id")

    def open(self, chain: bool = True) -> ProcessWindow:
        """Start the window (returns it). ``chain=False``: never start from the previous
        window's end (heap-profiled runs dump the heap between tasks)."""
        global _peak_so_far, _boundary
        tid = threading.get_ident()
        with _lock:
            last, _boundary = _boundary, None
            if (chain and last is not None and last[0] == tid and not _open_windows
                    and _statm_rss() == last[1]):
                self._chained, self._overlapped, self._rss_open = True, False, last[1]
                # the previous close's rusage too: two system calls fewer per task
                self._self0, self._thread0 = last[2], last[3]
            else:
                self._chained = False
                self._overlapped = overlapped = bool(_open_windows)
                for other in _open_windows:
                    other._overlapped = True
                if _status[0]:
                    self._self0 = None
                    hwm, self._rss_open = hwm_rss(_status_buf())
                else:
                    self._self0 = resource.getrusage(resource.RUSAGE_SELF)
                    hwm, self._rss_open = self._self0.ru_maxrss * 1024, _statm()[0]
                if hwm > _peak_so_far:
                    _peak_so_far = hwm
                if not overlapped:
                    os.write(_fd("clear_refs", os.O_WRONLY), b"5")
            _open_windows.add(self)
        self._thread_id = tid
        if not self._chained:
            if self._self0 is None:
                self._self0 = resource.getrusage(resource.RUSAGE_SELF)
            self._thread0 = resource.getrusage(resource.RUSAGE_THREAD)
        return self

    def close_packed(self) -> tuple:
        """End the window: its columns, in ``COLUMNS`` order."""
        global _peak_so_far, _boundary
        thread1 = resource.getrusage(resource.RUSAGE_THREAD)
        self1 = resource.getrusage(resource.RUSAGE_SELF)
        brk = _brk[0] if _brk else _brk_reader()
        tid = threading.get_ident()
        with _lock:
            if _status[0]:
                hwm, rss, anon, file, shmem, swap = window_fields(_status_buf())
            else:
                rss, shared = _statm()
                hwm = max(self1.ru_maxrss * 1024, rss)  # RSS read a moment later
                anon, file, shmem, swap = rss - shared, shared, None, None
            brk_now = brk.read() if brk is not None else None
            if hwm > _peak_so_far:
                _peak_so_far = hwm
            peak = _peak_so_far
            _open_windows.discard(self)
            if not _open_windows and rss is not None:
                os.write(_fd("clear_refs", os.O_WRONLY), b"5")
                _boundary = (tid, rss, self1, thread1)
        s0, t0, rss_open = self._self0, self._thread0, self._rss_open
        same_thread = tid == self._thread_id
        return (
            hwm, hwm - rss_open, not self._overlapped, self._chained,
            rss, rss - rss_open, anon, file, shmem, swap,
            None if brk_now is None else brk_now[0], None if brk_now is None else brk_now[1],
            peak, self1.ru_minflt - s0.ru_minflt, self1.ru_majflt - s0.ru_majflt,
            self1.ru_inblock - s0.ru_inblock, self1.ru_oublock - s0.ru_oublock,
            _ns(self1.ru_utime + self1.ru_stime - s0.ru_utime - s0.ru_stime),
            _ns(thread1.ru_utime + thread1.ru_stime - t0.ru_utime - t0.ru_stime)
            if same_thread else None,
            _ns(thread1.ru_stime - t0.ru_stime) if same_thread else None,
        )

    def close(self) -> dict:
        """End the window: its ``proc_*`` columns."""
        return dict(zip(COLUMNS, self.close_packed()))

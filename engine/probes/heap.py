"""gperftools heap profiles dumped at every task boundary, plus tcmalloc's own counters.

The measured process must run with tcmalloc preloaded (``engine.probes.tcmalloc``).
What a dump sees (checked with real dumps, gperftools 2.10, CPython 3.11, numpy 2):

- Only allocations made *after* ``start()``; memory allocated earlier is invisible, and
  frees of it are ignored. In-use bytes are therefore relative to the start.
- Byte counts are the requested sizes: a numpy array's buffer shows up at exactly
  ``nbytes`` (numpy calls malloc for data buffers).
- CPython's small-object allocator (pymalloc, objects <= 512 bytes) takes its arenas with
  mmap, so e.g. a million int objects are invisible; only the list's malloc'd pointer
  array shows. Python objects' own headers are mostly missing from these figures.
- gperftools numbers files ``<prefix>.NNNN.heap`` from a process-wide counter that
  Start/Stop never reset, that every automatic dump also advances, and that a dump
  which failed to open its file still consumes. ``dump()`` mirrors that counter and
  checks the file it names exists; automatic dumps must be off (``preload_env`` does it).
- A profile still running at exit writes one more "Exiting" dump.
- One dump costs about a millisecond (it writes every call-stack bucket and a copy of
  /proc/self/maps) and holds the allocator's global lock meanwhile.
"""

from __future__ import annotations

import csv
import ctypes
import os
import re
import threading
import time
from pathlib import Path

from engine.errors import EdgeprofError
from engine.probes.tcmalloc import INTERVAL_DEFAULTS, loaded_library

# MallocExtension numeric properties recorded at each dump -> column name in tcmalloc.csv
PROPERTIES = {
    "generic.current_allocated_bytes": "tc_current_allocated_bytes",
    "generic.heap_size": "tc_heap_size_bytes",
    "generic.total_physical_bytes": "tc_total_physical_bytes",
    "tcmalloc.pageheap_free_bytes": "tc_pageheap_free_bytes",
    "tcmalloc.pageheap_unmapped_bytes": "tc_pageheap_unmapped_bytes",
    "tcmalloc.current_total_thread_cache_bytes": "tc_thread_cache_bytes",
    "tcmalloc.central_cache_free_bytes": "tc_central_cache_free_bytes",
    "tcmalloc.transfer_cache_free_bytes": "tc_transfer_cache_free_bytes",
}
TOTALS = ("inuse_objects", "inuse_bytes", "alloc_objects", "alloc_bytes")
_HEADER = re.compile(rb"heap profile:\s*(\d+):\s*(\d+)\s*\[\s*(\d+):\s*(\d+)\s*\]\s*@")

# Mirror of gperftools' process-wide dump counter (all dumps go through HeapDumper),
# and the lock that keeps it in step with the library's.
_dumps_in_process = 0
_dump_lock = threading.Lock()


def parse_heap_profile(path: str | os.PathLike) -> dict[str, int]:
    """Totals from the header ``heap profile: I: B [ A: AB] @ heapprofile`` of a dump:
    inuse_objects, inuse_bytes, alloc_objects, alloc_bytes (alloc_* cumulative since the
    profile started)."""
    with open(path, "rb") as f:
        line = f.readline(4096)
    m = _HEADER.match(line)
    if m is None:
        raise EdgeprofError(f"{path}: not a gperftools heap profile (header {line[:80]!r})")
    return dict(zip(TOTALS, map(int, m.groups())))


class HeapDumper:
    """Explicit heap-profile dumps numbered 1, 2, ... in call order, with tcmalloc stats."""

    def __init__(self) -> None:
        self._lib: ctypes.CDLL | None = None
        self._prefix = ""
        self._csv_file = None
        self._csv = None
        self._value = ctypes.c_size_t()

    def start(self, folder: Path) -> None:
        """Start profiling into ``folder/heap.NNNN.heap``; stats go to folder/tcmalloc.csv."""
        lib = loaded_library()
        if lib.IsHeapProfilerRunning():
            raise EdgeprofError("a gperftools heap profile is already running in this process "
                                "(HEAPPROFILE set?); unset HEAPPROFILE")
        automatic = [k for k, default in INTERVAL_DEFAULTS.items()
                     if os.environ.get(k, default).strip() != "0"]
        if automatic:
            # tcmalloc read these at startup; an automatic dump would shift our numbering
            raise EdgeprofError(f"automatic heap dumps are on ({', '.join(automatic)} not 0); "
                                "start the process with engine.probes.tcmalloc.preload_env")
        lib.MallocExtension_GetNumericProperty.argtypes = [ctypes.c_char_p,
                                                           ctypes.POINTER(ctypes.c_size_t)]
        folder = Path(folder).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        self._prefix = str(folder / "heap")
        self._csv_file = open(folder / "tcmalloc.csv", "w", newline="", buffering=1)
        self._csv = csv.writer(self._csv_file)
        self._csv.writerow(["dump", "label", "t_ns", *PROPERTIES.values()])
        lib.HeapProfilerStart(self._prefix.encode())
        self._lib = lib

    def dump(self, label: object) -> int:
        """Dump the heap now; returns N of the file ``heap.NNNN.heap`` just written."""
        global _dumps_in_process
        if self._lib is None:
            raise EdgeprofError("HeapDumper.dump() before start()")
        text = " ".join(map(str, label)) if isinstance(label, tuple) else str(label)
        with _dump_lock:
            stats = [self._property(name) for name in PROPERTIES]
            t_ns = time.perf_counter_ns()
            self._lib.HeapProfilerDump(text.encode())
            _dumps_in_process += 1
            number = _dumps_in_process
            path = f"{self._prefix}.{number:04d}.heap"
            if not os.path.exists(path):
                raise EdgeprofError(f"heap dump {number} ({text}) was not written to {path}: "
                                    "disk full, or an automatic dump shifted the numbering")
            self._csv.writerow([number, text, t_ns, *stats])
        return number

    def _property(self, name: str) -> int | None:
        ok = self._lib.MallocExtension_GetNumericProperty(name.encode(), ctypes.byref(self._value))
        return self._value.value if ok else None

    def stop(self) -> None:
        """Stop profiling and close tcmalloc.csv (idempotent)."""
        with _dump_lock:
            if self._lib is not None:
                self._lib.HeapProfilerStop()
                self._lib = None
            if self._csv_file is not None:
                self._csv_file.close()
                self._csv_file = self._csv = None

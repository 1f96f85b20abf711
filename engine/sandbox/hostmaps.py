"""How many host mappings a user-mode Linux guest's processes hold, watched from the host.

UML maps each guest process's memory into a host process, one host mapping per run of
guest pages that lie in ascending order in its physmem file; the host caps a process at
``vm.max_map_count`` mappings (65530 on Debian). A guest process at the cap does not die:
UML spins, printing nothing, and nothing inside the guest sees it (its memory, swap and
tasks stand still, or creep). So the host counts, for every process of the UML session,
the lines of its /proc/<pid>/maps: the peak goes into the run's record
(``sandbox.host_maps_peak``), and a session whose largest process sits at the cap for a whole
window is ended as a timeout that names the cap (docs/sandboxes.md).
"""

from __future__ import annotations

import threading
import time

import psutil

# A process within this many mappings of the cap is at it: UML's last few mmap calls fail
# and it retries for good (seen stuck at cap + 2: the count includes [vdso] and friends)
AT_CAP_SLACK = 64
# Without a run's own stall window (--stall-timeout), a session at the cap this long ends
DEFAULT_WINDOW_S = 60.0
PAGE = 4096  # the unit of UML's mappings (x86)
POLL_S = 0.25  # reading 65k lines of maps costs about 10 ms: 4 % of a CPU at the cap


def maps_of(pid: int) -> int | None:
    """The number of mappings of host process ``pid`` (None: gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            return f.read().count(b"\n")
    except OSError:
        return None


def session_maps(leader: int) -> int:
    """The most mappings any process of ``leader``'s tree holds now (0: none readable)."""
    try:
        root = psutil.Process(leader)
        pids = [leader, *(p.pid for p in root.children(recursive=True))]
    except psutil.Error:
        return 0
    return max((n for n in map(maps_of, pids) if n is not None), default=0)


def why_split(maps: str) -> dict[str, int]:
    """What a process's mappings (the text of its /proc/<pid>/maps) are, to tell why there
    are so many: ``mappings``; ``one_page`` of them; by access, ``young`` (read-write: UML
    maps a guest page it saw touched and written so), ``old`` (no read or write: a page
    whose accessed bit reclaim cleared, trapping its next touch) and ``clean`` (read
    only); and of neighbouring pairs (one ends where the next starts, the same file),
    ``split_by_access`` (the next page of the file too: they differ only in access) and
    ``split_by_scatter`` (another place in the file), and of those ``scatter_lower``, the
    next one lower in the file: all of them where copies fault top-down, about half where
    swapped-in pages land wherever reclaim freed memory (docs/sandboxes.md)."""
    counts = dict.fromkeys(("mappings", "one_page", "young", "old", "clean",
                            "split_by_access", "split_by_scatter", "scatter_lower"), 0)
    prev = None
    for line in maps.splitlines():
        fields = line.split()
        start, end = (int(x, 16) for x in fields[0].split("-"))
        perms, offset = fields[1], int(fields[2], 16)
        path = fields[5] if len(fields) > 5 else ""
        counts["mappings"] += 1
        counts["one_page"] += end - start == PAGE
        if path:  # UML's guest memory is its physmem file
            kind = ("young" if perms.startswith("rw") else "clean" if perms.startswith("r")
                    else "old")
            counts[kind] += 1
        if prev is not None and prev[1] == start and prev[3] == path and path:
            if prev[2] + (prev[1] - prev[0]) == offset:
                counts["split_by_access"] += 1
            else:
                counts["split_by_scatter"] += 1
                counts["scatter_lower"] += offset < prev[2]
        prev = (start, end, offset, path)
    return counts


NEAR_CAP = 0.9  # a run that failed this close to the cap is said to have been there


def cap_note(peak: int | None, cap: int | None) -> str | None:
    """What to add to the record of a run that failed (stalled, crashed) while a guest
    process was near the host's mapping cap: UML 7.2 stalls or dies of SIGSEGV there, and
    nothing in the guest can tell (None: not near it, or unknown)."""
    if peak is None or not cap or peak < NEAR_CAP * cap:
        return None
    return (f"a guest process held {peak} host mappings, {100 * peak / cap:.0f} % of the "
            f"host's cap (vm.max_map_count {cap}): user-mode Linux stalls or crashes there "
            f"(docs/sandboxes.md)")


class MapWatch:
    """Samples ``leader``'s tree every ``poll_s`` in a thread; ``hit`` is set once its
    largest process has stayed within AT_CAP_SLACK of ``cap`` for ``window_s``."""

    def __init__(self, leader: int, cap: int | None, window_s: float | None,
                 poll_s: float = POLL_S) -> None:
        self.leader, self.cap, self.poll_s = leader, cap, poll_s
        self.window_s = window_s or DEFAULT_WINDOW_S
        self.peak: int | None = None
        self.hit = threading.Event()
        self._stop = threading.Event()
        self._since: float | None = None
        self._thread = threading.Thread(target=self._loop, name="uml-maps", daemon=True)

    def start(self) -> MapWatch:
        self._thread.start()
        return self

    def stop(self) -> int | None:
        """Stop sampling (after a last look); the peak count seen (None: never sampled)."""
        self._stop.set()
        self._thread.join()
        return self.peak

    def sample(self, now: float) -> None:
        """One look: the peak, and the time at the cap."""
        count = session_maps(self.leader)
        if count:
            self.peak = max(self.peak or 0, count)
        if self.cap and count >= self.cap - AT_CAP_SLACK:
            self._since = now if self._since is None else self._since
            if now - self._since >= self.window_s:
                self.hit.set()
        else:
            self._since = None

    def _loop(self) -> None:
        while not self.hit.is_set():
            self.sample(time.monotonic())
            if self._stop.wait(self.poll_s):
                self.sample(time.monotonic())  # the last look, at the end
                return

    def detail(self) -> str:
        """What ended the session, for the run's termination detail."""
        return (f"a guest process sat at the host's mapping cap (vm.max_map_count "
                f"{self.cap}: {self.peak} mappings) for {self.window_s:g} s; user-mode "
                f"Linux cannot map more of its memory (docs/sandboxes.md)")

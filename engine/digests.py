"""Whether a file still holds the bytes a digest was taken of, without hashing it again
while it has not changed.

A run checks every weight file it will read against its split's SHA-256 (docs/engine.md).
Hashing a 560 MiB pipeline takes about half a second, more than many a run's makespan, and
the default reproduction hashes the same files hundreds of times. A file's stat stamp
(device, inode, size, modification and change times to the nanosecond) is remembered
beside the digest it had: the change time moves with every write, and no tool can set it
back, so an unchanged stamp means unchanged bytes. Two exceptions, both closed here:
a file changed within ``RACY_S`` of the check is never remembered, as the same clock tick
could hold a later write (git's "racy clean" case); and a write through a shared writable
mapping moves the times only when it dirties a clean page, so a page dirtied before the
check could change again unseen (twenty-fourth held-out pass M1). The file is written
back (fsync) before its stamp is taken: every page is clean then, and its next write
through any mapping faults and moves the change time. That holds on the disk file
systems of ``STAMPED_FS``; on others (tmpfs, where a write through a mapping never moves
the times: twenty-fifth pass M1; network and FUSE ones) and where a file cannot be
written back (a read-only mount, as a sandbox guest's) a stamp is never remembered.

Either way the file's pages are read, so they are in the page cache before the run's
child reads them: charged to the checking process, not to the measured child's cgroup,
as when every check hashed (docs/measurement.md, ``page_cache``)."""

from __future__ import annotations

import functools
import hashlib
import os
import re
import time
from pathlib import Path

from engine.files import cache_dir, lies_under, write_text_atomic

RACY_S = 2.0
_CHUNK = 1 << 20
# file systems whose writes through a mapping move a file's times once its pages are clean
STAMPED_FS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs"})


@functools.cache
def _mounts() -> tuple[tuple[str, str], ...]:
    """(mount point, file system type) of this process's mounts, in mount order."""
    try:
        text = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return ()
    found = []
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) > 4 and right:
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            found.append((point, right.split()[0]))
    return tuple(found)


def _stamped_fs(path: str | os.PathLike) -> bool:
    """Whether ``path`` lies on one of ``STAMPED_FS`` (the last mount over it decides)."""
    real = os.path.realpath(path)
    fs, depth = None, -1
    for point, kind in _mounts():
        if lies_under(real, point) and len(point) >= depth:
            fs, depth = kind, len(point)
    return fs in STAMPED_FS


def _entry(path: str | os.PathLike) -> Path | None:
    """The cache file of ``path`` as it is now, or None where it changed too recently."""
    st = os.stat(path)
    if time.time() - st.st_ctime < RACY_S:
        return None
    stamp = "\0".join(map(str, (os.path.abspath(path), st.st_dev, st.st_ino, st.st_size,
                                st.st_mtime_ns, st.st_ctime_ns)))
    key = hashlib.sha256(stamp.encode()).hexdigest()
    return cache_dir("EDGEPROF_DIGEST_CACHE", "digests") / key[:2] / key


def _read_through(path: str | os.PathLike) -> None:
    """Every page of the file read once (into the page cache), through one small buffer."""
    buffer = bytearray(_CHUNK)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buffer):
            pass


def holds(path: str | os.PathLike, sha256: str) -> bool:
    """Whether the file at ``path`` has SHA-256 ``sha256`` (hex). A cache that cannot be
    read or written (a read-only home, as in a sandbox's guest) only costs the hash."""
    entry = _entry(path)
    if entry is not None:
        try:
            known = entry.read_text()
        except OSError:
            known = None
        if known == sha256:
            _read_through(path)
            return True
    with open(path, "rb") as f:
        settled = None
        if _stamped_fs(path):
            try:
                os.fsync(f.fileno())  # every page clean: its next write moves the stamp
                settled = _entry(path)
            except OSError:
                pass
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    if settled is not None and digest == sha256 and _entry(path) == settled:
        try:
            settled.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(settled, digest)
        except OSError:
            pass
    return digest == sha256

"""engine.digests: a file's digest is taken again whenever its bytes may have changed, and
only then; every check reads the file's pages (the kernel's read counter says so)."""

from __future__ import annotations

import hashlib
import mmap
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from engine import digests


@pytest.fixture
def tmp_path(tmp_path):
    """A folder on a file system whose stamps are remembered (STAMPED_FS): pytest's own,
    or, where /tmp is a tmpfs (Debian 13's default), one beside the tests."""
    if digests._stamped_fs(tmp_path):
        yield tmp_path
        return
    here = Path(__file__).resolve().parent
    if not digests._stamped_fs(here):
        pytest.skip(f"neither {tmp_path} nor {here} is on a file system of STAMPED_FS")
    folder = Path(tempfile.mkdtemp(prefix=".digests-", dir=here))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("EDGEPROF_DIGEST_CACHE", str(folder))
    return folder


def _later(monkeypatch, seconds: float) -> None:
    """The clock ``seconds`` ahead: files written now are past the racy window."""
    now = time.time
    monkeypatch.setattr(digests.time, "time", lambda: now() + seconds)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _no_hashing(monkeypatch) -> None:
    def refuse(f, algorithm):
        raise AssertionError(f"{f.name} hashed again")

    monkeypatch.setattr(digests.hashlib, "file_digest", refuse)


def test_a_file_is_checked_against_its_digest(tmp_path, cache):
    f = tmp_path / "w.bin"
    f.write_bytes(b"weights")
    assert digests.holds(f, _sha(b"weights"))
    assert not digests.holds(f, _sha(b"other"))


def test_an_unchanged_file_is_not_hashed_again(tmp_path, cache, monkeypatch):
    f = tmp_path / "w.bin"
    f.write_bytes(os.urandom(4096))
    digest = _sha(f.read_bytes())
    _later(monkeypatch, 2 * digests.RACY_S)
    assert digests.holds(f, digest)
    _no_hashing(monkeypatch)
    assert digests.holds(f, digest)
    # a wrong digest is never taken from the cache
    with pytest.raises(AssertionError, match="hashed again"):
        digests.holds(f, _sha(b"other"))


def test_bytes_rewritten_in_place_with_the_old_size_and_mtime_are_seen(tmp_path, cache,
                                                                        monkeypatch):
    f = tmp_path / "w.bin"
    f.write_bytes(b"A" * 4096)
    digest = _sha(b"A" * 4096)
    _later(monkeypatch, 2 * digests.RACY_S)
    assert digests.holds(f, digest)
    st = os.stat(f)
    time.sleep(0.05)  # past the kernel's coarse clock tick
    with open(f, "r+b") as handle:  # same inode, same size
        handle.write(b"B")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))  # the old modification time back
    assert os.stat(f).st_mtime_ns == st.st_mtime_ns and os.stat(f).st_ino == st.st_ino
    assert not digests.holds(f, digest)


def test_a_file_changed_within_the_racy_window_is_never_remembered(tmp_path, cache):
    f = tmp_path / "w.bin"
    f.write_bytes(b"weights")
    assert digests.holds(f, _sha(b"weights"))
    assert not cache.exists() or not any(p.is_file() for p in cache.rglob("*"))


def test_a_cache_that_cannot_be_written_costs_only_the_hash(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("EDGEPROF_DIGEST_CACHE", str(blocker))
    f = tmp_path / "w.bin"
    f.write_bytes(b"weights")
    _later(monkeypatch, 2 * digests.RACY_S)
    assert digests.holds(f, _sha(b"weights"))
    assert not digests.holds(f, _sha(b"other"))


def _rchar() -> int:
    """Bytes this process has read by read(2) and kin (the kernel's count, page cache
    hits included)."""
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


def test_a_remembered_file_is_still_read_into_the_page_cache(tmp_path, cache, monkeypatch):
    f = tmp_path / "w.bin"
    data = os.urandom(3 << 20)
    f.write_bytes(data)
    _later(monkeypatch, 2 * digests.RACY_S)
    assert digests.holds(f, _sha(data))
    _no_hashing(monkeypatch)
    before = _rchar()
    assert digests.holds(f, _sha(data))
    assert _rchar() - before >= len(data)


def test_a_page_dirtied_through_a_mapping_before_the_check_cannot_change_unseen(tmp_path,
                                                                               cache):
    """Twenty-fourth held-out pass M1: a write through a shared mapping moves the file's
    times only when it dirties a clean page. A partial whose page was dirtied (with its
    own bytes) before a check was remembered, then changed through the same mapping with
    its stamp unmoved, and every later run read the changed weights unrefused. The check
    writes the file back before taking its stamp: the change then moves it."""
    f = tmp_path / "w.bin"
    data = os.urandom(8192)
    f.write_bytes(data)
    with open(f, "r+b") as handle, mmap.mmap(handle.fileno(), 0) as mapped:
        mapped[0] = data[0]  # the page dirty, the bytes the same
        time.sleep(digests.RACY_S + 0.2)  # past the racy window: the check remembers it
        assert digests.holds(f, _sha(data))
        stamp = os.stat(f).st_ctime_ns
        mapped[0] = (data[0] + 1) % 256  # a weight changed through the same mapping
        assert os.stat(f).st_ctime_ns != stamp
        assert not digests.holds(f, _sha(data))


def test_a_file_on_tmpfs_is_hashed_at_every_check(tmp_path, cache, monkeypatch):
    """Twenty-fifth held-out pass M1: on tmpfs a write through a shared mapping never
    moves a file's times, written back or not; a split in /dev/shm was remembered, changed
    through a mapping, and read unrefused. Only the disk file systems whose mapped writes
    move the times (STAMPED_FS) are remembered; the kernel's own mount table says which
    one a file is on."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or digests._stamped_fs(shm):
        pytest.skip("no tmpfs at /dev/shm here")
    f = shm / f"edgeprof-test-{os.getpid()}.bin"
    data = os.urandom(4096)
    f.write_bytes(data)
    try:
        _later(monkeypatch, 2 * digests.RACY_S)
        assert digests.holds(f, _sha(data))
        _no_hashing(monkeypatch)
        with pytest.raises(AssertionError, match="hashed again"):
            digests.holds(f, _sha(data))
    finally:
        f.unlink()

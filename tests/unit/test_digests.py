"""engine.digests: a file's digest is taken again whenever its bytes may have changed, and
only then; every check reads the file's pages (the kernel's read counter says so)."""

from __future__ import annotations

import hashlib
import os
import time

import pytest

from engine import digests


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
    def refuse(path):
        raise AssertionError(f"{path} hashed again")

    monkeypatch.setattr(digests, "sha256_file", refuse)


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

"""Writing results so that a reader, or a killed job, never sees half a file."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

_UMASK = os.umask(0)
os.umask(_UMASK)


def normal_mode(path: str | os.PathLike, directory: bool = False) -> None:
    """mkstemp/mkdtemp create private (0600/0700) entries; results should be shareable."""
    os.chmod(path, (0o777 if directory else 0o666) & ~_UMASK)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside ``path`` that replaces it only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    normal_mode(tmp)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def parse_json(text: str | bytes, finite: bool = False) -> object:
    """``json.loads`` where every problem is a ValueError: also nesting too deep for the
    parser, a key given twice, and (``finite``) NaN and Infinity, which are not JSON."""
    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not a valid number here")

    def unique(pairs: list[tuple[str, object]]) -> dict:
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys):  # json would keep the last silently
            raise ValueError(f"key {next(k for k in keys if keys.count(k) > 1)!r} appears "
                             f"twice")
        return dict(pairs)

    try:
        return json.loads(text, parse_constant=refuse if finite else None,
                          object_pairs_hook=unique)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def sha256_file(path: str | os.PathLike) -> str:
    """The hex SHA-256 of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)

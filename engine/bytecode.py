"""The engine's compiled bytecode, written once for every job and sandbox guest to read.

Where ``PYTHONDONTWRITEBYTECODE`` is set (as on this project's machines), every
``python -m engine`` process compiled every engine module it imported from source: about
0.3 s of each native run's supervisor and child together, on a loaded host
(docs/performance.md). The workflow writes the engine's bytecode into its ``__pycache__``
folders (where ``PYTHONPYCACHEPREFIX`` points, if set) before its jobs start; the jobs and
their sandbox guests (which see the host's files read-only) read it from there.

The files are checked-hash pycs: an import hashes the source and uses the cached code only
if it was compiled from those very bytes, so an edit is never run stale, whatever its
times; a module that changed since is compiled in memory, as before. The compiled code is
the interpreter's own, so what a run computes is unchanged; its start-up, before the
measured pipeline's t0, no longer holds the compiler's memory."""

from __future__ import annotations

import importlib.util
import os
import py_compile
from pathlib import Path

ENGINE_DIR = Path(__file__).resolve().parent
_CHECKED_HASH = 0b11  # a pyc's flags: hash-based, checked at import (PEP 552)


def _current(source: bytes, cached: Path) -> bool:
    """Whether ``cached`` is a checked-hash pyc of ``source`` for this interpreter."""
    try:
        with open(cached, "rb") as f:
            head = f.read(16)
    except OSError:
        return False
    return (head[:4] == importlib.util.MAGIC_NUMBER
            and int.from_bytes(head[4:8], "little") == _CHECKED_HASH
            and head[8:16] == importlib.util.source_hash(source))


def compile_package(package: str | os.PathLike = ENGINE_DIR) -> bool:
    """Compile every module of ``package`` whose cached code is missing or was compiled
    from other bytes. False where some could not be compiled or written (a read-only
    checkout): those are compiled in memory at each import, as without this, so nothing
    else depends on it."""
    ok = True
    for path in sorted(Path(package).rglob("*.py")):
        cached = importlib.util.cache_from_source(os.fspath(path))
        try:
            if _current(path.read_bytes(), Path(cached)):
                continue
            py_compile.compile(os.fspath(path), cfile=cached, doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
        except (OSError, py_compile.PyCompileError):
            ok = False
    return ok

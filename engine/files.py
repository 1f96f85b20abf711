"""Writing results so that a reader, or a killed job, never sees half a file."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from engine.errors import EdgeprofError

# what Snakemake leaves in each folder a rule declares as a directory() output (a run
# folder, the split's partials): the workflow's, never a user's file
SNAKEMAKE_MARKER = ".snakemake_timestamp"

_UMASK = os.umask(0)
os.umask(_UMASK)


def normal_mode(path: str | os.PathLike, directory: bool = False) -> None:
    """mkstemp/mkdtemp create private (0600/0700) entries; results should be shareable."""
    os.chmod(path, (0o777 if directory else 0o666) & ~_UMASK)


# a file that could not be written for want of room (a full disk, a quota, a file size
# limit) or by the device: the machine's state, not bad input (exit 1, not 2)
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})


def is_write_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is a file that could not be written (``WRITE_ERRNOS``)."""
    return isinstance(exc, OSError) and exc.errno in WRITE_ERRNOS


def write_failure(exc: OSError) -> str:
    """One line naming the file and the error number: "cannot write F: why (ENAME)"."""
    where = f" {exc.filename}" if exc.filename else ""
    name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    # the errno's own words: pyarrow's strerror is its whole message ("Error writing
    # bytes to file. Detail: [errno 27] File too large"), where other writers' is these
    why = os.strerror(exc.errno) if exc.errno else (exc.strerror or str(exc))
    return f"cannot write{where}: {why} ({name})"


@contextlib.contextmanager
def script_errors() -> Iterator[None]:
    """A Snakemake script's failure reported as the engine's verbs report theirs: one
    ``error:`` line on the console (the script's stderr is its rule's log) and in the log,
    exit 1, for bad input (an EdgeprofError) and for a file that could not be written
    alike. Anything else is a bug and keeps its traceback."""
    try:
        yield
    except EdgeprofError as exc:
        message = str(exc)
    except OSError as exc:
        if not is_write_failure(exc):
            raise
        message = write_failure(exc)
    else:
        return
    print(f"error: {message}", file=sys.__stderr__)
    sys.exit(f"error: {message}")


@contextlib.contextmanager
def naming(path: str | os.PathLike) -> Iterator[None]:
    """An OSError raised in the block without a file name (a write to an open file: a
    full disk, a quota) names ``path``."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            exc.filename = os.fspath(path)
        raise


@contextlib.contextmanager
def made_folder(path: str | os.PathLike) -> Iterator[Path]:
    """``path`` created (with its missing parents) for the block; if the block fails, the
    folders it created are removed again where they are still empty: a failed writer
    leaves no empty output folder behind."""
    path = Path(path)
    missing = [p for p in (path, *path.parents) if not p.exists()]
    path.mkdir(parents=True, exist_ok=True)
    try:
        yield path
    except BaseException:
        for folder in missing:  # deepest first
            try:
                folder.rmdir()
            except OSError:  # not empty (or gone): keep it and what lies above
                break
        raise


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside ``path`` that replaces it only if the block succeeds; the
    folders it made for it go again if it does not."""
    path = Path(path)
    made = []  # the missing folders on the way, deepest first
    for folder in (path.parent, *path.parent.parents):
        if folder.exists():
            break
        made.append(folder)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except BaseException:
        _remove_empty(made)
        raise
    os.close(fd)
    normal_mode(tmp)
    try:
        with naming(path):
            yield Path(tmp)
        try:
            os.replace(tmp, path)
        except OSError as exc:  # name the caller's path, not the hidden temporary file
            raise OSError(exc.errno, exc.strerror, os.fspath(path)) from None
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        _remove_empty(made)
        raise


def _remove_empty(folders: list[Path]) -> None:
    for folder in folders:  # deepest first; one another writer filled stays
        try:
            folder.rmdir()
        except OSError:
            return


@contextlib.contextmanager
def staged(out: Path, prefix: str) -> Iterator[Path]:
    """A hidden folder in the existing folder ``out`` (``<prefix><pid>.<random>``) to write
    a set of outputs into, under signals that unwind (SIGINT, SIGTERM, SIGHUP). When the
    block ends well, its files replace their namesakes in ``out``, and the files of each
    of its folders those in ``out``'s folder of that name (created if missing; nothing
    else in it is touched), with those signals held back: an interrupted writer leaves
    none of the set and a finished one all of it. The hidden folder goes either way; one
    a SIGKILLed writer left is removed by the next."""
    from engine.procs import stamped_tempdir, sweep
    from engine.signals import committed, signals_deferred, signals_unwind

    sweep(out, prefix)
    tmp = stamped_tempdir(prefix, out)
    try:
        with signals_unwind():
            try:
                yield tmp
            except OSError as exc:  # name the file the user asked for, not its stand-in
                if exc.filename and Path(exc.filename).is_relative_to(tmp):
                    exc.filename = os.fspath(out / Path(exc.filename).relative_to(tmp))
                raise
            _check_targets(tmp, out)
            with signals_deferred():
                for entry in sorted(tmp.iterdir()):
                    dest = out / entry.name
                    if entry.is_dir():
                        dest.mkdir(exist_ok=True)
                        for item in sorted(entry.iterdir()):
                            os.replace(item, dest / item.name)
                    else:
                        os.replace(entry, dest)
                committed()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _check_targets(tmp: Path, out: Path) -> None:
    """Every place ``staged`` moves a file of ``tmp`` into takes it (a folder for a
    folder, a file or nothing for a file), checked before the first move: a folder of the
    user's where a table goes refuses the whole set, naming the user's path."""
    def refuse(dest: Path, want: str) -> None:
        raise EdgeprofError(f"cannot write {dest}: it is {file_kind(dest)}, where {want} "
                            f"goes; move it away or choose another output folder")

    for entry in tmp.iterdir():
        dest = out / entry.name
        if entry.is_dir():
            if dest.is_symlink() or file_kind(dest) not in ("missing", "a folder"):
                refuse(dest, "a folder")
            for item in entry.iterdir():
                if file_kind(dest / item.name) not in ("missing", "a regular file"):
                    refuse(dest / item.name, "a file")
        elif file_kind(dest) not in ("missing", "a regular file"):
            refuse(dest, "a file")


def flat_paths(*items: str | os.PathLike | Iterable[str | os.PathLike] | None) -> list[str]:
    """The paths of options that give one path, several, or none, as one list."""
    out: list[str] = []
    for item in items:
        if item is None:
            continue
        out.extend([os.fspath(item)] if isinstance(item, (str, os.PathLike))
                   else map(os.fspath, item))
    return out


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


def lies_under(path: str, top: str) -> bool:
    """Whether the absolute ``path`` is ``top`` or inside it (``/`` holds everything)."""
    return path == top or path.startswith(top.rstrip("/") + "/")


def sha256_file(path: str | os.PathLike) -> str:
    """The hex SHA-256 of a file's bytes (read in chunks: a 500 MiB file is not held at once)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def file_kind(path: str | os.PathLike) -> str:
    """What ``path`` is, as a message says it: "a regular file", "a folder", "a FIFO",
    "a device", "a socket", or "missing"."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "missing"
    except NotADirectoryError:
        return "missing"
    except OSError as exc:  # ELOOP, EACCES on the way
        return f"unreadable ({exc.strerror})"
    for test, name in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device")):
        if test(mode):
            return name
    return "not a regular file"


def read_regular(path: str | os.PathLike, what: str, max_bytes: int) -> bytes:
    """The bytes of ``path``, which must be a regular file of at most ``max_bytes``:
    checked before opening (a FIFO would block, a device never end), so a wrong input is
    one ValueError naming the path, ``what`` it should be and what it is instead."""
    kind = file_kind(path)
    if kind == "missing":
        raise ValueError(f"{what} {os.fspath(path)} does not exist")
    if kind != "a regular file":
        raise ValueError(f"{what} {os.fspath(path)} is {kind}, not a regular file")
    with open(path, "rb") as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"{what} {os.fspath(path)} is larger than {max_bytes // 2**20} MiB; "
                         f"not a {what}")
    return data


def check_output_file(path: str | os.PathLike, what: str) -> Path:
    """``path`` as a file a command may write at its end, checked before any work: a
    ValueError naming ``what`` and the fix when it is empty, a folder or something else
    that is not a file, or its folder cannot be created or written."""
    text = os.fspath(path)
    if not text.strip():
        raise ValueError(f"{what} is empty; name the file to write")
    out = Path(text)
    kind = file_kind(out)
    if kind not in ("missing", "a regular file"):
        raise ValueError(f"{what} {out} is {kind}; name a file")
    parent = out.parent
    existing = next((p for p in (parent, *parent.parents) if p.exists()), None)
    if existing is None or not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{what} {out}: cannot write into {existing or parent}; name a "
                         f"writable place")
    return out


# Columns of measurements, by their names' units and statistics: read_table refuses text
# in them (a table edited by hand) rather than let arithmetic on it end in a traceback.
MEASURED = re.compile(r"(_ns|_s|_bytes|_cpus|_delta|_median|_ci_low|_ci_high|_n|_hz|_start"
                      r"|_end|_pct|_mib|_us)$")
TEXT_COLUMNS = {"running_at_end"}  # the tasks running at a run's end, by name
# Columns that name what a row is about: read_table refuses a number or other non-text in
# them (a policy 3.0 would reach the policy parser as a float)
NAME_COLUMNS = {"policy", "pipeline", "limit", "run_id", "termination", "networks",
                "backend", "sandbox", "runtime", "size_bin", "policy_family", "arrival_mode",
                "network", "kind", "mode"}
KEY_COLUMNS = {"policy", "pipeline", "limit", "run_id", "termination", "network"}  # never missing


def read_table(path: str | os.PathLike, fix: str = "rerun the aggregate stage",
               columns: Iterable[str] = ()):
    """The parquet table at ``path`` as a DataFrame; an EdgeprofError naming the file and
    ``fix`` when it is missing, not a regular file, not a readable table, or without one
    of ``columns`` (another table in its place)."""
    import pandas as pd

    from engine.errors import EdgeprofError

    kind = file_kind(path)
    if kind != "a regular file":
        raise EdgeprofError(f"{os.fspath(path)} is {kind}, not a table; {fix}")
    try:
        table = pd.read_parquet(path)
    except (OSError, ValueError) as exc:  # pyarrow's errors are both
        raise EdgeprofError(f"{os.fspath(path)} is not a readable table "
                            f"({type(exc).__name__}); {fix}") from None
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise EdgeprofError(f"{os.fspath(path)} has no column {missing[0]!r}: another table "
                            f"is in its place; {fix}")
    for col in table.columns:
        values = table[col]
        if col in NAME_COLUMNS:
            if col in KEY_COLUMNS and values.isna().any():
                raise EdgeprofError(f"{os.fspath(path)}: column {col!r} has a row without a "
                                    f"value (an edited or another table); {fix}")
            if values.notna().any() and pd.api.types.infer_dtype(values, skipna=True) != "string":
                # a categorical of names infers as "categorical": its distinct values decide
                odd = next((v for v in pd.unique(values.dropna()) if not isinstance(v, str)),
                           None)
                if odd is not None:
                    odd = odd.item() if hasattr(odd, "item") else odd  # numpy's scalar
                    raise EdgeprofError(f"{os.fspath(path)}: column {col!r} holds {odd!r}, where "
                                        f"names belong (an edited or another table); {fix}")
            continue
        if (MEASURED.search(str(col)) and col not in TEXT_COLUMNS
                and not (pd.api.types.is_numeric_dtype(values)
                         or pd.api.types.is_bool_dtype(values) or values.isna().all())):
            example = values.dropna().iloc[0]
            raise EdgeprofError(f"{os.fspath(path)}: column {col!r} holds {example!r}, where "
                                f"numbers belong (an edited or another table); {fix}")
    return table


def cache_dir(env: str, name: str) -> Path:
    """The cache folder of one of the things edgeprof builds once per machine (the uml
    kernel, the qemu guest, the real-Caffe chroot): ``$env`` if set, else
    ``$XDG_CACHE_HOME`` (or ~/.cache) ``/edgeprof/<name>``."""
    if os.environ.get(env):
        return Path(os.environ[env])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "edgeprof" / name

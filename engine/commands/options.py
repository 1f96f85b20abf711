"""What several verbs check the same way: numbers in range, sizes, output paths, the
runtime option. Each error is an EdgeprofError naming the option (exit 2)."""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import logging
import math
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from engine.errors import EdgeprofError
from engine.runtime import DEFAULT_RUNTIME, RUNTIMES

log = logging.getLogger(__name__)

# bounds shared by the verbs and the config schema (workflow/schemas/config.schema.yaml)
MAX_BATCH = 10_000
MAX_LIMIT = 2**50  # 1 PiB: a memory limit past any machine's RAM is a typo
# below 1 MiB not even the supervisor's interpreter starts in the cgroup's sandbox: a run
# there measures nothing (twenty-fourth held-out pass L1: 4K ended as a crash that left
# an error folder it said it had not written)
MIN_LIMIT = 2**20
MIN_LIMIT_WHY = "at least 1M (below it no run starts: the interpreter alone needs more)"
MAX_BLAS_THREADS = 1024
MAX_SEED = 2**32 - 1  # numpy's legacy seeding and the pipelines' seeds
MIN_SAMPLE_HZ, MAX_SAMPLE_HZ = 0.01, 10_000
MAX_ORDERINGS = 10_000  # orderings a multi-worker cell's peak range is replayed over
MIN_RESAMPLES, MAX_RESAMPLES = 20, 100_000  # bootstrap resamples (the schema's too)


def positive(value: float | None, flag: str, allow_zero: bool = False,
             most: float = float("inf")) -> None:
    """A number option within its range (NaN and infinity never are)."""
    if value is None:
        return
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise EdgeprofError(f"{flag} {value}: must be a number {'>= 0' if allow_zero else '> 0'}")
    if value > most:
        shown = f"{most:,}" if float(most).is_integer() else f"{most:g}"
        raise EdgeprofError(f"{flag} {value}: must be at most {shown}")


def size(text: str, flag: str) -> int:
    """A size option, its errors naming the option."""
    from engine.units import parse_size

    try:
        return parse_size(text)
    except EdgeprofError as exc:
        raise EdgeprofError(f"{flag}: {exc}") from None


def swap(text: str | None) -> int | None:
    """--swap: a size, 0 (in any unit), or max / not given (None: unlimited)."""
    import re

    if text in (None, "max"):
        return None
    if re.fullmatch(r"\s*0+(\.0*)?\s*([KMGT]?(i?B)?)?\s*", text, re.IGNORECASE):
        return 0
    return size(text, "--swap")


def limit_size(text: str, flag: str = "--limit") -> int:
    """A memory limit: a size from MIN_LIMIT to MAX_LIMIT."""
    limit = size(text, flag)
    if limit > MAX_LIMIT:
        raise EdgeprofError(f"{flag} {text}: at most {MAX_LIMIT >> 50} PiB")
    if limit < MIN_LIMIT:
        raise EdgeprofError(f"{flag} {text}: {MIN_LIMIT_WHY}")
    return limit


def output_file(path: str, option: str) -> Path:
    """An output file checked before the work (engine.files.check_output_file), never in
    a run folder."""
    from engine.files import check_output_file

    try:
        out = check_output_file(path, option)
    except ValueError as exc:
        raise EdgeprofError(str(exc)) from None
    not_over_inputs(out, option, [], "")  # never into a run folder
    return out


def not_over_inputs(out: str | os.PathLike, option: str,
                    inputs: Iterable[str | os.PathLike], what: str) -> None:
    """Refuse an output that is one of the command's ``inputs`` (files or folders) or lies
    in one, or lies in a run folder, links resolved: one line naming it, before the work."""
    places = {Path(os.path.abspath(out)), Path(os.path.realpath(out))}
    for item in inputs:
        srcs = {Path(os.path.abspath(item)), Path(os.path.realpath(item))}
        if any(t == s or s in t.parents for t in places for s in srcs):
            raise EdgeprofError(f"{option} {out} would overwrite {what} ({item}); write the "
                                f"output elsewhere")
    run = next((parent for t in places for parent in (t, *t.parents) if is_run(parent)),
               None)
    if run is not None:
        raise EdgeprofError(f"{option} {out} is or lies in the run folder {run}; write the "
                            f"output elsewhere")


def is_run(folder: Path) -> bool:
    """A run folder: its meta.json is a run record (engine.runner.meta: it carries its
    record_digest), or one damaged beside the tables a run writes; not any file of that
    name (a project's own meta.json)."""
    from engine.files import parse_json

    meta = folder / "meta.json"
    try:
        if not meta.is_file():
            return False
        record = parse_json(meta.read_bytes()) if meta.stat().st_size <= 2**24 else None
    except ValueError:
        record = None
    except OSError:
        return False
    if isinstance(record, dict):
        return {"pipeline", "policy", "record_digest"} <= set(record)
    return (folder / "tasks.csv").is_file() or (folder / "networks.csv").is_file()


@contextlib.contextmanager
def folder_lock(folder: Path, option: str, verb: str, what: str) -> Iterator[None]:
    """An exclusive lock on ``what`` in the (existing) folder (a hidden ``.<what>.lock``
    file), held while ``verb`` writes it: a second one at the same time is refused, so two
    never leave a mixed set, while writers of other sets share the folder. The kernel
    drops the lock when the process ends, however it ends; one that ends normally removes
    the lock file too."""
    lock = folder / f".{what}.lock"
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise EdgeprofError(f"{option} {folder}: another {verb} is writing {what} into "
                                f"it; wait for it or choose another {option}") from None
        try:  # still the file at that name, not one a writer just ended and removed
            if os.stat(lock).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        yield
    finally:
        # removed before unlocking: a writer that opens the name afterwards makes a new
        # lock file, and one that opened this one finds it gone and opens again
        with contextlib.suppress(OSError):
            os.unlink(lock)
        os.close(fd)


def output_dir(path: str, option: str) -> Path:
    """An output folder, checked before the work: not empty, not a file, not in a run
    folder."""
    from engine.files import file_kind

    if not path.strip():
        raise EdgeprofError(f"{option} is empty; name the folder to write into")
    kind = file_kind(path)
    if kind not in ("missing", "a folder"):
        raise EdgeprofError(f"{option} {path} is {kind}; name a folder")
    not_over_inputs(path, option, [], "")  # never into a run folder
    return Path(path)


def add_runtime_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runtime", choices=RUNTIMES, default=DEFAULT_RUNTIME,
                   help="what each stage allocates and frees: lean (the engine's own: "
                        "weights from their LOAD to their EXEC) or caffe (as Caffe 1.0 "
                        "under EdgeCaffe: every parameter at INIT, a parsed message per "
                        "LOAD, activations kept to the network's end); default lean")


class _OldSpelling(argparse.Action):
    """An option under its old name: accepted, with a warning that names the new one."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        log.warning(f"warning: {option_string} is now --{self.dest}; {option_string} will be "
                    "removed in the next release")
        setattr(namespace, self.dest, values)


def add_split_option(p: argparse.ArgumentParser, help: str, default: object = None,
                     nargs: str | None = None) -> None:
    """--split, the folder of split networks (python -m engine split's --out), required
    unless it has a default. Its old name --models (which read as the zoo's, or the
    slowdown model's) is accepted with a warning for one release."""
    group = p.add_mutually_exclusive_group(required=default is None)
    group.add_argument("--split", nargs=nargs, default=default, help=help)
    group.add_argument("--models", dest="split", nargs=nargs, action=_OldSpelling,
                       default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def add_tables_options(p: argparse.ArgumentParser) -> None:
    """--tables and --split of the model's verbs: one campaign or several."""
    p.add_argument("--tables", nargs="+", default=["results/tables"],
                   help="folder(s) of runs/tasks/networks.parquet, one per campaign "
                   "(default results/tables)")
    add_split_option(p, nargs="+", default=["results/split"],
                     help="folder(s) of the split networks' *.description.json: one, or one "
                     "per --tables folder (default results/split)")


def add_model_tables_parser(sub: argparse._SubParsersAction, name: str, what: str,
                            writes: str) -> argparse.ArgumentParser:
    """A verb that reads a campaign's tables and a model file and writes tables."""
    p = sub.add_parser(name, help=what)
    add_tables_options(p)
    p.add_argument("--model", default="results/model/model.json")
    p.add_argument("--out", default="results/model", help=f"folder for {writes}")
    return p

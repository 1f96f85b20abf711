"""``python -m engine tidy --out DIR RUN...``: the tidy tables (runs, tasks, networks,
samples as Parquet) of run folders, one folder per run under DIR named as the run's own
(``rep0``, ...): what the workflow's aggregate reads of each run, for a look at a few."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import time
from pathlib import Path

from engine.commands.options import not_over_inputs, output_dir
from engine.errors import EdgeprofError
from engine.files import file_kind, staged

log = logging.getLogger(__name__)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tidy", help="tidy tables (Parquet) of run folders, one folder each "
                       "under --out")
    p.add_argument("--out", help="folder for one <run folder name>/ per run")
    p.add_argument("runs", nargs="*", help="run folders written by run")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> None:
    if not args.out or not args.runs:
        raise EdgeprofError("give --out and the run folders to tidy")
    _tidy(*_check(args.out, args.runs))


def _check(out_arg: str, runs: list[str]) -> tuple[Path, list[str], list[str]]:
    """The --out folder and the runs, checked before anything is written: the folder, the
    runs, and the name each run's tables go under."""
    from engine.analysis.tablefiles import TIDY_DIGESTS
    from engine.analysis.tidy import TIDY_TABLES

    for run in runs:  # the inputs first: a FIFO or a file is not a run folder
        if file_kind(run) != "a folder":
            raise EdgeprofError(f"{run} is {file_kind(run)}, not a run folder; give the "
                                f"folders python -m engine run wrote")
    out = output_dir(out_arg, "--out")
    # the name a run folder has ("runs/x/.." is "runs"): its tables go to --out/<name>
    names = [Path(os.path.abspath(run)).name for run in runs]
    for name in names:  # --out/<name> may be a run itself (--out its parent folder)
        not_over_inputs(out / name, "--out", runs, "a run it tidies")
        kind = file_kind(out / name)
        if kind not in ("missing", "a folder") or (out / name).is_symlink():
            raise EdgeprofError(f"--out {out}: {out / name}, where this run's tables go, is "
                                f"{'a link' if (out / name).is_symlink() else kind}; "
                                f"choose another --out")
        for table in [f"{t}.parquet" for t in TIDY_TABLES] + [TIDY_DIGESTS]:
            if file_kind(out / name / table) not in ("missing", "a regular file"):
                raise EdgeprofError(f"--out {out}: {out / name / table}, where a table of "
                                    f"this run goes, is {file_kind(out / name / table)}; "
                                    f"move it away or choose another --out")
    # a set is whole: what another tidy left in --out would read as one of this set's runs
    try:
        others = sorted(e.name for e in out.iterdir()
                        if not e.name.startswith(".") and e.name not in names)
    except FileNotFoundError:
        others = []
    if others:
        raise EdgeprofError(f"--out {out} holds {others[0]!r}"
                            f"{f' and {len(others) - 1} more' if len(others) > 1 else ''}, "
                            f"which this tidy does not write (a set tidied there before, "
                            f"which would mix with this one); remove it or choose another "
                            f"--out")
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise EdgeprofError(f"runs named {', '.join(twice)} more than once: each is written "
                            f"to --out/<its folder name>; tidy one run set per --out")
    return out, runs, names


def _tidy(out: Path, runs: list[str], names: list[str]) -> None:
    """The checked runs: every run read before anything is written (a damaged run leaves
    no output), then written whole."""
    from engine.analysis.tablefiles import write_tidy
    from engine.analysis.tidy import tidy_run

    t0 = time.perf_counter()
    tables = [(run, name, tidy_run(run)) for run, name in zip(runs, names)]
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        with staged(out, ".tidy.") as tmp:  # an interrupted tidy leaves none of its runs
            for _, name, tidy in tables:
                write_tidy(tidy, tmp / name)
    except BaseException:
        if created:  # nor the folder it made for them ("nothing written")
            with contextlib.suppress(OSError):
                out.rmdir()
        raise
    for run, name, tidy in tables:
        log.info(f"{run}: {len(tidy['tasks'])} tasks, {len(tidy['samples'])} samples -> "
                 f"{out / name}")
    log.info(f"{len(tables)} runs tidied in {time.perf_counter() - t0:.2f} s")

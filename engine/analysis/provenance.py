"""Provenance: each run the aggregate reads is the one the workflow planned, in its place.

``set_folders`` reads a run set's tidy folders (exactly its repetitions, each holding the
run its path names, tidied from the very run recorded there, unedited since), and
``check_inputs`` and ``check_settings`` refuse a run made from another campaign's inputs
or with other settings than the config's; ``refuse_copies`` one run reached twice.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from engine.analysis.tablefiles import check_tidy
from engine.analysis.tidy import record_digest, tidy_run
from engine.errors import EdgeprofError
from engine.schedule.names import policy_id


def set_folders(set_dir: str | os.PathLike, reps: int, probed: bool = True,
                runs_dir: str | os.PathLike | None = None,
                settings: Mapping[str, object] | None = None,
                pipeline_file: str | os.PathLike | None = None,
                split_dir: str | os.PathLike | None = None) -> list[Path]:
    """The per-run tidy folders of one run set's tidy folder
    (``tidy/<kind>/<pipeline>/<policy id>/<limit>``, as the workflow lays it out): exactly
    ``rep0`` .. ``rep<reps - 1>``, each holding the run its path names (pipeline, policy,
    limit, repetition, and probed or not), made with the set's ``settings``
    (``check_settings``) from the campaign's ``pipeline_file`` and the descriptions in its
    ``split_dir`` (``check_inputs``: not another campaign's pipeline of that name, nor
    another split's weights) and, given the run set's folder ``runs_dir``, the
    very run recorded there (its record's digest: not another campaign's run). A
    folder missing, one too many, a run tidied into another's place or redone by hand
    with other flags is refused, naming it and what to remove so that the workflow
    measures or tidies it anew: the aggregate would silently drop, add or misplace a run."""
    folder = Path(set_dir)
    fix = f"remove {folder} and run the workflow again (it tidies the set anew)"
    expected = [f"rep{i}" for i in range(reps)]
    try:
        present = sorted(e.name for e in folder.iterdir() if not e.name.startswith("."))
    except OSError as exc:
        raise EdgeprofError(f"cannot read the tidy folder {folder}: {exc.strerror}; "
                            f"{fix}") from None
    missing, stray = sorted(set(expected) - set(present)), sorted(set(present) - set(expected))
    if missing or stray:
        said = "; ".join(filter(None, [missing and f"no {', '.join(missing)}",
                                       stray and f"{', '.join(stray)} is not one of its "
                                                 f"{reps} runs"]))
        raise EdgeprofError(f"{folder}: {said}; {fix}")
    pipeline, folder_policy, limit = folder.parts[-3:]
    for i, name in enumerate(expected):
        check_tidy(folder / name, fix)
        runs = pd.read_parquet(folder / name / "runs.parquet")
        row = runs.iloc[0] if len(runs) == 1 else None
        # the run itself is wrong: measure it anew, and tidy it anew (the tidy set is
        # one output: Snakemake redoes it only when it is gone)
        run = None if runs_dir is None else Path(runs_dir) / name
        redo = (f"remove {run if run else 'its run folder'} and {folder}, and run the "
                f"workflow again: it measures the run anew")
        if (row is None or row["pipeline"] != pipeline or row["limit"] != limit
                or policy_id(str(row["policy"])) != folder_policy or row["rep"] != i):
            held = "no single run" if row is None else row["run_id"]
            # tidied from the run folder of its place: the run there is another (a redo)
            redone = (row is not None and run is not None
                      and row.get("record_digest") == record_digest(run))
            raise EdgeprofError(f"{folder / name} holds {held}, not "
                                f"{pipeline}/{folder_policy}/{limit}/rep{i}: "
                                + (f"the run in {run} is another run (redone by hand?); "
                                   f"{redo}" if redone else
                                   f"another run's tables copied into its place; {fix}"))
        if run is not None:
            _check_source(folder / name, run, row, fix, redo)
            _check_rederived(folder / name, run, fix)
        if bool(row.get("probed", True)) != probed:
            raise EdgeprofError(f"run {row['run_id']} was made "
                                f"{'without' if probed else 'with'} its probes, where the "
                                f"config's {'has them' if probed else 'is the unprobed twin'} "
                                f"(redone by hand?); {redo}")
        check_inputs(row, pipeline_file, split_dir, redo)
        if settings is not None:
            check_settings(runs, settings, redo)
    return [folder / name for name in expected]


@functools.lru_cache(maxsize=4096)
def _file_digest(path: str) -> str | None:
    """A pipeline or description file's SHA-256 (None: unreadable), once per aggregate:
    every run of a set reads the same pipeline, every run of a campaign the same few
    descriptions."""
    from engine.files import sha256_file

    try:
        return sha256_file(path)
    except OSError:
        return None


def check_inputs(row: Mapping, pipeline_file: str | os.PathLike | None,
                 split_dir: str | os.PathLike | None, fix: str) -> None:
    """The run of the runs-table ``row`` read the campaign's own pipeline file and network
    descriptions (their SHA-256s; a description holds its weights' digests): not another
    campaign's pipeline of the same name, nor another split's weights."""
    if pipeline_file is not None:
        ours = _file_digest(str(pipeline_file))
        if ours is None:
            raise EdgeprofError(f"cannot read the pipeline {pipeline_file}; run the workflow "
                                f"again (it draws the pipelines anew)")
        if row.get("pipeline_sha256") != ours:
            raise EdgeprofError(f"run {row['run_id']} ran another pipeline than "
                                f"{pipeline_file} (another campaign's, or another pipeline "
                                f"of that name); {fix}")
    if split_dir is None:
        return
    for name, digest in json.loads(row.get("descriptions") or "{}").items():
        if digest != _file_digest(str(Path(split_dir) / name)):
            raise EdgeprofError(f"run {row['run_id']} read another {name} than {split_dir}'s "
                                f"(other weights: another seed's split, or split again "
                                f"since); {fix}")


def _check_source(tidied: Path, run: Path, row: pd.Series, fix: str, redo: str) -> None:
    """The per-run tidy folder ``tidied`` holds the tables of the run folder ``run`` (its
    record's digest)."""
    if not (run / "meta.json").is_file():
        raise EdgeprofError(f"{run}, the run {tidied} was tidied from, is gone (or holds no "
                            f"meta.json); {redo}")
    recorded = record_digest(run)
    if recorded is None:
        raise EdgeprofError(f"{run}/meta.json, the record of the run {tidied} was tidied "
                            f"from, is unreadable (cut short or edited); {redo}")
    if row.get("record_digest") != recorded:
        raise EdgeprofError(f"{tidied} holds the tables of another run than {run} (their "
                            f"records differ: another campaign's, or the run was redone "
                            f"since); {fix}")


def _check_rederived(tidied: Path, run: Path, fix: str) -> None:
    """Each table of the per-run tidy folder ``tidied`` holds what tidying its run folder
    ``run`` gives now: a table edited or cut short after tidy wrote it is refused even
    when its digest file was rewritten to match (the run's record is the one source)."""
    import io

    for name, fresh in tidy_run(run).items():
        buf = io.BytesIO()
        fresh.to_parquet(buf)  # the same round trip as the stored table's
        stored = tidied / f"{name}.parquet"
        # the bytes tidy wrote, as a rule (the same writer on the same table): the tables
        # are then read back only where the bytes differ (another library version)
        if stored.read_bytes() == buf.getvalue():
            continue
        if not pd.read_parquet(stored).equals(pd.read_parquet(buf)):
            raise EdgeprofError(f"{tidied / name}.parquet is not what tidying {run} gives "
                                f"(edited or cut short since); {fix}")


# settings a run takes from its environment, not its flags: redoing it in the same
# environment gives the same run
# settings the measured child reports in its summary, which a child killed by the limit
# or the timeout never wrote: for such a run they are unknown, not other settings
ENV_SETTINGS = {"numpy_hugepages": "NUMPY_MADVISE_HUGEPAGE", "mmap_threshold": "GLIBC_TUNABLES"}


def check_settings(runs: pd.DataFrame, expected: Mapping[str, object], fix: str) -> None:
    """Every run was made with the settings the workflow asks for (``expected``: column ->
    value, None for "not set"; ``seed`` is repetition 0's, each repetition adds its
    number): a run redone by hand with other settings
    (another batch, runtime, sandbox, swap, ...) is refused, naming it, the setting and
    ``fix``, instead of being compared as the config's run. What only the measured child
    reports (``ENV_SETTINGS``) is unknown for a run whose child was killed, and passes."""
    def missing(value: object) -> bool:  # None, NaN or pd.NA (an unset batch)
        return value is None or bool(pd.api.types.is_scalar(value) and pd.isna(value))

    def same(value: object, want: object) -> bool:
        if want is None or missing(value):
            return missing(value) and want is None
        if isinstance(want, bool):
            return isinstance(value, (bool, np.bool_)) and bool(value) == want
        if isinstance(want, str):
            return str(value) == want
        return float(value) == float(want)

    for row in runs.itertuples(index=False):
        checks = dict(expected)
        if "seed" in checks:
            checks["seed"] = int(checks["seed"]) + int(row.rep)
        for col, want in checks.items():
            value = getattr(row, col, None)
            if col in ENV_SETTINGS and missing(value) and want is not None:
                continue  # the child wrote no summary (killed): unknown
            if not same(value, want):
                said, wanted = ("unset" if missing(v) else repr(v.item() if isinstance(
                    v, np.generic) else v) for v in (value, want))
                env = ENV_SETTINGS.get(col)
                why = (f"{env} in the workflow's environment?); unset it, then " if env
                       else "redone by hand?); ")
                raise EdgeprofError(f"run {row.run_id} was made with {col} {said}, not the "
                                    f"config's {wanted} ({why}{fix}")


def refuse_copies(runs: pd.DataFrame) -> None:
    """One run reached through two folders (a copy, a link) would count twice: runs that
    started at the same instant are one."""
    if runs.empty or "started_at" not in runs:
        return
    known = runs.dropna(subset=["started_at"])
    twice = known[known.duplicated("started_at", keep=False)]
    if not twice.empty:
        ids = sorted(twice["run_id"].astype(str))
        raise EdgeprofError(f"runs {', '.join(ids[:4])} are one run (the same start, to the "
                            f"microsecond): a copy or a link of a run folder; aggregate each "
                            f"run once")

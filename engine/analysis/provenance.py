"""Provenance: each run the aggregate reads is the one the workflow planned, in its place.

``set_runs`` tidies a run set's runs (exactly its repetitions, each the run its path
names), and ``check_inputs`` and ``check_settings`` refuse a run made from another
campaign's inputs or with other settings than the config's; ``refuse_copies`` one run
reached twice.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from engine.analysis.tidy import tidy_run
from engine.errors import EdgeprofError
from engine.schedule.names import policy_id


def set_runs(runs_dir: str | os.PathLike, reps: int, probed: bool = True,
             settings: Mapping[str, object] | None = None,
             pipeline_file: str | os.PathLike | None = None,
             split_dir: str | os.PathLike | None = None) -> list[dict[str, pd.DataFrame]]:
    """The tidy tables (``engine.analysis.tidy.tidy_run``) of one run set's runs
    (``<kind>/<pipeline>/<policy id>/<limit>`` under the results, as the workflow lays it
    out): exactly ``rep0`` .. ``rep<reps - 1>``, each the run its path names (pipeline,
    policy, limit, and probed or not; its repetition is its folder's, and its seed is
    checked with the ``settings``), made with the set's ``settings`` (``check_settings``)
    from the campaign's ``pipeline_file`` and the descriptions in its ``split_dir``
    (``check_inputs``: not another campaign's pipeline of that name, nor another split's
    weights). A run missing, damaged, moved into another's place or redone by hand with
    other flags is refused, naming it and what to remove so that the workflow measures it
    anew: the aggregate would silently drop or misplace a run. Folders beyond ``reps``
    (left by a config of more repetitions) are not the set's and are not read."""
    folder = Path(runs_dir)
    pipeline, folder_policy, limit = folder.parts[-3:]
    out = []
    for i in range(reps):
        run = folder / f"rep{i}"
        redo = f"remove {run} and run the workflow again: it measures the run anew"
        if not (run / "meta.json").is_file():
            raise EdgeprofError(f"{run} holds no run (no meta.json); {redo}")
        try:
            tables = tidy_run(run)
        except EdgeprofError as exc:  # damaged: what the workflow does about it
            raise EdgeprofError(f"{exc}; in the workflow, {redo}") from None
        row = tables["runs"].iloc[0]
        if (row["pipeline"] != pipeline or row["limit"] != limit
                or policy_id(str(row["policy"])) != folder_policy):
            raise EdgeprofError(f"{run} holds a run of {row['pipeline']}/"
                                f"{policy_id(str(row['policy']))}/{row['limit']}, not "
                                f"{pipeline}/{folder_policy}/{limit} (moved or copied into "
                                f"its place?); {redo}")
        if bool(row.get("probed", True)) != probed:
            raise EdgeprofError(f"run {row['run_id']} was made "
                                f"{'without' if probed else 'with'} its probes, where the "
                                f"config's {'has them' if probed else 'is the unprobed twin'} "
                                f"(redone by hand?); {redo}")
        check_inputs(row, pipeline_file, split_dir, redo)
        if settings is not None:
            check_settings(tables["runs"], settings, redo)
        out.append(tables)
    return out


def planned_runs(sets: Mapping[str, list], pipelines_dir: str | os.PathLike,
                 split_dir: str | os.PathLike, probed: bool | None = None,
                 repetitions: Mapping[str, int] | None = None
                 ) -> list[dict[str, pd.DataFrame]]:
    """``set_runs`` of every run set of ``sets`` (its folder -> [repetitions, probed,
    settings], as the workflow's params give them; each from its pipeline's file in
    ``pipelines_dir``): only the probed (or the unprobed) ones where ``probed`` is given,
    and a pipeline's ``repetitions`` instead of its sets' where given (run.sequential's:
    what its look decided)."""
    out = []
    for folder, (reps, set_probed, settings) in sets.items():
        if probed is not None and set_probed != probed:
            continue
        pipeline = Path(folder).parts[-3]
        reps = (repetitions or {}).get(pipeline, reps)
        out += set_runs(folder, reps, set_probed, settings,
                        Path(pipelines_dir, f"{pipeline}.json"), split_dir)
    return out


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

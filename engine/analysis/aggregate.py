"""The campaign's aggregate tables: the tidy tables of every run stacked, the
reconciliation run's table, and the summaries (``engine.analysis.summaries``)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from engine.analysis.provenance import check_inputs, check_settings, refuse_copies
from engine.analysis.reconcile import reconcile_run
from engine.analysis.summaries import (
    noise_floor_table,
    outputs_agree,
    probe_overhead_table,
    speedup_summary,
    speedup_table,
    summary_table,
)
from engine.analysis.tablefiles import concat_tables, stack
from engine.analysis.tidy import SAMPLE_VALUES, tidy_run
from engine.errors import EdgeprofError

# Enough points to draw a run's memory curve; the aggregate keeps at most this many per run.
MAX_SAMPLES_PER_RUN = 2000


def downsample(samples: pd.DataFrame, max_rows: int = MAX_SAMPLES_PER_RUN) -> pd.DataFrame:
    """At most ``max_rows`` samples per run: consecutive samples are merged into buckets
    keeping each value's maximum, so that memory peaks survive the thinning."""
    if samples.empty:
        return samples

    def thin(run: pd.DataFrame) -> pd.DataFrame:
        if len(run) <= max_rows:
            return run
        bucket = np.arange(len(run)) * max_rows // len(run)
        values = [c for c in SAMPLE_VALUES if c in run]
        first = run.groupby(bucket).first()
        first[values] = run[values].groupby(bucket).max()
        return first

    parts = [thin(run.sort_values("t_ns")) for _, run in samples.groupby("run_id", sort=False)]
    return pd.concat(parts, ignore_index=True)


def _reconcile(reconcile_dir: str | os.PathLike | None,
               settings: Mapping[str, object] | None = None,
               inputs: tuple[str | os.PathLike, str | os.PathLike] | None = None
               ) -> pd.DataFrame:
    """The reconciliation table of the reconciliation run, checked (given ``settings``,
    its pipeline, policy, limit and heap profile among them, and ``inputs``: the pipeline
    file and split folder, as ``check_inputs``) to be the run the workflow asks for."""
    if reconcile_dir is None:
        return pd.DataFrame()
    redo = f"remove {reconcile_dir} and run the workflow again (it redoes the reconciliation run)"
    if not (Path(reconcile_dir) / "meta.json").is_file():
        raise EdgeprofError(f"the reconciliation run {reconcile_dir} holds no meta.json; {redo}")
    if settings is not None or inputs is not None:
        runs = tidy_run(reconcile_dir)["runs"].assign(rep=0)
        if inputs is not None:
            check_inputs(runs.iloc[0], *inputs, redo)
        if settings is not None:
            check_settings(runs, settings, redo)
    return reconcile_run(reconcile_dir)


def aggregate(runs: Iterable[Mapping[str, pd.DataFrame]],
              reconcile_dir: str | os.PathLike | None,
              unprobed: Iterable[Mapping[str, pd.DataFrame]] = (),
              reconcile_settings: Mapping[str, object] | None = None,
              reconcile_inputs: tuple[str | os.PathLike, str | os.PathLike] | None = None
              ) -> dict[str, pd.DataFrame]:
    """The campaign's tables from its runs' tidy tables (``runs``: each run's, as
    ``engine.analysis.tidy.tidy_run`` gives them): runs, tasks, networks, samples (at most
    MAX_SAMPLES_PER_RUN per run), reconcile (its run checked against
    ``reconcile_settings`` and ``reconcile_inputs``, as ``_reconcile``), speedup (per
    pair), and the statistics
    over repetitions: summary, speedup_summary, noise_floor, probe_overhead (the probed
    runs against the unprobed twins' tables in ``unprobed``)."""
    tables = stack(runs)
    tables["samples"] = downsample(tables["samples"])
    tables["reconcile"] = _reconcile(reconcile_dir, reconcile_settings, reconcile_inputs)
    runs = tables["runs"]
    refuse_copies(runs)
    if not runs.empty:  # the order the runs really started in (runs.started_at)
        runs["run_order"] = runs["started_at"].rank(method="first").astype("Int64")
        runs["outputs_agree"] = outputs_agree(runs)
    tables["speedup"] = speedup_table(runs)
    tables["summary"] = summary_table(runs)
    tables["speedup_summary"] = speedup_summary(tables["speedup"])
    tables["noise_floor"] = noise_floor_table(runs)
    twins = concat_tables([t["runs"] for t in unprobed])
    tables["probe_overhead"] = probe_overhead_table(runs, twins)
    return tables

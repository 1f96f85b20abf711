"""Sequential repetitions (``run.sequential``): how many repetitions a pipeline's runs
need, from its first ``run.repetitions``.

The rule is two-stage (after Stein's two-stage design, but with the campaign's own
percentile-bootstrap CIs over every repetition, so neither the final width nor the
coverage is guaranteed): after the first ``run.repetitions`` (at least
MIN_N_SIGNIFICANT), each speed-up over Bulk the pipeline measures (each policy under each
limit, in each execution mode: the cells of ``speedup_summary`` at the pipeline level)
asks for the repetitions at which its 95 % CI would be ``width`` wide (ci_high / ci_low =
1 + width): a CI's width shrinks as one over the square root of its pairs, so n = first x
(ln(ci_high / ci_low) / ln(1 + width))^2. The pipeline runs the most any cell asks for, at
most ``max_repetitions``, and is not looked at again; a cell without a CI of
MIN_N_SIGNIFICANT pairs asks for the most. A cell without a single pair (each lost to a
run that did not finish) asks for nothing: repetitions narrow a CI, they do not make a
killed policy finish.

What it costs in error rate: how many repetitions a pipeline gets depends only on its
first ones' spread, never on which side of 1 its speed-ups lie, and the repetitions added
are new draws; but a pipeline stopped at the first look keeps CIs that are narrow partly
by chance. On synthetic pairs of a known ratio (tests/unit/test_sequential.py,
benchmarks/sequential_error.py) a pipeline of one cell claims 1.5-2 points more null
differences than a fixed number; one of several cells, as the workflow's pipelines are,
half a point or less (it stops early less often, so it runs more). Rules that look after
every repetition claim more: stopping once a CI excludes 1 about three times the fixed
rate.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from engine.analysis.stats import MIN_N_SIGNIFICANT
from engine.analysis.summaries import speedup_summary
from engine.errors import EdgeprofError
from engine.files import parse_json

# a look's record of each cell, besides its keys and the repetitions it asks for
CELL_FIELDS = ["speedup_n", "speedup_median", "speedup_ci_low", "speedup_ci_high"]
CELL_KEYS = ["pipeline", "emulated", "sandbox", "runtime", "batch", "limit", "policy"]


def needed(ci_low: float, ci_high: float, n: int, width: float, first: int, last: int) -> int:
    """The repetitions a ratio's CI of ``n`` pairs over ``first`` repetitions asks for to be
    ``width`` wide (ci_high / ci_low = 1 + width), from ``first`` to ``last``: ``last``
    without a CI of MIN_N_SIGNIFICANT pairs."""
    if n < MIN_N_SIGNIFICANT or not (math.isfinite(ci_low) and math.isfinite(ci_high)):
        return last
    ratio = math.log(ci_high / ci_low) / math.log1p(width)
    return min(last, max(first, math.ceil(first * ratio ** 2 - 1e-9)))


def look(pairs: pd.DataFrame, width: float, first: int, last: int) -> dict[str, object]:
    """The look at a pipeline's speed-up pairs over its first ``first`` repetitions
    (``engine.analysis.summaries.speedup_table`` of its runs): the ``repetitions`` it
    runs, and each cell's n, median and CI with the repetitions it asks for (``cells``, the
    most demanding first)."""
    summary = speedup_summary(pairs)
    if summary.empty:
        return {"repetitions": first, "cells": []}
    cells = summary[(summary["level"] == "pipeline") & (summary["policy"] != "bulk")
                    & (summary["speedup_n"] > 0)]
    out = cells[CELL_KEYS + CELL_FIELDS].copy()
    out["needs"] = [needed(lo, hi, int(n), width, first, last) for lo, hi, n in
                    zip(out["speedup_ci_low"], out["speedup_ci_high"], out["speedup_n"])]
    out = out.sort_values("needs", ascending=False, kind="stable")
    records = [{k: (None if pd.isna(v) else v.item() if hasattr(v, "item") else v)
                for k, v in row.items()} for row in out.to_dict("records")]
    return {"repetitions": int(out["needs"].max()) if len(out) else first, "cells": records}


def read_look(path: str | os.PathLike, first: int, sequential: Mapping[str, object]) -> int:
    """The repetitions a look file decided, checked to be the look the config asks for (its
    first repetitions and ``run.sequential``'s width and max_repetitions) and a whole number
    from ``first`` to max_repetitions: a look edited by hand or left by other settings is
    refused, naming the file to remove so that the workflow takes it anew."""
    fix = f"remove {path} and run the workflow again: the look is taken anew"
    try:
        record = parse_json(Path(path).read_bytes(), finite=True)
    except (OSError, ValueError) as exc:
        raise EdgeprofError(f"{path}: not a look's record ({exc}); {fix}") from None
    if not isinstance(record, dict):
        raise EdgeprofError(f"{path}: not a look's record; {fix}")
    most = sequential["max_repetitions"]
    taken = {k: record.get(k) for k in ("first", "width", "max_repetitions")}
    if taken != {"first": first, "width": sequential["width"], "max_repetitions": most}:
        raise EdgeprofError(f"{path} was taken with {taken}, not the config's first {first}, "
                            f"width {sequential['width']} and max_repetitions {most}; {fix}")
    reps = record.get("repetitions")
    if type(reps) is not int or not first <= reps <= most:
        raise EdgeprofError(f"{path} says {reps!r} repetitions, not a whole number from "
                            f"{first} to {most} (edited by hand?); {fix}")
    return reps

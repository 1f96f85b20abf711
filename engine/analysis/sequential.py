"""Sequential repetitions (``run.sequential``): how many repetitions a pipeline's runs
need, from its first ``run.repetitions``.

The rule is two-stage (Stein's design, with the campaign's own CIs): after the first
``run.repetitions`` (at least MIN_N_SIGNIFICANT), each speed-up over Bulk the pipeline
measures (each policy under each limit, in each execution mode: the cells of
``speedup_summary`` at the pipeline level) asks for the repetitions at which its 95 % CI
would be ``width`` wide (ci_high / ci_low = 1 + width): a CI's width shrinks as one over
the square root of its pairs, so n = first x (ln(ci_high / ci_low) / ln(1 + width))^2. The
pipeline runs the most any cell asks for, at most ``max_repetitions``, and is not looked at
again; a cell without a CI of MIN_N_SIGNIFICANT pairs asks for the most. A cell without a
single pair (each lost to a run that did not finish) asks for nothing: repetitions narrow a
CI, they do not make a killed policy finish.

Why it keeps the CIs' error rate: how many repetitions a pipeline gets depends only on its
first ones' spread, never on which side of 1 its speed-ups lie, and the repetitions added
are new draws. Stopping once a CI is narrow at some look, or once it excludes 1, picks the
moments a CI is narrow or off 1 by chance, and claims differences that are not there
more often; tests/unit/test_sequential.py measures all three on synthetic pairs of a known
ratio.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from engine.analysis.stats import MIN_N_SIGNIFICANT

# a look's record of each cell, besides its keys and the repetitions it asks for
CELL_FIELDS = ["speedup_n", "speedup_median", "speedup_ci_low", "speedup_ci_high"]
CELL_KEYS = ["pipeline", "emulated", "sandbox", "runtime", "batch", "limit", "policy"]


def needed(ci_low: float, ci_high: float, n: int, width: float, first: int, last: int) -> int:
    """The repetitions a ratio's CI of ``n`` pairs over ``first`` repetitions asks for to be
    ``width`` wide (ci_high / ci_low = 1 + width), from ``first`` to ``last``: ``last``
    without a CI of MIN_N_SIGNIFICANT pairs."""
    if n < MIN_N_SIGNIFICANT or not (np.isfinite(ci_low) and np.isfinite(ci_high)):
        return last
    ratio = math.log(ci_high / ci_low) / math.log1p(width)
    return min(last, max(first, math.ceil(first * ratio ** 2 - 1e-9)))


def look(pairs: pd.DataFrame, width: float, first: int, last: int) -> dict[str, object]:
    """The look at a pipeline's speed-up pairs over its first ``first`` repetitions
    (``engine.analysis.summaries.speedup_table`` of its runs): the ``repetitions`` it
    runs, and each cell's n, median and CI with the repetitions it asks for (``cells``, the
    most demanding first)."""
    from engine.analysis.summaries import speedup_summary

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

"""The sequential repetitions' rule (engine.analysis.sequential): what the look decides
on a pipeline's pairs, and, on synthetic pairs of a known ratio, that the two-stage rule
holds the CIs' error rate within two points of a fixed number, where a rule stopping once
a CI excludes 1 does not."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

from engine.analysis import sequential, stats
from engine.analysis.summaries import speedup_table
from engine.errors import EdgeprofError
from tests.unit.test_stats import _runs

BULK = [10.0, 12.0, 14.0, 16.0, 18.0, 20.0, 11.0, 13.0]
TIGHT = [2.0, 2.02, 1.98, 2.01, 1.99, 2.0]


def _look(policies: dict[str, list[float]], width: float = 0.1, last: int = 12) -> dict:
    """The look at pipeline p0's unconstrained runs after six repetitions: Bulk's BULK
    makespans and each policy's speed-ups (NaN: the policy's run did not finish)."""
    cells = {("p0", "bulk", "none", False): BULK[:6]}
    for policy, speedups in policies.items():
        cells[("p0", policy, "none", False)] = [b / s for b, s in zip(BULK, speedups)]
    runs = _runs(cells)
    runs.loc[runs["makespan_s"].isna(), "termination"] = "memory"
    return sequential.look(speedup_table(runs), width, 6, last)


def test_narrow_cells_need_no_more_repetitions():
    result = _look({"linear": TIGHT, "deepeye": [1.0, 1.01, 0.99, 1.0, 1.02, 0.98]})
    assert result["repetitions"] == 6
    assert {c["policy"] for c in result["cells"]} == {"linear", "deepeye"}
    assert all(c["needs"] == 6 and c["speedup_n"] == 6 for c in result["cells"])


def test_the_widest_cell_sets_the_repetitions_and_is_named_first():
    some = _look({"linear": TIGHT, "deepeye": [0.92, 1.08, 1.0, 0.96, 1.04, 1.0]})
    more = _look({"linear": TIGHT, "deepeye": [0.9, 1.1, 1.0, 0.95, 1.05, 1.0]})
    assert some["cells"][0]["policy"] == "deepeye"
    # its CI [0.94, 1.06] is ln(1.06 / 0.94) / ln(1.1) = 1.26 times too wide: 6 x 1.26^2 -> 10
    assert (some["cells"][0]["speedup_ci_low"], some["cells"][0]["speedup_ci_high"]
            ) == pytest.approx((0.94, 1.06))
    assert some["repetitions"] == 10 < more["repetitions"] == 12
    assert more["repetitions"] == more["cells"][0]["needs"]
    assert _look({"deepeye": [0.8, 1.2, 1.0, 0.9, 1.1, 1.0]}, last=9)["repetitions"] == 9


def test_fewer_than_six_pairs_ask_for_the_most_however_tight():
    result = _look({"linear": [2.0, 2.0, 2.0, 2.0, 2.0, np.nan]})  # one run killed
    assert result["cells"][0]["speedup_n"] == 5 and result["repetitions"] == 12
    assert _look({"linear": [2.0] * 6})["repetitions"] == 6


def test_a_cell_without_any_pair_asks_for_nothing():
    result = _look({"linear": [2.0] * 6, "masa:2": [np.nan] * 6})
    assert result["repetitions"] == 6
    assert [c["policy"] for c in result["cells"]] == ["linear"]


@pytest.mark.parametrize(("hi", "n", "expected"), [
    (1.1, 6, 6),             # already as wide as asked: the first six
    (1.05, 6, 6),            # narrower: never fewer than the first
    (1.1 ** 1.2, 6, 9),      # 1.2 times too wide (in logs): 6 x 1.44 = 8.64 -> 9
    (1.1 ** 2, 6, 12),       # twice: 24, capped at the last
    (1.05, 5, 12),           # five pairs: no claim, the most
])
def test_needed_grows_with_the_square_of_the_width(hi, n, expected):
    assert sequential.needed(1.0, hi, n, 0.1, 6, 12) == expected
    assert sequential.needed(2.0, 2 * hi, n, 0.1, 6, 12) == expected  # a ratio of the ends


FIRST, LAST, CELLS, WIDTH = 6, 12, 1000, 0.1


def _ci(pairs: np.ndarray, cell: int, n: int) -> tuple[float, float]:
    """The 95 % CI of a cell's first ``n`` pairs (a seed per cell and n)."""
    return stats.bootstrap_ci(pairs[:n], seed=cell * 100 + n)[1:]


@functools.cache
def _simulate(ratio: float, seed: int) -> dict[str, np.ndarray]:
    """Per synthetic cell (log speed-ups normal about ln ``ratio``, sd 0.05: the noise of a
    ratio of two runs of about 3.5 % CV), each rule's final CI (low, high, n): fixed at
    FIRST or LAST; two-stage; and two rules that look after every repetition from FIRST
    on, stopping once the CI is WIDTH narrow or once it excludes 1 (decided)."""
    rng = np.random.default_rng(seed)
    pairs = np.exp(np.log(ratio) + 0.05 * rng.standard_normal((CELLS, LAST)))
    out: dict[str, list] = {r: [] for r in ("first", "last", "two", "narrow", "decided")}
    for c in range(CELLS):
        ci = functools.cache(functools.partial(_ci, pairs[c], c))

        looks = range(FIRST, LAST)
        stops = {
            "first": FIRST, "last": LAST,
            "two": sequential.needed(*ci(FIRST), FIRST, WIDTH, FIRST, LAST),
            "narrow": next((n for n in looks if ci(n)[1] <= ci(n)[0] * (1 + WIDTH)), LAST),
            "decided": next((n for n in looks
                             if stats.significance(*ci(n), n) != stats.NO_DIFFERENCE), LAST),
        }
        for rule, n in stops.items():
            out[rule].append((*ci(n), n))
    return {rule: np.array(v) for rule, v in out.items()}


@functools.cache
def _simulate_pipelines(cells: int, pipelines: int, seed: int) -> dict[str, np.ndarray]:
    """As ``_simulate`` at ratio 1, for pipelines of several cells as the workflow's (one
    look sizes all of a pipeline's cells: the most any asks for): each cell's final CI
    (low, high, n) under a fixed FIRST or LAST and under the two-stage rule."""
    rng = np.random.default_rng(seed)
    out: dict[str, list] = {r: [] for r in ("first", "last", "two")}
    for p in range(pipelines):
        pairs = np.exp(0.05 * rng.standard_normal((cells, LAST)))
        cis = [functools.cache(functools.partial(_ci, pairs[c], p * cells + c))
               for c in range(cells)]
        two = max(sequential.needed(*ci(FIRST), FIRST, WIDTH, FIRST, LAST) for ci in cis)
        for ci in cis:
            for rule, n in (("first", FIRST), ("last", LAST), ("two", two)):
                out[rule].append((*ci(n), n))
    return {rule: np.array(v) for rule, v in out.items()}


def _claims(ci: np.ndarray) -> float:
    return float(np.mean((ci[:, 0] > 1) | (ci[:, 1] < 1)))


def _covers(ci: np.ndarray, ratio: float) -> float:
    return float(np.mean((ci[:, 0] <= ratio) & (ratio <= ci[:, 1])))


def test_the_two_stage_rule_claims_about_as_many_null_differences_as_a_fixed_number():
    """No difference at all (ratio 1): a fixed six or twelve repetitions claim one in 6-8 %
    of cells (the percentile bootstrap, tests/unit/test_stats.py), the two-stage rule at
    most 2.5 points more, with fewer repetitions than twelve; a look after every repetition
    claims more, far more when it stops once the CI excludes 1. (The two-stage rule's own
    cost, 1-2 points, is measured over 8000 cells by benchmarks/sequential_error.py.)"""
    sim = _simulate(1.0, 3)
    fixed = max(_claims(sim["first"]), _claims(sim["last"]))
    assert fixed <= 0.085
    assert _claims(sim["two"]) <= min(fixed + 0.025, 0.095)
    assert _claims(sim["decided"]) >= fixed + 0.06
    assert FIRST < sim["two"][:, 2].mean() < LAST - 2  # it adds some, often not the most


def test_the_two_stage_rule_covers_a_known_ratio_as_a_fixed_number_does():
    ratio = 1.03
    sim = _simulate(ratio, 4)
    fixed = min(_covers(sim["first"], ratio), _covers(sim["last"], ratio))
    assert _covers(sim["two"], ratio) >= fixed - 0.025
    assert _covers(sim["two"], ratio) >= 0.905
    # and it finds the difference more often than the first six alone do
    assert _claims(sim["two"]) > _claims(sim["first"]) + 0.05


def test_a_caption_gives_the_range_of_repetitions_the_looks_decided(tmp_path):
    """A figure's n counts each execution mode's pipelines and their repetitions: with
    run.sequential they differ by pipeline, and the caption gives their range."""
    import pandas as pd

    from engine.analysis.captions import caption_facts

    rows = [("p000", r, False) for r in range(6)] + [("p001", r, False) for r in range(9)]
    rows += [("v000", r, True) for r in range(3)]
    pd.DataFrame(rows, columns=["pipeline", "rep", "emulated"]).to_parquet(
        tmp_path / "runs.parquet")
    pd.DataFrame().to_parquet(tmp_path / "speedup_summary.parquet")
    assert caption_facts(tmp_path)["n"] == ("native: n = 2 pipeline(s) x 6-9 repetition(s); "
                                            "emulated: n = 1 pipeline(s) x 3 repetition(s)")


SEQ = {"width": 0.1, "max_repetitions": 8}


@pytest.mark.parametrize(("change", "message"), [
    ({}, None),
    ({"repetitions": 3}, "says 3 repetitions, not a whole number from 6 to 8"),
    ({"repetitions": 20}, "says 20 repetitions"),
    ({"repetitions": 7.5}, "says 7.5 repetitions"),
    ({"repetitions": "7"}, "says '7' repetitions"),
    ({"repetitions": True}, "says True repetitions"),
    ({"width": 0.2}, "was taken with .*'width': 0.2.*, not the config's first 6, width 0.1"),
    ({"first": 7}, "was taken with .*'first': 7"),
])
def test_a_look_is_read_only_as_the_config_would_take_it(tmp_path, change, message):
    path = tmp_path / "p000.json"
    path.write_text(json.dumps({"pipeline": "p000", "first": 6, **SEQ, "repetitions": 7,
                                "cells": [], **change}))
    if message is None:
        assert sequential.read_look(path, 6, SEQ) == 7
        return
    with pytest.raises(EdgeprofError, match=message + f".*remove {path} and run"):
        sequential.read_look(path, 6, SEQ)


@pytest.mark.parametrize("text", ["", "[7]", '{"repetitions": NaN}', "{"])
def test_a_look_that_is_no_record_is_refused(tmp_path, text):
    path = tmp_path / "p000.json"
    path.write_text(text)
    with pytest.raises(EdgeprofError, match="not a look's record"):
        sequential.read_look(path, 6, SEQ)
    with pytest.raises(EdgeprofError, match="not a look's record"):
        sequential.read_look(tmp_path / "none.json", 6, SEQ)


def test_pipelines_of_several_cells_stop_early_less_often_and_claim_as_a_fixed_number():
    """The workflow's look sizes a pipeline by its widest cell: with four cells it adds
    more repetitions than with one, and its null claims are those of a fixed number."""
    sim = _simulate_pipelines(4, 250, 5)
    fixed = max(_claims(sim["first"]), _claims(sim["last"]))
    assert _claims(sim["two"]) <= fixed + 0.015
    assert sim["two"][:, 2].mean() > _simulate(1.0, 3)["two"][:, 2].mean() + 1

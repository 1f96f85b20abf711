"""The hand-written numerics against their references (issue 37, point 6): the model's
non-negative least squares (``fit_linear``) against hand counts and an NNLS by
enumeration, the swap-cost crossover's root against scipy's ``brentq``."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import brentq

from engine.model.fit import fit_linear
from engine.model.reconstruct import ROOT_XTOL, _root_log

# ---- fit_linear: the exact NNLS ----


def test_fit_linear_keeps_a_feature_backward_elimination_drops():
    # no intercept; unconstrained, a and b fit with c negative and b's alone is 1.6 (16 / 10,
    # residual sum of squares 3.4); the NNLS optimum keeps a: a = 2/7, b = 10/7, c = 0,
    # residuals (4, -3, 0, -10, 6) / 7, sum of squares 161 / 49 = 23 / 7 (normal equations
    # a.r = b.r = 0; c.r = -12/7 < 0, so a positive c only adds to it)
    x = pd.DataFrame({"a": [0, 2, 0, 0, 1], "b": [1, 2, 0, 1, 2], "c": [2, 0, 1, 2, 0]},
                     dtype=float)
    y = np.array([2.0, 3.0, 0.0, 0.0, 4.0])
    line = fit_linear(x, y, intercept=False)
    assert line.intercept == 0.0 and set(line.coef) == {"a", "b"}
    assert line.coef["a"] == pytest.approx(2 / 7) and line.coef["b"] == pytest.approx(10 / 7)
    # r2 against the mean 1.8: total sum of squares 0.04 + 1.44 + 3.24 + 3.24 + 4.84 = 12.8
    assert line.r2 == pytest.approx(1 - (23 / 7) / 12.8)


def test_fit_linear_intercept_is_a_non_negative_column_of_ones():
    # y = 2 x - 1 exactly: the intercept would be -1; held at 0, the slope through the
    # origin is x.y / x.x = (1 + 6 + 15 + 28) / (1 + 4 + 9 + 16) = 50 / 30
    x = pd.DataFrame({"x": [1.0, 2.0, 3.0, 4.0]})
    line = fit_linear(x, 2 * x["x"] - 1)
    assert line.intercept == 0.0 and line.coef["x"] == pytest.approx(50 / 30)
    # a positive intercept is fitted like any coefficient: y = 3 + 0.5 x
    line = fit_linear(x, 3 + 0.5 * x["x"])
    assert line.intercept == pytest.approx(3) and line.coef["x"] == pytest.approx(0.5)


def _nnls_by_enumeration(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The NNLS optimum by brute force: the optimum is the unconstrained least squares on
    its own support, so the best non-negative least-squares fit over all column subsets."""
    best, best_ss = np.zeros(a.shape[1]), float(y @ y)
    for k in range(1, a.shape[1] + 1):
        for subset in itertools.combinations(range(a.shape[1]), k):
            sol, *_ = np.linalg.lstsq(a[:, subset], y, rcond=None)
            if (sol < 0).any():
                continue
            ss = float(((y - a[:, subset] @ sol) ** 2).sum())
            if ss < best_ss - 1e-12:
                best, best_ss = np.zeros(a.shape[1]), ss
                best[list(subset)] = sol
    return best


@pytest.mark.parametrize("intercept", [True, False])
def test_fit_linear_is_the_nnls_optimum_on_random_designs(intercept):
    # the model's shapes: a layer type's EXEC (up to 3 features, 6-20 medians); correlated
    # columns, so that the unconstrained fit often has negative coefficients
    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(6, 21))
        base = rng.uniform(0, 1, n)
        x = pd.DataFrame({c: base * rng.uniform(0.5, 2) + rng.normal(0, 0.3, n)
                          for c in ("macs", "weight_bytes", "scratch_bytes")}) * 1e8
        y = rng.uniform(0, 1) * 1e-3 + x.to_numpy() @ rng.normal(0, 1e-11, 3) \
            + rng.normal(0, 1e-4, n)
        a = x.to_numpy()
        if intercept:
            a = np.column_stack([np.ones(n), a])
        want = _nnls_by_enumeration(a / np.abs(a).max(axis=0), y) / np.abs(a).max(axis=0)
        feats = want[1:] if intercept else want
        line = fit_linear(x, y, intercept)
        if not (feats > 0).any():  # no feature left: the median, by the rule
            assert line.coef == {} and line.intercept == (np.median(y) if intercept else 0)
            continue
        got = [line.coef.get(c, 0.0) for c in x.columns]
        assert got == pytest.approx(feats, rel=1e-6, abs=1e-18)
        assert line.intercept == pytest.approx(want[0] if intercept else 0.0, abs=1e-9)


# ---- the swap-cost crossover: Brent's method in log cost ----


def test_crossover_root_is_brents_to_its_tolerance_in_fewer_calls():
    # a speed-up over Bulk as it is on the axis, a ratio of two makespans linear in the
    # per-page cost c: (2 + 3000 c) / (1 + 5000 c) crosses 1 at c = (2 - 1) / (5000 - 3000)
    # = 5e-4 (by hand), between two grid points 4 a decade apart
    calls = []

    def f(c: float) -> float:
        calls.append(c)
        return (2 + 3000 * c) / (1 + 5000 * c) - 1

    lo, hi = 10 ** -3.5, 10 ** -3.25
    at = _root_log(f, lo, hi)
    assert abs(np.log(at / 5e-4)) <= ROOT_XTOL  # 8 bisection steps: 5e-4 x (1 - 5.5e-4)
    # scipy's brentq on the same function in log space, to the same tolerance
    want = np.exp(brentq(lambda u: f(np.exp(u)), np.log(lo), np.log(hi), xtol=ROOT_XTOL))
    assert at == pytest.approx(want, rel=2 * ROOT_XTOL)
    calls.clear()
    _root_log(f, lo, hi)
    assert len(calls) <= 9 and calls[:2] == [lo, hi]  # bisection: 9; the ends exact (cached)


def test_crossover_of_an_unrebuilt_end_is_nan():
    assert np.isnan(_root_log(lambda c: np.nan if c < 1e-4 else c - 2e-4, 1e-5, 1e-3))


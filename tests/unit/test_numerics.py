"""The hand-written numerics against their references (issue 37, point 6): the model's
non-negative least squares (``fit_linear``) against hand counts and an NNLS by
enumeration, the swap-cost crossover's root against scipy's ``brentq``, the bootstrap
CI against ``scipy.stats.bootstrap`` and Kendall's tau against ``scipy.stats.kendalltau``.
Their speeds: ``benchmarks/bench_numerics.py`` (docs/statistics.md)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from scipy.optimize import brentq

from engine.analysis.stats import CI_LEVEL, N_BOOT, bootstrap_ci, kendall_tau
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


# ---- bootstrap_ci against scipy.stats.bootstrap (kept: the same numbers, faster) ----


@pytest.mark.parametrize("n", [2, 3, 6, 13, 20, 40])
def test_bootstrap_ci_is_scipys_percentile_bootstrap_with_the_same_seed(n):
    # the same resamples from the same seed (rng.integers(0, n, (resamples, n))), the
    # same linear-interpolated percentiles: equal but for the last bits of the
    # percentile's q (scipy's (1 - 0.95) / 2 x 100 against 2.5)
    rng = np.random.default_rng(n)
    for seed in range(5):
        x = rng.lognormal(0, 0.5, n)
        med, lo, hi = bootstrap_ci(x, seed=seed)
        ref = sps.bootstrap((x,), np.median, n_resamples=N_BOOT, method="percentile",
                            confidence_level=CI_LEVEL, vectorized=True,
                            rng=np.random.default_rng(seed)).confidence_interval
        assert med == np.median(x)
        assert (lo, hi) == pytest.approx((ref.low, ref.high), rel=1e-12, abs=0)


def test_bootstrap_ci_of_normal_medians_has_the_known_width():
    # the median of n normal values is asymptotically normal with sd sqrt(pi / 2) / sqrt(n)
    # (sigma 1), so its 95 % CI is 2 x 1.96 x that wide: 0.2453 for n = 401; the mean
    # width over 60 samples within 4 Monte-Carlo standard errors, and centred on 0
    rng = np.random.default_rng(11)
    n, widths, mids = 401, [], []
    for seed in range(60):
        _, lo, hi = bootstrap_ci(rng.normal(0, 1, n), seed=seed)
        widths.append(hi - lo)
        mids.append((hi + lo) / 2)
    known = 2 * 1.959964 * np.sqrt(np.pi / 2) / np.sqrt(n)
    assert abs(np.mean(widths) - known) < 4 * np.std(widths) / np.sqrt(60)
    assert abs(np.mean(mids)) < 4 * np.std(mids) / np.sqrt(60)


# ---- kendall_tau against scipy.stats.kendalltau (kept: the same tau-b, faster) ----


def test_kendall_tau_is_scipys_tau_b_on_ties():
    rng = np.random.default_rng(3)
    for n in (2, 3, 5, 10, 40, 120):
        for _ in range(20):  # few distinct values: ties on both sides
            x, y = rng.integers(0, 4, n), rng.integers(0, 4, n)
            want = sps.kendalltau(x, y, variant="b").statistic
            got = kendall_tau(x, y)
            if np.isnan(want):  # one side all ties
                assert np.isnan(got)
            else:  # the same sums, added in another order: within an ulp or two
                assert got == pytest.approx(want, rel=1e-15, abs=1e-15)
    # a pair with a NaN left out, as scipy's nan_policy="omit"
    x, y = [1.0, 2.0, np.nan, 3.0, 3.0, 1.0], [2.0, 1.0, 5.0, 3.0, 4.0, np.nan]
    assert kendall_tau(x, y) == pytest.approx(
        sps.kendalltau([1, 2, 3, 3], [2, 1, 3, 4]).statistic, rel=1e-15)

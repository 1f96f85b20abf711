"""The statistics (engine.analysis.stats and the tables built on it) on synthetic data
whose answers are known."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from engine.analysis import stats
from engine.analysis.summaries import (
    noise_floor_table,
    probe_overhead_table,
    speedup_summary,
    speedup_table,
    summary_table,
)


def test_bootstrap_ci_of_constant_values_is_that_value():
    assert stats.bootstrap_ci([2.5] * 5) == (2.5, 2.5, 2.5)


def test_bootstrap_ci_needs_two_values():
    med, lo, hi = stats.bootstrap_ci([3.0, np.nan])
    assert med == 3.0 and np.isnan(lo) and np.isnan(hi)
    assert all(np.isnan(v) for v in stats.bootstrap_ci([]))


def test_bootstrap_ci_of_three_values_spans_them():
    # the median of a resample of 3 is each order statistic with probability >= 7/27
    assert stats.bootstrap_ci([1.0, 5.0, 2.0]) == (2.0, 1.0, 5.0)


def test_bootstrap_ci_covers_the_true_median_about_95_percent_of_the_time():
    rng = np.random.default_rng(1)
    true_median = np.exp(0.0)  # lognormal(0, 0.5)
    hits = 0
    trials = 300
    for i in range(trials):
        _, lo, hi = stats.bootstrap_ci(rng.lognormal(0.0, 0.5, size=40), seed=i)
        hits += lo <= true_median <= hi
    assert 0.89 <= hits / trials <= 0.99


def test_cluster_bootstrap_with_one_cluster_is_the_plain_bootstrap():
    vals = [1.0, 2.0, 4.0, 8.0]
    assert stats.cluster_bootstrap_ci(vals, ["a"] * 4) == stats.bootstrap_ci(vals)


def test_cluster_bootstrap_is_wider_than_pooling_when_clusters_differ():
    # six pipelines whose repetitions agree closely but which differ from each other:
    # pooling the values as if independent understates the uncertainty about pipelines
    vals = np.concatenate([[k * 0.99, k, k * 1.01] for k in range(1, 7)])
    clusters = np.repeat([f"p{k}" for k in range(6)], 3)
    _, plo, phi = stats.bootstrap_ci(vals)
    med, clo, chi = stats.cluster_bootstrap_ci(vals, clusters)
    assert med == pytest.approx(3.495)
    assert chi - clo > 1.2 * (phi - plo)
    assert clo < plo and chi > phi


def test_few_clusters_give_a_ci_conditional_on_them_without_padding():
    # two pipelines: each keeps its own repetitions' values (stratified), so cluster a
    # (one value) is always 10 and b (five) always 20: the pooled median is always 20
    vals = [10.0, 20.0, 20.0, 20.0, 20.0, 20.0]
    assert stats.cluster_bootstrap_ci(vals, ["a", "b", "b", "b", "b", "b"]) == (
        20.0, 20.0, 20.0)
    assert stats.ci_scope(2) == "these pipelines"
    assert stats.ci_scope(stats.MIN_CLUSTERS) == "pipelines of the bin"


def test_many_clusters_are_resampled_whole_without_padding():
    # six clusters of unequal size, constant within: every resample median is one of the
    # clusters' values or the mean of two of them, never a padding NaN
    sizes = [1, 2, 3, 4, 5, 6]
    vals = np.concatenate([[float(k)] * n for k, n in enumerate(sizes)])
    clusters = np.concatenate([[k] * n for k, n in enumerate(sizes)])
    med, lo, hi = stats.cluster_bootstrap_ci(vals, clusters)
    allowed = {k / 2 for k in range(11)}
    assert np.isfinite([lo, hi]).all() and lo in allowed and hi in allowed and lo < hi


@pytest.mark.parametrize("lo, hi, n, label", [
    (1.1, 1.3, 6, stats.FASTER), (0.7, 0.95, 6, stats.SLOWER),
    (0.9, 1.2, 6, stats.NO_DIFFERENCE), (1.0, 1.2, 9, stats.NO_DIFFERENCE),
    (np.nan, np.nan, 9, stats.TOO_FEW),
    # all of 5 on one side of 1 happens by chance with p = 2/32 > 5 %: never a claim
    (1.1, 1.3, 5, stats.TOO_FEW)])
def test_significance_against_one(lo, hi, n, label):
    assert stats.significance(lo, hi, n) == label


def test_too_few_runs_below_six_keeps_false_claims_under_five_percent():
    """Under the null (ratios scattered around 1) three repetitions would claim a
    difference in about a quarter of the cells: they claim none. From n = 6 the
    percentile bootstrap claims one in 6-8 % of null cells (nominally 5 %: it is a little
    too narrow for small samples, as the README says)."""
    rng = np.random.default_rng(7)
    for n, most in ((3, 0.0), (6, 0.08)):
        claims = 0
        for i in range(400):
            med, lo, hi = stats.bootstrap_ci(rng.lognormal(0, 0.1, size=n), seed=i)
            claims += stats.significance(lo, hi, n) in (stats.FASTER, stats.SLOWER)
        assert claims / 400 <= most


def _runs(makespans: dict[tuple[str, str, str, bool], list[float]]) -> pd.DataFrame:
    """A runs table: (pipeline, policy, limit, emulated) -> makespan per repetition."""
    rows = []
    for (pipeline, policy, limit, emulated), values in makespans.items():
        for rep, m in enumerate(values):
            rows.append({
                "run_id": f"{pipeline}/{policy}/{limit}/rep{rep}", "pipeline": pipeline,
                "policy": policy, "limit": limit, "limit_enforced": limit != "none",
                "emulated": emulated, "rep": rep, "termination": "ok",
                "size_bin": "0-150 MiB", "n_networks": 2, "param_bytes": 1,
                "limit_bytes": None, "policy_family": policy, "workers": 1,
                "makespan_s": m, "wall_s": m + 0.1, "cpu_s": m, "hwm_rss_bytes": 100 + rep,
                "peak_rss_bytes": 90.0, "tasks_finished": 40})
    return pd.DataFrame(rows)


def test_paired_speedup_is_per_repetition_and_significant_only_when_the_ci_excludes_1():
    bulk = [10.0, 12.0, 14.0, 16.0, 18.0, 20.0]  # a drift that pairing cancels
    runs = _runs({
        ("p0", "bulk", "none", False): bulk,
        ("p0", "linear", "none", False): [b / 2 for b in bulk],  # exactly twice as fast
        ("p0", "deepeye", "none", False): [b * f for b, f in
                                           zip(bulk, [0.9, 1.1, 1.0, 0.95, 1.05, 1.0])],
        ("p0", "masa:2", "none", False): [b / 2 for b in bulk[:3]],  # three repetitions
    })
    pairs = speedup_table(runs)
    linear = pairs[pairs["policy"] == "linear"]
    assert list(linear["speedup"]) == [2.0] * 6
    summary = speedup_summary(pairs)
    cell = summary[(summary["level"] == "pipeline")].set_index("policy")
    assert cell.loc["linear", ["speedup_median", "speedup_ci_low", "speedup_ci_high"]
                    ].tolist() == [2.0, 2.0, 2.0]
    assert cell.loc["linear", "speedup_significance"] == "higher"
    assert cell.loc["deepeye", "speedup_significance"] == "no difference"
    assert cell.loc["deepeye", "speedup_ci_low"] < 1 < cell.loc["deepeye", "speedup_ci_high"]
    assert cell.loc["bulk", "speedup_significance"] == ""
    assert cell.loc["linear", "speedup_n"] == 6
    # three pairs cannot carry a claim, however consistent
    assert cell.loc["masa:2", "speedup_median"] == 2.0
    assert cell.loc["masa:2", "speedup_significance"] == "too few runs"


def test_slowdown_pairs_a_limit_with_the_unconstrained_run_of_the_same_mode():
    runs = _runs({
        ("v0", "bulk", "none", True): [20.0, 22.0, 21.0, 20.0, 22.0, 21.0],
        ("v0", "bulk", "64M", True): [40.0, 44.0, 42.0, 40.0, 44.0, 42.0],
        ("p0", "bulk", "none", False): [1.0] * 6,  # native: never a baseline here
    })
    pairs = speedup_table(runs)
    limited = pairs[pairs["limit"] == "64M"]
    assert list(limited["slowdown"]) == [2.0] * 6
    summary = speedup_summary(pairs)
    row = summary[(summary["limit"] == "64M") & (summary["level"] == "pipeline")].iloc[0]
    assert row["slowdown_median"] == 2.0 and row["slowdown_significance"] == "higher"
    assert bool(row["emulated"])


def test_summary_has_a_ci_per_pipeline_and_per_size_bin():
    runs = _runs({("p0", "bulk", "none", False): [1.0, 2.0, 3.0],
                  ("p1", "bulk", "none", False): [5.0, 6.0, 7.0]})
    summary = summary_table(runs)
    per_pipe = summary[summary["level"] == "pipeline"].set_index("pipeline")
    assert per_pipe.loc["p0", ["makespan_s_median", "makespan_s_ci_low",
                               "makespan_s_ci_high"]].tolist() == [2.0, 1.0, 3.0]
    per_bin = summary[summary["level"] == "size_bin"].iloc[0]
    assert per_bin["makespan_s_n"] == 6 and per_bin["runs"] == 6
    # two pipelines: a CI about these two (their repetitions resampled), not about
    # every pipeline of the bin
    assert per_bin["makespan_s_ci_scope"] == "these pipelines"
    assert per_bin["makespan_s_median"] == 4.0
    assert 2.0 <= per_bin["makespan_s_ci_low"] < 4.0 < per_bin["makespan_s_ci_high"] <= 6.0


def test_noise_floor_is_the_coefficient_of_variation_per_mode():
    runs = _runs({("p0", "bulk", "none", False): [9.0, 10.0, 11.0],
                  ("v0", "bulk", "none", True): [18.0, 20.0, 22.0]})
    floor = noise_floor_table(runs).set_index(["mode", "metric"])
    assert floor.loc[("native", "makespan"), "cv_median"] == pytest.approx(0.1)
    assert floor.loc[("emulated (vm)", "makespan"), "cv_median"] == pytest.approx(0.1)
    assert floor.loc[("native", "makespan"), "rel_range_median"] == pytest.approx(0.2)


def test_probe_overhead_pairs_each_run_with_its_unprobed_twin():
    base = [1.0, 2.0, 4.0, 1.0, 2.0, 4.0]
    unprobed = _runs({("p0", "linear", "none", False): base})
    probed = _runs({("p0", "linear", "none", False): [b * 1.03 for b in base]})
    table = probe_overhead_table(probed, unprobed).set_index("pipeline")
    assert table.loc["p0", "pairs"] == 6 and table.loc["p0", "pairs_missing"] == 0
    assert table.loc["p0", "overhead_pct_median"] == pytest.approx(3.0)
    assert table.loc["p0", "overhead_pct_ci_low"] == pytest.approx(3.0)
    assert table.loc["p0", "significance"] == "overhead"
    # 0.03, 0.06 or 0.12 s more over 40 tasks: 0.75, 1.5 or 3 ms a task
    assert table.loc["p0", "per_task_ms_median"] == pytest.approx(1.5)


def test_a_run_swapped_if_any_instrument_saw_swap_and_unknown_if_none_measured():
    from engine.analysis.tidy import _swapped

    assert _swapped({"guest_pswpout": 0, "peak_swap_bytes": 0}) is False
    assert _swapped({"guest_pswpout": np.nan, "cg_window_swap_peak_bytes": 4096}) is True
    assert _swapped({"guest_pswpout": np.nan, "peak_swap_bytes": np.nan}) is None

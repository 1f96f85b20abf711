"""engine.analysis.report: the least and the most of a metric per cell, read by hand off
a small summary table."""

from __future__ import annotations

import pandas as pd

from engine.analysis.report import NONE_FINISHED, extremes_table

MIB = 2**20


def _row(policy: str, limit: str, size_bin: str, median: float, low: float, high: float,
         level: str = "size_bin") -> dict:
    return {"level": level, "sandbox": "uml", "runtime": "caffe", "limit": limit,
            "size_bin": size_bin, "policy": policy, "pipeline": "",
            "peak_rss_bytes_median": median * MIB, "peak_rss_bytes_ci_low": low * MIB,
            "peak_rss_bytes_ci_high": high * MIB}


def test_least_and_most_per_bin_and_limit_in_size_order():
    summary = pd.DataFrame([
        _row("bulk", "512M", "400-800MB", 500, 490, 510),
        _row("linear", "512M", "400-800MB", 200, 195, 205),
        _row("deepeye", "512M", "400-800MB", 300, 150, 520),
        _row("bulk", "1G", "<400MB", 300, 250, 350),
        _row("linear", "1G", "<400MB", 310, 280, 330),
        _row("linear", "1G", "400-800MB", 999, 999, 999, level="pipeline"),
        _row("bulk", "none", "<400MB", 0, 0, 0),
        _row("linear", "none", "<400MB", 0, 0, 0),
    ])
    lines = extremes_table(summary, "peak_rss_bytes").splitlines()
    assert len(lines) == 2 + 3  # header, rule, three cells (pipeline rows are not bins)
    # unconstrained first, where no policy uses more than another
    assert lines.pop(2) == "| uml | caffe | none | <400MB | every policy | 0 | no | 2 |"
    # 1G before 512M; the bin's least and most by median; CIs of 300 [250, 350] and
    # 310 [280, 330] overlap
    assert lines[2] == ("| uml | caffe | 1G | <400MB | bulk 300 [250, 350] | "
                        "linear 310 [280, 330] | no | 2 |")
    assert lines[3] == ("| uml | caffe | 512M | 400-800MB | linear 200 [195, 205] | "
                        "bulk 500 [490, 510] | yes | 3 |")


def test_peaks_side_by_side_mark_overlapping_cis():
    from engine.analysis.report import peaks_table

    rows = [_row("bulk", "512M", "<400MB", 500, 490, 510), _row("linear", "512M", "<400MB",
                                                                 200, 195, 205)]
    rows[0].update(peak_swap_bytes_median=90 * MIB, peak_swap_bytes_ci_low=10 * MIB,
                   peak_swap_bytes_ci_high=120 * MIB)
    rows[1].update(peak_swap_bytes_median=40 * MIB, peak_swap_bytes_ci_low=30 * MIB,
                   peak_swap_bytes_ci_high=50 * MIB)
    line = peaks_table(pd.DataFrame(rows)).splitlines()[2]
    assert line == ("| uml | caffe | 512M | <400MB | linear 200 [195, 205] | "
                    "bulk 500 [490, 510] | linear 40 [30, 50] | bulk 90 [10, 120] ≈ |")


def test_a_policy_whose_runs_were_killed_is_never_the_least_and_is_named():
    """bulk's runs were OOM-killed before their peak (its median is the lowest): the
    least is linear's, and bulk is named beside it; a cell every policy of which was
    killed has no least."""
    rows = [_row("bulk", "64M", "<400MB", 40, 35, 45), _row("linear", "64M", "<400MB",
                                                             60, 55, 65),
            _row("deepeye", "64M", "<400MB", 90, 85, 95)]
    for r, not_ok in zip(rows, (3, 0, 0)):
        r.update(runs=3, runs_not_ok=not_ok, ended="memory" if not_ok else "")
    lines = extremes_table(pd.DataFrame(rows), "peak_rss_bytes").splitlines()
    assert lines[2] == ("| uml | caffe | 64M | <400MB | linear 60 [55, 65] (left out: "
                        "bulk: 3 of 3 runs ended memory) | deepeye 90 [85, 95] (or bulk: its "
                        "runs ended early) | yes | 3 |")
    # killed, deepeye's is still the most, and said to be a bound (tenth pass L8)
    rows[2].update(runs_not_ok=3, ended="memory")
    line = extremes_table(pd.DataFrame(rows), "peak_rss_bytes").splitlines()[2]
    assert "| deepeye 90 [85, 95] (at least: its runs ended early) |" in line
    rows[2].update(runs_not_ok=0, ended="")
    for r in rows:
        r.update(runs_not_ok=1, ended="timeout")
    line = extremes_table(pd.DataFrame(rows), "peak_rss_bytes").splitlines()[2]
    assert line == ("| uml | caffe | 64M | <400MB | n/a (bulk: 1 of 3 runs ended timeout; "
                    "linear: 1 of 3 runs ended timeout; deepeye: 1 of 3 runs ended timeout) | "
                    f"{NONE_FINISHED} | n/a | 3 |")


def test_the_report_says_killed_policies_are_left_out(tmp_path):
    from engine.analysis.report import report

    rows = [_row("bulk", "64M", "<400MB", 40, 35, 45), _row("linear", "64M", "<400MB",
                                                             60, 55, 65)]
    rows[0].update(runs=2, runs_not_ok=2, ended="memory", emulated=True)
    rows[1].update(runs=2, runs_not_ok=0, ended="", emulated=True)
    pd.DataFrame(rows).to_parquet(tmp_path / "summary.parquet")
    text = report(tmp_path, peaks_only=True)
    assert "OOM-killed" in text and "left out: bulk: 2 of 2 runs ended memory" in text


def _crashed(policy: str, sandbox: str = "uml", limit: str = "64M") -> dict:
    """A summary row of one policy whose only run crashed (its sandbox never started):
    nothing measured, counted in runs_not_ok (as summary_table writes it)."""
    nan = float("nan")
    return {**_row(policy, limit, "<400MB", nan, nan, nan), "sandbox": sandbox, "runs": 1,
            "runs_not_ok": 1, "ended": "error"}


def test_a_cell_whose_runs_all_crashed_is_named_not_dropped(tmp_path):
    """F4 (report 36): uml runs that all ended 'error' vanished from the report (no row,
    no note; --mode uml printed header-only tables). They are named like killed runs."""
    from engine.analysis.report import report

    native = [{**_row(p, "none", "<400MB", m, m - 5, m + 5), "sandbox": "none", "runs": 1,
               "runs_not_ok": 0, "ended": ""} for p, m in (("linear", 60), ("bulk", 90))]
    rows = native + [_crashed("bulk"), _crashed("linear")]  # sorted as summary_table
    lines = extremes_table(pd.DataFrame(rows), "peak_rss_bytes").splitlines()
    assert lines[2:] == [
        "| native | caffe | none | <400MB | linear 60 [55, 65] | bulk 90 [85, 95] | yes | 2 |",
        "| uml | caffe | 64M | <400MB | n/a (bulk: 1 of 1 runs ended error; linear: 1 of 1 "
        f"runs ended error) | {NONE_FINISHED} | n/a | 2 |"]
    pd.DataFrame(rows).assign(emulated=False).to_parquet(tmp_path / "summary.parquet")
    assert "| native |" not in report(tmp_path, mode="uml")  # any table of it
    uml = report(tmp_path, mode="uml", peaks_only=True).splitlines()
    assert uml[-1] == ("| uml | caffe | 64M | <400MB | n/a (bulk: 1 of 1 runs ended error; "
                       f"linear: 1 of 1 runs ended error) | {NONE_FINISHED} | n/a | "
                       "n/a |")
    # one policy crashed beside one that finished: the finished one is the least, and the
    # crashed one is named
    line = extremes_table(pd.DataFrame([native[0], _crashed("bulk", "none", "none")]),
                          "peak_rss_bytes").splitlines()[2]
    assert line == ("| native | caffe | none | <400MB | linear 60 [55, 65] (left out: bulk: "
                    "1 of 1 runs ended error) | linear 60 [55, 65] | no | 2 |")


def test_a_cell_no_policy_of_which_finished_has_no_most_and_no_cis_apart(tmp_path):
    """M4 (report 36b): every run OOM-killed (wf3, run.swap 0): least was n/a, but most
    showed partial:2's 42 MiB, a peak its killed runs never reached, and "CIs apart" said
    yes with no least CI. Both sides are n/a, the most naming why, and CIs apart is n/a;
    in the side-by-side table no ≈ (no two CIs to overlap)."""
    from engine.analysis.report import peaks_table, report

    rows = [_row("bulk", "48M", "0-150 MiB", 30, 30, 30),
            _row("partial:2", "48M", "0-150 MiB", 42, 42, 42)]
    for r in rows:
        r.update(runs=2, runs_not_ok=2, ended="memory", emulated=True,
                 peak_swap_bytes_median=0.0, peak_swap_bytes_ci_low=0.0,
                 peak_swap_bytes_ci_high=0.0)
    left = "bulk: 2 of 2 runs ended memory; partial:2: 2 of 2 runs ended memory"
    for metric in ("peak_rss_bytes", "peak_swap_bytes"):
        assert extremes_table(pd.DataFrame(rows), metric).splitlines()[2:] == [
            f"| uml | caffe | 48M | 0-150 MiB | n/a ({left}) | {NONE_FINISHED} | "
            f"n/a | 2 |"]
    assert peaks_table(pd.DataFrame(rows)).splitlines()[2] == (
        f"| uml | caffe | 48M | 0-150 MiB | n/a ({left}) | {NONE_FINISHED} | "
        f"n/a ({left}) | {NONE_FINISHED} |")
    pd.DataFrame(rows).to_parquet(tmp_path / "summary.parquet")
    text = report(tmp_path)
    assert "42" not in text and "| yes |" not in text and "| no |" not in text, text
    # one policy, killed: the same (nothing to compare, nothing known)
    line = extremes_table(pd.DataFrame(rows[1:]), "peak_rss_bytes").splitlines()[2]
    assert line == ("| uml | caffe | 48M | 0-150 MiB | n/a (partial:2: 2 of 2 runs ended "
                    f"memory) | {NONE_FINISHED} | n/a | 1 |")


def test_the_most_names_a_policy_whose_cut_short_runs_may_hide_more():
    """Twenty-sixth held-out pass H2: bulk's peak-swap median at 12M was the middle of a
    run killed at 10 MiB and a finished one at 72 MiB (41), and linear's 57 was named the
    most, unmarked. A policy whose runs ended early is named beside the most."""
    rows = [_row("bulk", "12M", "<400MB", 41, 10, 72), _row("linear", "12M", "<400MB",
                                                             57, 55, 60)]
    rows[0].update(runs=2, runs_not_ok=1, ended="memory")
    rows[1].update(runs=2, runs_not_ok=0, ended="")
    line = extremes_table(pd.DataFrame(rows), "peak_rss_bytes").splitlines()[2]
    assert "| linear 57 [55, 60] (or bulk: its runs ended early) |" in line

"""Issue 38, what a campaign at several batches reports: the figure of memory and time
against the batch, and the batch at which each policy's peak passes each of the paper's
limits, on runs tables whose peaks are set by hand (bulk 200 + 50 x batch MiB, linear 60 +
50 x batch MiB, a MiB apart between repetitions)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from engine.analysis import plots
from engine.analysis.report import crossing, crossings_table
from engine.analysis.summaries import summary_table
from tests.figure_checks import unlabelled_panels

MIB = 2**20
BATCHES = (1, 2, 4, 10)
BASE = {"bulk": 200, "linear": 60}
STYLE = {"dpi": 60, "font_size": 8, "palette": "tab10"}


def _peak_mib(policy: str, batch: int, rep: int) -> float:
    return BASE[policy] + 50 * batch + (rep - 1)


def _runs(batches=BATCHES, limit: str = "none") -> pd.DataFrame:
    rows = []
    for policy in BASE:
        for batch in batches:
            for rep in range(3):
                rows.append({
                    "run_id": f"runs_b{batch}/p000/{policy}/{limit}/rep{rep}",
                    "pipeline": "p000", "policy": policy, "policy_family": policy,
                    "workers": 1, "limit": limit,
                    "limit_bytes": np.nan if limit == "none" else 256 * MIB,
                    "limit_enforced": limit != "none", "emulated": False, "sandbox": "none",
                    "runtime": "caffe", "batch": batch, "rep": rep, "size_bin": "0-400 MB",
                    "n_networks": 1, "param_bytes": 1e8, "termination": "ok",
                    "makespan_s": 0.1 * batch + (0.5 if policy == "bulk" else 0.3),
                    "wall_s": 1.0, "cpu_s": 1.0,
                    "peak_rss_bytes": _peak_mib(policy, batch, rep) * MIB,
                    "hwm_rss_bytes": _peak_mib(policy, batch, rep) * MIB,
                    "mean_rss_bytes": 50 * MIB, "peak_swap_bytes": 0.0,
                    "mean_swap_bytes": 0.0})
    runs = pd.DataFrame(rows)
    return runs.assign(batch=runs["batch"].astype("Int64"))


@pytest.fixture(scope="module")
def summary() -> pd.DataFrame:
    return summary_table(_runs())


def test_the_crossing_batch_lies_between_the_batches_measured_either_side():
    """Hand counts: bulk needs 250, 300, 400 and 700 MiB at batches 1, 2, 4 and 10."""
    peaks = [(m * MIB, (m - 1) * MIB, (m + 1) * MIB) for m in (250, 300, 400, 700)]
    assert crossing(list(BATCHES), peaks, 256 * MIB) == "1-2"
    assert crossing(list(BATCHES), peaks, 512 * MIB) == "4-10"
    assert crossing(list(BATCHES), peaks, 2048 * MIB) == "> 10"
    assert crossing(list(BATCHES), peaks, 128 * MIB) == "<= 1"
    # 400 MiB [399, 401] at batch 4 holds a 400 MiB limit: not decided there
    assert crossing(list(BATCHES), peaks, 400 * MIB) == "4-10 ≈"


def test_the_crossings_table_reads_each_policys_peaks_against_the_paper_limits(summary):
    table = crossings_table(summary)
    rows = {line.split(" | ")[3]: line.split(" | ")[4:8] for line in table.splitlines()[2:]}
    # bulk: 250, 300, 400, 700 MiB; linear: 110, 160, 260, 560 MiB
    assert rows["bulk"] == ["> 10", "> 10", "4-10", "1-2"]
    assert rows["linear"] == ["> 10", "> 10", "4-10", "2-4"]


def test_the_batch_figure_draws_each_policys_medians_against_the_batch(summary):
    """Each policy's line passes through its medians (hand counts above) at each batch,
    on the peak RAM row and the makespan row; every panel is drawn and labelled."""
    fig = plots.make_figure("batch", {"summary": summary, "runs": _runs()}, STYLE,
                            {"run": {"policies": ["bulk", "linear"]}})
    assert not (problems := unlabelled_panels(fig)), "\n".join(problems)
    peak_ax, time_ax = (ax for ax in fig.axes if ax.get_ylabel())
    for policy in BASE:
        [peak] = [c.lines[0] for c in peak_ax.containers if c.get_label() == policy]
        assert list(peak.get_xdata()) == list(BATCHES)
        assert list(peak.get_ydata()) == [_peak_mib(policy, b, 1) for b in BATCHES]
        [time] = [c.lines[0] for c in time_ax.containers if c.get_label() == policy]
        assert np.allclose(time.get_ydata(), [0.1 * b + (0.5 if policy == "bulk" else 0.3)
                                              for b in BATCHES])


def test_runs_at_one_batch_have_no_batch_figure_nor_crossings(tmp_path, capsys):
    from engine.analysis.tablefiles import write_tables
    from engine.cli import main

    one = summary_table(_runs(batches=(4,)))
    fig = plots.make_figure("batch", {"summary": one, "runs": _runs(batches=(4,))}, STYLE,
                            {"run": {"policies": ["bulk", "linear"]}})
    assert not any(ax.axison for ax in fig.axes)  # the no-data figure
    write_tables({"summary": one}, tmp_path)
    code = main(["results-report", "--tables", str(tmp_path), "--batch-crossings"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "two or more" in err, err


def test_the_noise_floor_never_takes_runs_of_two_batches_for_repetitions():
    """Held-out pass 29, H1: the noise floor pooled the runs of every batch into one cell,
    reporting the batch's effect as the host's noise (8-20x). Its CV is each (policy,
    batch) cell's own: by hand, repetitions a MiB apart around 250-760 MiB."""
    from engine.analysis.summaries import noise_floor_table

    table = noise_floor_table(_runs()).set_index(["mode", "metric"])
    cvs = []
    for policy in BASE:
        for batch in BATCHES:
            peaks = np.array([_peak_mib(policy, batch, rep) for rep in range(3)])
            cvs.append(peaks.std(ddof=1) / peaks.mean())
    row = table.loc[("native, caffe runtime", "run max RSS")]
    assert row["cells"] == len(BASE) * len(BATCHES)
    assert row["cv_median"] == pytest.approx(np.median(cvs))
    # one run a cell: nothing repeated, no noise floor
    single = _runs()
    assert noise_floor_table(single[single["rep"] == 0]).empty

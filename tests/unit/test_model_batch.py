"""Issue 38: the batch as an input of the model. Synthetic campaigns at several batches
whose task times come from known coefficients on each layer's work at the run's batch
(``tests.model_fixtures.task_seconds``: EXEC = 5e-5 s + 1e-8 s per MAC): the fit must
recover them only by taking each run's features at its own batch, and then predict a
batch it never saw."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.cli import main
from engine.model import fit as fitting
from engine.model.evaluate import LBO, cross_validate
from tests.model_fixtures import TINY, WIDE, campaign, write_network

BATCHES = (1, 4, 16)


@pytest.fixture(scope="module")
def nets(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("nets")
    return {"Tiny": write_network(root, TINY), "Wide": write_network(root, WIDE)}


@pytest.fixture(scope="module")
def batched(nets) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    return campaign(nets, {"p000": ["Tiny"], "p001": ["Wide"], "p002": ["Tiny", "Wide"]},
                    ("linear",), reps=2, noise=0.01, batches=BATCHES)


def test_the_fit_takes_each_runs_work_at_its_own_batch(nets, batched):
    """A 16-image batch multiplies every layer's MACs by 16 and its EXEC time with them:
    the fitted InnerProduct line is the generating one (1e-8 s per MAC) only if each
    task's features are its run's batch's; and the model records the batches it saw."""
    runs, tasks, _ = batched
    model = fitting.fit(runs, tasks, nets)
    mode = model.modes["native/lean"]
    assert mode.batches == list(BATCHES)
    assert mode.domain.batches == list(BATCHES)
    line = mode.exec_types["InnerProduct"]
    assert line.coef.get("macs", 0.0) == pytest.approx(1e-8, rel=0.05)
    # at batch 1 an InnerProduct reads each weight once per MAC: only other batches tell
    # the work of multiplying from the bytes moved, which cost nothing here
    assert line.coef.get("weight_bytes", 0.0) * 4 < 0.05 * 1e-8


def test_a_batch_left_out_is_predicted_from_the_others(nets, batched):
    """Leave-batch-out: one fold per batch, trained on the other two; the batch in the
    middle (4, between 1 and 16) is predicted within a few % of what it measured, and
    every fold tests only its own batch's runs."""
    runs, tasks, networks = batched
    pred, notes = cross_validate(runs, tasks, networks, nets, schemes=(LBO,), orderings=1)
    assert notes == []
    assert set(pred["fold"]) == {f"batch {b}" for b in BATCHES}
    for fold, part in pred.groupby("fold"):
        assert set(part["batch"]) == {int(fold.split()[1])}
    middle = pred[pred["fold"] == "batch 4"]
    assert middle["makespan_error_pct"].abs().max() < 5, middle["makespan_error_pct"]
    # a larger batch takes longer: the prediction scales with it
    by_batch = pred.groupby("batch")["predicted_makespan_s"].median()
    assert by_batch[1] < by_batch[4] < by_batch[16]


def test_a_campaign_at_one_batch_has_no_leave_batch_out_fold(nets):
    runs, tasks, networks = campaign(nets, {"p000": ["Tiny"], "p001": ["Wide"]}, ("linear",),
                                     reps=1, batches=(4,))
    pred, notes = cross_validate(runs, tasks, networks, nets, schemes=(LBO,), orderings=1)
    assert pred.empty and notes == []


def _advise(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["advise", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_advise_answers_at_the_batch_asked_and_names_one_outside_those_fitted(
        nets, tmp_path, capsys):
    """A model fitted at batches 1 and 16 needs the batch named; at batch 4 it answers,
    with its leave-batch-out error; at 64 the domain check names the batch."""
    from engine.analysis.tablefiles import write_tables
    from engine.schedule.pipelines import Arrival, Pipeline, save_pipeline

    runs, tasks, networks = campaign(nets, {"p000": ["Tiny"], "p001": ["Wide"],
                                            "p002": ["Tiny", "Wide"]}, ("linear", "partial:2"),
                                     reps=2, noise=0.01, batches=(1, 16))
    write_tables({"runs": runs, "tasks": tasks, "networks": networks}, tmp_path / "tables")
    split = str(Path(nets["Tiny"].path).parent)
    model = tmp_path / "model" / "model.json"
    assert main(["fit-model", "--tables", str(tmp_path / "tables"), "--split", split,
                 "--out", str(model)]) == 0
    assert main(["evaluate-model", "--tables", str(tmp_path / "tables"), "--split", split,
                 "--model", str(model), "--out", str(model.parent), "--orderings", "1"]) == 0
    save_pipeline(Pipeline("q", [Arrival(0.0, ["Tiny", "Wide"])]), tmp_path / "q.json")
    capsys.readouterr()
    base = ["--pipeline", str(tmp_path / "q.json"), "--model", str(model), "--split", split]

    code, out, err = _advise(capsys, *base)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "fitted at batches 1 and 16" in err and "--batch" in err

    code, out, err = _advise(capsys, *base, "--batch", "4")
    assert code == 0, err
    assert "(batch 4, fitted at batches 1 and 16 on " in out
    assert "domain: inside what the model was fitted on" in out
    assert "leave-batch-out (" in out and "leave-batch-out: unknown" not in out

    code, out, err = _advise(capsys, *base, "--batch", "64", "--json")
    assert code == 0, err
    answer = json.loads(out)
    assert answer["batch"] == 64
    assert any("batch 64: outside the batches fitted (1, 16)" in p
               for p in answer["outside_domain"])
    code, out, err = _advise(capsys, *base, "--batch", "64", "--strict")
    assert code == 2 and "batch 64" in err

    # the predicted time grows with the batch: every layer's work does
    def makespan(batch: int) -> float:
        code, out, err = _advise(capsys, *base, "--batch", str(batch), "--json")
        assert code == 0, err
        return float(np.median([p["makespan_s"] for p in json.loads(out)["policies"]]))

    assert makespan(1) < makespan(4) < makespan(16)


def test_a_mode_of_one_pipeline_takes_its_prediction_interval_from_the_batch_left_out(nets):
    """A sandbox fit on one pipeline has no leave-pipeline-out cells: advise's interval
    then comes from its leave-batch-out cells (held out all the same), and says so."""
    from engine.model.evaluate import cross_validate, score_summary, scores

    runs, tasks, networks = campaign(nets, {"p000": ["Tiny", "Wide"]}, ("linear",),
                                     reps=2, noise=0.01, batches=(1, 4, 16))
    pred, notes = cross_validate(runs, tasks, networks, nets, orderings=1)
    assert set(pred["scheme"]) == {LBO}
    pi = score_summary(scores(pred, notes), pred)["native/lean"]["makespan_log_error_pi"]
    assert pi["unconstrained"]["scheme"] == LBO and pi["unconstrained"]["n"] == 3

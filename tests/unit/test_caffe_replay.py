"""The slowdown model's memory replay of the Caffe-faithful runtime against the kernel:
real runs' VmHWM (bulk and linear, where no ordering of workers is in play) and the
baseline the fit derives from them, which must be the interpreter's own start RSS, not a
clamp hiding a replay that holds more than the runtime does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from engine.analysis.aggregate import aggregate
from engine.analysis.tablefiles import write_tables
from engine.analysis.tidy import tidy_run
from engine.caffe.splitter import Description
from engine.model.predict import Networks, predict
from engine.model.train import fit_model_files, pipelines_from_networks
from engine.schedule.pipelines import Arrival, Pipeline, save_pipeline

REPO = Path(__file__).resolve().parents[2]
MIB = 2**20


@pytest.fixture(scope="module")
def caffe_runs(zoo_split, tmp_path_factory) -> tuple[Path, Path]:
    """(tables, models) of AgeNet then GenderNet (both V1 files: a LOAD holds three
    copies of a layer's weights) under bulk and linear, Caffe-faithful, batch 1."""
    root = tmp_path_factory.mktemp("caffe_replay")
    models = Path(zoo_split["AgeNet"].path).parent
    pipe = root / "p.json"
    save_pipeline(Pipeline("p", [Arrival(0.0, ["AgeNet", "GenderNet"])]), pipe)
    runs = []
    for policy in ("bulk", "linear"):
        run = root / "runs" / policy
        subprocess.run([sys.executable, "-m", "engine", "run", "--pipeline", str(pipe),
                        "--policy", policy, "--split", str(models), "--out", str(run),
                        "--backend", "none", "--batch", "1", "--runtime", "caffe",
                        "--sample-hz", "0"], cwd=REPO, check=True, capture_output=True)
        runs.append(tidy_run(run))
    write_tables(aggregate(runs, None), root / "tables")
    return root / "tables", models


def test_the_caffe_replay_holds_what_the_kernel_measured(caffe_runs, tmp_path):
    tables, models = caffe_runs
    model = fit_model_files(tables, models, tmp_path / "model.json")
    mode = model.modes["native/caffe"]
    # the baseline is the runtime's own memory: the interpreter and numpy at the start
    assert mode.baseline_bytes == pytest.approx(mode.start_rss_bytes, abs=12 * MIB)
    runs = pd.read_parquet(tables / "runs.parquet")
    pipes = pipelines_from_networks(pd.read_parquet(tables / "networks.parquet"))
    descs = {n: Description.load(models / f"{s}.description.json")
             for n, s in (("AgeNet", "age_net"), ("GenderNet", "gender_net"))}
    nets = Networks(descs, 1, "caffe")
    for run in runs.itertuples():
        predicted = predict(mode, pipes[run.pipeline], nets, run.policy)[0].peak_ram_bytes
        assert predicted == pytest.approx(run.hwm_rss_bytes, rel=0.04), run.policy

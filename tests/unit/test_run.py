"""The ``run`` and ``graph`` commands end to end on real split models."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from threadpoolctl import threadpool_limits

from engine.analysis.tidy import tidy_run
from engine.caffe import generate, splitter
from engine.limits import LimitRequest
from engine.network import run_standalone
from engine.runner.meta import RunMeta, transparent_hugepage
from engine.runner.request import ProbeOptions, RunOptions, RunRequest
from engine.runner.supervise import run_supervised
from engine.schedule.pipelines import Arrival, Pipeline, save_pipeline
from engine.schedule.policies import parse_policy
from tests.signals import default_signals

REPO = Path(__file__).resolve().parents[2]
POLICIES = ["bulk", "linear", "partial:1", "partial:2", "partial:3", "deepeye",
            "deepeye-frugal", "execprio:2", "execprio-inter:2", "masa:2"]


@pytest.fixture(scope="module")
def models(zoo_split) -> dict[str, Path]:
    return {name: Path(d.path) for name, d in zoo_split.items()}


def _pipeline(nets, times=None) -> Pipeline:
    times = times or [0.0] * len(nets)
    arrivals = [Arrival(t, [n]) for t, n in zip(times, nets)] if len(set(times)) > 1 else [
        Arrival(0.0, list(nets))]
    return Pipeline("t", arrivals, arrival_mode="batch" if len(set(times)) == 1 else "given")


def run_pipeline(pipe: Pipeline, policy: str, models: dict[str, Path], out: Path,
                 options: RunOptions) -> Path:
    """One supervised run with the process-level probes off (they are tested elsewhere)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    path = out.parent / f"{out.name}.pipeline.json"
    save_pipeline(pipe, path)
    run_supervised(RunRequest(
        str(path), parse_policy(policy).name, str(models["AgeNet"].parent), str(out), options,
        LimitRequest(backend="none"),
        ProbeOptions(process=False, cgroup=False, gnu_time=False, sample_hz=0)))
    return out


def test_every_policy_gives_bit_identical_outputs_equal_to_standalone_runs(models, tmp_path):
    nets = ["GoogLeNet", "AgeNet", "GenderNet", "AgeNet"]
    pipe = _pipeline(nets)
    outputs = {}
    for policy in POLICIES:
        folder = run_pipeline(pipe, policy, models, tmp_path / policy,
                              RunOptions(batch=1, seed=5, budget=200 * 2**20))
        meta = json.loads((folder / "meta.json").read_text())
        assert meta["termination"] == "ok" and meta["policy"] == parse_policy(policy).name
        assert meta["limit_enforced"] is False
        assert meta["child"]["blas"][0]["num_threads"] == 1
        with np.load(folder / "outputs.npz") as z:
            outputs[policy] = {k: z[k] for k in z.files}
        rows = list(csv.DictReader(open(folder / "tasks.csv")))
        layers = {"GoogLeNet": 152, "AgeNet": 20, "GenderNet": 20}
        expected = 3 * len(nets) if policy == "bulk" else sum(1 + 2 * layers[n] for n in nets)
        assert len(rows) == expected
        assert all(int(r["end_ns"]) >= int(r["work_end_ns"]) >= int(r["start_ns"]) >= 0
                   for r in rows)
        networks = list(csv.DictReader(open(folder / "networks.csv")))
        for r in networks:
            assert int(r["response_ns"]) == int(r["waiting_ns"]) + int(r["execution_ns"])
    ref = outputs["bulk"]
    assert sorted(ref) == ["0:GoogLeNet/prob", "1:AgeNet/prob", "2:GenderNet/prob",
                           "3:AgeNet/prob"]
    for policy, out in outputs.items():
        assert out.keys() == ref.keys()
        for k in ref:
            assert np.array_equal(out[k], ref[k]), (policy, k)
    # BLAS thread count changes float rounding, so compare at the run's setting (1)
    with threadpool_limits(1, "blas"):
        alone = run_standalone(models["AgeNet"], seed=5, batch=1)["prob"]
    assert np.array_equal(ref["1:AgeNet/prob"], alone)


def test_the_caffe_runtime_gives_every_policy_the_lean_runtimes_outputs(models, tmp_path):
    """The runtime changes when memory is used, never what is computed: every policy
    under the Caffe-faithful runtime, bit for bit the lean runtime's bulk outputs."""
    pipe = _pipeline(["AgeNet", "GoogLeNet"])
    ref = run_pipeline(pipe, "bulk", models, tmp_path / "lean", RunOptions(batch=1, seed=3))
    with np.load(ref / "outputs.npz") as z:
        want = {k: z[k] for k in z.files}
    for policy in POLICIES:
        folder = run_pipeline(pipe, policy, models, tmp_path / policy,
                              RunOptions(batch=1, seed=3, budget=200 * 2**20,
                                         runtime="caffe"))
        meta = RunMeta.read(folder)
        assert meta.termination == "ok" and meta.runtime == "caffe"
        with np.load(folder / "outputs.npz") as z:
            assert sorted(z.files) == sorted(want)
            for k in want:
                assert np.array_equal(z[k], want[k]), (policy, k)


def test_loads_are_recorded_with_their_bytes(models, tmp_path):
    folder = run_pipeline(_pipeline(["AgeNet"]), "linear", models,
                          tmp_path / "r", RunOptions(batch=1))
    rows = [r for r in csv.DictReader(open(folder / "tasks.csv")) if r["task_type"] == "LOAD"]
    assert sum(int(r["bytes_loaded"]) for r in rows) == 4 * 11_415_048
    fc6 = next(r for r in rows if r["layer_name"] == "fc6")
    assert int(fc6["bytes_loaded"]) == int(fc6["param_bytes"]) == 4 * (512 * 18816 + 512)
    assert fc6["layer_kind"] == "fc"


@pytest.mark.parametrize("setting, advice", [(None, False), ("1", True)])
def test_the_child_gets_4k_pages_unless_numpy_hugepages_are_asked_for(
        models, tmp_path, monkeypatch, setting, advice):
    if setting is None:
        monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE", raising=False)
    else:
        monkeypatch.setenv("NUMPY_MADVISE_HUGEPAGE", setting)
    folder = run_pipeline(_pipeline(["AgeNet"]), "linear", models, tmp_path / "r",
                          RunOptions(batch=1))
    meta = RunMeta.read(folder)
    # what the child's numpy itself reported, not what we asked for
    assert meta.child["numpy_hugepage_advice"] is advice
    assert meta.host["transparent_hugepage"] == transparent_hugepage()
    assert bool(tidy_run(folder)["runs"].loc[0, "numpy_hugepages"]) is advice


def test_the_hugepage_mode_is_read_from_the_kernels_bracket(tmp_path):
    path = tmp_path / "enabled"
    path.write_text("always [madvise] never\n")
    assert transparent_hugepage(str(path)) == "madvise"
    path.write_text("garbage\n")
    assert transparent_hugepage(str(path)) is None
    assert transparent_hugepage(str(tmp_path / "missing")) is None


def test_poisson_arrivals_are_honoured(models, tmp_path):
    pipe = _pipeline(["AgeNet", "AgeNet"], times=[0.0, 0.2])
    folder = run_pipeline(pipe, "partial:2", models, tmp_path / "r",
                          RunOptions(batch=1))
    rows = list(csv.DictReader(open(folder / "networks.csv")))
    assert int(rows[1]["arrival_ns"]) == 200_000_000
    assert int(rows[1]["init_start_ns"]) >= 200_000_000


def _cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300, **kw)


def test_run_cli_refuses_to_overwrite_and_reports_bad_input(models, tmp_path):
    pipe = tmp_path / "p.json"
    save_pipeline(_pipeline(["AgeNet"]), pipe)
    split_dir = str(models["AgeNet"].parent)
    args = ["run", "--pipeline", str(pipe), "--split", split_dir, "--batch", "1"]
    r = _cli(*args, "--policy", "linear", "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    assert "t under linear (unlimited): ok" in r.stderr
    r = _cli(*args, "--policy", "linear", "--out", str(tmp_path / "out"))
    assert r.returncode == 2 and "already holds a finished run; pass --force" in r.stderr
    r = _cli(*args, "--policy", "linear", "--out", str(tmp_path / "out"), "--force")
    assert r.returncode == 0
    r = _cli(*args, "--policy", "roundrobin", "--out", str(tmp_path / "o2"))
    assert r.returncode == 2 and "unknown policy 'roundrobin'" in r.stderr
    save_pipeline(_pipeline(["AgeNet", "ResNet"]), tmp_path / "bad.json")
    r = _cli("run", "--pipeline", str(tmp_path / "bad.json"), "--split", split_dir,
             "--policy", "bulk", "--out", str(tmp_path / "o3"))
    assert r.returncode == 2
    assert "names networks with no split model: ResNet (available: AgeNet," in r.stderr
    assert not (tmp_path / "o2").exists() and not (tmp_path / "o3").exists()


def test_forward_and_run_give_the_same_arrays_under_the_same_keys(models, tmp_path):
    """forward at its default BLAS threads equals a run of the network alone at run's
    default, bit for bit, keyed alike (AlexNet: its large products are where a second
    BLAS thread changes the rounding)."""
    pipe = tmp_path / "p.json"
    save_pipeline(_pipeline(["AlexNet"]), pipe)
    r = _cli("run", "--pipeline", str(pipe), "--split", str(models["AlexNet"].parent),
             "--policy", "linear", "--backend", "none", "--no-probes", "--seed", "3",
             "--out", str(tmp_path / "run"))
    assert r.returncode == 0, r.stderr
    r = _cli("forward", str(models["AlexNet"]), "--seed", "3", "--out",
             str(tmp_path / "f.npz"))
    assert r.returncode == 0, r.stderr
    with np.load(tmp_path / "run" / "outputs.npz") as a, np.load(tmp_path / "f.npz") as b:
        assert a.files == b.files == ["0:AlexNet/prob"]
        assert all(np.array_equal(a[k], b[k]) for k in a.files)


def _corrupt_fc6(tmp_path: Path) -> tuple[Path, Path]:
    """AgeNet split into tmp_path/s with its fc6 partial corrupt but of the same size, as
    if split so (the run checks the partials' digests up front): its LOAD fails. Returns
    the partial and a pipeline of AgeNet alone."""
    prototxt, model = generate.write_zoo_model("AgeNet", tmp_path / "m", 1)
    desc = splitter.Description.load(splitter.split_model(model, prototxt, tmp_path / "s",
                                                          network="AgeNet"))
    partial = desc.resolve(desc.layers[12].partial)  # fc6
    data = bytearray(partial.read_bytes())
    data[4:40] = b"\xff" * 36  # only reading the layer can tell
    partial.write_bytes(bytes(data))
    record = json.loads(Path(desc.path).read_text())
    record["layers"][12]["partial_sha256"] = hashlib.sha256(bytes(data)).hexdigest()
    Path(desc.path).write_text(json.dumps(record))
    pipe = tmp_path / "p.json"
    save_pipeline(_pipeline(["AgeNet"]), pipe)
    return partial, pipe


def test_a_failing_task_is_recorded_as_error(tmp_path):
    partial, pipe = _corrupt_fc6(tmp_path)
    r = _cli("run", "--pipeline", str(pipe), "--split", str(tmp_path / "s"), "--policy",
             "partial:2", "--out", str(tmp_path / "run"), "--batch", "1")
    assert r.returncode == 1
    assert "task 0:AgeNet LOAD_12 failed: CorruptModelError" in r.stderr
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["termination"] == "error"
    assert f"{partial}: corrupt or truncated caffemodel at byte 11" in meta[
        "termination_detail"]
    assert meta["child"]["failed_task"] == "0:AgeNet LOAD_12"
    # --error-is-result (the workflow's sandbox runs): the same record, exit 0
    r = _cli("run", "--pipeline", str(pipe), "--split", str(tmp_path / "s"), "--policy",
             "partial:2", "--out", str(tmp_path / "run2"), "--batch", "1",
             "--error-is-result")
    assert r.returncode == 0 and "task 0:AgeNet LOAD_12 failed" in r.stderr
    assert json.loads((tmp_path / "run2" / "meta.json").read_text())["termination"] == "error"


def test_force_keeps_the_earlier_run_when_the_new_one_fails(models, tmp_path):
    """H3 (new-user pass): --force replaced a good run with one that failed (exit 1). A
    failed run is no result: the earlier run stays, the failed one's record lies beside."""
    _, pipe = _corrupt_fc6(tmp_path)
    out = tmp_path / "run"
    args = ["run", "--pipeline", str(pipe), "--policy", "linear", "--out", str(out),
            "--batch", "1", "--sample-hz", "0"]
    r = _cli(*args, "--split", str(models["AgeNet"].parent))
    assert r.returncode == 0, r.stderr
    good = (out / "meta.json").read_bytes()
    for extra in ([], ["--error-is-result"]):
        r = _cli(*args, "--split", str(tmp_path / "s"), "--force", *extra)
        assert r.returncode == 1 and "the earlier run in" in r.stderr, r.stderr
        assert (out / "meta.json").read_bytes() == good
        failed = [p for p in tmp_path.iterdir() if p.name.startswith("run.failed.")]
        assert len(failed) == 1
        assert json.loads((failed[0] / "meta.json").read_text())["termination"] == "error"
        assert str(failed[0]) in r.stderr
        shutil.rmtree(failed[0])


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 130),
                                       (signal.SIGHUP, 130)])
def test_a_signal_stops_the_run_and_writes_nothing(models, tmp_path, sig, code):
    pipe = tmp_path / "p.json"
    save_pipeline(_pipeline(["AlexNet"] * 30), pipe)
    proc = subprocess.Popen([sys.executable, "-m", "engine", "run", "--pipeline", str(pipe),
                             "--split", str(models["AlexNet"].parent), "--policy", "linear",
                             "--out", str(tmp_path / "run")], cwd=REPO,
                            stderr=subprocess.PIPE, text=True, preexec_fn=default_signals)
    time.sleep(2.0)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert f"interrupted by {sig.name}; nothing written" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json"]


def test_graph_command_writes_dot(models, tmp_path):
    out = tmp_path / "g.dot"
    r = _cli("graph", "--policy", "deepeye", "--description", str(models["AgeNet"]),
             "--count", "2", "--out", str(out))
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert text.startswith('digraph "deepeye: 2 x AgeNet"')
    assert text.count(" -> ") == int(r.stderr.split(" tasks, ")[1].split(" edges")[0])
    assert 'label="LOAD_12\\nfc6\\npool 1"' in text


def test_a_timed_out_run_keeps_the_networks_that_finished_before_it(models, tmp_path):
    pipe = tmp_path / "p.json"
    save_pipeline(_pipeline(["AgeNet", "GenderNet"], times=[0.0, 30.0]), pipe)
    r = _cli("run", "--pipeline", str(pipe), "--split", str(models["AgeNet"].parent),
             "--policy", "linear", "--out", str(tmp_path / "run"), "--batch", "1",
             "--backend", "none", "--timeout", "4")
    assert r.returncode == 0, r.stderr
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["termination"] == "timeout"
    rows = list(csv.DictReader(open(tmp_path / "run" / "networks.csv")))
    assert [(row["network"], row["complete"]) for row in rows] == [("AgeNet", "True")]
    assert int(rows[0]["end_ns"]) > int(rows[0]["init_start_ns"]) >= 0


def test_an_oom_says_when_it_struck():
    """Seventh held-out pass L3: a run killed before any task ran said "OOM while running:
    unknown"."""
    from engine.commands.run import _oom_moment

    assert _oom_moment(["0:AgeNet LOAD_3 conv2"], 7) == "OOM while running: 0:AgeNet LOAD_3 conv2"
    assert _oom_moment([], 0).startswith("OOM before its first task started")
    assert _oom_moment([], None).startswith("OOM before its first task started")
    assert _oom_moment([], 12) == "OOM between tasks, after 12 had finished"


def test_the_pipeline_waits_for_the_sampler_however_late_it_starts(models, tmp_path,
                                                                   monkeypatch):
    """Twenty-third held-out pass H2: on a loaded host the sampler (an interpreter started
    after the child, which it needs the PID of) came up after a 0.3 s pipeline had ended,
    and the run's peak RSS was its exit's, half the kernel's high-water mark. Here the
    sampler starts 1.5 s late, much longer than AgeNet's pipeline takes: the first sample
    still comes before the pipeline's t0, and the sampled peak is the high-water mark's."""
    import engine.probes.sampler as sampler_module

    start = sampler_module.start_sampler

    def late(*args, **kwargs):
        time.sleep(1.5)
        return start(*args, **kwargs)

    monkeypatch.setattr(sampler_module, "start_sampler", late)
    pipe = tmp_path / "p.json"
    save_pipeline(_pipeline(["AgeNet"]), pipe)
    out = tmp_path / "run"
    meta = run_supervised(RunRequest(
        str(pipe), "bulk", str(models["AgeNet"].parent), str(out), RunOptions(),
        LimitRequest(backend="none"), ProbeOptions(cgroup=False, gnu_time=False,
                                                   sample_hz=200)))
    samples = pd.read_csv(out / "samples.csv")
    assert samples["t_ns"].iloc[0] < meta.t0_monotonic_ns
    assert samples["rss_bytes"].max() >= 0.9 * meta.hwm_rss_bytes


def test_a_child_dead_before_the_gate_opens_is_the_childs_end_not_the_supervisors():
    """Twenty-fifth held-out pass M3: under uml at 8M with no swap the child was
    OOM-killed in its start-up, before it read the gate; the supervisor's write to the
    gate then broke the pipe, and the run ended exit 141 with no run folder (recorded as a
    crash, the kill lost). With no reader left, opening the gate is nothing to tell."""
    from engine.runner.gate import StartGate

    gate = StartGate()
    gate.started()  # the child's end closed: as if it died before reading it
    gate.open()
    gate.close()


@pytest.mark.parametrize("uptime, slept", [("0.75 0.70\n", [1.35]), ("2.50 2.40\n", [])])
def test_in_a_sandbox_guest_the_gate_opens_once_the_guest_has_been_up_long_enough(
        tmp_path, monkeypatch, uptime, slept):
    """engine.sandbox.job.SETTLE_S: a pipeline that starts early in a guest's life swaps
    differently, so the gate holds it until the uptime the guest job names; the child
    reads the gate's byte only after that wait."""
    import engine.runner.gate as gate_mod

    (tmp_path / "uptime").write_text(uptime)
    monkeypatch.setattr(gate_mod, "PROC_UPTIME", tmp_path / "uptime")
    monkeypatch.setenv(gate_mod.START_UPTIME_ENV, "2.1")
    sleeps = []
    monkeypatch.setattr(gate_mod.time, "sleep", sleeps.append)
    gate = gate_mod.StartGate()
    child = os.dup(gate.child_fd)
    gate.started()
    gate.open()
    assert sleeps == pytest.approx(slept)
    assert os.read(child, 1) == b"s"
    os.close(child)


def test_natively_the_gate_opens_at_once(monkeypatch):
    import engine.runner.gate as gate_mod

    monkeypatch.delenv(gate_mod.START_UPTIME_ENV, raising=False)
    monkeypatch.setattr(gate_mod.time, "sleep", lambda s: pytest.fail(f"slept {s}"))
    gate = gate_mod.StartGate()
    child = os.dup(gate.child_fd)
    gate.started()
    gate.open()
    assert os.read(child, 1) == b"s"
    os.close(child)

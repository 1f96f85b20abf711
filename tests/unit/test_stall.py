"""The stall watch (engine.runner.stall) on real child processes: a run that stands
still is ended after stall_s; one whose progress file, memory or swap moves is not; and
`engine run --stall-timeout` ends a real run that waits for nothing, but never one that
waits for a later arrival or works."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from engine.runner.stall import StallWatch, wait_child
from engine.schedule.pipelines import Arrival, Pipeline, save_pipeline

REPO = Path(__file__).resolve().parents[2]


def _child(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code])


def _fake_cgroup(tmp_path: Path) -> Path:
    """A directory laid out like a cgroup v2 folder: what the watch reads."""
    cg = tmp_path / "cg"
    cg.mkdir()
    (cg / "cgroup.controllers").write_text("memory\n")
    (cg / "memory.current").write_text("1000000\n")
    (cg / "memory.swap.current").write_text("0\n")
    return cg


def _wait(proc, watch, stall_s=1.0, timeout_s=20.0, last_arrival_s=0.0):
    t0 = time.monotonic()
    try:
        res = wait_child(proc, timeout_s, stall_s, watch, last_arrival_s)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    return res, time.monotonic() - t0


def test_a_child_that_stands_still_is_ended_as_stalled(tmp_path):
    proc = _child("import time; time.sleep(30)")
    res, took = _wait(proc, StallWatch(tmp_path / "progress.jsonl", proc.pid))
    assert (res.code, res.why) == (None, "stalled")
    assert 1.0 <= took < 5.0


def test_progress_lines_keep_a_run_alive(tmp_path):
    cg = _fake_cgroup(tmp_path)  # memory frozen: only the progress file moves
    progress = tmp_path / "progress.jsonl"
    proc = _child(f"import time\nfor i in range(12):\n"
                  f"    open({str(progress)!r}, 'a').write('x\\n'); time.sleep(0.25)\n")
    res, took = _wait(proc, StallWatch(progress, proc.pid, cg, 2))
    assert (res.code, res.why) == (0, None)
    assert took >= 2.5


def test_moving_swap_keeps_a_run_alive_and_frozen_counters_do_not(tmp_path):
    cg = _fake_cgroup(tmp_path)
    swap = cg / "memory.swap.current"
    proc = _child(f"import time\nfor i in range(12):\n"
                  f"    open({str(swap)!r}, 'w').write(str(4096 * i)); time.sleep(0.25)\n")
    res, _ = _wait(proc, StallWatch(tmp_path / "progress.jsonl", proc.pid, cg, 2))
    assert (res.code, res.why) == (0, None)
    # under a cgroup CPU time is no sign of life: a busy child with frozen counters stalls
    proc = _child("import time\nt = time.monotonic()\nwhile time.monotonic() - t < 30: pass\n")
    res, took = _wait(proc, StallWatch(tmp_path / "progress.jsonl", proc.pid, cg, 2))
    assert res.why == "stalled" and took < 5.0


def test_without_a_cgroup_a_computing_child_is_moving(tmp_path):
    proc = _child("import time\nt = time.monotonic()\nwhile time.monotonic() - t < 3: pass\n")
    res, _ = _wait(proc, StallWatch(tmp_path / "progress.jsonl", proc.pid))
    assert (res.code, res.why) == (0, None)


def test_the_wall_clock_timeout_comes_first_when_it_is_shorter(tmp_path):
    proc = _child("import time; time.sleep(30)")
    res, took = _wait(proc, StallWatch(tmp_path / "p", proc.pid), stall_s=10.0, timeout_s=1.0)
    assert res.why == "timeout" and took < 5.0


def test_standing_still_before_the_last_arrival_is_waiting(tmp_path):
    proc = _child("import time; time.sleep(3)")
    res, _ = _wait(proc, StallWatch(tmp_path / "p", proc.pid), stall_s=1.5,
                   last_arrival_s=2.5)
    assert (res.code, res.why) == (0, None)


def _run(zoo_split, tmp_path, times, *flags, stop_child_at=None):
    """``engine run`` of AgeNet then GenderNet arriving at ``times``; with
    ``stop_child_at``, the measured child is SIGSTOPped that many seconds in (a run that
    stands still for good, as a stuck sandbox kernel leaves it)."""
    pipe = tmp_path / "p.json"
    nets = ["AgeNet", "GenderNet"][:len(times)]
    save_pipeline(Pipeline("t", [Arrival(t, [n]) for t, n in zip(times, nets)],
                           arrival_mode="given"), pipe)
    models = Path(zoo_split["AgeNet"].path).parent
    proc = subprocess.Popen([sys.executable, "-m", "engine", "run", "--pipeline", str(pipe),
                             "--split", str(models), "--policy", "linear", "--batch", "1",
                             "--out", str(tmp_path / "run"), "--backend", "none", *flags],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if stop_child_at is not None:
        time.sleep(stop_child_at)
        for child in psutil.Process(proc.pid).children(recursive=True):
            if "child" in child.cmdline():
                os.kill(child.pid, signal.SIGSTOP)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return json.loads((tmp_path / "run" / "meta.json").read_text())


def test_run_waits_for_a_later_arrival_and_finishes(zoo_split, tmp_path):
    meta = _run(zoo_split, tmp_path, [0.0, 4.0], "--stall-timeout", "2", "--timeout", "60")
    assert meta["termination"] == "ok"
    assert meta["wall_s"] >= 4.0


def test_run_whose_child_stands_still_ends_as_a_stalled_timeout(zoo_split, tmp_path):
    meta = _run(zoo_split, tmp_path, [0.0, 3.0], "--stall-timeout", "2", "--timeout", "60",
                stop_child_at=1.5)
    assert meta["termination"] == "timeout"
    assert meta["termination_detail"].startswith("stalled: ")
    assert 5.0 <= meta["wall_s"] < 30.0  # the last arrival (3 s) + 2 s, not the 60 s timeout


def test_run_with_a_bad_stall_timeout_is_refused(tmp_path):
    r = subprocess.run([sys.executable, "-m", "engine", "run", "--pipeline", "p.json",
                        "--split", ".", "--policy", "linear", "--out", str(tmp_path / "r"),
                        "--stall-timeout", "-1"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 2 and "--stall-timeout -1.0: must be a number > 0" in r.stderr
    assert not (tmp_path / "r").exists()

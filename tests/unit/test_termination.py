"""How a run's end is classified (engine.runner.supervise._termination) and what the run
folder keeps of a run killed mid-task (engine.runner.folder.assemble), on hand-made run
temp folders: child.json, gnu_time.txt and progress.jsonl as the measured child and GNU
time leave them."""

from __future__ import annotations

import csv
import json
import os
import subprocess
from pathlib import Path

import pytest

from engine.runner.folder import assemble
from engine.runner.meta import RunMeta
from engine.runner.supervise import _termination

GT_REPORT = """\
\tCommand being timed: "python -m engine child /tmp/run/spec.json"
\tUser time (seconds): 0.52
\tSystem time (seconds): 0.10
\tPercent of CPU this job got: 95%
\tElapsed (wall clock) time (h:mm:ss or m:ss): 0:00.65
\tMaximum resident set size (kbytes): 6
\tMinor (reclaiming a frame) page faults: 1234
\tExit status: 0
"""


class FakeSession:
    """What _termination asks of a limit session: whether the cgroup hit its limit."""

    def __init__(self, at_limit: bool) -> None:
        self.at_limit = at_limit
        self.asked = 0

    def hit_limit(self) -> bool:
        self.asked += 1
        return self.at_limit


def _child(tmp: Path, status: str, error: str | None = None) -> None:
    (tmp / "child.json").write_text(json.dumps(
        {"status": status, "error": error, "failed_task": None, "t0_monotonic_ns": 1,
         "wall_s": 0.5, "blas": [], "probes": {}, "tasks": 7, "edges": 9}, indent=1))


def _gnu(tmp: Path, signal: int | None) -> None:
    head = f"Command terminated by signal {signal}\n" if signal else ""
    (tmp / "gnu_time.txt").write_text(head + GT_REPORT)


@pytest.fixture(scope="module")
def real_gnu_reports(tmp_path_factory) -> dict[str, str]:
    """GNU time's own reports of a command SIGKILLed and of one exiting 3 (skipped
    without GNU time)."""
    if not os.access("/usr/bin/time", os.X_OK):
        pytest.skip("GNU time is not installed at /usr/bin/time")
    d = tmp_path_factory.mktemp("gnutime")
    out = {}
    for name, cmd in (("killed", "kill -9 $$"), ("exit3", "exit 3")):
        proc = subprocess.run(["/usr/bin/time", "-v", "-o", str(d / name), "sh", "-c", cmd],
                              capture_output=True)
        out[name] = (d / name).read_text()
        out[name + "_code"] = proc.returncode
    return out


# ---- timeout ----

def test_a_wall_clock_timeout_wins_over_everything(tmp_path):
    _child(tmp_path, "running")  # (a status the child never writes: not finished)
    session = FakeSession(at_limit=True)
    assert _termination(-9, True, 3, session, tmp_path) == (
        "timeout", "wall-clock timeout; the run was killed")
    assert session.asked == 0
    (tmp_path / "child.json").unlink()
    assert _termination(-9, "stalled", None, session, tmp_path, 60)[0] == "timeout"


@pytest.mark.parametrize("timed_out, said", [
    (True, "the wall-clock timeout killed it as it exited"),
    ("stalled", "the stall watch (60 s) killed it as it exited")])
def test_a_timeout_after_every_task_and_the_outputs_ends_a_finished_run(tmp_path, timed_out,
                                                                        said):
    """Twentieth held-out pass D2, the timeout's twin of the nineteenth's D2: runs that
    finished every task and wrote their outputs just before the timeout were tabled
    'timeout', with no makespan, and advise said no run finished."""
    _child(tmp_path, "ok")
    assert _termination(-9, timed_out, None, FakeSession(True), tmp_path, 60) == (
        "ok", f"every task finished and the outputs were written; then {said}")


def test_the_childs_own_timeout(tmp_path):
    _child(tmp_path, "timeout")
    assert _termination(0, False, 0, FakeSession(False), tmp_path) == (
        "timeout", "the run's own timeout")


# ---- memory ----

@pytest.mark.parametrize("code", [-9, 137, 1, 0])
def test_kernel_oom_kills_mean_memory_whatever_the_exit_code(tmp_path, code):
    session = FakeSession(at_limit=False)
    termination, detail = _termination(code, False, 2, session, tmp_path)
    assert termination == "memory"
    assert detail == "kernel OOM killer: 2 process(es) killed in the run's cgroup"
    assert session.asked == 0  # the kernel's count decides; the fallback is not needed


@pytest.mark.parametrize("code", [-9, 137, 0])
def test_a_kill_after_every_task_and_the_outputs_ends_a_finished_run(tmp_path, code):
    """Nineteenth held-out pass D2: near the limit, most uml runs counted OOM-killed had
    finished every task and written their outputs (their summary, which the child writes
    last, says ok) before the kernel killed them as they exited; they were tabled as
    runs that never finished, and the model took its kill limit from them. Such a run
    finished: ok, and its detail names the kill; a child killed before its summary is
    still memory."""
    _child(tmp_path, "ok")
    termination, detail = _termination(code, False, 3, FakeSession(False), tmp_path)
    assert termination == "ok"
    assert detail == ("every task finished and the outputs were written; then the kernel "
                      "OOM killer ended 3 process(es) in the run's cgroup as it exited")
    # the limit-reached fallback of a kernel that counts no OOM kills, likewise
    assert _termination(-9, False, None, FakeSession(True), tmp_path)[0] == "ok"
    _child(tmp_path, "error", "MemoryError")  # the run itself failed first: not finished
    assert _termination(code, False, 3, FakeSession(False), tmp_path)[0] == "memory"
    (tmp_path / "child.json").unlink()
    assert _termination(code, False, 3, FakeSession(False), tmp_path)[0] == "memory"


@pytest.mark.parametrize("oom_kills", [None, 0])  # not counted, or counted none
@pytest.mark.parametrize("code", [-9, 128 + 9])  # SIGKILL seen directly / through a shell
def test_sigkill_at_the_limit_is_memory_when_no_oom_kill_was_counted(tmp_path, code,
                                                                     oom_kills):
    session = FakeSession(at_limit=True)
    assert _termination(code, False, oom_kills, session, tmp_path) == (
        "memory", "killed by SIGKILL with the cgroup at its limit")
    assert session.asked == 1


def test_sigkill_reported_only_by_gnu_time_counts_as_sigkill(tmp_path):
    _gnu(tmp_path, 9)
    session = FakeSession(at_limit=True)
    assert _termination(1, False, None, session, tmp_path)[0] == "memory"
    assert session.asked == 1


def test_gnu_times_own_report_of_a_sigkill(tmp_path, real_gnu_reports):
    assert real_gnu_reports["killed_code"] == 128 + 9
    (tmp_path / "gnu_time.txt").write_text(real_gnu_reports["killed"])
    for code in (real_gnu_reports["killed_code"], 0):  # the text alone is enough
        assert _termination(code, False, None, FakeSession(True), tmp_path)[0] == "memory"


@pytest.mark.parametrize("code", [-9, 128 + 9])
def test_sigkill_below_the_limit_is_an_error(tmp_path, code):
    session = FakeSession(at_limit=False)
    assert _termination(code, False, None, session, tmp_path) == (
        "error", f"the run process ended with code {code} before finishing")
    assert session.asked == 1


@pytest.mark.parametrize("code, signal", [(-15, None), (128 + 15, None), (1, 15), (-6, 6)])
def test_other_signals_are_errors_even_at_the_limit(tmp_path, code, signal):
    if signal:
        _gnu(tmp_path, signal)
    session = FakeSession(at_limit=True)
    assert _termination(code, False, None, session, tmp_path) == (
        "error", f"the run process ended with code {code} before finishing")
    assert session.asked == 0  # not a SIGKILL: the limit is not asked about


def test_a_sigkill_after_the_child_wrote_its_summary_at_the_limit_ends_a_finished_run(
        tmp_path):
    _child(tmp_path, "ok")  # (a kill at exit, nineteenth held-out pass D2: see above)
    assert _termination(-9, False, None, FakeSession(True), tmp_path) == (
        "ok", "every task finished and the outputs were written; then it was killed by "
        "SIGKILL with the cgroup at its limit as it exited")
    assert _termination(-9, False, None, FakeSession(False), tmp_path) == (
        "error", "exit code -9")


# ---- ok and error, from child.json ----

def test_ok_needs_status_ok_and_exit_code_0(tmp_path):
    _child(tmp_path, "ok")
    _gnu(tmp_path, None)
    session = FakeSession(at_limit=True)
    assert _termination(0, False, 0, session, tmp_path) == ("ok", "")
    assert _termination(0, False, None, session, tmp_path) == ("ok", "")
    assert session.asked == 0  # a clean exit is never blamed on the limit
    assert _termination(1, False, 0, session, tmp_path) == ("error", "exit code 1")


def test_a_failed_task_is_an_error_with_the_childs_message(tmp_path):
    _child(tmp_path, "error", "ModelError: conv3.partial.caffemodel is truncated")
    assert _termination(1, False, 0, FakeSession(False), tmp_path) == (
        "error", "ModelError: conv3.partial.caffemodel is truncated")


def test_gnu_times_report_of_an_exit_code(tmp_path, real_gnu_reports):
    (tmp_path / "gnu_time.txt").write_text(real_gnu_reports["exit3"])
    session = FakeSession(at_limit=True)
    assert _termination(3, False, None, session, tmp_path) == (
        "error", "the run process ended with code 3 before finishing")
    assert session.asked == 0


@pytest.mark.parametrize("code", [1, 2, -11, 0])
def test_no_child_summary_is_an_error_naming_the_exit_code(tmp_path, code):
    assert _termination(code, False, None, FakeSession(False), tmp_path) == (
        "error", f"the run process ended with code {code} before finishing")


@pytest.mark.parametrize("text", ["", '{"status": "o'])
def test_a_cut_child_summary_is_still_classified(tmp_path, text):
    (tmp_path / "child.json").write_text(text)
    assert _termination(-15, False, None, FakeSession(False), tmp_path)[0] == "error"


# ---- assemble: a run killed mid-task ----

def _task(task_id, instance, network, task_type, layer, name):
    return {"instance": instance, "network": network, "layer": layer, "task_id": task_id,
            "task_type": task_type, "layer_name": name, "layer_type": "", "layer_kind": "",
            "param_bytes": 0}


def _start(task, start_ns):
    return json.dumps({"event": "start", **task, "start_ns": start_ns}) + "\n"


def _end(task, start_ns, end_ns, peak):
    return json.dumps({"event": "end", **task, "worker": 0, "start_ns": start_ns,
                       "end_ns": end_ns, "duration_ns": end_ns - start_ns, "cpu_ns": 1,
                       "proc_peak_so_far_bytes": peak}) + "\n"


INIT0 = _task(0, 0, "AgeNet", "INIT", -1, "")
LOAD0 = _task(1, 0, "AgeNet", "LOAD", 0, "conv1")
EXEC0 = _task(2, 0, "AgeNet", "EXEC", 0, "conv1")
INIT1 = _task(4, 1, "GenderNet", "INIT", -1, "")
LOAD1 = _task(5, 1, "GenderNet", "LOAD", 0, "conv1")


def _killed_run_progress() -> str:
    """Two networks; the kill came while AgeNet EXEC_0 and GenderNet LOAD_0 ran, cutting
    the line of EXEC_0's end being written."""
    return "".join([
        json.dumps({"event": "begin", "t0_monotonic_ns": 123456789}) + "\n",
        _start(INIT0, 0), _end(INIT0, 0, 10, 1000),
        _start(LOAD0, 10), _start(INIT1, 12), _end(INIT1, 12, 18, 7000),
        _start(LOAD1, 18), _end(LOAD0, 10, 20, 9000), _start(EXEC0, 20),
        _end(EXEC0, 20, 31, 9500)[:57],  # cut by the kill
    ])


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_assemble_names_the_tasks_running_when_the_run_was_killed(tmp_path):
    (tmp_path / "progress.jsonl").write_text(_killed_run_progress())
    _gnu(tmp_path, 9)  # max RSS 6 kB: below the process probe's running peak
    meta = RunMeta(policy="partial:2", termination="memory", exit_code=-9)
    assemble(tmp_path, meta)
    assert meta.running_at_end == ["0:AgeNet EXEC_0 conv1", "1:GenderNet LOAD_0 conv1"]
    assert meta.tasks_finished == 3  # INIT0, INIT1, LOAD0; EXEC0's cut end does not count
    assert meta.t0_monotonic_ns == 123456789
    assert meta.child is None  # killed before its summary
    assert meta.gnu_time["gt_signal"] == 9 and meta.gnu_time["gt_max_rss_bytes"] == 6 * 1024
    assert meta.hwm_rss_bytes == 9000  # max(1000, 7000, 9000, 6144)
    tasks = _rows(tmp_path / "tasks.csv")
    assert [(r["task_id"], r["task_type"]) for r in tasks] == [("0", "INIT"), ("1", "LOAD"),
                                                               ("4", "INIT")]
    # [0,10] touches [10,20] only at an end point; [12,18] lies inside [10,20]
    assert {r["task_id"]: r["overlap"] for r in tasks} == {"0": "0", "1": "1", "4": "1"}
    networks = _rows(tmp_path / "networks.csv")
    assert [(r["instance"], r["network"], r["complete"], r["init_start_ns"])
            for r in networks] == [("0", "AgeNet", "False", "0"),
                                   ("1", "GenderNet", "False", "12")]
    assert RunMeta.read(tmp_path) == meta


def test_assemble_of_a_run_that_finished(tmp_path):
    progress = "".join([
        json.dumps({"event": "begin", "t0_monotonic_ns": 5}) + "\n",
        _start(INIT0, 0), _end(INIT0, 0, 10, 1000), _start(LOAD0, 10),
        _end(LOAD0, 10, 20, 2000), _start(EXEC0, 20), _end(EXEC0, 20, 30, 3000),
        json.dumps({"event": "network", "instance": 0, "network": "AgeNet", "arrival": 0,
                    "arrival_ns": 0, "released_ns": 0, "init_start_ns": 0, "end_ns": 30,
                    "waiting_ns": 0, "execution_ns": 30, "response_ns": 30}) + "\n"])
    (tmp_path / "progress.jsonl").write_text(progress)
    _child(tmp_path, "ok")
    _gnu(tmp_path, None)
    meta = RunMeta(policy="linear", termination="ok")
    assemble(tmp_path, meta)
    assert meta.running_at_end == [] and meta.tasks_finished == 3
    assert meta.child["status"] == "ok" and meta.gnu_time["gt_exit_status"] == 0
    assert meta.hwm_rss_bytes == 6144  # GNU time's 6 kB above every window's peak
    [net] = _rows(tmp_path / "networks.csv")
    assert net["complete"] == "True" and net["response_ns"] == "30"


@pytest.mark.parametrize("cut", [0, 1, 30])
def test_assemble_when_even_the_first_line_was_cut(tmp_path, cut):
    (tmp_path / "progress.jsonl").write_text(_killed_run_progress()[:cut])
    meta = RunMeta(policy="linear")
    assemble(tmp_path, meta)
    assert meta.running_at_end == [] and meta.tasks_finished == 0
    assert meta.t0_monotonic_ns is None and meta.hwm_rss_bytes is None
    assert _rows(tmp_path / "tasks.csv") == [] and _rows(tmp_path / "networks.csv") == []


def test_assemble_cut_right_after_a_start_line(tmp_path):
    text = _killed_run_progress()
    cut = text.index(_start(LOAD1, 18)) + len(_start(LOAD1, 18))
    (tmp_path / "progress.jsonl").write_text(text[:cut])
    meta = RunMeta(policy="partial:2")
    assemble(tmp_path, meta)
    assert meta.running_at_end == ["0:AgeNet LOAD_0 conv1", "1:GenderNet LOAD_0 conv1"]
    assert meta.tasks_finished == 2 and meta.hwm_rss_bytes == 7000


def test_assemble_with_an_empty_child_summary(tmp_path):
    (tmp_path / "progress.jsonl").write_text(_killed_run_progress())
    (tmp_path / "child.json").write_text("")
    meta = RunMeta(policy="partial:2", termination="memory")
    assemble(tmp_path, meta)
    assert meta.child is None and meta.tasks_finished == 3

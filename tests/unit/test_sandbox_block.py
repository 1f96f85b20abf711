"""A block of sandbox runs in one boot (``run_block_in_sandbox``, ``python -m engine
run-block``): each run its own folder and record, a run the boot did not reach goes to the
next boot, a crash is the crashed run's alone. No guest is booted: ``boot_job`` is faked
as a guest that writes what engine.sandbox.job writes; tests/integration/uml/test_uml.py
runs real blocks."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from engine.cli import build_parser
from engine.cli import main as cli
from engine.commands.run import run_request
from engine.errors import EdgeprofError
from engine.runner.meta import RunMeta
from engine.sandbox import SandboxConfig, run_block_in_sandbox
from engine.sandbox import boot as vmboot
from engine.sandbox import config as sandbox_config
from engine.sandbox import run as vmrun
from engine.signals import Interrupted
from tests.unit.test_sandbox_failures import FAKE_GUEST

POLICIES = ["bulk", "linear", "deepeye"]


def _request(tiny: dict, out: Path, policy: str, *extra: str):
    return run_request(build_parser().parse_args(
        ["run", "--pipeline", str(tiny["pipeline"]), "--split", str(tiny["models"]),
         "--policy", policy, "--out", str(out), "--backend", "vm", "--limit", "256M",
         "--batch", "1", *extra]))


def _finish(share: Path, i: int, policy: str, uptime: float) -> None:
    """What the guest leaves of run ``i`` that ended: its folder and its record."""
    (share / f"run-{i}").mkdir()
    RunMeta(policy=policy, termination="ok", exit_code=0).write(share / f"run-{i}")
    (share / f"job-{i}.log").write_text(f"run {i}\n")
    (share / f"guest-{i}.json").write_text(json.dumps(
        {"exit_code": 0, "job_start_uptime_s": uptime, "job_s": 1.0, "kernel": "6.12",
         "vmstat_delta": {"pswpin": i}, "swap_used_at_start": 0}))


def _crash(share: Path, i: int) -> None:
    """Run ``i`` had started a task when the guest died."""
    partial = share / f".run-{i}.77.x"
    partial.mkdir()
    (partial / "progress.jsonl").write_text(json.dumps(
        {"event": "start", "instance": 0, "network": "AgeNet", "layer": -1, "task_id": 0,
         "task_type": "INIT", "layer_name": "", "layer_type": "", "layer_kind": "",
         "param_bytes": 0, "start_ns": 1000}) + "\n")


def _result(share: Path, limit, swap, *, crashed: bool):
    console = "[0.1] boom\n" if crashed else "[0.1] fine\n"
    res = vmboot.BootResult(rc=None if crashed else 0, accel="tcg", boot_s=2.0, total_s=9.0,
                            timed_out=None, qemu_exit=-9 if crashed else 0, console=console,
                            error="the guest stopped" if crashed else None,
                            guest_marks={"guest_VM_CMD_START": 1.5})
    return res, vmrun.plan(SandboxConfig(accel="tcg"), limit, swap, FAKE_GUEST), FAKE_GUEST, None


def test_a_guest_that_dies_mid_block_records_that_run_and_boots_again_for_the_rest(
        tiny, tmp_path, monkeypatch):
    boots: list[list[str]] = []

    def boot(py_args, share, limit, swap, cfg=None, timeout_s=None, sandbox="vm",
             stall_s=None, cpus=None, bound=None):
        boots.append(py_args)
        indexes = [int(i) for i in py_args[1:]]
        if len(boots) == 1:  # run 0 ends, the guest dies in run 1, run 2 never starts
            _finish(share, 0, POLICIES[0], 2.0)
            _crash(share, 1)
            return _result(share, limit, swap, crashed=True)
        for n, i in enumerate(indexes):
            _finish(share, i, POLICIES[i], 2.0 + n)
        return _result(share, limit, swap, crashed=False)

    monkeypatch.setattr(vmrun, "boot_job", boot)
    outs = [tmp_path / "runs" / policy for policy in POLICIES]
    metas = run_block_in_sandbox([_request(tiny, o, p) for o, p in zip(outs, POLICIES)])
    assert boots == [["engines", "0", "1", "2"], ["engines", "2"]]
    assert [m.termination for m in metas] == ["ok", "error", "ok"]
    # the crashed run keeps its progress and names the guest's failure
    assert "the guest stopped" in metas[1].termination_detail and metas[1].limit_enforced
    assert (outs[1] / "progress.jsonl").is_file()
    first, again = metas[0].sandbox, metas[2].sandbox
    assert first["boot_runs"] == 3 and first["boot_position"] == 0
    assert again["boot_runs"] == 1 and again["boot_position"] == 0
    assert first["boot_id"] == metas[1].sandbox["boot_id"] != again["boot_id"]
    assert first["retried_boot"] is None and again["retried_boot"] is None
    # each run's own guest record and log; the boot's console in each
    assert [m.sandbox["vmstat_delta"] for m in metas] == [{"pswpin": 0}, None, {"pswpin": 2}]
    assert (outs[2] / "guest_job.log").read_text() == "run 2\n"
    assert (outs[0] / "console.log").read_text() == "[0.1] boom\n"
    assert (outs[2] / "console.log").read_text() == "[0.1] fine\n"
    # its start on the host's clock: the boot's start and the guest's offset
    assert metas[0].sandbox["job_start_s"] == pytest.approx(2.5)
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == sorted(POLICIES)


def test_a_run_the_emulator_failed_is_booted_once_more_alone(tiny, tmp_path, monkeypatch):
    """A guest that stops before a run's first task is a flaky boot, not the run's result:
    the run goes to a second boot with the ones after it, and says so; a second such stop
    is its result."""
    boots: list[list[str]] = []

    def boot(py_args, share, limit, swap, cfg=None, timeout_s=None, sandbox="vm",
             stall_s=None, cpus=None, bound=None):
        boots.append(py_args)
        if len(boots) == 1:
            _finish(share, 0, POLICIES[0], 2.0)  # then stops before run 1's first task
        return _result(share, limit, swap, crashed=True)

    monkeypatch.setattr(vmrun, "boot_job", boot)
    outs = [tmp_path / p for p in POLICIES]
    metas = run_block_in_sandbox([_request(tiny, o, p) for o, p in zip(outs, POLICIES)])
    # run 1 retried once, with run 2; the second boot stops at once again: run 1's result,
    # and run 2, not reached, goes on to a third boot
    assert boots == [["engines", "0", "1", "2"], ["engines", "1", "2"], ["engines", "2"],
                     ["engines", "2"]]
    assert [m.termination for m in metas] == ["ok", "error", "error"]
    why = metas[1].sandbox["retried_boot"]["why"]
    assert why == "the guest stopped before the run's first task"
    assert metas[2].sandbox["retried_boot"] is not None


def test_runs_that_cannot_share_a_guest_are_refused_before_anything_is_written(
        tiny, tmp_path, monkeypatch):
    monkeypatch.setattr(vmrun, "boot_job", lambda *a, **k: pytest.fail("booted"))
    requests = [_request(tiny, tmp_path / "a", "bulk"),
                _request(tiny, tmp_path / "b", "linear", "--stall-timeout", "30")]
    with pytest.raises(EdgeprofError, match="differ in --stall-timeout"):
        run_block_in_sandbox(requests)
    assert list(tmp_path.iterdir()) == []


def test_a_boot_of_limited_and_unconstrained_runs_fits_each_and_limits_each_its_own(
        tiny, tmp_path, monkeypatch):
    """Runs of other limits and swap in one boot: the guest is sized for the largest
    limit and the unconstrained runs' bound together, its swap device for the largest
    allowance, and each run's request keeps its own limit and swap (the guest's
    supervisor sets them on the run's cgroup)."""
    from engine.runner.request import RunRequest
    from engine.sandbox.config import SandboxConfig

    seen = {}

    def boot(py_args, share, limit, swap, cfg=None, timeout_s=None, sandbox="vm",
             stall_s=None, cpus=None, bound=None):
        seen["plan"] = vmrun.plan(SandboxConfig(accel="tcg"), limit, swap, FAKE_GUEST, bound)
        seen["requests"] = [RunRequest.from_json((share / f"request-{i}.json").read_text())
                            for i in range(3)]
        for i in range(3):
            _finish(share, i, POLICIES[i], 2.0 + i)
        return _result(share, limit, swap, crashed=False)

    monkeypatch.setattr(vmrun, "boot_job", boot)
    requests = [_request(tiny, tmp_path / "a", "bulk", "--swap", "0"),
                run_request(build_parser().parse_args(
                    ["run", "--pipeline", str(tiny["pipeline"]), "--split",
                     str(tiny["models"]), "--policy", "linear", "--out", str(tmp_path / "b"),
                     "--backend", "vm", "--batch", "1"])),
                _request(tiny, tmp_path / "c", "deepeye", "--limit", "1G", "--swap", "3G")]
    assert requests[1].limits.limit_bytes is None
    metas = run_block_in_sandbox(requests)
    assert [m.termination for m in metas] == ["ok"] * 3
    bound = vmrun.unconstrained_bound_bytes(requests[1], vmrun._check_request(
        requests[1], SandboxConfig(), "vm"))
    p = seen["plan"]
    assert p.ram_bytes >= max(2**30, bound) + sandbox_config.GUEST_OVERHEAD
    assert p.swap_device_bytes == 3 * 2**30 + vmrun.DEVICE_SLACK
    assert [(r.limits.limit_bytes, r.limits.swap_bytes) for r in seen["requests"]] == [
        (256 * 2**20, 0), (None, None), (2**30, 3 * 2**30)]


def test_an_interrupted_block_keeps_its_finished_runs_and_leaves_nothing_else(
        tiny, tmp_path, monkeypatch):
    boots: list[list[str]] = []

    def boot(py_args, share, limit, swap, cfg=None, timeout_s=None, sandbox="vm",
             stall_s=None, cpus=None, bound=None):
        boots.append(py_args)
        if len(boots) == 1:
            _finish(share, 0, POLICIES[0], 2.0)
            return _result(share, limit, swap, crashed=True)  # run 1 not started: reboot
        os.kill(os.getpid(), signal.SIGTERM)  # Ctrl-C's kin, during the second boot
        raise AssertionError("the signal did not unwind the boot")

    monkeypatch.setattr(vmrun, "boot_job", boot)
    outs = [tmp_path / p for p in POLICIES]
    with pytest.raises(Interrupted, match="SIGTERM.*1 finished run"):
        run_block_in_sandbox([_request(tiny, o, p) for o, p in zip(outs, POLICIES)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bulk"]
    assert RunMeta.read(outs[0]).termination == "ok"


def _cli(tiny: dict, tmp_path: Path, *runs: str, logs: tuple[str, ...] = ()) -> int:
    argv = ["run-block", "-q"]
    for words in runs:
        argv += ["--run", f"--pipeline {tiny['pipeline']} --split {tiny['models']} --batch 1 "
                          f"{words}"]
    for log in logs:
        argv += ["--log", log]
    return cli(argv)


def test_run_block_writes_each_runs_outcome_to_its_log_and_exits_by_its_crashes(
        tiny, tmp_path, monkeypatch, capsys):
    def boot(py_args, share, limit, swap, cfg=None, timeout_s=None, sandbox="vm",
             stall_s=None, cpus=None, bound=None):
        _finish(share, 0, "bulk", 2.0)
        _crash(share, 1)
        return _result(share, limit, swap, crashed=True)

    monkeypatch.setattr(vmrun, "boot_job", boot)
    logs = (str(tmp_path / "a.log"), str(tmp_path / "b.log"))
    code = _cli(tiny, tmp_path, f"--policy bulk --backend vm --out {tmp_path / 'a'}",
                f"--policy linear --backend vm --out {tmp_path / 'b'} --error-is-result",
                logs=logs)
    assert code == 0  # the crash was asked to be a result
    assert "under bulk (unlimited): ok" in Path(logs[0]).read_text()
    said = Path(logs[1]).read_text()
    assert "under linear (unlimited): error" in said and "error: the guest stopped" in said
    assert "error: the guest stopped" in capsys.readouterr().err


@pytest.mark.parametrize("runs, logs, message", [
    (["--policy bulk --backend vm --out {t}/a", "--policy bulk --backend uml --out {t}/b"], (),
     "give each --backend uml, or each --backend vm"),
    (["--policy bulk --backend none --out {t}/a"], (), "give each --backend uml"),
    (["--policy bulk --backend vm --out {t}/a", "--policy linear --backend vm --out {t}/a"], (),
     "two --run name the same --out"),
    (["--policy bulk --backend vm --out {t}/a"], ("x.log", "y.log"), "2 --log for 1 --run"),
    (["--policy bulk --backend vm --out '{t}/a"], (), "No closing quotation"),
    (["--policy nope --backend vm --out {t}/a"], (), "nope"),
])
def test_run_block_refuses_bad_runs_in_one_line_before_anything_is_written(
        tiny, tmp_path, monkeypatch, capsys, runs, logs, message):
    monkeypatch.setattr(vmrun, "boot_job", lambda *a, **k: pytest.fail("booted"))
    code = _cli(tiny, tmp_path, *(r.format(t=tmp_path) for r in runs), logs=logs)
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []

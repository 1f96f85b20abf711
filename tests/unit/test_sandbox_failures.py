"""A sandbox run whose guest never ran the run (a boot timeout on a loaded host): a
result the campaign counts, never a stop. No guest is booted: ``boot_job`` is faked."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from engine.analysis.provenance import check_inputs, check_settings
from engine.analysis.summaries import summary_table
from engine.analysis.tidy import tidy_run
from engine.cli import build_parser
from engine.commands.run import run_request
from engine.errors import RunFailed
from engine.runner.meta import RunMeta
from engine.sandbox import SandboxConfig, guest, run_in_sandbox
from engine.sandbox import boot as vmboot
from engine.sandbox import config as sandbox_config
from engine.sandbox import run as vmrun
from engine.workflow.args import batch_args, limit_args, run_options, run_settings
from tests.unit.test_workflow_args import load_config, with_

FAKE_GUEST = guest.Guest(kernel=Path("/nonexistent/vmlinuz"), initrd=Path("/nonexistent"),
                         kernel_version="6.12", package="linux-image-fake")


def boot_timeout(py_args, share, limit, swap, cfg=None, timeout_s=None, sandbox="vm",
                 stall_s=None, cpus=None, bound=None):
    """A guest that never came up: qemu killed at the boot timeout, nothing in the share."""
    res = vmboot.BootResult(rc=None, accel="tcg", boot_s=None, total_s=180.0,
                            timed_out="boot", qemu_exit=-9, console="[0.1] slow\n",
                            error="the guest did not start within 180 s")
    return (res, vmrun.plan(SandboxConfig(accel="tcg"), limit, swap, FAKE_GUEST, bound),
            FAKE_GUEST, None)


def test_a_guest_that_never_booted_is_counted_not_ok_and_passes_the_settings_check(
        tiny, tmp_path, monkeypatch):
    """H2 (new-user pass): the record the host writes for a guest that never started must
    carry every setting the workflow's aggregate checks (it lacked cpu_affinity, and the
    campaign stopped with 'made with cpu_pin_asked unset ... (redone by hand?)')."""
    config = with_(load_config(), run__backend="vm", sandbox__kernel="vm")
    assert config["run"]["pin_cpu"] is True  # the setting the record lacked
    limit = "256M"
    flags = " ".join([limit_args(config, limit, True), run_options(config["run"]),
                      batch_args(config["run"]["batch"])]).split()
    monkeypatch.setattr(vmrun, "boot_job", boot_timeout)
    out = tmp_path / "runs" / "rep0"
    request = run_request(build_parser().parse_args(
        ["run", "--pipeline", str(tiny["pipeline"]), "--split", str(tiny["models"]),
         "--policy", "linear", "--out", str(out), "--seed", str(config["seed"]), *flags]))
    meta = run_in_sandbox(request)
    assert meta.termination == "error" and "did not start" in meta.termination_detail
    runs = tidy_run(out)["runs"]
    settings = run_settings(config, limit, True, config["run"]["runtime"],
                            config["run"]["batch"])
    check_settings(runs, settings, "fix")  # no raise
    assert json.loads(runs["descriptions"].iloc[0]).keys() == {
        "age_net.description.json", "gender_net.description.json"}
    check_inputs(runs.iloc[0], tiny["pipeline"], tiny["models"], "fix")
    summary = summary_table(runs)
    assert summary["runs_not_ok"].max() == 1 and summary["ended"].iloc[0] == "error"


def test_force_keeps_the_earlier_run_when_the_guest_never_boots(tiny, tmp_path, monkeypatch):
    """H3 (new-user pass): under a sandbox, --force replaced a good run with a boot
    timeout's error record (exit 1). The earlier run stays; the failed one lies beside."""
    out = tmp_path / "run"

    def request(*extra: str):
        return run_request(build_parser().parse_args(
            ["run", "--pipeline", str(tiny["pipeline"]), "--split", str(tiny["models"]),
             "--policy", "linear", "--out", str(out), "--batch", "1", "--backend", "vm",
             "--limit", "256M", *extra]))

    def boot_ok(py_args, share, *args, **kw):  # a guest that wrote an ok run
        (share / "run-0").mkdir()
        RunMeta(policy="linear", termination="ok", exit_code=0).write(share / "run-0")
        return boot_timeout(py_args, share, *args, **kw)  # its folder is what counts

    monkeypatch.setattr(vmrun, "boot_job", boot_ok)
    assert run_in_sandbox(request()).termination == "ok"
    monkeypatch.setattr(vmrun, "boot_job", boot_timeout)
    earlier = (out / "meta.json").read_bytes()
    with pytest.raises(RunFailed, match="the earlier run in .* is kept") as raised:
        run_in_sandbox(request("--force"))
    assert (out / "meta.json").read_bytes() == earlier
    kept = sorted(tmp_path.glob("run.failed.*"))
    assert len(kept) == 1 and str(kept[0]) in str(raised.value)
    assert (kept[0] / "console.log").read_text() == "[0.1] slow\n"


def test_a_guest_that_crashed_mid_run_enforced_its_limit_and_stays_in_its_cell(
        tiny, tmp_path, monkeypatch):
    """Nineteenth held-out pass D3: a uml kernel that died mid-run (the README's crash
    under heavy swap) was recorded limit_enforced false ("not enforced (no reason
    recorded)"): the error run left its cell for a group of its own, whose failure
    counts then said 0. The guest's supervisor starts the child only under the limit, so
    a run whose child started had it: enforced, and counted in its cell."""
    from engine.cli import main as cli

    native = tmp_path / "native"  # a real run's progress, the guest's stream up to a crash
    assert cli(["run", "--pipeline", str(tiny["pipeline"]), "--split", str(tiny["models"]),
                "--policy", "linear", "--out", str(native), "--backend", "none", "-q"]) == 0
    lines = (native / "progress.jsonl").read_text().splitlines()
    started = [i for i, line in enumerate(lines) if '"event": "end"' in line]

    def crashed(py_args, share, limit, swap, cfg=None, timeout_s=None, sandbox="vm",
                stall_s=None, cpus=None, bound=None):
        partial = share / ".run-0.4242"
        partial.mkdir()
        (partial / "progress.jsonl").write_text("\n".join(lines[:started[5] + 1]) + "\n")
        res = vmboot.BootResult(rc=None, accel="tcg", boot_s=1.0, total_s=4.0,
                                timed_out=None, qemu_exit=-9, console="[3.1] panic\n",
                                error="the uml kernel ended with signal 9")
        return res, vmrun.plan(SandboxConfig(accel="tcg"), limit, swap, FAKE_GUEST), \
            FAKE_GUEST, None

    monkeypatch.setattr(vmrun, "boot_job", crashed)
    request = run_request(build_parser().parse_args(
        ["run", "--pipeline", str(tiny["pipeline"]), "--split", str(tiny["models"]),
         "--policy", "linear", "--out", str(tmp_path / "r" / "rep0"), "--limit", "48M",
         "--backend", "vm"]))
    meta = run_in_sandbox(request)
    assert meta.termination == "error" and meta.tasks_finished == 6
    assert meta.limit_enforced and meta.limits["guest_backend"] == "cgroup2"
    runs = tidy_run(tmp_path / "r" / "rep0")["runs"]
    assert runs["limit_enforced"].all() and runs["limit_enforced_why"].iloc[0] == (
        "enforced by vm (cgroup2)")
    # without a limit nothing was enforced, crash or not
    request = run_request(build_parser().parse_args(
        ["run", "--pipeline", str(tiny["pipeline"]), "--split", str(tiny["models"]),
         "--policy", "linear", "--out", str(tmp_path / "free"), "--backend", "vm"]))
    assert not run_in_sandbox(request).limit_enforced


def test_a_guest_larger_than_the_host_names_what_to_lower():
    """Twenty-first held-out pass, a low: the refusal said "lower --limit" where
    EDGEPROF_SANDBOX_RAM asked for the RAM."""
    from engine.errors import EdgeprofError

    with pytest.raises(EdgeprofError, match=r"^vm: the guest would need .* lower "
                                            r"EDGEPROF_SANDBOX_RAM$"):
        vmrun.plan(SandboxConfig(ram=2**45), 48 * 2**20, None, FAKE_GUEST)
    with pytest.raises(EdgeprofError, match=r"for this limit but .* lower --limit$"):
        vmrun.plan(SandboxConfig(), 2**45, None, FAKE_GUEST)
    # an unconstrained run's bound beyond the host: its batch or its networks, not a limit
    for limit in (None, 48 * 2**20):
        with pytest.raises(EdgeprofError, match=r"for this unconstrained run but .* lower "
                                                r"--batch or run fewer networks$"):
            vmrun.plan(SandboxConfig(), limit, None, FAKE_GUEST, 2**45)


def test_an_input_under_a_folder_the_guest_mounts_its_own_is_refused_up_front(
        tiny, tmp_path, monkeypatch, capsys):
    """Twenty-fifth held-out pass M5: a split in /dev/shm passed every host check, the
    guest (which mounts its own /dev, /proc, /sys and /run) then said the pipeline did not
    exist, and the run left an error folder. Refused before any folder, naming the mount;
    a link into one counts as where it points; the workflow's config check refuses a
    results folder there."""
    from engine.cli import main as cli
    from engine.sandbox.paths import hidden_in_guest

    link = tmp_path / "shm-link"
    link.symlink_to("/dev/shm")
    assert [hidden_in_guest(p) for p in ("/dev/shm/s", "/run/user/0/p.json", "/proc",
                                         str(link / "x"), "/tmp/x", "/devices/x")] == [
        "/dev", "/run", "/proc", "/dev", None, None]
    monkeypatch.setattr(vmrun, "boot_job", lambda *a, **k: pytest.fail("booted"))
    out = tmp_path / "run"
    shared = link / f"edgeprof-test-{os.getpid()}.json"  # the pipeline, in /dev/shm
    shared.write_bytes(Path(tiny["pipeline"]).read_bytes())
    try:
        code = cli(["run", "--pipeline", str(shared), "--split", str(tiny["models"]),
                    "--policy", "linear", "--out", str(out), "--batch", "1", "--backend",
                    "uml", "--limit", "64M"])
    finally:
        shared.unlink()
    assert code == 2 and not out.exists()
    capsys.readouterr()  # the first refusal's
    # twenty-sixth held-out pass M1: a split whose partials folder is a link into /dev/shm
    split_at = Path(tiny["models"])
    shutil.copytree(split_at.parent, tmp_path / "copy", symlinks=True)  # models beside
    split = tmp_path / "copy" / split_at.name
    partials = next(p for p in split.iterdir() if p.is_dir())
    moved = link / f"edgeprof-test-{os.getpid()}-partials"
    shutil.copytree(partials, moved)
    shutil.rmtree(partials)
    partials.symlink_to(moved)
    try:
        code = cli(["run", "--pipeline", str(tiny["pipeline"]), "--split", str(split),
                    "--policy", "linear", "--out", str(out), "--batch", "1", "--backend",
                    "uml", "--limit", "64M"])
    finally:
        shutil.rmtree(moved)
    assert code == 2 and not out.exists()
    assert "partials" in (err := capsys.readouterr().err) and "mounts its own /dev" in err, err
    config = with_(load_config(), results="/run/edgeprof-results", sandbox__kernel="uml")
    from engine.workflow.checks import check_config

    with pytest.raises(ValueError, match="guest mounts its own /run"):
        check_config(config)


def _request(tiny, out: Path, *extra: str):
    return run_request(build_parser().parse_args(
        ["run", "--pipeline", str(tiny["pipeline"]), "--split", str(tiny["models"]),
         "--policy", "partial:2", "--out", str(out), "--backend", "vm", *extra]))


def test_an_unconstrained_guest_is_sized_by_its_pipelines_bound_from_the_split(
        tiny, tmp_path, monkeypatch):
    """The guest of an unconstrained run holds the bound of what its pipeline may hold
    (checked against the kernel's VmHWM by test_workflow_args), read from the split's
    prototxts: the zoo's bound of the same networks, at the run's batch and runtime, two
    workers' transients; a limited run's guest is sized by its limit."""
    from engine.workflow.resources import unconstrained_mem_mb

    seen = []

    def boot(py_args, share, limit, swap, cfg=None, timeout_s=None, sandbox="vm",
             stall_s=None, cpus=None, bound=None):
        seen.append(bound)
        return boot_timeout(py_args, share, limit, swap, cfg, timeout_s, sandbox, stall_s,
                            cpus, bound)

    monkeypatch.setattr(vmrun, "boot_job", boot)
    for i, (extra, mib) in enumerate([
            ((), unconstrained_mem_mb(["AgeNet", "GenderNet"], None, "lean", 2)),
            (("--batch", "4", "--runtime", "caffe"),
             unconstrained_mem_mb(["AgeNet", "GenderNet"], 4, "caffe", 2)),
            (("--limit", "256M"), None)]):
        run_in_sandbox(_request(tiny, tmp_path / f"r{i}", *extra))  # an error record
        assert seen[-1] == (None if mib is None else mib * 2**20)
    assert seen[1] > seen[0] > 128 * 2**20
    for bound in (*seen[:2], 3 * 2**30 + 5, 2**20):
        ram = vmrun.plan(SandboxConfig(accel="tcg"), None, None, FAKE_GUEST, bound).ram_bytes
        # the bound and the guest's own beside it, in whole 64 MiB, at least 1 GiB
        assert ram % (64 * 2**20) == 0 and ram >= sandbox_config.MIN_RAM
        overhead = sandbox_config.GUEST_OVERHEAD
        assert bound + overhead <= ram < max(bound + overhead + 64 * 2**20,
                                             sandbox_config.MIN_RAM + 1)
    assert vmrun.plan(SandboxConfig(accel="tcg"), None, None, FAKE_GUEST).ram_bytes == \
        sandbox_config.BASELINE_RAM


@pytest.mark.parametrize("limit, ended", [(None, "ok"), (None, "memory"), ("256M", "ok")])
def test_an_unconstrained_run_that_swapped_in_its_guest_is_no_baseline(
        tiny, tmp_path, monkeypatch, limit, ended):
    """A guest sized too small for an unconstrained run would have the run swap to the
    device the limited runs need: its pages written to swap (the guest's pswpout over the
    run) make it an error naming the setting to raise, however it ended; a limited run's
    swapping is its measurement."""
    def boot(py_args, share, *args, **kw):
        (share / "run-0").mkdir()
        RunMeta(policy="partial:2", termination=ended, exit_code=0).write(share / "run-0")
        (share / "guest-0.json").write_text(json.dumps(
            {"exit_code": 0, "vmstat_delta": {"pswpout": 12, "pswpin": 3}}))
        res, p, g, _ = boot_timeout(py_args, share, *args, **kw)
        return vmboot.BootResult(rc=0, accel="tcg", boot_s=1.0, total_s=3.0, timed_out=None,
                                 qemu_exit=0, console="", guest_marks={}), p, g, None

    monkeypatch.setattr(vmrun, "boot_job", boot)
    extra = () if limit is None else ("--limit", limit)
    if limit is not None:
        assert run_in_sandbox(_request(tiny, tmp_path / "r", *extra)).termination == "ok"
        return
    meta = run_in_sandbox(_request(tiny, tmp_path / "r", *extra))
    assert meta.termination == "error" and RunMeta.read(tmp_path / "r") == meta
    ram = meta.sandbox["guest_ram_bytes"] // 2**20
    assert meta.sandbox["boot_unconstrained_bound_bytes"] < ram * 2**20
    said = "" if ended == "ok" else f" (it ended: {ended})"
    assert meta.termination_detail == (
        f"the unconstrained run swapped 12 pages out in a guest of {ram} MiB{said}: the "
        f"guest's RAM limited it; set EDGEPROF_SANDBOX_RAM above {ram}M")

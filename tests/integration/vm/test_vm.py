"""The vm backend, and through it the project's real-kernel tests of the cgroup v2 backend.

Every test here boots (or refuses to boot) a throwaway qemu guest: a Debian 6.12 kernel
with its own cgroup v2 hierarchy and a swap device. The host's cgroups are never touched.
Guest boots are run one at a time (a TCG guest uses every host core).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from engine.cli import build_parser
from engine.commands.run import run_request
from engine.errors import EdgeprofError
from engine.probes.vmstat import COLUMNS, VmstatWindows
from engine.runner.request import RunRequest
from engine.sandbox import SandboxConfig, guest, run_command_in_sandbox, run_in_sandbox
from engine.sandbox import boot as vmboot
from tests.signals import default_signals

pytestmark = pytest.mark.vm
MiB = 2**20
REPO = Path(__file__).resolve().parents[3]
QEMU_COMM = "qemu-system-x86"  # /proc/<pid>/comm is cut to 15 characters
ALLOC_200MB = """
import numpy as np
chunks = []
for i in range(10):  # 200 MB of float32, touched page by page
    a = np.empty(5 * 2**20, np.float32); a[:] = i; chunks.append(a)
print("sum", sum(float(c[::1024].sum()) for c in chunks))
"""


def _qemu_pids() -> set[int]:
    pids = set()
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() == QEMU_COMM:
                pids.add(int(comm.parent.name))
        except OSError:  # the process ended while we looked
            pass
    return pids


def _install_qemu() -> str | None:
    """Install the guest's host packages if this machine can; None when done, else why
    not (the only reason these tests may skip)."""
    if shutil.which("apt-get") is None:
        return "qemu-system-x86_64 is absent and this host has no apt-get to install it"
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    if sudo and shutil.which("sudo") is None:
        return "qemu-system-x86_64 is absent and installing it needs root (no sudo)"
    cmd = [*sudo, "apt-get", "install", "-y", "--no-install-recommends", "qemu-system-x86",
           "busybox-static"]
    res = subprocess.run(cmd, capture_output=True, text=True,
                         env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    if res.returncode != 0 or shutil.which(vmboot.QEMU) is None:
        return f"qemu-system-x86_64 is absent and '{' '.join(cmd)}' failed: {res.stderr[-300:]}"
    return None


@pytest.fixture(scope="module")
def vm_guest() -> guest.Guest:
    if shutil.which(vmboot.QEMU) is None:
        why = _install_qemu()
        if why:
            pytest.skip(why)
    return guest.ensure_guest(log=lambda m: print(m, file=sys.stderr))


@pytest.fixture(autouse=True)
def no_qemu_left_behind():
    """(d) every test ends with no qemu process of its own still alive (other qemu
    processes on the machine are not ours to judge)."""
    yield
    ours = {p for p in _qemu_pids() if _ppid(p) == os.getpid()}
    assert not ours, f"qemu process(es) {sorted(ours)} outlived their run"


def _no_guest_files(folder: Path) -> None:
    left = [p.name for p in folder.iterdir() if ".vm." in p.name or "edgeprof-" in p.name]
    assert not left, f"guest files left behind: {left}"


def _request(tiny: dict[str, Path], policy: str, out: Path, *extra: str,
             backend: str = "vm") -> RunRequest:
    return run_request(build_parser().parse_args(
        ["run", "--pipeline", str(tiny["pipeline"]), "--split", str(tiny["models"]),
         "--policy", policy, "--out", str(out), "--batch", "1", "--backend", backend,
         *extra]))


def test_swap_allowed_run_completes_swaps_out_and_peaks_at_the_limit(vm_guest, tmp_path):
    res = run_command_in_sandbox([sys.executable, "-c", ALLOC_200MB], 64 * MiB, 512 * MiB,
                                 timeout_s=240, workdir=tmp_path)
    facts, vm = res["guest"], res["sandbox"]
    assert facts is not None, res["console"][-2000:]
    assert facts["exit_code"] == 0 and "sum 230400.0" in res["job_log"]
    cg = facts["cgroup"]
    assert cg["memory.max"] == 64 * MiB and cg["memory.swap.max"] == 512 * MiB
    assert cg["memory.peak"] == 64 * MiB  # the run sat at its limit ...
    assert cg["memory.swap.peak"] > 100 * MiB  # ... and the rest went to swap
    assert cg["memory.events"]["max"] > 0 and facts["oom_kills"] == 0
    assert facts["vmstat_delta"]["pswpout"] > 100 * MiB // 4096
    assert facts["vmstat_delta"]["pswpin"] > 0  # the re-read pages came back
    assert facts["limits"]["features"]["peak_fd_reset"]
    assert vm["guest_kernel"].startswith("6.12") and vm["accelerator"] in ("kvm", "tcg")
    assert vm["emulated"] == (vm["accelerator"] == "tcg")
    assert vm["swap_device"]["size_bytes"] >= 512 * MiB
    assert vm["guest_ram_bytes"] >= 64 * MiB + 512 * MiB
    assert list(tmp_path.iterdir()) == []


def test_no_swap_run_is_oom_killed_and_recorded_as_memory(vm_guest, tiny, tmp_path):
    out = tmp_path / "oom"
    meta = run_in_sandbox(_request(tiny, "bulk", out, "--limit", "48M", "--swap", "0")).to_dict()
    assert meta["termination"] == "memory", meta["termination_detail"]
    assert meta["oom_kills"] > 0 and meta["limit_enforced"]
    assert meta["backend"] == "vm" and meta["limits"]["guest_backend"] == "cgroup2"
    assert meta["limits"]["memory_swap_max"] == 0
    assert meta["sandbox"]["swap_device"]["size_bytes"] == 0
    assert meta["running_at_end"]  # which task the OOM hit
    on_disk = json.loads((out / "meta.json").read_text())
    assert on_disk["termination"] == "memory" and on_disk["sandbox"]["vmstat_delta"]["oom_kill"] > 0
    for name in ("tasks.csv", "networks.csv", "console.log"):
        assert (out / name).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["oom"]


def _host_run(tiny: dict[str, Path], policy: str, out: Path) -> None:
    """The same run natively, with the guest's OpenBLAS kernels."""
    r = subprocess.run([sys.executable, "-m", "engine", "run", "--pipeline",
                        str(tiny["pipeline"]), "--split", str(tiny["models"]), "--policy",
                        policy, "--out", str(out), "--batch", "1", "--backend", "none"],
                       cwd=REPO, env=dict(os.environ, OPENBLAS_CORETYPE="Nehalem"),
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def _same_outputs(host: Path, guest_out: Path) -> None:
    assert {p.name for p in host.iterdir()} <= {p.name for p in guest_out.iterdir()}
    a, b = np.load(host / "outputs.npz"), np.load(guest_out / "outputs.npz")
    assert sorted(a) == sorted(b) == ["0:AgeNet/prob", "1:GenderNet/prob"]
    for key in a:
        assert np.array_equal(a[key], b[key]), key


def test_a_multi_worker_run_in_the_guest_gives_the_host_outputs(vm_guest, tiny, tmp_path):
    """partial:2 (two workers); linear's outputs are compared in the heap-profiled run
    below (each guest run is a boot of its own: a minute under TCG)."""
    host, guest_out = tmp_path / "host", tmp_path / "vm"
    _host_run(tiny, "partial:2", host)
    meta = run_in_sandbox(_request(tiny, "partial:2", guest_out, "--limit", "256M")).to_dict()
    assert meta["termination"] == "ok", meta["termination_detail"]
    assert meta["limit_enforced"] and meta["limits"]["memory_max"] == 256 * MiB
    assert meta["emulated"] == meta["sandbox"]["emulated"]
    assert meta["sandbox"]["boot_s"] > 0 and meta["sandbox"]["guest"]["kernel"].startswith("6.12")
    _same_outputs(host, guest_out)
    header = (guest_out / "tasks.csv").read_text().splitlines()[0].split(",")
    assert "cg_workingset_refault_anon_delta" in header and "cg_peak_bytes" in header
    _no_guest_files(tmp_path)


@pytest.mark.parametrize("sig, when", [(signal.SIGINT, "boot"), (signal.SIGTERM, "job")],
                         ids=["SIGINT-at-boot", "SIGTERM-in-job"])
def test_an_interrupted_run_kills_qemu_and_leaves_nothing(vm_guest, tiny, tmp_path, sig,
                                                          when):
    script = ("import sys\nfrom engine.cli import build_parser\n"
              "from engine.commands.run import run_request\n"
              "from engine.sandbox import run_in_sandbox\n"
              "from engine.signals import Interrupted\n"
              "args = build_parser().parse_args(sys.argv[1:])\n"
              "try:\n    run_in_sandbox(run_request(args))\n"
              "except Interrupted as exc:\n    print(exc, file=sys.stderr)\n    sys.exit(130)\n")
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", script, "run", "--pipeline",
                             str(tiny["pipeline"]), "--split", str(tiny["models"]),
                             "--policy", "linear", "--out", str(out)],
                            cwd=REPO, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_signals)
    try:
        deadline = time.monotonic() + 60
        qemu = set()
        while not qemu and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            qemu = {p for p in _qemu_pids() if _ppid(p) == proc.pid}
        assert qemu, "qemu never started"
        if when == "job":  # the guest's job script sends its output to the share's job.log
            while not list(tmp_path.glob(".run.vm.*/job.log")) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert list(tmp_path.glob(".run.vm.*/job.log")), "the guest job never started"
            time.sleep(2.0)
        else:
            time.sleep(1.0)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert f"interrupted by {sig.name}; nothing written" in err
    assert not qemu & _qemu_pids()
    assert list(tmp_path.iterdir()) == []


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def test_a_guest_that_does_not_come_up_is_killed_and_recorded(vm_guest, tiny, tmp_path):
    out = tmp_path / "run"
    meta = run_in_sandbox(_request(tiny, "linear", out),
                          SandboxConfig(boot_timeout_s=1.0)).to_dict()
    assert meta["termination"] == "error"
    assert "did not start the job within 1 s" in meta["termination_detail"]
    assert meta["sandbox"]["error"] and not meta["limit_enforced"]
    console = (out / "console.log").read_text()  # kept for the post-mortem
    assert "host: qemu (pid" in console and "killed: the guest did not start" in console
    assert json.loads((out / "meta.json").read_text())["termination"] == "error"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_missing_qemu_names_the_install_command(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EdgeprofError, match="apt-get install -y .*qemu-system-x86"):
        run_in_sandbox(_request(tiny, "linear", tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def test_missing_busybox_names_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setattr(guest, "BUSYBOX_CANDIDATES", (str(tmp_path / "busybox"),))
    with pytest.raises(EdgeprofError, match="apt-get install -y .*busybox-static"):
        guest.build_guest(tmp_path / "cache")


def test_missing_kernel_package_names_the_apt_command(vm_guest, tmp_path, monkeypatch):
    monkeypatch.setenv(guest.KERNEL_ENV, "linux-image-0.0.0-nonexistent-amd64")
    with pytest.raises(EdgeprofError,
                       match="apt-get download linux-image-0.0.0-nonexistent-amd64"):
        guest.build_guest(tmp_path / "cache")


def test_a_limit_above_the_guest_ram_is_refused(vm_guest, tiny, tmp_path):
    with pytest.raises(EdgeprofError, match="above the guest RAM"):
        run_in_sandbox(_request(tiny, "linear", tmp_path / "run", "--limit", "2G"),
                       SandboxConfig(ram=2048 * MiB))
    assert list(tmp_path.iterdir()) == []


def test_vmstat_windows_give_swap_and_fault_deltas(tmp_path):
    vmstat = tmp_path / "vmstat"
    vmstat.write_text("pgfault 10\npswpin 5\npswpout 7\npgmajfault 1\n")
    probe = VmstatWindows(vmstat)
    token = probe.open()
    vmstat.write_text("pgfault 99\npswpin 6\npswpout 17\npgmajfault 4\n")
    assert probe.close(token) == {"guest_pswpin_delta": 1, "guest_pswpout_delta": 10,
                                  "guest_pgmajfault_delta": 3, "guest_pswpin_end": 6,
                                  "guest_pswpout_end": 17, "guest_pgmajfault_end": 4}
    assert set(COLUMNS) == set(probe.close(token))


def test_sigkill_of_the_supervisor_takes_qemu_along_and_the_next_run_sweeps(vm_guest, tiny,
                                                                          tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "engine", "run", "--pipeline",
                             str(tiny["pipeline"]), "--split", str(tiny["models"]),
                             "--policy", "linear", "--out", str(out), "--backend", "vm",
                             "--limit", "256M"], cwd=REPO, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob(".run.vm.*/job.log")) and time.monotonic() < deadline:
            time.sleep(0.2)
        qemu = {p for p in _qemu_pids() if _ppid(p) == proc.pid}
        assert qemu, "qemu never started the job"
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 2.0
    while qemu & _qemu_pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not qemu & _qemu_pids(), "qemu outlived its SIGKILLed supervisor"
    left = sorted(p.name for p in tmp_path.iterdir())
    assert any(".run.vm." in n for n in left) and any("edgeprof-swap" in n for n in left)
    # the next run on this --out removes what the dead one left (its guest need not boot)
    meta = run_in_sandbox(_request(tiny, "linear", out, "--limit", "256M", "--force"),
                          SandboxConfig(boot_timeout_s=1.0))
    assert meta.termination == "error"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_a_heap_profiled_run_in_the_guest_is_attributed_to_the_cgroups_charge(vm_guest, tiny,
                                                                              tmp_path):
    """The reconciliation's outermost instrument in the guest is the run cgroup's
    memory.current, split by memory.stat; every window adds up and is plausible. Its
    outputs are the host's."""
    from engine.analysis.reconcile import reconcile_run

    out = tmp_path / "rec"
    meta = run_in_sandbox(_request(tiny, "linear", out, "--heap-profile"))
    assert meta.termination == "ok", meta.termination_detail
    _host_run(tiny, "linear", tmp_path / "host")
    _same_outputs(tmp_path / "host", out)
    table = reconcile_run(out)
    windows = table[table.task_type.isin(["LOAD", "EXEC"])]
    assert len(windows) == 2 * 40  # AgeNet + GenderNet, 20 layers each
    assert (windows.att_outer == "cgroup memory.current").all()
    for col in ("cg_anon_bytes", "cg_file_bytes", "cg_kernel_bytes", "att_page_cache_bytes"):
        assert windows[col].notna().all(), col
    bound = np.maximum(2 * 2**20, 0.02 * windows.att_outer_bytes)
    assert (windows.att_unexplained_bytes.abs() <= bound).all()
    assert windows.plausible.all(), windows.loc[~windows.plausible, ["layer_name",
                                                                     "implausible"]]


def _fake_boot(calls: list, *, start_a_task: bool, segfault: bool = False):
    """A boot_job that never boots: the guest 'stops' at once (qemu exit 0), after
    streaming one task's start when ``start_a_task``; or, with ``segfault``, its first
    boot writes a run folder whose child died of SIGSEGV."""
    from engine.runner.meta import RunMeta

    def boot(py_args, share, limit, swap, cfg=None, timeout_s=None, sandbox="vm",
             stall_s=None, cpus=None, bound=None):
        calls.append(sorted(p.name for p in share.iterdir()))
        if segfault and len(calls) == 1:
            (share / "run-0").mkdir()
            RunMeta(policy="linear", termination="error", exit_code=139,
                    termination_detail="the run process ended with code 139").write(
                        share / "run-0")
        if start_a_task:
            partial = share / ".run-0.123.x"
            partial.mkdir()
            (partial / "progress.jsonl").write_text(json.dumps(
                {"event": "start", "instance": 0, "network": "AgeNet", "layer": -1,
                 "task_id": 0, "task_type": "INIT", "layer_name": "", "layer_type": "",
                 "layer_kind": "", "param_bytes": 0, "start_ns": 1000}) + "\n")
        (share / "job.sh").write_text("true\n")
        res = vmboot.BootResult(rc=None, accel="tcg", boot_s=4.0, total_s=6.0,
                                timed_out=None, qemu_exit=0, console="[0.1] boom\n")
        plan = run_mod.plan(SandboxConfig(accel="tcg"), limit, swap, FAKE_GUEST)
        return res, plan, FAKE_GUEST, None

    from engine.sandbox import run as run_mod
    return boot


FAKE_GUEST = guest.Guest(kernel=Path("/nonexistent/vmlinuz"), initrd=Path("/nonexistent"),
                         kernel_version="6.12", package="linux-image-fake")


@pytest.mark.parametrize("start_a_task, boots", [(False, 2), (True, 1)])
def test_a_guest_that_stops_before_the_first_task_is_booted_once_more(
        tiny, tmp_path, monkeypatch, start_a_task, boots):
    """A guest that ends before the run's first task started is a flaky boot, not a
    result: booted again once (from a clean share: only the request), and recorded; one
    that stopped mid-run is a result (an error) and is not retried."""
    from engine.sandbox import run as run_mod

    calls: list = []
    monkeypatch.setattr(run_mod, "boot_job", _fake_boot(calls, start_a_task=start_a_task))
    meta = run_in_sandbox(_request(tiny, "linear", tmp_path / "run", "--limit", "256M"))
    assert len(calls) == boots and meta.termination == "error"
    # each boot without what an earlier one left of the run: only its request
    assert all([n for n in c if "0" in n] == ["request-0.json"] for c in calls)
    retried = meta.sandbox["retried_boot"]
    assert (retried is not None) == (boots == 2)
    if retried:
        assert retried["qemu_exit"] == 0 and retried["console_tail"] == ["[0.1] boom"]
    assert (tmp_path / "run" / "console.log").read_text() == "[0.1] boom\n"


def test_a_child_killed_by_sigsegv_under_emulation_is_booted_once_more(tiny, tmp_path,
                                                                        monkeypatch):
    from engine.sandbox import run as run_mod

    calls: list = []
    monkeypatch.setattr(run_mod, "boot_job", _fake_boot(calls, start_a_task=False,
                                                        segfault=True))
    meta = run_in_sandbox(_request(tiny, "linear", tmp_path / "run", "--limit", "256M"))
    assert len(calls) == 2 and [n for n in calls[1] if "0" in n] == ["request-0.json"]
    assert meta.sandbox["retried_boot"]["why"] == "the measured child died of SIGSEGV in the guest"

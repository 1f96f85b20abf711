"""The uml backend: runs in a user-mode Linux kernel (engine/sandbox/uml.py), a real kernel with
its own cgroup v2 and swap device, started as an ordinary host process. Its limits, swap,
OOM kills and clean-up are checked the way tests/integration/vm/test_vm.py checks the qemu
guest's. The host's cgroups are never touched."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from engine.analysis.tidy import tidy_run
from engine.limits import LimitRequest
from engine.limits.select import open_backend
from engine.sandbox import (
    SandboxConfig,
    job,
    run_block_in_sandbox,
    run_command_in_sandbox,
    run_in_sandbox,
    uml,
)
from engine.sandbox import config as sandbox_config
from engine.units import parse_size
from tests.integration.vm.test_vm import ALLOC_200MB, REPO, _request
from tests.signals import default_signals

pytestmark = pytest.mark.uml
MiB = 2**20


@pytest.fixture(scope="module")
def uml_kernel() -> uml.Uml:
    try:
        return uml.ensure_uml(log=lambda m: print(m, file=sys.stderr))
    except Exception as exc:  # noqa: BLE001 - the one reason these tests may skip
        pytest.skip(f"no user-mode Linux kernel works on this host: {exc}")


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _uml_pids(parent: int, binary: Path) -> set[int]:
    """The UML kernels ``parent`` started (their /proc exe is the built binary)."""
    found = set()
    for exe in Path("/proc").glob("[0-9]*/exe"):
        try:
            if Path(os.readlink(exe)) == binary and _ppid(int(exe.parent.name)) == parent:
                found.add(int(exe.parent.name))
        except OSError:
            pass
    return found


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _members(pgid: int) -> set[int]:
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[3]) == pgid:
                out.add(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            pass
    return out


def test_swap_allowed_run_swaps_out_and_peaks_at_the_limit(uml_kernel, tmp_path):
    res = run_command_in_sandbox([sys.executable, "-c", ALLOC_200MB], 64 * MiB, 512 * MiB,
                                 timeout_s=240, workdir=tmp_path, sandbox="uml")
    facts, vm = res["guest"], res["sandbox"]
    assert facts is not None, res["console"][-2000:]
    assert facts["exit_code"] == 0 and "sum 230400.0" in res["job_log"]
    cg = facts["cgroup"]
    assert cg["memory.max"] == 64 * MiB and cg["memory.peak"] == 64 * MiB
    assert cg["memory.swap.peak"] > 100 * MiB
    assert facts["vmstat_delta"]["pswpout"] > 100 * MiB // 4096
    # the first chunk holds zeros (20 MiB): swapped out first, as the oldest, into the swap's
    # bitmap of zero pages instead of the disk, and read back as zeros by the sum
    zero_pages = 20 * MiB // 4096
    assert facts["vmstat_delta"]["swpout_zero"] >= 0.9 * zero_pages
    assert facts["vmstat_delta"]["swpin_zero"] >= 0.9 * zero_pages
    assert facts["limits"]["features"]["peak_fd_reset"]
    assert vm["kernel"] == "uml" and vm["accelerator"] == "uml" and vm["emulated"]
    assert vm["guest_kernel"] == uml_kernel.kernel_version
    assert vm["uml_userspace"] in ("seccomp", "ptrace")
    assert "ubd" in vm["swap_device"]["device"]
    # the kernel skipped the RAID-6 benchmark (0.85 s of every boot): it prints one line
    # per algorithm it times
    assert "raid6:" not in res["console"] and "Linux version" in res["console"]
    assert list(tmp_path.iterdir()) == []


def test_a_block_of_runs_in_one_boot_starts_each_from_the_same_state(uml_kernel, tiny,
                                                                      tmp_path):
    """sandbox.per_boot block: runs one after another in one boot (python -m engine
    run-block). Each has its own folder, log and vmstat deltas, and starts with the page
    cache dropped (engine.sandbox.job.reset): unconstrained, the first run leaves its
    90 MB of weights in the guest's cache, and the second must not start with them."""
    outs = [tmp_path / name for name in ("linear", "linear-again")]
    metas = run_block_in_sandbox([_request(tiny, "linear", o, backend="uml") for o in outs],
                                 sandbox="uml")
    assert [m.termination for m in metas] == ["ok"] * 2, [m.termination_detail for m in metas]
    boxes = [m.sandbox for m in metas]
    assert len({b["boot_id"] for b in boxes}) == 1
    assert [b["boot_position"] for b in boxes] == [0, 1]
    assert boxes[0]["job_start_s"] < boxes[1]["job_start_s"]
    # no pipeline starts before the guest's kernel has settled (engine.sandbox.job.SETTLE_S)
    assert all(b["guest_uptime_at_pipeline_s"] >= job.SETTLE_S for b in boxes), boxes
    # the guest's RAM written once before the first run (engine.sandbox.job.warm_ram): all
    # of it that was free but the kernel's reserve, the host's file allocated beside it
    ram = [(b["ram_warmed_bytes"], b["guest_mem_total_bytes"]) for b in boxes]
    assert all(warmed > total - 512 * MiB for warmed, total in ram), ram
    assert "host: the guest's RAM file (" in (outs[0] / "console.log").read_text()
    # an unconstrained guest sized by its pipeline's bound (engine.runtime.bound), not 4
    # GiB: above what the guest's kernel measured of the child, and never swapping
    for m, b in zip(metas, boxes):
        assert m.hwm_rss_bytes < b["boot_unconstrained_bound_bytes"], (m.hwm_rss_bytes, b)
        overhead = sandbox_config.GUEST_OVERHEAD
        assert (b["boot_unconstrained_bound_bytes"] + overhead <= b["guest_ram_bytes"]
                < sandbox_config.BASELINE_RAM)
        assert b["vmstat_delta"]["pswpout"] == 0
    weights = sum(p.stat().st_size for p in tiny["models"].rglob("*.caffemodel"))
    assert weights > 80 * MiB
    cached = [b["page_cache_at_start"] for b in boxes]
    assert abs(cached[1] - cached[0]) < weights / 4, cached
    assert [b["swap_used_at_start"] for b in boxes] == [0, 0]
    assert all(b["vmstat_delta"]["pgfault"] > 0 for b in boxes)
    assert all((o / "guest_job.log").is_file() for o in outs)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(o.name for o in outs)


def test_no_swap_run_is_oom_killed_and_recorded_as_memory(uml_kernel, tiny, tmp_path):
    out = tmp_path / "oom"
    meta = run_in_sandbox(_request(tiny, "bulk", out, "--limit", "48M", "--swap", "0",
                                   backend="uml"), sandbox="uml").to_dict()
    assert meta["termination"] == "memory", meta["termination_detail"]
    assert meta["oom_kills"] > 0 and meta["limit_enforced"]
    assert meta["backend"] == "uml" and meta["limits"]["guest_backend"] == "cgroup2"
    assert meta["running_at_end"]
    assert json.loads((out / "meta.json").read_text())["sandbox"]["vmstat_delta"]["oom_kill"] > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["oom"]


def test_a_limited_run_and_its_baseline_give_the_host_outputs(uml_kernel, tiny, tmp_path):
    """UML runs its processes on the host CPU, told to use the host's BLAS kernels
    (OpenBLAS may pick others in it): same bits. Bulk under 48M reads both networks'
    weights into memory that swaps: UML 7.2 lost what its kernel read into swapped-in
    pages (AgeNet's conv1 came back with zeros and stale values), unless the weights go
    through a locked buffer (engine.caffe.wire)."""
    host = tmp_path / "host"
    r = subprocess.run([sys.executable, "-m", "engine", "run", "--pipeline",
                        str(tiny["pipeline"]), "--split", str(tiny["models"]), "--policy",
                        "linear", "--out", str(host), "--batch", "1", "--backend", "none"],
                       cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # partial:2: two workers load at once, each through a buffer of its own (one shared
    # buffer gave every multi-worker UML run other outputs). All in one boot: each run
    # under its own limit (the guest sized for them all), the unconstrained never swapping
    runs = (("linear", ()), ("linear", ("--limit", "64M")), ("bulk", ("--limit", "48M")),
            ("partial:2", ()))
    outs = [tmp_path / f"uml-{policy.replace(':', '_')}{''.join(limit)}"
            for policy, limit in runs]
    metas = run_block_in_sandbox([_request(tiny, policy, out, *limit, backend="uml")
                                  for (policy, limit), out in zip(runs, outs)], sandbox="uml")
    assert len({m.sandbox["boot_id"] for m in metas}) == 1
    for (policy, limit), out, m in zip(runs, outs, metas):
        meta = m.to_dict()
        assert meta["termination"] == "ok", meta["termination_detail"]
        assert meta["emulated"] and meta["sandbox"]["kernel"] == "uml"
        assert meta["limit_enforced"] == bool(limit)
        if limit:
            assert meta["limits"]["memory_max"] == parse_size(limit[1])
            peak = tidy_run(out)["runs"]["peak_cg_current_bytes"].iloc[0]
            assert 0.5 * parse_size(limit[1]) < peak <= parse_size(limit[1])
        else:
            assert meta["sandbox"]["vmstat_delta"]["pswpout"] == 0
        if policy == "bulk":  # both networks' 91 MB of weights held at once
            assert meta["sandbox"]["vmstat_delta"]["pswpout"] > 0
        host_blas = json.loads((host / "meta.json").read_text())["child"]["blas"]
        assert meta["child"]["blas"] == host_blas
        a, b = np.load(host / "outputs.npz"), np.load(out / "outputs.npz")
        assert sorted(a) == sorted(b)
        for key in a:
            assert np.array_equal(a[key], b[key]), key


def test_sigkill_of_the_supervisor_takes_every_uml_process_along(uml_kernel, tiny, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "engine", "run", "--pipeline",
                             str(tiny["pipeline"]), "--split", str(tiny["models"]),
                             "--policy", "linear", "--out", str(out), "--backend", "uml",
                             "--limit", "64M"], cwd=REPO, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob(".run.vm.*/job.log")) and time.monotonic() < deadline:
            time.sleep(0.1)
        kernels = _uml_pids(proc.pid, uml_kernel.binary)
        assert kernels, "UML never started the job"
        groups = {_group(pid) for pid in kernels} - {None}
        assert sum(len(_members(g)) for g in groups) > 1  # UML runs its guest in host processes
    finally:
        proc.kill()
        proc.wait()
    # they end on their own (the kernel's parent-death signal), freeing the guest's RAM
    # as they go: seconds on a loaded host (once more than 2 s in the suite). One that
    # outlives its supervisor stays for good; the wait is a bound, not the test
    deadline = time.monotonic() + 30.0
    while any(_members(g) for g in groups) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_members(g) for g in groups), "UML processes outlived their supervisor"
    left = sorted(p.name for p in tmp_path.iterdir())
    assert any(".run.vm." in n for n in left) and any("edgeprof-swap" in n for n in left)
    meta = run_in_sandbox(_request(tiny, "linear", out, "--limit", "64M", "--force",
                                   backend="uml"), SandboxConfig(boot_timeout_s=0.01),
                          sandbox="uml")
    assert meta.termination == "error"  # too short a boot: killed, recorded
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_kills_uml_and_leaves_nothing(uml_kernel, tiny, tmp_path, sig):
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "engine", "run", "--pipeline",
                             str(tiny["pipeline"]), "--split", str(tiny["models"]),
                             "--policy", "linear", "--out", str(out), "--backend", "uml",
                             "--limit", "64M"], cwd=REPO, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_signals)
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob(".run.vm.*/job.log")) and time.monotonic() < deadline:
            time.sleep(0.1)
        kernels = _uml_pids(proc.pid, uml_kernel.binary)
        assert kernels, "UML never started the job"
        groups = {_group(pid) for pid in kernels} - {None}
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert f"interrupted by {sig.name}; nothing written" in err
    assert not any(_members(g) for g in groups)
    assert list(tmp_path.iterdir()) == []


def test_auto_prefers_uml_to_the_vm_where_it_works(monkeypatch):
    from engine.limits import select

    request = LimitRequest(256 * MiB, None)
    monkeypatch.setattr(select, "uml_status", lambda: (True, "Linux 7.2.7 (sid)"))
    session = open_backend("auto", request, "t", allow_unenforced=True, env={})
    assert session.backend == "uml" and session.runs_elsewhere
    monkeypatch.setattr(select, "uml_status", lambda: (False, "not built"))
    monkeypatch.setattr(select, "qemu_installed", lambda: True)
    session = open_backend("auto", request, "t", allow_unenforced=True, env={})
    assert session.backend == "vm"
    assert "uml: not built" in session.notes["auto"]["skipped"]


@pytest.mark.parametrize("gap_s", [0.005, 0.02])
def test_a_double_sigint_in_the_first_seconds_leaves_no_swap_image(uml_kernel, tiny, tmp_path,
                                                                   gap_s):
    """The kernel's kill and its swap image's removal run with the signals held back: a
    second Ctrl-C a few ms after the first cannot cut them short."""
    out = tmp_path / "run"
    for delay in (0.3, 0.8, 1.5):
        proc = subprocess.Popen([sys.executable, "-m", "engine", "run", "--pipeline",
                                 str(tiny["pipeline"]), "--split", str(tiny["models"]),
                                 "--policy", "linear", "--out", str(out), "--backend", "uml",
                                 "--limit", "64M"], cwd=REPO, stderr=subprocess.PIPE,
                                text=True, preexec_fn=default_signals)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        time.sleep(gap_s)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert list(tmp_path.iterdir()) == [], (delay, sorted(tmp_path.iterdir()))


def test_calibrate_measures_the_sandboxes_per_page_costs(uml_kernel, tiny, tmp_path):
    """python -m engine calibrate in the sandbox: AgeNet (45.7 MB of weights) under 48M
    swaps, and the fit gives positive costs per page in and out from the guest's
    counters."""
    out = tmp_path / "uml.json"
    r = subprocess.run([sys.executable, "-m", "engine", "calibrate", "--backend", "uml",
                        "--limit", "48M", "--split", str(tiny["models"]), "--repetitions",
                        "2", "--out", str(out)], cwd=REPO, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    device = json.loads(out.read_text())
    assert device["per_page_in_s"] > 0 and device["per_page_out_s"] >= 0
    assert "uml backend" in device["source"] and "guest_pswpin_delta" in device["source"]


# The build probe's copy-read (engine.sandbox.uml.COPY_READ_1GIB: the engine's readinto_at into
# 1 GiB of fresh blobs at the scratch buffer's page offset, glibc's vector copy forced, as
# on hosts whose memmove does not use rep movsb): it copies backward there, and without
# the ascending faults each page becomes a host mapping of its own.
COPY_READ_1GIB = uml.COPY_READ_1GIB + """
rss = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS"))
print("resident MiB", rss // 1024)
"""
BACKWARD_COPIES = uml.BACKWARD_COPIES


def test_the_engines_copy_read_reaches_1_gib_under_the_hosts_mapping_cap(uml_kernel,
                                                                        tmp_path):
    res = run_command_in_sandbox(["env", BACKWARD_COPIES, sys.executable, "-c", COPY_READ_1GIB],
                                 None, None, timeout_s=300, workdir=tmp_path, sandbox="uml",
                                 stall_s=20)
    assert res["boot"]["timed_out"] is None, res["boot"]["error"]
    assert res["guest"]["exit_code"] == 0, res["job_log"][-2000:]
    resident = int(res["job_log"].split("resident MiB")[1].split()[0])
    assert resident >= 1024
    vm = res["sandbox"]
    # 1 GiB page by page would be 262,144 mappings; ascending faults merge them
    assert vm["host_max_map_count"] and vm["host_maps_peak"] < 0.25 * vm["host_max_map_count"]
    assert vm["uml_preload"]["sha256"]


# A guest process whose fresh pages fault top-down, one by one, as a backward copy's do
DESCENDING_TOUCH = """
import numpy as np
a = np.empty(1 << 30, np.uint8)
for page in range((1 << 30) // 4096 - 1, -1, -1):
    a[page * 4096] = 1
print("never here")
"""


def test_a_guest_process_at_the_mapping_cap_is_ended_naming_the_cap(uml_kernel, tmp_path):
    cap = uml.max_map_count()
    if cap is None or cap > 200_000:
        pytest.skip(f"the host's vm.max_map_count ({cap}) is above what 1 GiB can reach")
    t0 = time.monotonic()
    res = run_command_in_sandbox([sys.executable, "-c", DESCENDING_TOUCH], None, None,
                                 cfg=SandboxConfig(ascend=False), timeout_s=600, workdir=tmp_path,
                                 sandbox="uml", stall_s=10)
    assert res["boot"]["timed_out"] == "maps", res["boot"]["error"]
    assert "vm.max_map_count" in res["boot"]["error"] and str(cap) in res["boot"]["error"]
    assert res["sandbox"]["host_maps_peak"] >= cap - 64
    assert "never here" not in res["job_log"]
    assert time.monotonic() - t0 < 300  # the window, not the 600 s timeout, ended it
    assert list(tmp_path.iterdir()) == []


def test_a_swap_heavy_run_at_512m_completes_and_records_its_peak_mappings(uml_kernel, tiny,
                                                                          tmp_path):
    """DeepEye over sixteen AgeNet/GenderNet pairs loads their 1.46 GB of weights ahead
    of the EXECs (eight pairs peaked at 736 MiB natively, and under 512M on a loaded
    host the EXECs once kept up enough not to swap): under 512M the rest swaps out and
    back in."""
    from engine.schedule.pipelines import Arrival, Pipeline, save_pipeline

    big = tmp_path / "big.json"
    save_pipeline(Pipeline("big", [Arrival(0.0, ["AgeNet", "GenderNet"] * 16)]), big)
    out = tmp_path / "run"
    meta = run_in_sandbox(_request({**tiny, "pipeline": big}, "deepeye", out, "--limit", "512M",
                                   backend="uml"), sandbox="uml").to_dict()
    assert meta["termination"] == "ok", meta["termination_detail"]
    assert meta["sandbox"]["vmstat_delta"]["pswpout"] > 64 * MiB // 4096
    peak, cap = meta["sandbox"]["host_maps_peak"], meta["sandbox"]["host_max_map_count"]
    assert peak is not None and 0 < peak < cap, (peak, cap)
    assert json.loads((out / "meta.json").read_text())["sandbox"]["host_maps_peak"] == peak
    # the cross-check's record of it (benchmarks/crosscheck.py) reads the same counters
    from engine.analysis.crosscheck import run_record

    record = run_record(out)
    assert record["sandbox"] == "uml" and record["host_maps_peak"] == peak
    assert record["pswpout"] == meta["sandbox"]["vmstat_delta"]["pswpout"]


def test_a_uml_run_that_cannot_write_its_files_names_the_file(uml_kernel, tiny, tmp_path):
    """Third held-out pass M1: under --backend uml a full disk (ulimit -f) said 'cannot
    write: File too large' without the file; it names it, exits 1, and leaves no folder."""
    from tests.unit.test_faults import _file_size_limit

    out = tmp_path / "w" / "run"
    r = subprocess.run([sys.executable, "-m", "engine", "run", "--pipeline",
                        str(tiny["pipeline"]), "--split", str(tiny["models"]), "--policy",
                        "linear", "--out", str(out), "--batch", "1", "--backend", "uml",
                        "--limit", "64M"], cwd=REPO, capture_output=True, text=True,
                       timeout=300, preexec_fn=_file_size_limit(4096))
    assert r.returncode == 1, r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("error: cannot write /") and "File too large (EFBIG)" in line, line
    assert not out.exists()


@pytest.mark.parametrize("kib", [4096, 500_000])
def test_a_file_size_limit_below_the_guests_ram_is_no_result_without_swap_too(
        uml_kernel, tiny, tmp_path, kib):
    """Fifteenth held-out pass M3: with --swap 0 (no swap image to fail first) a host
    file-size limit below the guest's RAM killed UML with SIGXFSZ as it booted (its RAM
    file), and the run was kept as an `error` result the workflow never redid: now no run
    folder, exit 1 naming the file, with or without --error-is-result."""
    from tests.unit.test_faults import _file_size_limit

    for extra in ([], ["--error-is-result"]):
        out = tmp_path / f"w{len(extra)}" / "run"
        r = subprocess.run([sys.executable, "-m", "engine", "run", "--pipeline",
                            str(tiny["pipeline"]), "--split", str(tiny["models"]), "--policy",
                            "linear", "--out", str(out), "--batch", "1", "--backend", "uml",
                            "--limit", "64M", "--swap", "0", *extra], cwd=REPO,
                           capture_output=True, text=True, timeout=300,
                           preexec_fn=_file_size_limit(kib * 1024))
        assert r.returncode == 1, r.stderr
        line = r.stderr.strip().splitlines()[-1]
        assert line.startswith("error: cannot write /dev/shm/") and "(EFBIG)" in line, line
        assert f"ulimit -f {kib}" in line and not out.exists()

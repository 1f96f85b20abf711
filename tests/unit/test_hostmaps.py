"""The host's count of a UML guest's mappings (engine/sandbox/hostmaps.py), the ascending faults
of the engine's copy-read (engine/caffe/wire.py), and what a session ended at the mapping
cap records. The real stall and its fix run in tests/integration/uml/test_uml.py."""

from __future__ import annotations

import ctypes
import mmap
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from engine.analysis.noise import run_warnings
from engine.caffe import wire
from engine.sandbox import hostmaps
from engine.sandbox import run as vm_run
from engine.sandbox.boot import BootResult

PAGE = 4096


def _resident_pages(address: int, length: int) -> int:
    """Resident pages of a range, as the kernel's mincore says."""
    libc = ctypes.CDLL(None, use_errno=True)
    start = address & ~(PAGE - 1)
    pages = (address + length - start + PAGE - 1) // PAGE
    vec = (ctypes.c_ubyte * pages)()
    assert libc.mincore(ctypes.c_void_p(start), ctypes.c_size_t(pages * PAGE), vec) == 0
    return sum(v & 1 for v in vec)


def test_a_process_with_more_separate_mappings_is_counted_with_them():
    """Each PROT_NONE guard between two mappings keeps the kernel from merging them: 50
    mapped-and-guarded pages are 100 more mappings in the kernel's own count."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import mmap, sys\n"
         "keep = [mmap.mmap(-1, 4096, prot=mmap.PROT_READ | (mmap.PROT_WRITE if i % 2 "
         "else 0)) for i in range(int(sys.argv[1]))]\nsys.stdin.read()", "0"],
        stdin=subprocess.PIPE)
    more = subprocess.Popen(
        [sys.executable, "-c", "import mmap, sys\n"
         "keep = [mmap.mmap(-1, 4096, prot=mmap.PROT_READ | (mmap.PROT_WRITE if i % 2 "
         "else 0)) for i in range(int(sys.argv[1]))]\nsys.stdin.read()", "100"],
        stdin=subprocess.PIPE)
    try:
        import time

        for _ in range(200):  # until both have mapped their pages
            a, b = hostmaps.maps_of(child.pid), hostmaps.maps_of(more.pid)
            if a and b and b - a >= 90:
                break
            time.sleep(0.05)
        assert 90 <= b - a <= 110, (a, b)
        assert hostmaps.maps_of(child.pid) == len(
            Path(f"/proc/{child.pid}/maps").read_text().splitlines())
    finally:
        for p in (child, more):
            p.communicate(b"")
    assert hostmaps.maps_of(child.pid) is None  # gone: unknown, not zero


def test_a_session_at_the_cap_for_its_window_is_hit_and_one_that_leaves_it_is_not(
        monkeypatch):
    counts = iter([100, 65500, 65520, 65530, 65532])
    monkeypatch.setattr(hostmaps, "session_maps", lambda leader: next(counts))
    watch = hostmaps.MapWatch(1, 65530, window_s=10)
    for now in (0, 1, 5, 10):
        watch.sample(now)
    assert not watch.hit.is_set()  # at the cap from t=1: 9 s so far
    watch.sample(11)
    assert watch.hit.is_set() and watch.peak == 65532
    assert "vm.max_map_count 65530" in watch.detail()

    counts = iter([65500, 65500, 1000, 65500, 65500])
    monkeypatch.setattr(hostmaps, "session_maps", lambda leader: next(counts))
    watch = hostmaps.MapWatch(1, 65530, window_s=10)
    for now in (0, 6, 8, 9, 18):  # left the cap at 8: the window starts again
        watch.sample(now)
    assert not watch.hit.is_set()


def test_no_cap_known_never_ends_a_session(monkeypatch):
    monkeypatch.setattr(hostmaps, "session_maps", lambda leader: 70000)
    watch = hostmaps.MapWatch(1, None, window_s=1)
    for now in range(5):
        watch.sample(now)
    assert not watch.hit.is_set() and watch.peak == 70000


def test_the_copy_read_destination_is_resident_before_the_copy(monkeypatch, tmp_path):
    """fault_ascending makes every page of a fresh destination resident (the kernel's
    mincore), and the read that follows still gives the file's bytes."""
    buf = mmap.mmap(-1, 64 * PAGE)
    view = memoryview(buf)
    address = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    assert _resident_pages(address, len(buf)) == 0
    wire.fault_ascending(view[100:])  # from inside the first page to the end
    assert _resident_pages(address, len(buf)) == 64

    data = np.random.default_rng(1).integers(0, 255, 40 * PAGE, dtype=np.uint8).tobytes()
    (tmp_path / "f").write_bytes(b"xx" + data)
    monkeypatch.setenv(wire.UML_READS_ENV, "1")
    out = np.empty(len(data), np.uint8)
    with open(tmp_path / "f", "rb", buffering=0) as f:
        wire.readinto_at(f, memoryview(out), 2, str(tmp_path / "f"))
    assert out.tobytes() == data


_RESIDENT_SCRIPT = """
import sys
from engine.caffe import wire
from engine.network import input_blob
from tests.unit.test_hostmaps import _resident_pages
blob = input_blob((64, 3, 227, 227), 0, wire.uml_ascending())
print(_resident_pages(blob.ctypes.data, blob.nbytes), blob.nbytes // 4096,
      int(blob[1:].any()))
"""


def test_uml_mode_writes_memory_before_reading_it():
    """Under UML (ascending) even the lean runtime's zero images of a batch are written,
    not left to the zero page; natively, and in the mode that reproduces the stall,
    they are not. Each in a fresh process (40 MB: over glibc's largest mmap threshold, so
    fresh pages), whose allocator no earlier test has touched."""
    for env, written in ((None, False), (wire.UNORDERED, False), ("1", True)):
        environ = {k: v for k, v in os.environ.items() if k != wire.UML_READS_ENV}
        if env is not None:
            environ[wire.UML_READS_ENV] = env
        out = subprocess.run([sys.executable, "-c", _RESIDENT_SCRIPT], env=environ,
                             cwd=Path(__file__).resolve().parents[2], capture_output=True,
                             text=True, check=True).stdout.split()
        resident, pages, nonzero = map(int, out)
        assert (resident > 0.9 * pages) == written, env
        assert not nonzero


def test_a_run_ended_at_the_mapping_cap_is_a_timeout_that_names_the_cap(tiny, tmp_path):
    from engine.cli import build_parser
    from engine.commands.run import run_request
    from engine.schedule.pipelines import load_pipeline
    from engine.schedule.policies import parse_policy

    request = run_request(build_parser().parse_args(
        ["run", "--pipeline", str(tiny["pipeline"]), "--split", str(tiny["models"]),
         "--policy", "linear", "--out", str(tmp_path / "out"), "--backend", "uml"]))
    res = BootResult(rc=None, accel="uml", boot_s=2.0, total_s=70.0, timed_out="maps",
                     qemu_exit=-9, console="", error=hostmaps.MapWatch(1, 65530, 60).detail(),
                     host_maps_peak=65532)
    run = tmp_path / "run"
    run.mkdir()
    meta = vm_run._error_meta(request, load_pipeline(tiny["pipeline"]),
                              parse_policy("linear"), res, run, {})
    assert meta.termination == "timeout"
    assert "vm.max_map_count 65530" in meta.termination_detail


def test_runs_over_80_percent_of_the_cap_are_warned():
    runs = pd.DataFrame({"run_id": ["a", "b", "c"], "termination": ["ok"] * 3,
                         "host_maps_peak": [3000.0, 52500.0, np.nan],
                         "host_max_map_count": [65530.0, 65530.0, np.nan]})
    warned = [w for w in run_warnings(runs, pd.DataFrame()) if "mapping cap" in w]
    assert len(warned) == 1 and "1 user-mode Linux run" in warned[0] and "b:" in warned[0]
    runs.loc[1, "host_maps_peak"] = 52000.0  # 79 %
    assert not [w for w in run_warnings(runs, pd.DataFrame()) if "mapping cap" in w]


def test_the_preload_keeps_copies_right_and_faults_their_destination(tmp_path):
    """ascend.c built as the UML build does: a process under it copies, moves overlapping
    bytes and keeps errno as glibc alone does."""
    import shutil

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        import pytest

        pytest.skip("no C compiler")
    lib = tmp_path / "ascend.so"
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(lib),
                    str(Path(vm_run.uml.PRELOAD_SOURCE)), "-ldl"], check=True)
    code = ("import numpy as np, os\n"
            "a = np.arange(3_000_000, dtype=np.float32); b = a.copy(); c = np.empty_like(a)\n"
            "c[:] = a\n"
            "x = bytearray(b'abcdefgh' * 1_000_000); x[1:] = x[:-1]\n"
            "y = bytearray(b'abcdefgh' * 1_000_000); y[:-1] = y[1:]\n"
            "print(bool((b == a).all() and (c == a).all()), bytes(x[:4]), bytes(y[-4:]))\n")
    env = {**os.environ, "LD_PRELOAD": str(lib)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "True b'aabc' b'fghh'"


def test_a_pinned_uml_run_claims_one_cpu_and_moves_its_supervisor_off_it(tmp_path,
                                                                          monkeypatch):
    import tempfile

    # the CPUs' claim files of this test alone: other runs on the machine may hold theirs
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    own = os.sched_getaffinity(0)
    if len(own) < 2:
        import pytest

        pytest.skip("one CPU allowed")
    pin = vm_run._pin_uml(True)
    try:
        assert pin.facts["pinned"], pin.facts
        assert len(pin.uml) == 1 and pin.uml.isdisjoint(os.sched_getaffinity(0))
        assert os.sched_getaffinity(0) == own - pin.uml
        # a second run meanwhile cannot take the same CPU
        other = vm_run._pin_uml(True)
        assert not other.uml or other.uml.isdisjoint(pin.uml)
        other.release()
    finally:
        pin.release()
    assert os.sched_getaffinity(0) == own
    assert vm_run._pin_uml(False).uml is None


def test_a_run_that_failed_near_the_cap_is_said_to_have_been_there(tiny, tmp_path,
                                                                    monkeypatch):
    """The guest's own stall watch ended the run (it cannot see the host's mappings), or
    its child died of SIGSEGV at 96 % of the cap: the record says where it was; a run
    that failed far from the cap, or finished, is left as it was."""
    from engine.cli import build_parser
    from engine.commands.run import run_request
    from engine.runner.meta import RunMeta

    def fake_boot(termination, peak):
        def boot(py_args, share, limit, swap, cfg=None, timeout_s=None, sandbox="vm",
                 stall_s=None, cpus=None, bound=None):
            (share / "run-0").mkdir()
            RunMeta(policy="linear", termination=termination, exit_code=139,
                    termination_detail="the run process ended with code 139").write(
                        share / "run-0")
            res = BootResult(rc=1, accel="uml", boot_s=1.0, total_s=9.0, timed_out=None,
                             qemu_exit=0, console="", host_maps_peak=peak)
            return res, vm_run.plan(vm_run.SandboxConfig(), None, None, _FAKE_UML), _FAKE_UML, None
        return boot

    monkeypatch.setattr(vm_run.uml, "max_map_count", lambda: 65530)
    for termination, peak, noted in (("error", 62757, True), ("timeout", 65532, True),
                                     ("error", 30000, False), ("ok", 65000, False)):
        monkeypatch.setattr(vm_run, "boot_job", fake_boot(termination, peak))
        out = tmp_path / f"{termination}-{peak}"
        request = run_request(build_parser().parse_args(
            ["run", "--pipeline", str(tiny["pipeline"]), "--split", str(tiny["models"]),
             "--policy", "linear", "--out", str(out), "--backend", "uml",
             "--error-is-result"]))
        vm_run.run_in_sandbox(request, sandbox="uml")
        detail = RunMeta.read(out).termination_detail or ""
        assert ("vm.max_map_count 65530" in detail) == noted, (termination, peak, detail)
        if noted:
            assert f"{peak} host mappings" in detail


_FAKE_UML = vm_run.uml.Uml(Path("/nonexistent/linux"), "7.2", "user-mode-linux_fake", "sid")


def test_why_split_counts_hand_made_mappings():
    from engine.sandbox.hostmaps import why_split

    maps = "\n".join([
        # a young page, then its file's next page read-only: split by access alone
        "100000-101000 rwxs 00005000 00:1c 7 /dev/shm/vm_file-x (deleted)",
        "101000-102000 r-xs 00006000 00:1c 7 /dev/shm/vm_file-x (deleted)",
        # then a page from elsewhere in the file: split by scatter; two pages long
        "102000-104000 rwxs 00009000 00:1c 7 /dev/shm/vm_file-x (deleted)",
        # a hole, then an old page: neighbours of nothing
        "200000-201000 --xs 00001000 00:1c 7 /dev/shm/vm_file-x (deleted)",
        # then a page one lower in the file (a top-down fault): scattered, lower
        "201000-202000 rwxs 00000000 00:1c 7 /dev/shm/vm_file-x (deleted)",
        "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0",
    ])
    assert why_split(maps) == {"mappings": 6, "one_page": 4, "young": 3, "old": 1, "clean": 1,
                               "split_by_access": 1, "split_by_scatter": 2, "scatter_lower": 1}

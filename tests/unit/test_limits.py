"""Memory-limit backends against a fake cgroupfs in tmp_path.

The real cgroup hierarchy of the test machine must never be written: a guard fixture
fails any write-mode open, mkdir or rmdir under /sys/fs/cgroup, and every test hands the
code fake /proc files. The fake kernel (os.mkdir/os.rmdir wrappers) fills a new cgroup
with the interface files the kernel would create and drops them again on rmdir.
"""

from __future__ import annotations

import argparse
import builtins
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import engine.limits as limits
from engine.errors import EdgeprofError
from engine.limits import cgroupfs as fs
from engine.limits import sandbox as sandbox_limits
from engine.limits import select, systemd
from engine.limits.base import LimitRequest
from engine.limits.cgroup1 import Cgroup1Session
from engine.limits.cgroup2 import Cgroup2Session
from engine.limits.inherit import InheritSession
from engine.limits.none import NoneSession

MiB = 2**20
V1_UNLIMITED = "9223372036854771712\n"
EVENTS = "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n"
FRESH_EVENTS = "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n"
PRESSURE = ("some avg10=0.00 avg60=0.00 avg300=0.00 total=1234\n"
            "full avg10=0.00 avg60=0.00 avg300=0.00 total=567\n")
V2_STAT_KEYS = (
    "anon file kernel kernel_stack pagetables sec_pagetables percpu sock vmalloc shmem zswap "
    "zswapped file_mapped file_dirty file_writeback swapcached anon_thp file_thp shmem_thp "
    "inactive_anon active_anon inactive_file active_file unevictable slab_reclaimable "
    "slab_unreclaimable slab workingset_refault_anon workingset_refault_file "
    "workingset_activate_anon workingset_activate_file workingset_restore_anon "
    "workingset_restore_file workingset_nodereclaim pswpin pswpout pgscan pgsteal "
    "pgscan_kswapd pgscan_direct pgfault pgmajfault pgrefill pgactivate pgdeactivate "
    "pglazyfree pglazyfreed thp_fault_alloc thp_collapse_alloc").split()
V1_STAT_KEYS = (
    "cache rss rss_huge shmem mapped_file dirty writeback workingset_refault_anon "
    "workingset_refault_file swap swapcached pgpgin pgpgout pgfault pgmajfault inactive_anon "
    "active_anon inactive_file active_file unevictable").split()


def v2_stat(**values: int) -> str:
    return "".join(f"{k} {values.get(k, 0)}\n" for k in V2_STAT_KEYS)


def v1_stat(limit: int | None = None, **values: int) -> str:
    lim = V1_UNLIMITED.strip() if limit is None else str(limit)
    local = "".join(f"{k} {values.get(k, 0)}\n" for k in V1_STAT_KEYS)
    totals = "".join(f"total_{k} {values.get('total_' + k, values.get(k, 0))}\n"
                     for k in V1_STAT_KEYS)
    return (local + f"hierarchical_memory_limit {lim}\nhierarchical_memsw_limit "
            f"{V1_UNLIMITED.strip()}\n" + totals)


def v2_files(controllers: str = "memory pids") -> dict[str, str]:
    """A non-root v2 cgroup as the kernel creates it (memory controller enabled)."""
    return {
        "cgroup.controllers": controllers + "\n", "cgroup.subtree_control": "\n",
        "cgroup.procs": "", "cgroup.events": "populated 0\nfrozen 0\n", "cgroup.freeze": "0\n",
        "cgroup.kill": "", "cgroup.type": "domain\n",
        "memory.max": "max\n", "memory.high": "max\n", "memory.low": "0\n", "memory.min": "0\n",
        "memory.swap.max": "max\n", "memory.oom.group": "0\n", "memory.current": "0\n",
        "memory.peak": "0\n", "memory.swap.current": "0\n", "memory.swap.peak": "0\n",
        "memory.stat": v2_stat(), "memory.events": FRESH_EVENTS,
        "memory.events.local": FRESH_EVENTS, "memory.pressure": PRESSURE,
    }


def v1_memory_files() -> dict[str, str]:
    return {
        "cgroup.procs": "", "tasks": "", "notify_on_release": "0\n",
        "memory.limit_in_bytes": V1_UNLIMITED, "memory.memsw.limit_in_bytes": V1_UNLIMITED,
        "memory.usage_in_bytes": "0\n", "memory.max_usage_in_bytes": "0\n",
        "memory.memsw.usage_in_bytes": "0\n", "memory.memsw.max_usage_in_bytes": "0\n",
        "memory.failcnt": "0\n", "memory.memsw.failcnt": "0\n", "memory.swappiness": "60\n",
        "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
        "memory.stat": v1_stat(), "memory.use_hierarchy": "1\n",
    }


def write_tree(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (path / name).write_text(text)
    return path


def mountinfo_text(v2: Path | None = None, v1_memory: Path | None = None,
                   v1_freezer: Path | None = None, v2_root: str = "/") -> str:
    lines = ["22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw",
             "25 22 0:23 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw"]
    if v2 is not None:
        lines.append(f"31 22 0:27 {v2_root} {v2} rw,nosuid,nodev,noexec,relatime shared:9 - "
                     f"cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot")
    if v1_memory is not None:
        lines.append(f"35 22 0:32 / {v1_memory} rw,nosuid,nodev,noexec,relatime shared:14 - "
                     f"cgroup cgroup rw,memory")
    if v1_freezer is not None:
        lines.append(f"37 22 0:34 / {v1_freezer} rw,relatime shared:16 - cgroup cgroup "
                     f"rw,freezer")
    return "\n".join(lines) + "\n"


class FakeKernel:
    """os.mkdir/os.rmdir inside ``base`` behave like cgroupfs; outside it, like os."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.made: list[Path] = []
        self.removed: list[Path] = []

    def mkdir(self, path, mode=0o777, *, dir_fd=None, real=os.mkdir):
        real(path, mode)
        path = Path(path)
        if self.base not in path.parents:
            return
        parent = path.parent
        if any((parent / f).is_file() for f in ("cgroup.controllers", "memory.limit_in_bytes",
                                                 "freezer.state")):
            self.made.append(path)
        if (parent / "cgroup.controllers").is_file():
            # a real kernel would show "+memory" as "memory" when read back
            enabled = [c.lstrip("+") for c in
                       (parent / "cgroup.subtree_control").read_text().split()]
            write_tree(path, v2_files(" ".join(enabled)) if "memory" in enabled
                       else {k: v for k, v in v2_files("").items() if k.startswith("cgroup.")})
        elif (parent / "memory.limit_in_bytes").is_file():
            write_tree(path, v1_memory_files())
        elif (parent / "freezer.state").is_file():
            write_tree(path, {"cgroup.procs": "", "tasks": "", "freezer.state": "THAWED\n"})

    def rmdir(self, path, *, dir_fd=None, real=os.rmdir):
        path = Path(path)
        if self.base in path.parents:
            self.removed.append(path)
            # cgroupfs: interface files vanish with the dir; child cgroups block rmdir
            if not any(p.is_dir() for p in path.iterdir()):
                for p in path.iterdir():
                    p.unlink()
        real(path)


@pytest.fixture(autouse=True)
def guard_real_cgroupfs(monkeypatch):
    """Fail the test on any attempt to modify the machine's real cgroup hierarchy."""
    real_open, real_os_open = builtins.open, os.open

    def check(path, writing: bool) -> None:
        if writing and os.path.abspath(os.fsdecode(path)).startswith("/sys/fs/cgroup"):
            raise AssertionError(f"test tried to write the real cgroupfs: {path}")

    def guarded_open(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, bytes, os.PathLike)):
            check(file, any(c in mode for c in "wax+"))
        return real_open(file, mode, *args, **kwargs)

    def guarded_os_open(path, flags, *args, **kwargs):
        check(path, bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC)))
        return real_os_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded_open)
    monkeypatch.setattr(io, "open", guarded_open)
    monkeypatch.setattr(os, "open", guarded_os_open)
    for name in ("mkdir", "rmdir"):
        real = getattr(os, name)

        def guarded(path, *args, _real=real, **kwargs):
            check(path, True)
            return _real(path, *args, **kwargs)

        monkeypatch.setattr(os, name, guarded)


@pytest.fixture
def kernel(tmp_path, monkeypatch) -> FakeKernel:
    fake = FakeKernel(tmp_path)
    real_mkdir, real_rmdir = os.mkdir, os.rmdir
    monkeypatch.setattr(os, "mkdir", lambda p, mode=0o777, **k: fake.mkdir(p, mode,
                                                                           real=real_mkdir))
    monkeypatch.setattr(os, "rmdir", lambda p, **k: fake.rmdir(p, real=real_rmdir))
    return fake


@pytest.fixture
def v2_root(tmp_path) -> Path:
    """A delegated, empty v2 cgroup (memory available but not yet enabled for children)."""
    return write_tree(tmp_path / "unified" / "delegated", v2_files("cpu memory pids"))


@pytest.fixture
def v1_root(tmp_path) -> Path:
    write_tree(tmp_path / "v1" / "memory", v1_memory_files())
    return write_tree(tmp_path / "v1" / "memory" / "delegated", v1_memory_files())


@pytest.fixture
def freezer_root(tmp_path) -> Path:
    return write_tree(tmp_path / "v1" / "freezer" / "delegated",
                      {"cgroup.procs": "", "tasks": "", "freezer.state": "THAWED\n"})


@pytest.fixture
def no_writes():
    """A context in which anything that could modify a file system or another process
    fails the test."""

    @contextlib.contextmanager
    def active():
        real_open, real_os_open = builtins.open, os.open

        def spy_open(file, mode="r", *args, **kwargs):
            if any(c in mode for c in "wax+"):
                raise AssertionError(f"write-mode open of {file}")
            return real_open(file, mode, *args, **kwargs)

        def spy_os_open(path, flags, *args, **kwargs):
            if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND):
                raise AssertionError(f"write-mode os.open of {path}")
            return real_os_open(path, flags, *args, **kwargs)

        def forbidden(*args, **kwargs):
            raise AssertionError(f"forbidden call with {args}")

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(builtins, "open", spy_open)
            mp.setattr(io, "open", spy_open)
            mp.setattr(os, "open", spy_os_open)
            for name in ("mkdir", "rmdir", "unlink", "rename", "kill"):
                mp.setattr(os, name, forbidden)
            mp.setattr(subprocess, "run", forbidden)
            mp.setattr(subprocess, "Popen", forbidden)
            yield

    return active


def fake_proc(tmp_path: Path, mountinfo: str, cgroup: str) -> tuple[Path, Path]:
    proc = tmp_path / "proc"
    proc.mkdir(exist_ok=True)
    (proc / "mountinfo").write_text(mountinfo)
    (proc / "cgroup").write_text(cgroup)
    return proc / "mountinfo", proc / "cgroup"


def sleeper() -> subprocess.Popen:
    return subprocess.Popen(["sleep", "30"])


# --- cgroupfs -------------------------------------------------------------------------


def test_mountinfo_and_own_cgroup_hybrid(tmp_path):
    """This machine's layout: v1 memory hierarchy plus a v2 mount without memory."""
    mi, cg = fake_proc(tmp_path,
                       mountinfo_text(v2=tmp_path / "un\\040ified", v1_memory=tmp_path / "mem"),
                       "9:name=systemd:/\n4:memory:/process_api/abc\n2:cpu,cpuacct:/\n0::/\n")
    mounts = fs.parse_mountinfo(mi)
    assert [(m.fstype, m.version) for m in mounts] == [("cgroup2", 2), ("cgroup", 1)]
    assert mounts[0].mount_point == tmp_path / "un ified"  # \040 unescaped
    assert "memory" in mounts[1].super_options
    paths = fs.parse_proc_cgroup(cg)
    assert paths["cpu"] == paths["cpuacct"] == "/" and paths[""] == "/"
    own = fs.own_cgroup("memory", mi, cg)
    assert (own.path, own.version) == (tmp_path / "mem" / "process_api" / "abc", 1)


def test_own_cgroup_unified_and_namespaced(tmp_path):
    mi, cg = fake_proc(tmp_path, mountinfo_text(v2=tmp_path / "cg", v2_root="/job"),
                       "0::/job/step/task\n")
    own = fs.own_cgroup("memory", mi, cg)
    assert (own.path, own.version) == (tmp_path / "cg" / "step" / "task", 2)
    (tmp_path / "proc" / "cgroup").write_text("0::/elsewhere\n")
    assert fs.own_cgroup("memory", mi, cg) is None  # not visible through this mount


def test_parsers():
    assert fs.parse_limit("max\n") is None
    assert fs.parse_limit(V1_UNLIMITED) is None
    assert fs.parse_limit("268435456\n") == 268435456
    assert fs.parse_keyed(EVENTS) == {"low": 0, "high": 0, "max": 3, "oom": 1, "oom_kill": 1,
                                      "oom_group_kill": 0}
    assert fs.parse_psi(PRESSURE) == {"some": 1234, "full": 567}
    assert fs.kernel_version("6.18.44-fc-v782") == (6, 18)


def test_write_errors_name_file_and_fix(tmp_path):
    with pytest.raises(fs.CgroupError, match=r"memory\.max: no such file"):
        fs.write_value(tmp_path / "memory.max", 1)
    with pytest.raises(fs.CgroupError, match="cannot read"):
        fs.read_text(tmp_path / "memory.current")


# --- cgroup2 --------------------------------------------------------------------------


def test_cgroup2_creates_and_configures(kernel, v2_root):
    s = Cgroup2Session(LimitRequest(256 * MiB, 64 * MiB), "r1", v2_root, kernel=(6, 18))
    cg = v2_root / "edgeprof-r1"
    assert kernel.made == [cg] and s.cgroup_dir == cg
    assert (v2_root / "cgroup.subtree_control").read_text() == "+memory"
    assert (cg / "memory.max").read_text() == str(256 * MiB)
    assert (cg / "memory.swap.max").read_text() == str(64 * MiB)
    assert (cg / "memory.oom.group").read_text() == "1"
    meta = s.metadata()
    assert meta["enforced"] is True and meta["cgroup_version"] == 2
    assert meta["memory_max"] == 256 * MiB and meta["swap_limited"] is True
    assert meta["features"]["peak_fd_reset"] and meta["features"]["swap_peak"]
    s.close()
    assert kernel.removed == [cg] and not cg.exists()


def test_cgroup2_defaults_leave_swap_and_subtree_alone(kernel, v2_root, monkeypatch):
    (v2_root / "cgroup.subtree_control").write_text("memory pids\n")
    written = []
    real = fs.write_value
    monkeypatch.setattr(fs, "write_value", lambda p, v: (written.append(p.name), real(p, v)))
    s = Cgroup2Session(LimitRequest(128 * MiB, None), "r2", v2_root, kernel=(6, 1))
    assert written == ["memory.max", "memory.oom.group"]
    assert (s.cgroup_dir / "memory.swap.max").read_text() == "max\n"
    assert s.metadata()["features"]["peak_fd_reset"] is False  # 6.1 < 6.12
    s.close()


def test_cgroup2_without_ram_limit_is_not_enforced(kernel, v2_root):
    s = Cgroup2Session(LimitRequest(None, None), "r3", v2_root)
    assert s.enforced is False and (s.cgroup_dir / "memory.max").read_text() == "max\n"
    s.close()


def test_cgroup2_preexec_joins_before_exec(kernel, v2_root):
    s = Cgroup2Session(LimitRequest(64 * MiB), "r4", v2_root)
    # the consumer's path: Popen forks, runs preexec in the child, then execs
    subprocess.run([sys.executable, "-c", "pass"], preexec_fn=s.preexec(), check=True)
    assert (s.cgroup_dir / "cgroup.procs").read_text() == "0"
    (s.cgroup_dir / "cgroup.procs").write_text("")
    s.close()


def test_cgroup2_preexec_failure_is_reported(kernel, v2_root, capfd):
    s = Cgroup2Session(LimitRequest(64 * MiB), "r5", v2_root)
    fn = s.preexec()
    (s.cgroup_dir / "cgroup.procs").unlink()
    with pytest.raises(subprocess.SubprocessError):
        subprocess.run(["true"], preexec_fn=fn)
    assert "cannot join cgroup via" in capfd.readouterr().err
    (s.cgroup_dir / "cgroup.procs").write_text("")
    s.close()


def test_cgroup2_oom_and_limit(kernel, v2_root):
    s = Cgroup2Session(LimitRequest(100), "r6", v2_root)
    cg = s.cgroup_dir
    assert s.oom_kills() == 0 and s.hit_limit() is False
    (cg / "memory.events").write_text(EVENTS.replace("oom_kill 1", "oom_kill 5"))
    (cg / "memory.events.local").write_text(EVENTS)
    assert s.oom_kills() == 1  # the local file: OOMs in nested cgroups do not count
    (cg / "memory.events.local").unlink()
    assert s.oom_kills() == 5
    assert s.hit_limit() is True  # memory.events max 3
    (cg / "memory.events").write_text(EVENTS.replace("max 3", "max 0"))
    (cg / "memory.peak").write_text("99\n")
    assert s.hit_limit() is False
    (cg / "memory.peak").write_text("100\n")
    assert s.hit_limit() is True
    s.close()


def test_cgroup2_kill_all_uses_cgroup_kill(kernel, v2_root):
    s = Cgroup2Session(LimitRequest(64 * MiB), "r7", v2_root)
    s.kill_all()
    assert (s.cgroup_dir / "cgroup.kill").read_text() == "1"
    s.close()


def test_cgroup2_kill_all_freezes_and_kills_without_cgroup_kill(kernel, v2_root, monkeypatch):
    s = Cgroup2Session(LimitRequest(64 * MiB), "r8", v2_root)
    cg = s.cgroup_dir
    (cg / "cgroup.kill").unlink()  # Linux < 5.14
    proc = sleeper()
    (cg / "cgroup.procs").write_text(f"{proc.pid}\n")
    written = []
    real = fs.write_value
    monkeypatch.setattr(fs, "write_value", lambda p, v: (written.append((p.name, v)), real(p, v)))
    s.kill_all()
    assert proc.wait(timeout=5) == -signal.SIGKILL
    assert written == [("cgroup.freeze", 1), ("cgroup.freeze", 0)]
    (cg / "cgroup.procs").write_text("")
    s.close()


def test_cgroup2_close_removes_children_first(kernel, v2_root):
    s = Cgroup2Session(LimitRequest(64 * MiB), "r9", v2_root)
    os.mkdir(s.cgroup_dir / "inner")  # a cgroup the measured program made itself
    s.close()
    assert kernel.removed == [s.cgroup_dir / "inner", s.cgroup_dir]
    assert not s.cgroup_dir.exists()
    s.close()  # idempotent
    assert len(kernel.removed) == 2


def test_cgroup2_errors(kernel, v2_root, monkeypatch):
    (v2_root / "cgroup.controllers").write_text("cpu pids\n")
    with pytest.raises(fs.CgroupError, match="memory controller is not available"):
        Cgroup2Session(LimitRequest(64 * MiB), "e1", v2_root)
    (v2_root / "cgroup.controllers").write_text("cpu memory pids\n")

    def busy(path, value):
        raise fs.CgroupError(f"cannot write {value!r} to {path}: Device or resource busy")

    monkeypatch.setattr(fs, "write_value", busy)
    with pytest.raises(fs.CgroupError, match="no-internal-processes"):
        Cgroup2Session(LimitRequest(64 * MiB), "e2", v2_root)
    assert kernel.made == []


def test_cgroup2_failed_setup_removes_the_cgroup(kernel, v2_root, monkeypatch):
    (v2_root / "cgroup.subtree_control").write_text("memory\n")

    def fail(path, value):
        raise fs.CgroupError(f"cannot write {path}")

    monkeypatch.setattr(fs, "write_value", fail)
    with pytest.raises(fs.CgroupError):
        Cgroup2Session(LimitRequest(64 * MiB), "e3", v2_root)
    assert kernel.removed == [v2_root / "edgeprof-e3"] and not kernel.removed[0].exists()


# --- cgroup1 --------------------------------------------------------------------------


def test_cgroup1_limits(kernel, v1_root):
    s = Cgroup1Session(LimitRequest(512 * MiB, 8 * 2**30), "a", v1_root)
    cg = v1_root / "edgeprof-a"
    assert (cg / "memory.limit_in_bytes").read_text() == str(512 * MiB)
    assert (cg / "memory.memsw.limit_in_bytes").read_text() == str(512 * MiB + 8 * 2**30)
    meta = s.metadata()
    assert meta["enforced"] and meta["swap_limited"] and meta["limit_in_bytes"] == 512 * MiB
    s.close()
    assert kernel.removed == [cg]


def test_cgroup1_swap_not_limited(kernel, v1_root, monkeypatch):
    s = Cgroup1Session(LimitRequest(512 * MiB, None), "b", v1_root)
    assert (s.cgroup_dir / "memory.memsw.limit_in_bytes").read_text() == V1_UNLIMITED
    assert s.notes["swap_limited"] is False
    s.close()
    # a kernel without swap accounting has no memsw files at all
    real_mkdir = os.mkdir

    def mkdir_no_memsw(path, *args, **kwargs):
        real_mkdir(path, *args, **kwargs)
        for f in Path(path).glob("memory.memsw.*"):
            f.unlink()

    monkeypatch.setattr(os, "mkdir", mkdir_no_memsw)
    s = Cgroup1Session(LimitRequest(512 * MiB, 0), "c", v1_root)
    assert s.notes["swap_limited"] is False and "swapaccount=1" in s.notes["swap_reason"]
    s.close()


def test_cgroup1_oom_and_fallback(kernel, v1_root):
    s = Cgroup1Session(LimitRequest(1000, 0), "d", v1_root)
    cg = s.cgroup_dir
    (cg / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    assert s.oom_kills() == 2
    (cg / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\n")  # < 4.13
    assert s.oom_kills() is None and s.hit_limit() is False  # not counted: unknown, not 0
    (cg / "memory.memsw.max_usage_in_bytes").write_text("1000\n")  # RAM+swap is binding
    assert s.hit_limit() is True
    (cg / "memory.memsw.max_usage_in_bytes").write_text("10\n")
    (cg / "memory.memsw.failcnt").write_text("4\n")
    assert s.hit_limit() is True
    s.close()


def test_cgroup1_preexec_joins_memory_and_freezer(kernel, v1_root, freezer_root):
    s = Cgroup1Session(LimitRequest(64 * MiB), "e", v1_root, freezer_root)
    subprocess.run(["true"], preexec_fn=s.preexec(), check=True)
    assert (s.cgroup_dir / "cgroup.procs").read_text() == "0"
    assert (freezer_root / "edgeprof-e" / "cgroup.procs").read_text() == "0"
    for d in (s.cgroup_dir, freezer_root / "edgeprof-e"):
        (d / "cgroup.procs").write_text("")
    s.close()
    assert kernel.removed == [s.cgroup_dir, freezer_root / "edgeprof-e"]


def test_cgroup1_kill_via_freezer(kernel, v1_root, freezer_root, monkeypatch):
    s = Cgroup1Session(LimitRequest(64 * MiB), "f", v1_root, freezer_root)
    proc = sleeper()
    (s.cgroup_dir / "cgroup.procs").write_text(f"{proc.pid}\n")
    state = freezer_root / "edgeprof-f" / "freezer.state"
    written = []
    real = fs.write_value
    monkeypatch.setattr(fs, "write_value", lambda p, v: (written.append((p, v)), real(p, v)))
    s.kill_all()
    assert proc.wait(timeout=5) == -signal.SIGKILL
    assert written == [(state, "FROZEN"), (state, "THAWED")]
    (s.cgroup_dir / "cgroup.procs").write_text("")
    s.close()


def test_cgroup1_kill_loop_without_freezer(kernel, v1_root, monkeypatch):
    s = Cgroup1Session(LimitRequest(64 * MiB), "g", v1_root)
    procs = [sleeper(), sleeper()]
    listing = s.cgroup_dir / "cgroup.procs"
    listing.write_text("".join(f"{p.pid}\n" for p in procs))
    real_kill = os.kill

    def kill(pid, sig):  # the kernel drops a killed process from cgroup.procs
        real_kill(pid, sig)
        listing.write_text("".join(f"{p}\n" for p in fs.procs(s.cgroup_dir) if p != pid))

    monkeypatch.setattr(os, "kill", kill)
    s.kill_all()
    assert [p.wait(timeout=5) for p in procs] == [-signal.SIGKILL] * 2
    s.close()
    assert not s.cgroup_dir.exists()


# --- systemd --------------------------------------------------------------------------


def test_systemd_command_prefix():
    s = systemd.SystemdSession(LimitRequest(512 * MiB, 0), "x1")
    assert s.command_prefix() == [
        "systemd-run", "--user", "--scope", "--quiet", "--unit=edgeprof-x1",
        "-p", f"MemoryMax={512 * MiB}", "-p", "MemorySwapMax=0", "--"]
    assert systemd.SystemdSession(LimitRequest(), "x2").command_prefix()[5:9] == [
        "-p", "MemoryMax=infinity", "-p", "MemorySwapMax=infinity"]


@pytest.fixture
def systemctl(monkeypatch):
    calls = []
    replies = {"is-system-running": "running\n", "show": "oom-kill\n"}

    def fake(*args):
        calls.append(args)
        return subprocess.CompletedProcess(args, 0, stdout=replies.get(args[0], ""), stderr="")

    monkeypatch.setattr(systemd, "_systemctl", fake)
    monkeypatch.setattr(systemd.shutil, "which", lambda name: f"/usr/bin/{name}")
    return calls, replies


def test_systemd_status(tmp_path, systemctl, v2_root):
    calls, replies = systemctl
    mi, _ = fake_proc(tmp_path, mountinfo_text(v2=v2_root), "0::/\n")
    ok, why = systemd.user_manager_status({}, mi)
    assert not ok and "XDG_RUNTIME_DIR" in why and calls == []  # nothing spawned
    runtime = tmp_path / "run"
    env = {"XDG_RUNTIME_DIR": str(runtime)}
    assert "socket" in systemd.user_manager_status(env, mi)[1]
    write_tree(runtime / "systemd", {"private": ""})
    assert systemd.user_manager_status(env, mi) == (True, "systemd user manager running")
    replies["is-system-running"] = "offline\n"
    assert "not running" in systemd.user_manager_status(env, mi)[1]
    replies["is-system-running"] = "degraded\n"
    mi.write_text(mountinfo_text(v1_memory=tmp_path / "v1"))  # memory on v1: no MemoryMax
    ok, why = systemd.user_manager_status(env, mi)
    assert not ok and "not on cgroup v2" in why


def test_systemd_attach_reads_scope_and_checks_limit(tmp_path, systemctl):
    calls, _ = systemctl
    mount = tmp_path / "unified"
    scope = "user.slice/user-1000.slice/user@1000.service/app.slice/edgeprof-x3.scope"
    write_tree(mount / scope, v2_files() | {"memory.max": f"{64 * MiB}\n",
                                            "memory.events.local": EVENTS})
    proc = tmp_path / "fakeproc"
    write_tree(proc / "self", {"mountinfo": mountinfo_text(v2=mount)})
    write_tree(proc / "4242", {"cgroup": f"0::/{scope}\n"})
    s = systemd.SystemdSession(LimitRequest(64 * MiB), "x3", proc=proc)
    s.attach_pid(4242)
    assert s.cgroup_dir == mount / scope and s.enforced
    assert s.oom_kills() == 1  # the scope's memory.events.local
    s.kill_all()
    assert ("kill", "--signal=SIGKILL", "edgeprof-x3.scope") in calls
    # systemd removes the scope's cgroup once empty: the verdict comes from Result=
    (mount / scope / "memory.events.local").unlink()
    (mount / scope / "memory.events").unlink()
    s.cgroup_dir = tmp_path / "gone"
    assert s.oom_kills() == 1 and s.hit_limit() is True
    assert ("show", "-P", "Result", "edgeprof-x3.scope") in calls

    (mount / scope / "memory.max").write_text("max\n")  # MemoryMax not delegated
    s = systemd.SystemdSession(LimitRequest(64 * MiB), "x3", proc=proc)
    with pytest.raises(EdgeprofError, match="not delegated"):
        s.attach_pid(4242)
    s = systemd.SystemdSession(LimitRequest(64 * MiB), "x3", allow_unenforced=True, proc=proc)
    s.attach_pid(4242)
    assert s.enforced is False and "unenforced_reason" in s.metadata()


# --- inherit --------------------------------------------------------------------------


def test_no_writes_spy_catches_writes(tmp_path, no_writes):
    with no_writes():
        with pytest.raises(AssertionError):
            fs.write_value(tmp_path / "x", 1)
        with pytest.raises(AssertionError):
            (tmp_path / "y").write_text("1")
        with pytest.raises(AssertionError):
            os.mkdir(tmp_path / "z")


def v2_job(tmp_path: Path, limit: str = f"{2**31}\n") -> tuple[Path, Path, Path]:
    """A scheduler's job cgroup (limit set on the job, the process in a step below it)."""
    mount = write_tree(tmp_path / "cg", {"cgroup.controllers": "cpu memory pids\n",
                                         "cgroup.subtree_control": "memory\n",
                                         "cgroup.procs": "", "memory.stat": v2_stat()})
    write_tree(mount / "job", v2_files() | {"memory.max": limit})
    step = write_tree(mount / "job" / "step", v2_files())
    mi, cg = fake_proc(tmp_path, mountinfo_text(v2=mount), "0::/job/step\n")
    return step, mi, cg


def v1_host(tmp_path: Path, own: dict[str, str] | None = None) -> tuple[Path, Path, Path]:
    """This machine's hybrid layout: memory on v1, own cgroup /process_api/abc."""
    mem = write_tree(tmp_path / "memory", v1_memory_files())
    job = write_tree(mem / "process_api" / "abc", v1_memory_files() | (own or {}))
    mi, cg = fake_proc(tmp_path, mountinfo_text(v2=tmp_path / "unified", v1_memory=mem),
                       "9:name=systemd:/\n4:memory:/process_api/abc\n1:cpu:/\n0::/\n")
    return job, mi, cg


def test_inherit_v2_limit_from_ancestor_without_writing(tmp_path, no_writes):
    step, mi, cg = v2_job(tmp_path)
    with no_writes():
        s = InheritSession(LimitRequest(2**32), mi, cg)
        assert (s.cgroup_dir, s.cgroup_version) == (step, 2)
        assert s.enforced and s.limit_bytes == 2**31
        meta = s.metadata()
        assert meta["limit_set_in"] == str(step.parent)
        assert meta["limit_mismatch"] == f"requested {2**32} bytes, the inherited limit is " \
                                         f"{2**31} bytes"
        # a looser inherited limit does not enforce the requested one
        loose = InheritSession(LimitRequest(2**30), mi, cg)
        assert not loose.enforced and "above the requested" in \
            loose.metadata()["unenforced_reason"]
        assert s.oom_kills() == 0 and s.hit_limit() is False
        s.kill_all()
        s.close()
    # counters are taken as deltas from the session's start: OOM kills in the run's own
    # cgroup, limit hits where the limit is set
    (step / "memory.events").write_text(EVENTS.replace("oom_kill 1", "oom_kill 3"))
    with no_writes():
        assert s.oom_kills() == 3 and s.hit_limit() is False
    (step.parent / "memory.events").write_text(EVENTS)
    with no_writes():
        assert s.hit_limit() is True


def test_inherit_v1(tmp_path, no_writes):
    job, mi, cg = v1_host(tmp_path, {"memory.stat": v1_stat(limit=512 * MiB)})
    with no_writes():
        s = InheritSession(LimitRequest(None), mi, cg)
    assert (s.cgroup_dir, s.cgroup_version, s.limit_bytes) == (job, 1, 512 * MiB)
    assert "limit_mismatch" not in s.metadata()  # nothing was requested
    (job / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    (job / "memory.failcnt").write_text("7\n")
    with no_writes():
        assert s.oom_kills() == 2 and s.hit_limit() is True
    # without hierarchical_memory_limit, the limits up the tree are walked
    (job / "memory.stat").write_text(v1_stat().replace("hierarchical_", "x_"))
    (job.parent / "memory.limit_in_bytes").write_text(f"{3 * 2**30}\n")
    with no_writes():
        assert InheritSession(LimitRequest(None), mi, cg).limit_bytes == 3 * 2**30


def test_inherit_unlimited_is_unenforced(tmp_path, no_writes):
    job, mi, cg = v1_host(tmp_path)
    with no_writes():
        s = InheritSession(LimitRequest(512 * MiB), mi, cg)
    assert s.enforced is False and s.limit_bytes is None
    assert str(job) in s.metadata()["unenforced_reason"]
    # no limit: its counters are not the run's (the defect: a node-wide cgroup's 1.2 GiB
    # reported as the run's page cache), so there are none, with the reason
    assert s.cgroup_dir is None and s.cgroup_version is None
    assert s.metadata()["cgroup_counters_not_measured"].startswith(
        "the requested limit is not enforced: no finite memory limit")
    assert s.oom_kills() is None and s.hit_limit() is False


def test_inherit_counters_only_from_a_cgroup_holding_the_run_alone(tmp_path, no_writes):
    """A scheduler's limit on a cgroup that also holds other processes (Snakemake, a whole
    node): enforced, but its counters are not the run's, so they are not read."""
    me = 4242
    step, mi, cg = v2_job(tmp_path)
    (step / "cgroup.procs").write_text(f"{me}\n{os.getpid()}\n")
    with no_writes():
        s = InheritSession(LimitRequest(2**31), mi, cg, pid=me)
    meta = s.metadata()
    assert s.enforced and s.cgroup_dir is None and meta["cgroup_dir"] is None
    assert meta["cgroup_counters_not_measured"].startswith(
        f"{step} holds 1 other process(es) besides this run ({os.getpid()} (")
    assert "srun --mem=<limit>" in meta["cgroup_counters_not_measured"]
    # a process in a child cgroup counts too (its memory is charged to ours)
    (step / "cgroup.procs").write_text(f"{me}\n")
    write_tree(step / "child", v2_files() | {"cgroup.procs": "77\n"})
    with no_writes():
        assert InheritSession(LimitRequest(2**31), mi, cg, pid=me).cgroup_dir is None
    (step / "child" / "cgroup.procs").write_text("")
    with no_writes():
        s = InheritSession(LimitRequest(2**31), mi, cg, pid=me)
    assert s.cgroup_dir == step and s.metadata()["cgroup_counters"] == f"measured in {step}"
    # an OOM kill is still told by the limit it hit when the counters are not the run's
    (step / "cgroup.procs").write_text(f"{me}\n99\n")
    with no_writes():
        s = InheritSession(LimitRequest(2**31), mi, cg, pid=me)
    (step.parent / "memory.events").write_text(EVENTS)
    with no_writes():
        assert s.oom_kills() is None and s.hit_limit() is True


def test_inherit_notes_processes_sharing_the_limit(tmp_path, no_writes):
    """SLURM's own step processes beside the run's task cgroup share the step's limit."""
    me = 4242
    step, mi, cg = v2_job(tmp_path)
    (step / "cgroup.procs").write_text(f"{me}\n")
    write_tree(step.parent / "slurm", v2_files() | {"cgroup.procs": "31\n"})
    with no_writes():
        s = InheritSession(LimitRequest(2**31), mi, cg, pid=me)
    assert s.cgroup_dir == step  # the run's own cgroup holds it alone
    assert s.metadata()["limit_shared_with"].startswith(
        f"1 other process(es) in {step.parent}, outside this run's cgroup: 31 (")


def test_inherit_root_cgroup_and_no_cgroup_are_not_measured(tmp_path, no_writes):
    mount = write_tree(tmp_path / "cg", {"cgroup.controllers": "memory\n", "cgroup.procs": "",
                                         "memory.stat": v2_stat()})
    mi, cg = fake_proc(tmp_path, mountinfo_text(v2=mount), "0::/\n")
    with no_writes():
        s = InheritSession(LimitRequest(None), mi, cg, pid=1)
    assert s.cgroup_dir is None and "root cgroup" in \
        s.metadata()["cgroup_counters_not_measured"]
    # no memory cgroup visible at all (a container without /sys/fs/cgroup): recorded
    mi, cg = fake_proc(tmp_path, mountinfo_text(), "0::/\n")
    with no_writes():
        s = select.open_backend("inherit", LimitRequest(64 * MiB), "n1", env={},
                                mountinfo=mi, proc_cgroup=cg)
    meta = s.metadata()
    assert (s.backend, s.enforced, s.cgroup_dir) == ("inherit", False, None)
    assert "memory cgroup is not visible" in meta["unenforced_reason"]
    assert meta["cgroup_counters_not_measured"] == meta["unenforced_reason"]


def test_inherit_oom_kill_ends_as_memory_when_counters_are_not_the_runs(tmp_path, no_writes):
    """The measured child SIGKILLed with the inherited limit hit: termination memory."""
    from engine.runner.supervise import _termination

    step, mi, cg = v2_job(tmp_path)
    (step / "cgroup.procs").write_text("99\n")  # shared: no counters
    with no_writes():
        s = InheritSession(LimitRequest(2**31), mi, cg, pid=4242)
    (step.parent / "memory.events").write_text(EVENTS)
    out = tmp_path / "run"
    out.mkdir()
    assert _termination(-signal.SIGKILL, False, s.oom_kills(), s, out)[0] == "memory"


def test_inherit_child_is_the_oom_killers_first_choice(tmp_path):
    step, mi, cg = v2_job(tmp_path)
    s = InheritSession(LimitRequest(2**31), mi, cg)
    child = subprocess.Popen(["sleep", "30"], preexec_fn=s.preexec())
    try:
        assert Path(f"/proc/{child.pid}/oom_score_adj").read_text().strip() == "1000"
    finally:
        child.kill()
        child.wait()


def test_run_session_under_inherit_records_an_unenforced_limit(monkeypatch):
    """`engine run --backend inherit --limit 64M` where no limit is inherited (this machine,
    SLURM without cgroups): recorded, never fatal; the counters are left alone."""
    from engine.runner import supervise

    opened = []

    def fake_open(request, run_id, allow_unenforced=False):
        opened.append(allow_unenforced)
        return select.open_backend(request.backend, request, run_id, allow_unenforced)

    monkeypatch.setattr(supervise, "open_session", fake_open)
    request = argparse.Namespace(limits=LimitRequest(64 * MiB, None, "inherit"))
    s = supervise.open_run_session(request, "r1")
    assert opened == [True] and s.backend == "inherit"
    if not s.enforced:  # a host that sets no limit (like this project's machines)
        assert s.cgroup_dir is None and s.metadata()["unenforced_reason"]


# --- select ---------------------------------------------------------------------------


@pytest.fixture
def no_systemd(monkeypatch):
    monkeypatch.setattr(select, "user_manager_status", lambda env, mi: (False, "no manager"))


def test_auto_uses_designated_v2_root(kernel, v2_root, tmp_path, no_systemd):
    mi, cg = fake_proc(tmp_path, mountinfo_text(), "0::/\n")
    s = select.open_backend("auto", LimitRequest(64 * MiB), "a1",
                            env={fs.ROOT_ENV: str(v2_root)}, mountinfo=mi, proc_cgroup=cg)
    assert isinstance(s, Cgroup2Session) and s.cgroup_dir == v2_root / "edgeprof-a1"
    assert s.metadata()["auto"] == {"chosen": "cgroup2", "skipped": []}
    s.close()


def test_auto_uses_designated_v1_root_and_freezer(kernel, v1_root, freezer_root, tmp_path,
                                                  no_systemd):
    mi, cg = fake_proc(tmp_path, mountinfo_text(), "0::/\n")
    env = {fs.ROOT_ENV: str(v1_root), fs.FREEZER_ENV: str(freezer_root)}
    s = select.open_backend("auto", LimitRequest(64 * MiB), "a2", env=env, mountinfo=mi,
                            proc_cgroup=cg)
    assert isinstance(s, Cgroup1Session) and s.freezer_dir == freezer_root / "edgeprof-a2"
    s.close()


def test_auto_rejects_a_broken_designated_root(tmp_path, no_systemd, monkeypatch, v2_root):
    mi, cg = fake_proc(tmp_path, mountinfo_text(), "0::/\n")

    def auto(root):
        return select.open_backend("auto", LimitRequest(), "a3", env={fs.ROOT_ENV: str(root)},
                                   mountinfo=mi, proc_cgroup=cg)

    with pytest.raises(EdgeprofError, match="does not exist"):
        auto(tmp_path / "missing")
    with pytest.raises(EdgeprofError, match="not a cgroup directory"):
        auto(tmp_path / "proc")
    monkeypatch.setattr(os, "access", lambda *a, **k: False)
    with pytest.raises(EdgeprofError, match=f"not writable by uid {os.getuid()}"):
        auto(v2_root)


def test_auto_prefers_systemd_to_inherit(tmp_path, monkeypatch, no_writes):
    _, mi, cg = v2_job(tmp_path)
    monkeypatch.setattr(select, "user_manager_status", lambda env, mi: (True, "running"))
    with no_writes():
        s = select.open_backend("auto", LimitRequest(64 * MiB), "a4", env={}, mountinfo=mi,
                                proc_cgroup=cg)
    assert isinstance(s, systemd.SystemdSession)
    assert s.metadata()["auto"]["skipped"][0].startswith("cgroup: EDGEPROF_CGROUP_ROOT")


def test_auto_inherits_a_finite_limit(tmp_path, no_systemd, no_writes):
    step, mi, cg = v2_job(tmp_path)
    with no_writes():
        s = select.open_backend("auto", LimitRequest(2**31), "a5", env={}, mountinfo=mi,
                                proc_cgroup=cg)
    assert isinstance(s, InheritSession) and s.enforced and s.cgroup_dir == step
    assert s.metadata()["auto"]["skipped"][1] == "systemd: no manager"


def test_auto_falls_back_to_the_vm_when_qemu_is_installed(tmp_path, no_systemd, no_writes,
                                                          monkeypatch):
    _, mi, cg = v1_host(tmp_path)
    monkeypatch.setattr(select, "uml_status", lambda: (False, "not built"))
    monkeypatch.setattr(select, "qemu_installed", lambda: True)
    with no_writes():
        s = select.open_backend("auto", LimitRequest(512 * MiB), "a9", env={}, mountinfo=mi,
                                proc_cgroup=cg)
        assert s.backend == "vm" and s.runs_elsewhere and s.enforced
        assert s.metadata()["auto"]["chosen"] == "vm"
        # cgroup, systemd, inherit and uml passed over
        assert len(s.metadata()["auto"]["skipped"]) == 4
        # without a limit there is nothing for a guest to enforce
        s = select.open_backend("auto", LimitRequest(None), "a10", env={}, mountinfo=mi,
                                proc_cgroup=cg)
        assert isinstance(s, NoneSession)


def test_uml_status_reads_only_this_recipes_build_record(tmp_path, monkeypatch):
    """Checkouts at other recipes share the UML cache: their builds are neither used nor
    taken for this one's, and a record whose kernel is gone is not a working sandbox."""
    from engine.limits import umlhost as uml
    from engine.limits.sandbox import uml_status

    monkeypatch.setenv(uml.CACHE_ENV, str(tmp_path))
    assert uml_status() == (False, "user-mode Linux is not built (python -m engine.sandbox build)")
    other = tmp_path / "0123456789abcdef"
    other.mkdir()
    record = {"suite": "sid", "kernel_version": "7.2.7", "package": "x.deb"}
    (other / "uml.json").write_text(json.dumps(record))
    assert "from another recipe" in uml_status()[1]
    home = uml.build_dir()
    assert home.parent == tmp_path and home != other
    home.mkdir()
    (home / "uml.json").write_text(json.dumps(record))
    ok, why = uml_status()
    assert not ok and "sid/linux is missing" in why
    (home / "sid").mkdir()
    (home / "sid" / "linux").write_bytes(b"")
    ok, why = uml_status()  # every guest process runs with it (docs/sandboxes.md)
    assert not ok and "preload" in why and "sid/ascend.so is missing" in why
    (home / "sid" / "ascend.so").write_bytes(b"")
    assert uml_status() == (True, "Linux 7.2.7 (sid)")
    (home / "uml.json").write_text(json.dumps({"suite": None, "why": "sid: probe failed"}))
    assert uml_status() == (False, "sid: probe failed")


def test_auto_falls_back_to_unenforced_none(tmp_path, no_systemd, no_writes, monkeypatch):
    _, mi, cg = v1_host(tmp_path)
    monkeypatch.setattr(select, "uml_status", lambda: (False, "not built"))
    monkeypatch.setattr(select, "qemu_installed", lambda: False)
    with no_writes():
        s = select.open_backend("auto", LimitRequest(512 * MiB), "a6", allow_unenforced=True,
                                env={}, mountinfo=mi, proc_cgroup=cg)
        assert isinstance(s, NoneSession) and s.enforced is False
        meta = s.metadata()
        assert "set EDGEPROF_CGROUP_ROOT or use the vm backend" in meta["unenforced_reason"]
        # cgroup, systemd, inherit, uml (not built) and the vm (qemu missing) were each
        # passed over
        assert meta["auto"]["chosen"] == "none" and len(meta["auto"]["skipped"]) == 5
        assert meta["auto"]["skipped"][3] == "uml: not built"
        assert meta["auto"]["skipped"][4].startswith("vm: qemu-system-x86_64 is not installed")
        with pytest.raises(EdgeprofError, match="cannot be enforced.*EDGEPROF_CGROUP_ROOT"):
            select.open_backend("auto", LimitRequest(512 * MiB), "a7", env={}, mountinfo=mi,
                                proc_cgroup=cg)
        # without a requested limit there is nothing to enforce
        s = select.open_backend("auto", LimitRequest(None), "a8", env={}, mountinfo=mi,
                                proc_cgroup=cg)
        assert isinstance(s, NoneSession)


def test_backend_none_says_why_a_limit_asked_of_it_is_not_enforced():
    """Twenty-fourth held-out pass L5: --backend none with a limit was tabled "not
    enforced (no reason recorded)"."""
    s = limits.open_session(LimitRequest(256 * MiB, backend="none"), "n1",
                            allow_unenforced=True)
    assert isinstance(s, NoneSession) and not s.enforced
    assert s.metadata()["unenforced_reason"] == ("--backend none sets no limit: the run is "
                                                 "measured unconstrained")
    free = limits.open_session(LimitRequest(None, backend="none"), "n2")
    assert "unenforced_reason" not in free.metadata()


def test_cgroup2_explicit_uses_parent_of_own_cgroup(kernel, tmp_path):
    mount = write_tree(tmp_path / "cg", v2_files("cpu memory"))
    write_tree(mount / "svc", v2_files("memory"))
    write_tree(mount / "svc" / "me", v2_files("memory"))
    mi, cg = fake_proc(tmp_path, mountinfo_text(v2=mount), "0::/svc/me\n")
    s = select.open_backend("cgroup2", LimitRequest(64 * MiB), "b1", env={}, mountinfo=mi,
                            proc_cgroup=cg)
    assert s.cgroup_dir == mount / "svc" / "edgeprof-b1"  # a sibling: no internal processes
    s.close()


def test_cgroup2_explicit_errors(tmp_path, monkeypatch):
    mount = write_tree(tmp_path / "cg", v2_files("memory"))
    write_tree(mount / "svc" / "me", v2_files("memory"))
    mi, cg = fake_proc(tmp_path, mountinfo_text(v2=mount), "0::/svc/me\n")
    monkeypatch.setattr(os, "access", lambda *a, **k: False)
    with pytest.raises(EdgeprofError) as err:
        select.open_backend("cgroup2", LimitRequest(64 * MiB), "b2", env={}, mountinfo=mi,
                            proc_cgroup=cg)
    assert str(err.value) == (
        f"cgroup2: {mount / 'svc'} is not writable by uid {os.getuid()}; delegate a subtree "
        f"and set EDGEPROF_CGROUP_ROOT=<that directory>, or use --backend systemd/vm/none")
    _, mi, cg = v1_host(tmp_path)
    with pytest.raises(EdgeprofError, match="memory controller is on cgroup v1 here"):
        select.open_backend("cgroup2", LimitRequest(64 * MiB), "b3", env={}, mountinfo=mi,
                            proc_cgroup=cg)


def test_cgroup1_explicit_nests_under_own_cgroup(kernel, tmp_path):
    job, mi, cg = v1_host(tmp_path)
    s = select.open_backend("cgroup1", LimitRequest(64 * MiB), "b4", env={}, mountinfo=mi,
                            proc_cgroup=cg)
    assert s.cgroup_dir == job / "edgeprof-b4"
    s.close()


def test_systemd_and_inherit_explicit_errors(tmp_path, no_systemd, no_writes):
    _, mi, cg = v1_host(tmp_path)
    with no_writes():
        with pytest.raises(EdgeprofError, match="systemd: no manager; use --backend cgroup2"):
            select.open_backend("systemd", LimitRequest(64 * MiB), "b5", env={}, mountinfo=mi,
                                proc_cgroup=cg)
        # inherit applies nothing, it only finds a limit: none found is recorded, never an
        # error, even when unenforced limits are not otherwise allowed
        s = select.open_backend("inherit", LimitRequest(64 * MiB), "b6", env={},
                                mountinfo=mi, proc_cgroup=cg)
        assert s.enforced is False and "no finite memory limit" in \
            s.metadata()["unenforced_reason"]
        s = select.open_backend("inherit", LimitRequest(None), "b7", env={}, mountinfo=mi,
                                proc_cgroup=cg)
        assert s.enforced is False and s.limit_bytes is None


def test_every_cli_backend_name_opens(monkeypatch):
    from engine.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    names = next(a for a in sub.choices["run"]._actions if "--backend" in a.option_strings)
    assert set(names.choices) == set(limits.BACKENDS)
    seen = []
    monkeypatch.setattr(select, "open_backend",
                        lambda b, r, i, a: seen.append(b) or NoneSession(r))
    for name in set(names.choices) - {"vm", "uml"}:
        assert limits.open_session(LimitRequest(backend=name), "c1").backend == "none"
    assert sorted(seen) == sorted(n for n in names.choices if n not in ("none", "vm", "uml"))
    # the sandboxes run the whole run in their kernel: their sessions only say so
    monkeypatch.setattr(sandbox_limits, "uml_status", lambda: (True, "Linux 7.2.7 (sid)"))
    for name in ("vm", "uml"):
        vm = limits.open_session(LimitRequest(64 * MiB, backend=name), "c3")
        assert vm.backend == name and vm.runs_elsewhere and vm.enforced
        assert vm.cgroup_dir is None and vm.oom_kills() is None
    monkeypatch.setattr(sandbox_limits, "uml_status", lambda: (False, "not built"))
    with pytest.raises(EdgeprofError, match="uml: not built; build it with"):
        limits.open_session(LimitRequest(64 * MiB, backend="uml"), "c5")
    assert not limits.open_session(LimitRequest(backend="none"), "c4").runs_elsewhere
    with pytest.raises(EdgeprofError, match="unknown limit backend 'vmx'"):
        limits.open_session(LimitRequest(backend="vmx"), "c2")


def test_a_boot_timeout_under_a_second_is_said_as_given(tmp_path):
    """A machine that never starts its job (a stand-in UML kernel that only sleeps) is
    killed after a boot timeout of 0.25 s, and the error says 0.25 s, not 0 s."""
    from engine.sandbox import boot, uml

    kernel = tmp_path / "linux"
    kernel.write_text("#!/bin/sh\nexec sleep 60\n")
    kernel.chmod(0o755)
    share = tmp_path / "share"
    share.mkdir()
    res = boot.boot(uml.Uml(kernel, "0", "none", "none"), share, accel="uml",
                    boot_timeout_s=0.25, timeout_s=10)
    assert res.timed_out == "boot" and res.rc is None
    assert res.error == "the guest did not start the job within 0.25 s", res.error


def test_the_host_allocates_a_uml_kernels_deleted_ram_file(tmp_path, monkeypatch):
    """uml.allocate_ram_file: UML creates its RAM file under RAM_DIR and unlinks it; the
    host finds it through /proc/PID/fd and allocates every block of it (the kernel's
    st_blocks says so), and says it did."""
    from engine.sandbox import uml

    monkeypatch.setattr(uml, "RAM_DIR", str(tmp_path))
    size = 8 << 20
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import os, sys, time\n"
         f"f = open({str(tmp_path / 'vm_file-x')!r}, 'wb+'); f.truncate({size})\n"
         f"os.unlink({str(tmp_path / 'vm_file-x')!r}); print(f.fileno(), flush=True)\n"
         "time.sleep(60)\n"], stdout=subprocess.PIPE, text=True)
    try:
        fd = int(holder.stdout.readline())
        path = Path(f"/proc/{holder.pid}/fd/{fd}")
        assert os.stat(path).st_blocks * 512 < size  # sparse until allocated
        line = uml.allocate_ram_file(holder.pid)
        assert os.stat(path).st_blocks * 512 >= size, line
        assert line.startswith("host: the guest's RAM file (8 MiB) allocated in"), line
    finally:
        holder.kill()
        holder.wait()


def test_a_uml_kernel_without_a_ram_file_is_said_so(tmp_path, monkeypatch):
    from engine.sandbox import uml

    monkeypatch.setattr(uml, "RAM_DIR", str(tmp_path))
    holder = subprocess.Popen(["sleep", "60"])
    try:
        assert uml.allocate_ram_file(holder.pid, wait_s=0.05) == (
            "host: the guest's RAM file not found in 0.05 s")
    finally:
        holder.kill()
        holder.wait()


def test_a_uml_kernel_gone_before_its_ram_file_is_said_so(tmp_path, monkeypatch):
    from engine.sandbox import uml

    monkeypatch.setattr(uml, "RAM_DIR", str(tmp_path))
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert uml.allocate_ram_file(gone.pid, wait_s=1) == (
        "host: the UML process ended before its RAM file was found")

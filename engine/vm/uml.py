"""User-mode Linux: a real Linux kernel run as an ordinary host process, the cheaper
sandbox beside the qemu guest.

No KVM, no privileges, no host cgroup touched: the UML kernel has its own cgroup v2 and
its own swap (a sparse file on the host as its ``ubd`` block device), and runs the
host's root filesystem read-only over ``hostfs``, so the host's Python and project run
unchanged in it. Its processes run natively on the host CPU (compute near native);
page faults and system calls go through the UML kernel (slow: docs/sandboxes.md).

Which kernel works depends on the host. On CPUs with AMX (``amx_tile`` in
/proc/cpuinfo) Debian's UML 6.1 and 6.12 panic at init ("ptrace set fp regs failed");
sid's 7.2 runs. So ``build`` fetches each candidate (``CANDIDATES``: Debian's
``user-mode-linux`` with that suite's ``libc6``, both with a private apt configuration,
nothing installed), points the binary at that libc with ``patchelf``, and keeps the
first that boots and passes a cgroup-v2 memory check here. The cache
(``~/.cache/edgeprof/uml`` or ``$EDGEPROF_UML_CACHE``) holds one folder per recipe
(``RECIPE``), which records in ``uml.json`` the kernel it chose: checkouts of the project
at different recipes share the cache without rebuilding each other's kernel from under
their runs. Every run records the sandbox and its kernel.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from engine.errors import EdgeprofError
from engine.files import atomic_path
from engine.vm.guest import Log, _run, apt_state, download_deb

CACHE_ENV = "EDGEPROF_UML_CACHE"
# newest first: sid's UML (7.2 when chosen) runs where trixie's 6.12 panics (hosts with
# AMX) or dies under a pipeline's memory (the probe's touch); every run records its
# kernel. 6.1 (bookworm) lacks memory.swap.peak and per-fd peak resets.
CANDIDATES = ("sid", "trixie")
PACKAGE = "user-mode-linux"
INIT_SCRIPT = Path(__file__).with_name("uml_init.sh")
PROBE_TIMEOUT_S = 180  # a kernel that fails the touch takes a minute to (UML 6.12 here)
INSTALL_HINT = "sudo apt-get install -y patchelf busybox-static"
# UML keeps the guest's RAM in a file it maps; tmpfs keeps it in memory, not on disk
RAM_DIR = "/dev/shm"
# UML >= 6.14 can trap its processes' system calls and faults with seccomp instead of
# ptrace: measured here (UML 7.2), first touches of fresh memory and page faults 2-15x
# faster and steadier. An older kernel says so on its console and falls back to ptrace.
SECCOMP_OFF = "SECCOMP userspace requested but not functional"
USERSPACE_ENV = "EDGEPROF_UML_USERSPACE"  # "ptrace": UML's older, slower mode


@dataclass(frozen=True)
class Uml:
    """A built UML kernel in the cache: what ``boot`` starts."""

    binary: Path
    kernel_version: str  # uname -r in the guest
    package: str  # the .deb it came from
    suite: str


def default_cache() -> Path:
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "edgeprof" / "uml"


# What the built kernel depends on (its candidates, and how each is fetched and patched);
# bump it when that changes. Not this file's source: every checkout of the project shares
# the cache, and an edit elsewhere in it must not make the others' build stale.
RECIPE = ("2: user-mode-linux + that suite's libc6, patchelf'd; probe: cgroup v2 memory.max, "
          "a fragmented 2 GiB touch")


def recipe_hash() -> str:
    h = hashlib.sha256(RECIPE.encode())
    h.update(" ".join(CANDIDATES).encode())
    return h.hexdigest()[:16]


def build_dir(cache: Path | None = None) -> Path:
    """This recipe's folder in the cache: its uml.json and each candidate's kernel."""
    return Path(cache or default_cache()) / recipe_hash()


def _info(cache: Path | None) -> dict | None:
    try:
        return json.loads((build_dir(cache) / "uml.json").read_text())
    except (OSError, ValueError):
        return None


def load_uml(cache: Path | None = None) -> Uml | None:
    """The cached UML kernel, or None when this recipe's is not built or no candidate
    worked on this host (``why_none`` says why)."""
    info = _info(cache)
    if not info or not info.get("suite"):
        return None
    uml = Uml(build_dir(cache) / info["suite"] / "linux", info["kernel_version"],
              info["package"], info["suite"])
    return uml if uml.binary.is_file() else None


def why_none(cache: Path | None = None) -> str | None:
    """Why no UML kernel works here (from the last build), or None when one does."""
    cache = Path(cache or default_cache())
    info = _info(cache)
    if info is None:
        other = (cache / "uml.json").exists() or any(cache.glob("*/uml.json"))
        return ("the user-mode Linux build is from another recipe (python -m engine.vm "
                "build)" if other else "user-mode Linux is not built (python -m engine.vm "
                "build)")
    if not info.get("suite"):
        return info.get("why", "no candidate kernel worked")
    if load_uml(cache) is None:
        return (f"the built kernel {build_dir(cache) / info['suite'] / 'linux'} is missing "
                f"(python -m engine.vm build --force)")
    return None


def ensure_uml(cache: Path | None = None, log: Log = print, force: bool = False) -> Uml:
    """The cached UML kernel, built (every candidate tried) if missing, stale or
    ``force``. Raises, naming each candidate's failure, when none works on this host (a
    build that found none is not repeated until the recipe changes or ``force``)."""
    cache = Path(cache or default_cache())
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:  # every recipe's builds share the debs
        fcntl.flock(lock, fcntl.LOCK_EX)
        uml = None if force else load_uml(cache)
        if uml is None and (force or not _found_none(cache)):
            uml = build(cache, log)
        if uml is None:
            raise EdgeprofError(f"no user-mode Linux kernel works on this host: "
                                f"{why_none(cache)}")
        return uml


def _found_none(cache: Path) -> bool:
    """Whether this recipe's last build tried every candidate and none worked."""
    info = _info(cache)
    return info is not None and not info.get("suite")


def build(cache: Path, log: Log = print) -> Uml | None:
    """Fetch, patch and probe each candidate into this recipe's folder; keep the first
    that works."""
    if shutil.which("patchelf") is None:
        raise EdgeprofError(f"patchelf is not installed; {INSTALL_HINT}")
    failures = []
    for suite in CANDIDATES:
        try:
            uml = _prepare(cache, suite, log)
            version = probe(uml.binary, log)
        except EdgeprofError as exc:
            failures.append(f"{suite}: {exc}")
            log(f"uml: {suite}'s {PACKAGE} does not work here: {exc}")
            shutil.rmtree(build_dir(cache) / suite, ignore_errors=True)
            continue
        uml = Uml(uml.binary, version, uml.package, suite)
        _write_info(cache, {"suite": suite, "kernel_version": version,
                            "package": uml.package, "tried": failures})
        log(f"uml: Linux {version} from {suite} ({uml.package}) -> {uml.binary}")
        return uml
    _write_info(cache, {"suite": None, "why": "; ".join(failures)})
    return None


def _write_info(cache: Path, info: dict) -> None:
    build_dir(cache).mkdir(parents=True, exist_ok=True)
    with atomic_path(build_dir(cache) / "uml.json") as tmp:
        tmp.write_text(json.dumps({"recipe": recipe_hash(), **info}, indent=1))


def _prepare(cache: Path, suite: str, log: Log) -> Uml:
    """The suite's UML binary, unpacked with that suite's libc and patched to use it, in
    this recipe's folder (a rebuild swaps the folder in whole: a kernel running from the
    old one keeps its files)."""
    debs = cache / "debs" / suite
    debs.mkdir(parents=True, exist_ok=True)
    have = {p: sorted(debs.glob(f"{p}_*.deb")) for p in (PACKAGE, "libc6")}
    apt = None if all(have.values()) else apt_state(debs, suite, log)
    deb = {p: have[p][-1] if have[p] else download_deb(debs, apt, p, suite, log)
           for p in have}
    home = build_dir(cache)
    home.mkdir(parents=True, exist_ok=True)
    out = home / suite
    with tempfile.TemporaryDirectory(prefix=".unpack.", dir=home) as tmp:
        root = Path(tmp)
        for d in deb.values():
            _run(["dpkg-deb", "-x", str(d), str(root)], f"unpack {d.name}")
        found = sorted(root.glob("usr/bin/linux.uml")) or sorted(root.glob("usr/bin/linux"))
        if not found:
            raise EdgeprofError(f"{deb[PACKAGE].name} has no usr/bin/linux.uml")
        staged = root / "out"
        staged.mkdir()
        shutil.copytree(root / "usr/lib/x86_64-linux-gnu", staged / "lib", symlinks=True,
                        ignore=shutil.ignore_patterns("gconv", "audit"))
        shutil.copy2(found[0], staged / "linux")
        if out.exists():
            os.replace(out, root / "old")  # removed with the temporary folder
        os.replace(staged, out)
    lib = out / "lib"
    # the loader's path is absolute (PT_INTERP has no $ORIGIN): patched in its final place
    _run(["patchelf", "--set-interpreter", str(lib / "ld-linux-x86-64.so.2"),
          "--set-rpath", str(lib), str(out / "linux")], "point UML at its libc (patchelf)")
    return Uml(out / "linux", "", deb[PACKAGE].name, suite)


def boot_argv(binary: Path, share: Path, ram_mb: int, swap_image: Path | None,
              cmd: str = "job.sh") -> list[str]:
    """The UML command line: the host's / read-only over hostfs, our init, the share,
    swap on ubd0, the console on stdout."""
    seccomp = [] if os.environ.get(USERSPACE_ENV) == "ptrace" else ["seccomp=on"]
    argv = [str(binary), f"mem={ram_mb}M", *seccomp, "root=/dev/root",
            "rootfstype=hostfs", "rootflags=/", "ro", f"init={INIT_SCRIPT}", "con=null",
            "con0=null,fd:1",
            f"vm.share={share.resolve()}", f"vm.cmd={cmd}",
            f"vm.swap={'disk' if swap_image else 'none'}"]
    if swap_image is not None:
        argv.append(f"ubd0={swap_image}")
    return argv


def userspace_mode(console: str) -> str:
    """How the UML kernel ran its processes, from its console: seccomp or ptrace."""
    return "ptrace" if SECCOMP_OFF in console else "seccomp"


MAP_COUNT_FILE = "/proc/sys/vm/max_map_count"
# A guest process's memory is mapped into its host process page by page once the guest's
# physical memory is fragmented, and the host caps a process at vm.max_map_count mappings:
# past it UML 6.12 dies of SIGSEGV ("UML ran out of memory on the host side") and 7.2
# spins for good (seen on an AMD EPYC host at the default 65530: a guest process stuck at
# 65532 mappings, 580 MiB, docs/sandboxes.md). 1,048,576 mappings cover 4 GiB.
MAP_COUNT_ENOUGH = 1 << 20


def max_map_count(path: str = MAP_COUNT_FILE) -> int | None:
    """The host's vm.max_map_count (None: unreadable)."""
    try:
        return int(Path(path).read_text())
    except (OSError, ValueError):
        return None


def map_count_note(count: int | None) -> str | None:
    """Why a guest process may not get past about count x 4 KiB here; None if it can."""
    if count is None or count >= MAP_COUNT_ENOUGH:
        return None
    return (f"the host's vm.max_map_count is {count}: a guest process whose memory is "
            f"fragmented stops at about {count * 4 // 1024} MiB (UML 7.2 stalls, 6.12 dies); "
            f"on a machine you own, sysctl -w vm.max_map_count={MAP_COUNT_ENOUGH}")


def environ() -> dict[str, str]:
    """The UML process's environment: its RAM file on tmpfs."""
    return {**os.environ, "TMPDIR": RAM_DIR}


PROBE_JOB = """\
cd /sys/fs/cgroup/edgeprof || exit 3
echo +memory > cgroup.subtree_control && mkdir probe && echo 16M > probe/memory.max || exit 4
{python} -c '{touch}' || exit 5
uname -r > /run/vmout/kernel
exit 0
"""
# A process touching memory freed and reused in pieces, as a pipeline's runs do: UML 6.12
# maps each such guest page on its own in the host process and, past the host's
# vm.max_map_count (65530), dies of SIGSEGV ("UML ran out of memory on the host side"),
# found on an AMD EPYC host where its cgroup probe passed (docs/sandboxes.md). 2 GiB in
# 4 MiB pieces, every other one freed before more come, as that host's failure needed
# (700 MiB passed); about a minute of the build.
PROBE_TOUCH = ("a = [b\"x\" * (4 << 20) for _ in range(400)]; del a[::2]; "
               "b = [b\"y\" * (4 << 20) for _ in range(300)]")
PROBE_RAM_MB = 3072


def probe(binary: Path, log: Log = print) -> str:
    """Boot ``binary`` once with a job that creates a cgroup with memory.max and touches
    fragmented memory (PROBE_TOUCH); returns the guest's kernel release, or raises with
    the console's last lines."""
    with tempfile.TemporaryDirectory(prefix="edgeprof-umlprobe.") as tmp:
        share = Path(tmp)
        (share / "job.sh").write_text(PROBE_JOB.format(python=sys.executable,
                                                      touch=PROBE_TOUCH))
        argv = boot_argv(binary, share, PROBE_RAM_MB, None)
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=PROBE_TIMEOUT_S, env=environ())
        except subprocess.TimeoutExpired:
            raise EdgeprofError(f"the probe boot did not finish in {PROBE_TIMEOUT_S} s") \
                from None
        rc = (share / "rc").read_text().strip() if (share / "rc").is_file() else None
        if rc != "0" or not (share / "kernel").is_file():
            lines = proc.stdout.decode(errors="replace").strip().splitlines()
            why = [ln.strip() for ln in lines if "panic" in ln.lower() or "failed" in ln
                   or "host side" in ln
                   or "FATAL" in ln] or lines[-3:]
            raise EdgeprofError(f"probe boot failed (job rc {rc}, exit {proc.returncode}): "
                                + " | ".join(why[:3]))
        return (share / "kernel").read_text().strip()

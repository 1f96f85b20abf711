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
(``~/.cache/edgeprof/uml`` or ``$EDGEPROF_UML_CACHE``) records which in ``uml.json``;
every run records the sandbox and its kernel.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from engine.errors import EdgeprofError
from engine.files import atomic_path
from engine.vm.guest import Log, _run, apt_state, download_deb

CACHE_ENV = "EDGEPROF_UML_CACHE"
# newest stable first; 6.1 (bookworm) lacks memory.swap.peak and per-fd peak resets
CANDIDATES = ("trixie", "sid")
PACKAGE = "user-mode-linux"
INIT_SCRIPT = Path(__file__).with_name("uml_init.sh")
PROBE_TIMEOUT_S = 60
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
RECIPE = "1: user-mode-linux + that suite's libc6, patchelf'd; probe: cgroup v2 memory.max"


def recipe_hash() -> str:
    h = hashlib.sha256(RECIPE.encode())
    h.update(" ".join(CANDIDATES).encode())
    return h.hexdigest()[:16]


def load_uml(cache: Path | None = None) -> Uml | None:
    """The cached UML kernel, or None when absent, built from another recipe, or when no
    candidate worked on this host (``why_none`` says why)."""
    cache = Path(cache or default_cache())
    try:
        info = json.loads((cache / "uml.json").read_text())
    except (OSError, ValueError):
        return None
    if info.get("recipe") != recipe_hash() or not info.get("suite"):
        return None
    uml = Uml(cache / info["suite"] / "linux", info["kernel_version"], info["package"],
              info["suite"])
    return uml if uml.binary.is_file() else None


def why_none(cache: Path | None = None) -> str | None:
    """Why no UML kernel works on this host (from the last build), or None."""
    cache = Path(cache or default_cache())
    try:
        info = json.loads((cache / "uml.json").read_text())
    except (OSError, ValueError):
        return "user-mode Linux is not built (python -m engine.vm build)"
    if info.get("recipe") != recipe_hash():
        return "the user-mode Linux build is stale (python -m engine.vm build)"
    return None if info.get("suite") else info.get("why", "no candidate kernel worked")


def ensure_uml(cache: Path | None = None, log: Log = print, force: bool = False) -> Uml:
    """The cached UML kernel, built (every candidate tried) if missing, stale or
    ``force``. Raises, naming each candidate's failure, when none works on this host (a
    build that found none is not repeated until the recipe changes or ``force``)."""
    cache = Path(cache or default_cache())
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
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
    try:
        info = json.loads((cache / "uml.json").read_text())
    except (OSError, ValueError):
        return False
    return info.get("recipe") == recipe_hash() and not info.get("suite")


def build(cache: Path, log: Log = print) -> Uml | None:
    """Fetch, patch and probe each candidate; keep the first that works."""
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
            continue
        uml = Uml(uml.binary, version, uml.package, suite)
        _write_info(cache, {"suite": suite, "kernel_version": version,
                            "package": uml.package, "tried": failures})
        log(f"uml: Linux {version} from {suite} ({uml.package}) -> {uml.binary}")
        return uml
    _write_info(cache, {"suite": None, "why": "; ".join(failures)})
    return None


def _write_info(cache: Path, info: dict) -> None:
    with atomic_path(cache / "uml.json") as tmp:
        tmp.write_text(json.dumps({"recipe": recipe_hash(), **info}, indent=1))


def _prepare(cache: Path, suite: str, log: Log) -> Uml:
    """The suite's UML binary, unpacked with that suite's libc and patched to use it."""
    debs = cache / "debs" / suite
    debs.mkdir(parents=True, exist_ok=True)
    have = {p: sorted(debs.glob(f"{p}_*.deb")) for p in (PACKAGE, "libc6")}
    apt = None if all(have.values()) else apt_state(debs, suite, log)
    deb = {p: have[p][-1] if have[p] else download_deb(debs, apt, p, suite, log)
           for p in have}
    out = cache / suite
    if out.exists():
        shutil.rmtree(out)
    with tempfile.TemporaryDirectory(prefix=".unpack.", dir=cache) as tmp:
        root = Path(tmp)
        for d in deb.values():
            _run(["dpkg-deb", "-x", str(d), str(root)], f"unpack {d.name}")
        found = sorted(root.glob("usr/bin/linux.uml")) or sorted(root.glob("usr/bin/linux"))
        if not found:
            raise EdgeprofError(f"{deb[PACKAGE].name} has no usr/bin/linux.uml")
        libdir = root / "usr/lib/x86_64-linux-gnu"
        out.mkdir(parents=True)
        shutil.copytree(libdir, out / "lib", symlinks=True,
                        ignore=shutil.ignore_patterns("gconv", "audit"))
        shutil.copy2(found[0], out / "linux")
    lib = out / "lib"
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


def environ() -> dict[str, str]:
    """The UML process's environment: its RAM file on tmpfs."""
    return {**os.environ, "TMPDIR": RAM_DIR}


PROBE_JOB = """\
cd /sys/fs/cgroup/edgeprof || exit 3
echo +memory > cgroup.subtree_control && mkdir probe && echo 16M > probe/memory.max || exit 4
uname -r > /run/vmout/kernel
exit 0
"""


def probe(binary: Path, log: Log = print) -> str:
    """Boot ``binary`` once with a job that creates a cgroup with memory.max; returns the
    guest's kernel release, or raises with the console's last lines."""
    with tempfile.TemporaryDirectory(prefix="edgeprof-umlprobe.") as tmp:
        share = Path(tmp)
        (share / "job.sh").write_text(PROBE_JOB)
        argv = boot_argv(binary, share, 256, None)
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
                   or "FATAL" in ln] or lines[-3:]
            raise EdgeprofError(f"probe boot failed (job rc {rc}, exit {proc.returncode}): "
                                + " | ".join(why[:3]))
        return (share / "kernel").read_text().strip()

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
(``RECIPE``), which records in ``uml.json`` the kernel it chose (read by
``engine.limits.umlhost``, below the limit backends and ``doctor``): checkouts of the project
at different recipes share the cache without rebuilding each other's kernel from under
their runs. Every run records the sandbox and its kernel.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from engine.caffe.wire import UML_READS_ENV
from engine.errors import EdgeprofError
from engine.files import atomic_path
from engine.limits.umlhost import (
    CANDIDATES,
    PRELOAD,
    PRELOAD_SOURCE,
    Uml,
    build_dir,
    build_info,
    default_cache,
    load_uml,
    max_map_count,
    recipe_hash,
    why_none,
)
from engine.sandbox.config import uml_userspace
from engine.sandbox.guest import Log, _run, apt_state, download_deb

PACKAGE = "user-mode-linux"
INIT_SCRIPT = Path(__file__).with_name("uml_init.sh")
PROBE_TIMEOUT_S = 180  # a kernel that fails the touch takes a minute to (UML 6.12 here)
INSTALL_HINT = "sudo apt-get install -y patchelf busybox-static"
CC_HINT = "sudo apt-get install -y gcc libc6-dev"
# UML keeps the guest's RAM in a file it maps; tmpfs keeps it in memory, not on disk
RAM_DIR = "/dev/shm"
# UML >= 6.14 can trap its processes' system calls and faults with seccomp instead of
# ptrace: measured here (UML 7.2), first touches of fresh memory and page faults 2-15x
# faster and steadier. An older kernel says so on its console and falls back to ptrace.
SECCOMP_OFF = "SECCOMP userspace requested but not functional"


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
    info = build_info(cache)
    return info is not None and not info.get("suite")


def build(cache: Path, log: Log = print) -> Uml | None:
    """Fetch, patch and probe each candidate into this recipe's folder; keep the first
    that works."""
    if shutil.which("patchelf") is None:
        raise EdgeprofError(f"patchelf is not installed; {INSTALL_HINT}")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise EdgeprofError(f"no C compiler for the guest's preload ({PRELOAD_SOURCE.name}); "
                            f"{CC_HINT}")
    failures = []
    for suite in CANDIDATES:
        try:
            uml = _prepare(cache, suite, log)
            preload = uml.binary.with_name(PRELOAD)
            _run([cc, "-O2", "-shared", "-fPIC", "-o", str(preload), str(PRELOAD_SOURCE),
                  "-ldl"], f"build the guest's preload ({CC_HINT} if it fails)")
            version, maps = probe(uml.binary, preload, log)
        except EdgeprofError as exc:
            failures.append(f"{suite}: {exc}")
            log(f"uml: {suite}'s {PACKAGE} does not work here: {exc}")
            shutil.rmtree(build_dir(cache) / suite, ignore_errors=True)
            continue
        uml = Uml(uml.binary, version, uml.package, suite, preload, maps)
        _writebuild_info(cache, {"suite": suite, "kernel_version": version,
                            "package": uml.package, "tried": failures, "probe_maps": maps})
        log(f"uml: Linux {version} from {suite} ({uml.package}) -> {uml.binary}; the probe's "
            f"peak host mappings: {maps}")
        return uml
    _writebuild_info(cache, {"suite": None, "why": "; ".join(failures)})
    return None


def _writebuild_info(cache: Path, info: dict) -> None:
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
    swap on ubd0, the console on stdout, no RAID-6 benchmark."""
    seccomp = [] if uml_userspace() == "ptrace" else ["seccomp=on"]
    argv = [str(binary), f"mem={ram_mb}M", *seccomp, "root=/dev/root",
            "rootfstype=hostfs", "rootflags=/", "ro", f"init={INIT_SCRIPT}", "con=null",
            "con0=null,fd:1",
            f"vm.share={share.resolve()}", f"vm.cmd={cmd}",
            f"vm.swap={'disk' if swap_image else 'none'}",
            # the RAID-6 library's boot-time benchmark (built in, for btrfs and md raid,
            # neither of which a guest uses) takes 0.85 s of a 1.2 s boot; its initcall is
            # raid6_init in 7.x, raid6_select_algo before
            "initcall_blacklist=raid6_init,raid6_select_algo"]
    if swap_image is not None:
        argv.append(f"ubd0={swap_image}")
    return argv


def userspace_mode(console: str) -> str:
    """How the UML kernel ran its processes, from its console: seccomp or ptrace."""
    return "ptrace" if SECCOMP_OFF in console else "seccomp"


def check_memory_file(ram_mb: int) -> None:
    """UML keeps the guest's RAM in a file under RAM_DIR, as large as the RAM: a host
    file-size limit (``ulimit -f``) below it kills UML with SIGXFSZ as it boots. Said
    before the boot as a file that could not be written (EFBIG: no run folder)."""
    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if soft != resource.RLIM_INFINITY and soft < ram_mb * 2**20:
        raise OSError(errno.EFBIG, os.strerror(errno.EFBIG),
                      f"{RAM_DIR}/ (the {ram_mb} MiB file user-mode Linux keeps the guest's "
                      f"RAM in, over this shell's file-size limit: ulimit -f {soft // 1024})")


def allocate_ram_file(pid: int, wait_s: float = 5.0) -> str:
    """Allocate the RAM file of the UML kernel ``pid`` on the host (it creates the file
    under RAM_DIR and unlinks it as it starts; found through /proc/PID/fd), so that the
    guest's warming of its RAM (engine.sandbox.job.warm_ram) only maps the pages: 2.1 s
    instead of 3.5-4.3 s for 3.8 GiB (docs/sandboxes.md). Run beside the boot; a line for
    the console on how it went."""
    t0 = time.monotonic()
    fds = Path(f"/proc/{pid}/fd")
    while time.monotonic() - t0 < wait_s:
        try:
            entries = list(fds.iterdir())
        except OSError:
            return "host: the UML process ended before its RAM file was found"
        for fd in entries:
            try:
                target = os.readlink(fd)
            except OSError:  # closed meanwhile, or the process gone
                continue
            if target.startswith(f"{RAM_DIR}/") and target.endswith(" (deleted)"):
                try:
                    with open(fd, "rb+") as f:
                        size = os.fstat(f.fileno()).st_size
                        os.posix_fallocate(f.fileno(), 0, size)
                except OSError as exc:  # the guest's warming still touches every page
                    return f"host: the guest's RAM file not allocated: {exc}"
                return (f"host: the guest's RAM file ({size // 2**20} MiB) allocated in "
                        f"{time.monotonic() - t0:.2f} s")
        time.sleep(0.002)
    return f"host: the guest's RAM file not found in {wait_s:g} s"


def environ() -> dict[str, str]:
    """The UML process's environment: its RAM file on tmpfs."""
    return {**os.environ, "TMPDIR": RAM_DIR}


PROBE_CGROUP_JOB = """\
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
# The engine's copy-read (engine.caffe.wire.readinto_at, as a UML run reads weights) into
# 1 GiB of fresh blobs whose page offset is the scratch buffer's: glibc's vector copy goes
# backward then (forced here with its tunable, as on hosts whose memmove does not use
# rep movsb), so only the ascending faults keep the mappings down.
COPY_READ_1GIB = """
import numpy as np
from engine.caffe.wire import readinto_at
blobs = []
with open("/dev/zero", "rb", buffering=0) as f:
    for _ in range(16):
        raw = np.empty((64 << 20) + 4096, np.uint8)
        at = -raw.ctypes.data % 4096
        readinto_at(f, memoryview(raw[at:at + (64 << 20)]), 0, "/dev/zero")
        blobs.append(raw)
"""
BACKWARD_COPIES = "GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=2147483647"
PROBE_COPY_READ = (f"export {{reads}}=1 {BACKWARD_COPIES}\n"
                   f"{{python}} -c '{COPY_READ_1GIB}' || exit 6\nexit 0\n")
# 1 GiB through a 256M cgroup with swap: written, then read and written again in a
# shuffled order of its 16 MiB pieces, twice (pages swapped out and in, in no order)
PROBE_SWAP = """\
cd /sys/fs/cgroup/edgeprof || exit 3
echo +memory > cgroup.subtree_control && mkdir probe && echo 256M > probe/memory.max || exit 4
echo $$ > probe/cgroup.procs || exit 4
{python} -c '
import numpy as np
rng = np.random.default_rng(0)
pieces = [np.ones(4 << 20, np.float32) for _ in range(64)]
for _ in range(2):
    for i in rng.permutation(64):
        pieces[i] += 1.0
assert all(float(p[0]) == 3.0 for p in pieces)
' || exit 7
exit 0
"""
PROBE_RAM_MB = 3072
PROBE_SWAP_BYTES = 2 << 30
PROBE_WINDOW_S = 30.0  # a pattern at the mapping cap this long has failed the probe


def job_share(folder: Path, preload: Path, job: str) -> Path:
    """A share (``folder``/share) whose job.sh runs the shell ``job`` in this checkout,
    every guest process with ``preload``: what a probe boot (or a benchmark's) runs."""
    share = folder / "share"
    share.mkdir()
    (share / "job.sh").write_text(f"export LD_PRELOAD={shlex.quote(str(preload))}\n"
                                  f"cd {shlex.quote(str(Path(__file__).parents[2]))} || exit 2\n"
                                  + job)
    return share


def probe(binary: Path, preload: Path, log: Log = print) -> tuple[str, dict[str, int]]:
    """Boot ``binary`` once per pattern, every guest process with ``preload``: a cgroup
    with memory.max and fragmented memory (PROBE_TOUCH), the engine's copy-read
    (PROBE_COPY_READ) and a swap-heavy touch (PROBE_SWAP). Returns the guest's kernel
    release and each pattern's peak host mappings; raises with the console's last lines
    when a pattern fails or sits at the host's mapping cap."""
    jobs = {"fragmented": (PROBE_CGROUP_JOB, 0), "copy_read": (PROBE_COPY_READ, 0),
            "swap_heavy": (PROBE_SWAP, PROBE_SWAP_BYTES)}
    version, maps = "", {}
    for name, (job, swap) in jobs.items():
        with tempfile.TemporaryDirectory(prefix="edgeprof-umlprobe.") as tmp:
            share = job_share(Path(tmp), preload, job.format(
                python=sys.executable, touch=PROBE_TOUCH, reads=UML_READS_ENV))
            image = None
            if swap:
                image = Path(tmp) / "swap.img"
                with open(image, "wb") as f:
                    f.truncate(swap)
            peak, console = _probe_boot(boot_argv(binary, share, PROBE_RAM_MB, image), share)
            maps[name] = peak
            if name == "fragmented" and (share / "kernel").is_file():
                version = (share / "kernel").read_text().strip()
        log(f"uml probe: {name}: peak {peak} host mappings")
    return version, maps


def _probe_boot(argv: list[str], share: Path) -> tuple[int, str]:
    """One probe boot: its guest processes' peak host mappings and its console; raises
    when the job fails, times out or sits at the mapping cap."""
    from engine.sandbox.hostmaps import MapWatch

    log_path = share.parent / "console.log"  # a file: a pipe left unread could fill
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, env=environ(),
                                start_new_session=True)
    watch = MapWatch(proc.pid, max_map_count(), PROBE_WINDOW_S).start()
    why = None
    try:
        deadline = time.monotonic() + PROBE_TIMEOUT_S
        while proc.poll() is None and why is None:
            if watch.hit.wait(0.5):
                why = watch.detail()
            elif time.monotonic() > deadline:
                why = f"the probe boot did not finish in {PROBE_TIMEOUT_S} s"
    finally:
        peak = watch.stop() or 0
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    console = log_path.read_text(errors="replace")
    rc = (share / "rc").read_text().strip() if (share / "rc").is_file() else None
    if why is None and rc != "0":
        lines = console.strip().splitlines()
        found = [ln.strip() for ln in lines if "panic" in ln.lower() or "failed" in ln
                 or "host side" in ln or "FATAL" in ln or "Error" in ln] or lines[-3:]
        why = f"job rc {rc}, exit {proc.returncode}: " + " | ".join(found[:3])
    if why is not None:
        raise EdgeprofError(f"probe boot failed ({why})")
    return peak, console

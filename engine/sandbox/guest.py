"""Building the guest: a Debian backports kernel plus a tiny busybox initramfs, cached.

The kernel package is fetched with ``apt-get download`` through a private apt
configuration (the host's sources and /boot are never touched) and unpacked with
``dpkg-deb -x``. The initramfs is written by a small newc cpio writer here, so building it
needs neither root (for /dev/console) nor the cpio tool. The result is three files in the
cache folder: ``vmlinuz``, ``initrd.gz`` and ``guest.json`` (kernel version and the recipe
hash; a changed recipe rebuilds).
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import io
import json
import lzma
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine.errors import EdgeprofError
from engine.files import atomic_path
from engine.limits.cgroupfs import PEAK_FD_RESET_KERNEL

CACHE_ENV = "EDGEPROF_VM_CACHE"
KERNEL_ENV = "EDGEPROF_VM_KERNEL_PACKAGE"  # pin an exact linux-image-* package
MIRROR_ENV = "EDGEPROF_VM_MIRROR"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
SUITE = "bookworm-backports"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
MIN_KERNEL = PEAK_FD_RESET_KERNEL  # memory.swap.peak and per-fd memory.peak reset
# what init needs; their dependencies are found from each module's modinfo
WANTED_MODULES = ("9p", "9pnet_virtio", "virtio_blk", "overlay")
INIT_SCRIPT = Path(__file__).with_name("init.sh")
INSTALL_HINT = "sudo apt-get install -y --no-install-recommends qemu-system-x86 busybox-static"
BUSYBOX_CANDIDATES = ("/bin/busybox", "/usr/bin/busybox")


Log = Callable[[str], None]


@dataclass(frozen=True)
class Guest:
    """A built guest in the cache: what qemu boots."""

    kernel: Path
    initrd: Path
    kernel_version: str
    package: str


def default_cache() -> Path:
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "edgeprof" / "vm"


def recipe_hash() -> str:
    """Everything the built guest depends on; a change rebuilds it."""
    h = hashlib.sha256()
    h.update(INIT_SCRIPT.read_bytes())
    h.update(Path(__file__).read_bytes())
    h.update(os.environ.get(KERNEL_ENV, "").encode())
    return h.hexdigest()[:16]


def load_guest(cache: Path | None = None) -> Guest | None:
    """The cached guest, or None when absent or built from another recipe."""
    cache = Path(cache or default_cache())
    try:
        info = json.loads((cache / "guest.json").read_text())
    except (OSError, ValueError):
        return None
    guest = Guest(cache / "vmlinuz", cache / "initrd.gz", info["kernel_version"],
                  info["package"])
    if info.get("recipe") != recipe_hash() or not (guest.kernel.is_file()
                                                   and guest.initrd.is_file()):
        return None
    return guest


def ensure_guest(cache: Path | None = None, log: Log = print, force: bool = False) -> Guest:
    """The cached guest, built first if missing, stale or ``force``."""
    cache = Path(cache or default_cache())
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel runs: one builds, the others wait
        return (not force and load_guest(cache)) or build_guest(cache, log=log)


def build_guest(cache: Path, log: Log = print) -> Guest:
    busybox = _static_busybox()
    cache.mkdir(parents=True, exist_ok=True)
    deb = fetch_kernel_deb(cache / "debs", log=log)
    with tempfile.TemporaryDirectory(prefix=".unpack.", dir=cache) as tmp:
        root = Path(tmp)
        _run(["dpkg-deb", "-x", str(deb), str(root)], "unpack the kernel package")
        versions = sorted(p.name for p in (root / "lib/modules").iterdir())
        if len(versions) != 1:
            raise EdgeprofError(f"{deb.name}: expected one lib/modules/<version>, found "
                                f"{versions}")
        version = versions[0]
        found = tuple(int(x) for x in re.match(r"(\d+)\.(\d+)", version).groups())
        if found < MIN_KERNEL:
            raise EdgeprofError(f"{deb.name} is Linux {version}; the vm backend needs >= "
                                f"{MIN_KERNEL[0]}.{MIN_KERNEL[1]} (memory.swap.peak, per-fd "
                                f"peak reset): unset {KERNEL_ENV} or pin a 6.12 package")
        modules = ordered_modules(root / "lib/modules" / version)
        files = [("init", INIT_SCRIPT.read_bytes(), 0o100755),
                 ("bin/busybox", busybox.read_bytes(), 0o100755),
                 ("lib/modules/order", "".join(f"{n}\n" for n, _ in modules).encode(),
                  0o100644)]
        files += [(f"lib/modules/{n}.ko", _module_bytes(p), 0o100644) for n, p in modules]
        initrd = gzip.compress(newc_archive(files), compresslevel=6, mtime=0)
        with atomic_path(cache / "initrd.gz") as tmp:
            tmp.write_bytes(initrd)
        with atomic_path(cache / "vmlinuz") as tmp:
            shutil.copyfile(root / "boot" / f"vmlinuz-{version}", tmp)
    info = {"kernel_version": version, "package": deb.name, "recipe": recipe_hash(),
            "modules": [n for n, _ in modules]}
    with atomic_path(cache / "guest.json") as tmp:
        tmp.write_text(json.dumps(info, indent=1))
    log(f"vm guest: Linux {version}, initramfs {len(initrd) / 2**20:.1f} MiB -> {cache}")
    return load_guest(cache)


def _apt_args(state: Path) -> list[str]:
    return ["-o", f"Dir::Etc::SourceList={state}/sources.list",
            "-o", f"Dir::Etc::SourceParts={state}/parts",
            "-o", f"Dir::State::Lists={state}/lists", "-o", f"Dir::Cache={state}/cache",
            "-o", "Debug::NoLocking=1"]


def fetch_kernel_deb(folder: Path, log: Log = print) -> Path:
    """The backports kernel .deb in ``folder``, downloaded once with a private apt config."""
    pinned = os.environ.get(KERNEL_ENV)
    folder = folder.resolve()
    have = sorted(folder.glob(f"{pinned or 'linux-image-*'}_*.deb"))
    if have:
        return have[-1]
    apt = apt_state(folder, SUITE, log)
    package = pinned or _resolve_kernel(apt)
    return download_deb(folder, apt, package, SUITE, log,
                        hint=f" (set {MIRROR_ENV} for another mirror, {KERNEL_ENV} for "
                             "another package)")


def apt_state(folder: Path, suite: str, log: Log = print) -> list[str]:
    """apt-get options for a private configuration of ``suite`` under ``folder`` (the
    host's sources, lists and cache are never touched), its package lists updated."""
    folder = folder.resolve()  # apt reads relative Dir:: options under /etc/apt
    if shutil.which("apt-get") is None:
        raise EdgeprofError(f"fetching {suite} packages needs apt-get (Debian/Ubuntu hosts); "
                            f"put the .deb files into {folder} by hand")
    state = folder / "apt"
    for sub in ("lists/partial", "cache/archives/partial", "parts"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    mirror = os.environ.get(MIRROR_ENV, DEFAULT_MIRROR)
    (state / "sources.list").write_text(f"deb [signed-by={KEYRING}] {mirror} {suite} main\n")
    apt = _apt_args(state)
    log(f"apt-get update ({suite}, private lists in {state})")
    _run(["apt-get", *apt, "update"], f"read the {suite} package lists from {mirror}")
    return apt


def download_deb(folder: Path, apt: list[str], package: str, suite: str, log: Log = print,
                 hint: str = "") -> Path:
    """``package``'s .deb from ``suite`` in ``folder`` (``apt_state``'s options)."""
    folder = folder.resolve()
    have = sorted(folder.glob(f"{package}_*.deb"))
    if have:
        return have[-1]
    log(f"apt-get download {package} ({suite})")
    _run(["apt-get", *apt, "download", package],
         f"apt-get download {package} from {suite}{hint}", cwd=folder)
    have = sorted(folder.glob(f"{package}_*.deb"))
    if not have:
        raise EdgeprofError(f"apt-get download {package} wrote no .deb into {folder}")
    return have[-1]


def _resolve_kernel(apt: list[str]) -> str:
    """The linux-image-<abi>-amd64 that backports' linux-image-amd64 points at."""
    out = _run(["apt-cache", *apt, "depends", f"linux-image-amd64/{SUITE}"],
               "resolve the backports kernel")
    names = re.findall(r"Depends: (linux-image-\d[\w.+~-]*-amd64)", out)
    if not names:
        raise EdgeprofError(f"no linux-image-*-amd64 dependency in {SUITE}; set {KERNEL_ENV}"
                            " to the package name")
    return names[0]


def _static_busybox() -> Path:
    for cand in BUSYBOX_CANDIDATES:
        path = Path(cand)
        if path.is_file() and _is_static(path):
            return path
    raise EdgeprofError(f"no static busybox for the guest initramfs: {INSTALL_HINT}")


def _is_static(path: Path) -> bool:
    # a dynamic ELF names its loader (PT_INTERP) near the start of the file
    return b"/lib64/ld-linux" not in path.read_bytes()[:4096]


def modinfo(data: bytes) -> dict[str, str]:
    """name and depends from a .ko's .modinfo strings (no modules.dep in the deb)."""
    info = {}
    for key in (b"name", b"depends"):
        m = re.search(rb"(?:^|\0)" + key + rb"=([^\0]*)\0", data)
        if m:
            info[key.decode()] = m.group(1).decode()
    return info


def _module_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    return lzma.decompress(data) if path.name.endswith(".xz") else data


def ordered_modules(moddir: Path) -> list[tuple[str, Path]]:
    """WANTED_MODULES and their dependencies, dependencies first; modules absent from the
    package are built into the kernel (checked against modules.builtin)."""
    files = {}
    for p in (moddir / "kernel").rglob("*.ko*"):
        files[p.name.split(".ko")[0].replace("-", "_")] = p
    builtin_text = (moddir / "modules.builtin").read_text() if (
        moddir / "modules.builtin").is_file() else ""
    builtin = {Path(line).name.split(".ko")[0].replace("-", "_")
               for line in builtin_text.split()}
    order: list[tuple[str, Path]] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        name = name.replace("-", "_")
        if name in seen:
            return
        seen.add(name)
        if name not in files:
            if name in builtin or not builtin:
                return
            raise EdgeprofError(f"kernel module {name} is neither in the package nor built in")
        deps = modinfo(_module_bytes(files[name])).get("depends", "")
        for dep in filter(None, deps.split(",")):
            visit(dep)
        order.append((name, files[name]))

    for wanted in WANTED_MODULES:
        visit(wanted)
    return order


def newc_archive(files: list[tuple[str, bytes, int]]) -> bytes:
    """A newc cpio with the initramfs skeleton (dirs, /dev/console, /dev/null) and
    ``files`` as (path, data, mode)."""
    out = io.BytesIO()
    ino = [0]

    def entry(name: str, mode: int, data: bytes = b"", rdev: tuple[int, int] = (0, 0)) -> None:
        ino[0] += 1
        fields = (ino[0], mode, 0, 0, 2 if mode & 0o040000 else 1, 0, len(data), 0, 0,
                  rdev[0], rdev[1], len(name) + 1, 0)
        out.write(b"070701" + b"".join(b"%08X" % f for f in fields))
        out.write(name.encode() + b"\0")
        out.write(b"\0" * (-out.tell() % 4))
        out.write(data)
        out.write(b"\0" * (-out.tell() % 4))

    dirs = {"bin", "lib", "lib/modules", "proc", "sys", "dev", "lower", "upper", "newroot"}
    for path, _, _ in files:
        parts = path.split("/")[:-1]
        dirs.update("/".join(parts[:i + 1]) for i in range(len(parts)))
    for d in sorted(dirs):
        entry(d, 0o040755)
    entry("dev/console", 0o020600, rdev=(5, 1))
    entry("dev/null", 0o020666, rdev=(1, 3))
    for path, data, mode in files:
        entry(path, mode, data)
    entry("TRAILER!!!", 0)
    return out.getvalue()


def _run(argv: list[str], what: str, cwd: Path | None = None) -> str:
    try:
        res = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=900)
    except FileNotFoundError:
        raise EdgeprofError(f"cannot {what}: {argv[0]} is not installed") from None
    if res.returncode != 0:
        tail = (res.stderr or res.stdout).strip().splitlines()[-3:]
        raise EdgeprofError(f"cannot {what}: {argv[0]} failed: {' | '.join(tail)}")
    return res.stdout

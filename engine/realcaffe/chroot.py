"""Real Caffe 1.0 beside the engine: a Debian bullseye chroot with ``libcaffe-dev``, built
once and cached, and ``probe.cpp`` compiled in it.

Debian bookworm no longer ships Caffe; bullseye does (CPU-only). ``mmdebstrap`` builds the
chroot from Debian's registry into the cache (``~/.cache/edgeprof/caffe`` or
``$EDGEPROF_CAFFE_CACHE``); ``caffe.json`` records the recipe's hash, and a changed recipe
rebuilds. Everything run in it runs in a private mount namespace (``unshare --mount``), so
its bind mounts (``/proc``, the models, read-only) vanish with the process, whatever
happens to it. Needs root (mmdebstrap's root mode, chroot, mounts).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from engine.errors import EdgeprofError
from engine.files import atomic_path

CACHE_ENV = "EDGEPROF_CAFFE_CACHE"
MIRROR_ENV = "EDGEPROF_CAFFE_MIRROR"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
SUITE = "bullseye"
# libcaffe-dev's headers include boost, glog, gflags, protobuf and cblas without depending
# on their -dev packages
PACKAGES = ("libcaffe-dev", "build-essential", "libboost-system-dev", "libgoogle-glog-dev",
            "libgflags-dev", "libprotobuf-dev", "libopenblas-dev")
HERE = Path(__file__).parent
SOURCES = (HERE / "probe.cpp", HERE / "warmup.prototxt")
PROBE = "/opt/edgeprof/probe"
WARMUP = "/opt/edgeprof/warmup.prototxt"
DATA, OUT = "/data", "/out"  # where run() binds its read-only and its writable folder
INSTALL_HINT = "sudo apt-get install -y mmdebstrap"

Log = Callable[[str], None]


def default_cache() -> Path:
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "edgeprof" / "caffe"


def recipe_hash() -> str:
    """Everything the built chroot depends on; a change rebuilds it."""
    h = hashlib.sha256()
    for path in (*SOURCES, Path(__file__)):
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def root_of(cache: Path) -> Path:
    return cache / "root"


def is_built(cache: Path | None = None) -> bool:
    cache = Path(cache or default_cache())
    try:
        info = json.loads((cache / "caffe.json").read_text())
    except (OSError, ValueError):
        return False
    return info.get("recipe") == recipe_hash() and (root_of(cache) / PROBE[1:]).is_file()


def why_unavailable() -> str | None:
    """Why this machine cannot build or use the chroot, or None."""
    if os.geteuid() != 0:
        return "building and entering the bullseye chroot needs root (chroot, mounts)"
    for tool in ("unshare", "chroot"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


def ensure_built(cache: Path | None = None, log: Log = print, force: bool = False) -> Path:
    """The chroot's root folder, built first if missing, stale or ``force``."""
    cache = Path(cache or default_cache())
    why = why_unavailable()
    if why:
        raise EdgeprofError(f"cannot build the real-Caffe reference: {why}")
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel test runs: one builds, the others wait
        if force or not is_built(cache):
            build(cache, log)
    return root_of(cache)


def _run(cmd: Sequence[str], what: str, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise EdgeprofError(f"{what} failed (exit {proc.returncode}): " + " | ".join(tail))
    return proc


def build(cache: Path, log: Log = print) -> None:
    """mmdebstrap a bullseye chroot with libcaffe-dev, then compile the probe in it."""
    if shutil.which("mmdebstrap") is None:
        raise EdgeprofError(f"mmdebstrap is not installed; {INSTALL_HINT}")
    root = root_of(cache)
    (cache / "caffe.json").unlink(missing_ok=True)
    if root.exists():
        shutil.rmtree(root)
    mirror = os.environ.get(MIRROR_ENV, DEFAULT_MIRROR)
    log(f"real Caffe: building a {SUITE} chroot with {', '.join(PACKAGES)} in {root} "
        "(about a minute, ~1.1 GB)")
    with tempfile.TemporaryDirectory(prefix=".build.", dir=cache) as tmp:
        staging = Path(tmp) / "root"
        _run(["mmdebstrap", "--mode=root", "--variant=apt", "--quiet",
              f"--include={','.join(PACKAGES)}", SUITE, str(staging), mirror],
             f"mmdebstrap {SUITE}")
        _compile_probe(staging)
        staging.rename(root)
    version = _caffe_version(root)
    with atomic_path(cache / "caffe.json") as tmp:
        tmp.write_text(json.dumps({"recipe": recipe_hash(), "suite": SUITE,
                                   "libcaffe": version}, indent=1))
    log(f"real Caffe: libcaffe {version} ready in {root}")


def _compile_probe(root: Path) -> None:
    """Compile probe.cpp against Debian's libcaffe. Two header fixes, both outside the
    compiled library: ``net.hpp`` gets EdgeCaffe's ``layers_unsafe()`` accessor (an
    inline function: the class layout is unchanged), and ``caffe.pb.h``, which Debian
    generated with a protoc newer than bullseye's protobuf headers, gets the two names
    those headers spell differently."""
    opt = root / PROBE[1:]
    include = opt.parent / "include" / "caffe"
    (include / "proto").mkdir(parents=True, exist_ok=True)
    net = (root / "usr/include/caffe/net.hpp").read_text()
    anchor = "  inline const vector<shared_ptr<Layer<Dtype> > >& layers() const {"
    if anchor not in net:
        raise EdgeprofError("Debian's caffe/net.hpp changed: layers() not found")
    accessor = ("  inline vector<shared_ptr<Layer<Dtype> > >& layers_unsafe() "
                "{ return layers_; }\n")
    (include / "net.hpp").write_text(net.replace(anchor, accessor + anchor))
    pb = (root / "usr/include/caffe/proto/caffe.pb.h").read_text()
    pb = pb.replace("AuxiliaryParseTableField", "AuxillaryParseTableField")
    pb = pb.replace("::PROTOBUF_NAMESPACE_ID::ConstStringParam", "const std::string&")
    (include / "proto" / "caffe.pb.h").write_text(pb)
    for src in SOURCES:
        shutil.copy(src, opt.parent / src.name)
    inside = str(Path(PROBE).parent)
    _run(["chroot", str(root), "g++", "-O2", "-DCPU_ONLY", f"-I{inside}/include", "-o", PROBE,
          f"{inside}/probe.cpp", "-lcaffe", "-lglog", "-lgflags", "-lboost_system",
          "-lprotobuf"], "compiling the probe against libcaffe-dev")


def _caffe_version(root: Path) -> str:
    status = (root / "var/lib/dpkg/status").read_text()
    found = re.search(r"Package: libcaffe1\n(?:.+\n)*?Version: (\S+)", status)
    return found.group(1) if found else "unknown"


def run(argv: Sequence[str], data: Path, out: Path, env: dict[str, str] | None = None,
        cache: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``argv`` in the chroot with ``data`` bound read-only at ``/data`` and ``out``
    writable at ``/out``, /proc mounted, single-threaded OpenBLAS, in a mount namespace
    of its own (nothing stays mounted when it ends)."""
    root = shlex.quote(str(root_of(Path(cache or default_cache()))))
    env_args = [f"{k}={v}" for k, v in {"OPENBLAS_NUM_THREADS": "1", **(env or {})}.items()]
    steps = ["mount --make-rprivate /"]
    for host, inside, mode in ((data, DATA, "ro"), (out, OUT, "rw")):
        target = f"{root}{inside}"
        steps += [f"mkdir -p {target}", f"mount --bind {shlex.quote(str(host))} {target}",
                  f"mount -o remount,bind,{mode} {target}"]
    steps += [f"mount -t proc proc {root}/proc",
              f"exec chroot {root} env -i PATH=/usr/bin:/bin "
              + " ".join(shlex.quote(a) for a in (*env_args, *argv))]
    return _run(["unshare", "--mount", "--fork", "sh", "-c", " && ".join(steps)],
                "real Caffe", timeout=timeout)

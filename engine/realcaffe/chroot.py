"""Real Caffe 1.0 beside the engine: a Debian bullseye chroot with Caffe (``libcaffe-dev``
for ``probe.cpp``, ``python3-caffe`` for ``pycaffe_run.py``), built once and cached.

Debian bookworm no longer ships Caffe; bullseye does (CPU-only). ``mmdebstrap`` builds the
chroot from Debian's registry into the cache (``~/.cache/edgeprof/caffe`` or
``$EDGEPROF_CAFFE_CACHE``); ``caffe.json`` records two hashes: the chroot's recipe (suite,
packages, build procedure) and the probe's (its sources and compile command). A changed
recipe rebuilds the chroot (minutes, ~1.5 GB); a changed probe is only recompiled in it.
Both hashes are of what the build uses, not of this file, so checkouts that differ
elsewhere share one cache. Everything run in it runs in a private mount namespace
(``unshare --mount``), so its mounts (``/proc``, ``/dev``, the models read-only) vanish
with the process, whatever happens to it. Needs root (mmdebstrap's root mode, chroot,
mounts).
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
from engine.files import atomic_path, cache_dir
from engine.procs import preexec

CACHE_ENV = "EDGEPROF_CAFFE_CACHE"
MIRROR_ENV = "EDGEPROF_CAFFE_MIRROR"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
SUITE = "bullseye"
# libcaffe-dev's headers include boost, glog, gflags, protobuf and cblas without depending
# on their -dev packages; python3-caffe is pycaffe (as the user measured), procps
# for ps/free when looking inside by hand
PACKAGES = ("libcaffe-dev", "python3-caffe", "python3-numpy", "python3-protobuf", "procps",
            "build-essential", "libboost-system-dev", "libgoogle-glog-dev", "libgflags-dev",
            "libprotobuf-dev", "libopenblas-dev")
# bump when build() changes what it makes of SUITE and PACKAGES
BUILD_PROCEDURE = 1
HERE = Path(__file__).parent
SOURCES = (HERE / "probe.cpp", HERE / "warmup.prototxt")
PROBE = "/opt/edgeprof/probe"
WARMUP = "/opt/edgeprof/warmup.prototxt"
COMPILE = ("g++", "-O2", "-DCPU_ONLY", "-I/opt/edgeprof/include", "-o", PROBE,
           "/opt/edgeprof/probe.cpp", "-lcaffe", "-lglog", "-lgflags", "-lboost_system",
           "-lprotobuf")
# EdgeCaffe's accessor to Net::layers_, added to Debian's net.hpp as an inline function
ACCESSOR = "  inline vector<shared_ptr<Layer<Dtype> > >& layers_unsafe() { return layers_; }\n"
DATA, OUT = "/data", "/out"  # where run() binds its read-only and its writable folder
INSTALL_HINT = "sudo apt-get install -y mmdebstrap"

Log = Callable[[str], None]


def default_cache() -> Path:
    return cache_dir(CACHE_ENV, "caffe")


def recipe_hash() -> str:
    """What the chroot is made of; a change rebuilds it."""
    recipe = json.dumps([SUITE, sorted(PACKAGES), BUILD_PROCEDURE])
    return hashlib.sha256(recipe.encode()).hexdigest()[:16]


def probe_hash() -> str:
    """What the probe is made of; a change recompiles it (in the same chroot)."""
    h = hashlib.sha256(json.dumps([COMPILE, ACCESSOR]).encode())
    for path in SOURCES:
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def root_of(cache: Path) -> Path:
    return cache / "root"


def _record(cache: Path) -> dict:
    try:
        info = json.loads((cache / "caffe.json").read_text())
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def is_built(cache: Path | None = None) -> bool:
    """Whether the cache holds this recipe's chroot with this probe compiled in it."""
    cache = Path(cache or default_cache())
    info = _record(cache)
    return (info.get("recipe") == recipe_hash() and info.get("probe") == probe_hash()
            and (root_of(cache) / PROBE[1:]).is_file())


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
        if force or _record(cache).get("recipe") != recipe_hash() or not (
                root_of(cache) / "usr/bin/python3").is_file():
            build(cache, log)
        elif not is_built(cache):
            log("real Caffe: the probe changed; recompiling it in the chroot")
            _compile_probe(root_of(cache))
            _write_record(cache)
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
        "(a few minutes, ~1.3 GB)")
    with tempfile.TemporaryDirectory(prefix=".build.", dir=cache) as tmp:
        staging = Path(tmp) / "root"
        _run(["mmdebstrap", "--mode=root", "--variant=apt", "--quiet",
              f"--include={','.join(PACKAGES)}", SUITE, str(staging), mirror],
             f"mmdebstrap {SUITE}")
        _compile_probe(staging)
        staging.rename(root)
    log(f"real Caffe: libcaffe {_write_record(cache)} ready in {root}")


def _write_record(cache: Path) -> str:
    version = _caffe_version(root_of(cache))
    with atomic_path(cache / "caffe.json") as tmp:
        tmp.write_text(json.dumps({"recipe": recipe_hash(), "probe": probe_hash(),
                                   "suite": SUITE, "libcaffe": version}, indent=1))
    return version


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
    (include / "net.hpp").write_text(net.replace(anchor, ACCESSOR + anchor))
    pb = (root / "usr/include/caffe/proto/caffe.pb.h").read_text()
    pb = pb.replace("AuxiliaryParseTableField", "AuxillaryParseTableField")
    pb = pb.replace("::PROTOBUF_NAMESPACE_ID::ConstStringParam", "const std::string&")
    (include / "proto" / "caffe.pb.h").write_text(pb)
    for src in SOURCES:
        shutil.copy(src, opt.parent / src.name)
    _run(["chroot", str(root), *COMPILE], "compiling the probe against libcaffe-dev")


def _caffe_version(root: Path) -> str:
    status = (root / "var/lib/dpkg/status").read_text()
    found = re.search(r"Package: libcaffe1\n(?:.+\n)*?Version: (\S+)", status)
    return found.group(1) if found else "unknown"


def run(argv: Sequence[str], data: Path, out: Path, env: dict[str, str] | None = None,
        cache: Path | None = None, timeout: float = 600,
        stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run ``argv`` in the chroot with ``data`` bound read-only at ``/data`` and ``out``
    writable at ``/out``, the host's /dev bound and a /proc of its own, single-threaded
    OpenBLAS, ``stdin`` on its standard input, in a mount namespace of its own (nothing
    stays mounted when it ends)."""
    root = shlex.quote(str(root_of(Path(cache or default_cache()))))
    env_args = [f"{k}={v}" for k, v in {"OPENBLAS_NUM_THREADS": "1", "HOME": "/tmp",
                                        **(env or {})}.items()]
    steps = ["mount --make-rprivate /"]
    for host, inside, mode in ((data, DATA, "ro"), (out, OUT, "rw"), ("/dev", "/dev", "rw")):
        target = f"{root}{inside}"
        steps += [f"mkdir -p {target}", f"mount --bind {shlex.quote(str(host))} {target}",
                  f"mount -o remount,bind,{mode} {target}"]
    steps += [f"mount -t proc proc {root}/proc",
              f"exec chroot {root} env -i PATH=/usr/bin:/bin "
              + " ".join(shlex.quote(a) for a in (*env_args, *argv))]
    # unshare dies with this process, and its child (the probe, after the execs) with it
    return _run(["unshare", "--mount", "--fork", "--kill-child", "sh", "-c",
                 " && ".join(steps)], "real Caffe", timeout=timeout, input=stdin,
                preexec_fn=preexec())

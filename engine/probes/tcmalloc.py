"""Finding gperftools' full tcmalloc and preloading it into the measured process.

Only the *full* ``libtcmalloc.so.4`` (Debian: libgoogle-perftools4) has the heap profiler;
``libtcmalloc_minimal`` does not. tcmalloc must be the process allocator from the first
malloc on, so it is LD_PRELOADed rather than loaded later with ctypes.

Facts checked against gperftools 2.10 (Debian 12) with real runs:

- ``HEAP_PROFILE_ALLOCATION_INTERVAL`` (default 1 GiB) and ``HEAP_PROFILE_INUSE_INTERVAL``
  (default 100 MiB) trigger automatic dumps that take the next file number; ``0`` means
  "never" (the source tests ``> 0``). Deallocation and time intervals already default to 0.
- ``PERFTOOLS_VERBOSE=-1`` silences the "Starting tracking the heap" / "Dumping heap
  profile to ..." lines; failures ("Failed dumping heap profile ...") are still printed.
- ``HEAPPROFILE`` would start a profile at startup in *every* preloaded process of the run
  (GNU time included), so it is removed: the measured process starts its own profile.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

from engine.errors import EdgeprofError

SONAME = "libtcmalloc.so.4"
# gperftools' defaults for the automatic-dump triggers; "0" turns each one off.
INTERVAL_DEFAULTS = {
    "HEAP_PROFILE_ALLOCATION_INTERVAL": str(1 << 30),
    "HEAP_PROFILE_DEALLOCATION_INTERVAL": "0",
    "HEAP_PROFILE_INUSE_INTERVAL": str(100 << 20),
    "HEAP_PROFILE_TIME_INTERVAL": "0",
}
QUIET_ENV = {name: "0" for name in INTERVAL_DEFAULTS} | {"PERFTOOLS_VERBOSE": "-1"}


@functools.cache
def library_path() -> str:
    """Absolute path of the full libtcmalloc.so.4, or EdgeprofError naming the package."""
    arch = sysconfig.get_config_var("MULTIARCH") or ""
    dirs = [f"/usr/lib/{arch}", f"/lib/{arch}", "/usr/lib64", "/usr/lib", "/usr/local/lib"]
    for d in dirs:
        if (Path(d) / SONAME).is_file():
            return str(Path(d) / SONAME)
    found = _from_ldconfig()
    if found:
        return found
    raise EdgeprofError(
        f"--heap-profile needs gperftools' full tcmalloc ({SONAME}, with the heap profiler; "
        "libtcmalloc_minimal has none) and it is not installed: "
        "apt-get install libgoogle-perftools4"
    )


def _from_ldconfig() -> str | None:
    ldconfig = shutil.which("ldconfig") or shutil.which("ldconfig", path="/sbin:/usr/sbin")
    if ldconfig is None:
        return None
    out = subprocess.run([ldconfig, "-p"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        name, _, path = line.strip().partition(" => ")
        if name.split(" ")[0] == SONAME and os.path.isfile(path):
            return path
    return None


def preload_env(env: dict) -> dict:
    """A copy of ``env`` with the full tcmalloc preloaded first and automatic heap-profile
    dumps and the profiler's log lines turned off."""
    lib = library_path()
    out = dict(env)
    others = [p for p in out.get("LD_PRELOAD", "").replace(":", " ").split()
              if Path(p).name != SONAME]
    out["LD_PRELOAD"] = " ".join([lib, *others])
    out.update(QUIET_ENV)
    out.pop("HEAPPROFILE", None)
    return out


def loaded_library() -> ctypes.CDLL:
    """The tcmalloc already serving this process's malloc, or EdgeprofError.

    It must have been preloaded: a tcmalloc loaded after startup would be handed pointers
    glibc allocated, and its profiler would see only part of the heap."""
    try:
        lib = ctypes.CDLL(SONAME, mode=os.RTLD_NOLOAD)
    except OSError:
        raise EdgeprofError(
            f"--heap-profile needs {SONAME} preloaded into the measured process "
            "(LD_PRELOAD, which the supervisor sets via engine.probes.tcmalloc.preload_env); "
            "it is not loaded here"
        ) from None
    process_malloc = ctypes.cast(ctypes.CDLL(None).malloc, ctypes.c_void_p).value
    if process_malloc != ctypes.cast(lib.malloc, ctypes.c_void_p).value:
        raise EdgeprofError(
            f"{SONAME} is loaded but is not this process's malloc: it must be LD_PRELOADed "
            "(engine.probes.tcmalloc.preload_env), not loaded after startup"
        )
    return lib

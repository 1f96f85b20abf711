"""The uml sandbox on this host, read without booting or building anything: the record
of the user-mode Linux kernel built into the cache (``engine.sandbox.uml`` builds it and boots
it), and the host's cap on a process's memory mappings, which bounds what a guest process
can map.

Here, below both, because the ``uml`` limit backend (``engine.limits.sandbox``: is it built?)
and ``doctor`` (``engine.analysis.noise``: the cap and the build probe's headroom) read
them too, and neither may import the sandboxes' package above them (docs/engine.md, the
layers).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from engine.files import cache_dir

CACHE_ENV = "EDGEPROF_UML_CACHE"
# newest first: sid's UML (7.2 when chosen) runs where trixie's 6.12 panics (hosts with
# AMX) or dies under a pipeline's memory (the probe's touch); every run records its
# kernel. 6.1 (bookworm) lacks memory.swap.peak and per-fd peak resets.
CANDIDATES = ("sid", "trixie")


@dataclass(frozen=True)
class Uml:
    """A built UML kernel in the cache: what ``boot`` starts."""

    binary: Path
    kernel_version: str  # uname -r in the guest
    package: str  # the .deb it came from
    suite: str
    preload: Path | None = None  # ascend.so, LD_PRELOADed in the guest (PRELOAD_SOURCE)
    probe_maps: dict | None = None  # the build probe's peak host mappings per pattern


def default_cache() -> Path:
    return cache_dir(CACHE_ENV, "uml")


# What the built kernel depends on (its candidates, and how each is fetched and patched);
# bump it when that changes. Not this file's source: every checkout of the project shares
# the cache, and an edit elsewhere in it must not make the others' build stale.
RECIPE = ("3: user-mode-linux + that suite's libc6, patchelf'd; ascend.c built with the host's "
          "cc; probe: cgroup v2 memory.max, a fragmented 2 GiB touch, a 1 GiB copy-read, a "
          "1 GiB swap-heavy touch at 256M, each under the host's mapping cap")
# The preload every guest process runs with: copies fault their destination in ascending
# page order (its source says why). Part of the recipe: an edit rebuilds it.
# (it is built with the kernel, in engine/sandbox: this module only names it)
PRELOAD_SOURCE = Path(__file__).parents[1] / "sandbox" / "ascend.c"
PRELOAD = "ascend.so"


def recipe_hash() -> str:
    h = hashlib.sha256(RECIPE.encode())
    h.update(" ".join(CANDIDATES).encode())
    h.update(PRELOAD_SOURCE.read_bytes())
    return h.hexdigest()[:16]


def build_dir(cache: Path | None = None) -> Path:
    """This recipe's folder in the cache: its uml.json and each candidate's kernel."""
    return Path(cache or default_cache()) / recipe_hash()


def build_info(cache: Path | None) -> dict | None:
    try:
        return json.loads((build_dir(cache) / "uml.json").read_text())
    except (OSError, ValueError):
        return None


def load_uml(cache: Path | None = None) -> Uml | None:
    """The cached UML kernel, or None when this recipe's is not built or no candidate
    worked on this host (``why_none`` says why)."""
    info = build_info(cache)
    if not info or not info.get("suite"):
        return None
    home = build_dir(cache) / info["suite"]
    uml = Uml(home / "linux", info["kernel_version"], info["package"], info["suite"],
              home / PRELOAD, info.get("probe_maps"))
    return uml if uml.binary.is_file() and uml.preload.is_file() else None


def why_none(cache: Path | None = None) -> str | None:
    """Why no UML kernel works here (from the last build), or None when one does."""
    cache = Path(cache or default_cache())
    info = build_info(cache)
    if info is None:
        other = (cache / "uml.json").exists() or any(cache.glob("*/uml.json"))
        return ("the user-mode Linux build is from another recipe (python -m engine.sandbox "
                "build)" if other else "user-mode Linux is not built (python -m engine.sandbox "
                "build)")
    if not info.get("suite"):
        return info.get("why", "no candidate kernel worked")
    if load_uml(cache) is None:
        home = build_dir(cache) / info["suite"]
        gone = home / "linux" if not (home / "linux").is_file() else home / PRELOAD
        what = "kernel" if gone.name == "linux" else "guest's preload"
        return f"the built {what} {gone} is missing (python -m engine.sandbox build --force)"
    return None


MAP_COUNT_FILE = "/proc/sys/vm/max_map_count"
# A guest process's memory is mapped into its host process one host mapping per run of
# pages in ascending physmem order, and the host caps a process at vm.max_map_count
# mappings (65530 on Debian): a process at the cap spins for good (UML 7.2) or dies of
# SIGSEGV (6.12). Faults in ascending order (the preload, engine.caffe.wire) keep a guest
# process's count far below it (docs/sandboxes.md); the host watches it (engine.sandbox.hostmaps).
MAP_COUNT_ENOUGH = 1 << 20  # 1,048,576 mappings cover 4 GiB page by page


def max_map_count(path: str = MAP_COUNT_FILE) -> int | None:
    """The host's vm.max_map_count (None: unreadable)."""
    try:
        return int(Path(path).read_text())
    except (OSError, ValueError):
        return None


def map_count_note(count: int | None, probe_maps: dict | None = None) -> str | None:
    """The headroom the build probe measured under the host's cap; None where the cap
    cannot bind (unreadable or at least MAP_COUNT_ENOUGH)."""
    if count is None or count >= MAP_COUNT_ENOUGH:
        return None
    if probe_maps:
        worst = max(probe_maps, key=probe_maps.get)
        return (f"the build probe's guest processes peaked at {probe_maps[worst]} host "
                f"mappings ({worst}), {100 * probe_maps[worst] / count:.0f} % of the cap; "
                f"each UML run records its own peak (vm.host_maps_peak)")
    return ("no build probe measured the uml sandbox's mappings here (python -m engine.sandbox "
            "build); a guest process past the cap stalls")

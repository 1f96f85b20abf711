"""The sandboxes: a run in a kernel of its own, with its own cgroup v2 and swap: a
user-mode Linux kernel run as a host process (``--backend uml``: ``uml``) or a throwaway
qemu guest (``--backend vm``: ``guest`` builds and caches its kernel + initramfs, ``boot``
starts qemu). ``job`` runs inside either, ``run`` is the host side of ``python -m engine
run --backend uml|vm`` and of ``run-block``. ``python -m engine.sandbox build|check``
builds both or reports what this host can do.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SandboxConfig", "run_block_in_sandbox", "run_command_in_sandbox", "run_in_sandbox"]


def __getattr__(name: str) -> Any:
    # lazy: the guest imports engine.sandbox.job through this package, and every import
    # costs seconds under emulation
    if name in __all__:
        from engine.sandbox import run

        return getattr(run, name)
    raise AttributeError(f"module 'engine.sandbox' has no attribute {name!r}")

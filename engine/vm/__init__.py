"""The ``vm`` limit backend: a throwaway qemu guest with its own cgroup v2 and swap.

``guest`` builds and caches the kernel + initramfs, ``boot`` starts qemu (timeout, kill
by PID), ``job`` runs inside the guest, ``run`` is the host side of ``python -m engine
run --backend vm``. ``python -m engine.vm build|check`` builds the cached guest or
reports what this host can do.
"""

from __future__ import annotations

from typing import Any

__all__ = ["VmConfig", "run_command_in_vm", "run_in_vm"]


def __getattr__(name: str) -> Any:
    # lazy: the guest imports engine.vm.job through this package, and every import costs
    # seconds under emulation
    if name in __all__:
        from engine.vm import run

        return getattr(run, name)
    raise AttributeError(f"module 'engine.vm' has no attribute {name!r}")

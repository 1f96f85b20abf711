"""Memory-limit backends: each opens a ``Session`` that confines one run's process tree.

``open_session(backend, request, run_id)`` returns a session for ``cgroup2``, ``cgroup1``,
``systemd``, ``inherit``, ``none`` or ``auto`` (the first that works here). A limit that
cannot be enforced is an error unless ``allow_unenforced`` (``none``/``auto``), and then
the session says ``enforced = False``.
"""

from __future__ import annotations

from engine.limits.base import LimitRequest, Session
from engine.limits.none import NoneSession

# "vm" is not a session in this process: engine.cli runs the whole run in a qemu guest
# (engine.vm.run_in_vm), where it uses cgroup2
BACKENDS = ("auto", "cgroup2", "cgroup1", "systemd", "inherit", "none", "vm")

__all__ = ["BACKENDS", "LimitRequest", "Session", "open_session"]


def open_session(backend: str, request: LimitRequest, run_id: str,
                 allow_unenforced: bool = False) -> Session:
    """A session for one run under ``backend``."""
    if backend not in BACKENDS:
        from engine.errors import EdgeprofError

        raise EdgeprofError(f"unknown limit backend '{backend}'; choose one of "
                            f"{', '.join(BACKENDS)}")
    if backend == "none":
        return NoneSession(request)
    if backend == "vm":
        from engine.errors import EdgeprofError

        raise EdgeprofError("the vm backend runs the whole run in a guest: use "
                            "engine.vm.run_in_vm (python -m engine run --backend vm)")
    from engine.limits.select import open_backend

    return open_backend(backend, request, run_id, allow_unenforced)

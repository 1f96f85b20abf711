"""Memory-limit backends: each opens a ``Session`` that confines one run's process tree.

``open_session(request, run_id)`` returns a session for ``request.backend``: ``cgroup2``,
``cgroup1``, ``systemd``, ``inherit``, ``none``, ``uml``, ``vm`` or ``auto`` (the first that
works here). A
limit that cannot be enforced is an error unless ``allow_unenforced`` (``none``/``auto``/
``inherit``: runner.supervise.RECORDS_UNENFORCED), and then the session says
``enforced = False``. A ``uml`` or ``vm`` session ``runs_elsewhere``: the caller hands the
run to ``engine.sandbox.run_in_sandbox`` (a user-mode Linux kernel, or a qemu guest), where it uses
cgroup2.
"""

from __future__ import annotations

from engine.limits.base import LimitRequest, Session
from engine.limits.none import NoneSession

# The one list of backends: the CLI's choices and the workflow schema's enum follow it.
BACKENDS = ("auto", "cgroup2", "cgroup1", "systemd", "inherit", "none", "uml", "vm")
# the backends that run the whole run in a kernel of their own (engine.sandbox)
SANDBOXES = ("uml", "vm")

__all__ = ["BACKENDS", "SANDBOXES", "LimitRequest", "Session", "open_session"]


def open_session(request: LimitRequest, run_id: str, allow_unenforced: bool = False) -> Session:
    """A session for one run under ``request``, by its backend."""
    backend = request.backend
    if backend not in BACKENDS:
        from engine.errors import EdgeprofError

        raise EdgeprofError(f"unknown limit backend '{backend}'; choose one of "
                            f"{', '.join(BACKENDS)}")
    if backend == "none":
        return NoneSession(request)
    if backend in SANDBOXES:
        from engine.limits.sandbox import sandbox_session

        return sandbox_session(request)
    from engine.limits.select import open_backend

    return open_backend(backend, request, run_id, allow_unenforced)

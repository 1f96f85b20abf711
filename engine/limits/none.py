"""``none``: the unconstrained baseline; only process-level probes measure it."""

from __future__ import annotations

from engine.limits.base import Session


class NoneSession(Session):
    backend = "none"
    enforced = False

"""``none``: the unconstrained baseline; only process-level probes measure it."""

from __future__ import annotations

from engine.limits.base import LimitRequest, Session


class NoneSession(Session):
    backend = "none"
    enforced = False

    def __init__(self, request: LimitRequest) -> None:
        super().__init__(request)
        if request.limit_bytes is not None:  # asked for by name (auto says its own why)
            self.notes["unenforced_reason"] = ("--backend none sets no limit: the run is "
                                               "measured unconstrained")

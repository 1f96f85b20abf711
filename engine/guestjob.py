"""``python -m engine.guestjob MODE ...``: a sandbox guest's job (``engine.sandbox.job``),
with each run's supervisor (the ``supervise`` verb) in the job's own process: a Python
start and the engine's imports cost a few tenths of a second a run in a sandbox, and they
are done here once, while the guest's kernel settles (``engine.sandbox.job.SETTLE_S``).
An entry point, as ``engine.cli`` is: the sandbox's layer does not import the verbs."""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

from engine.cli import main as cli
from engine.sandbox import job


def supervise_here(request: Path, log: int) -> int:
    """``python -m engine supervise REQUEST`` in this process, its output and its
    children's into ``log``. A bug's traceback goes there too, as exit code 1 (as a
    process of its own would have ended): the block's next run goes on."""
    saved = [os.dup(1), os.dup(2)]
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log, 1)
    os.dup2(log, 2)
    try:
        return cli(["supervise", str(request)])
    except Exception:  # noqa: BLE001 - a crash of one run, not of the block
        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, kept in ((1, saved[0]), (2, saved[1])):
            os.dup2(kept, fd)
            os.close(kept)


if __name__ == "__main__":
    sys.exit(job.main(sys.argv[1:], supervise_here))

"""``python -m engine child SPEC`` (hidden): the measured child process of a run."""

from __future__ import annotations

import argparse
from typing import NoReturn

from engine.errors import EdgeprofError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("child", help="internal: the measured process `run` starts")
    p.add_argument("spec")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> NoReturn:
    import os

    from engine.procs import SUPERVISOR_ENV, die_with_parent, exit_now

    # before the heavy imports: GNU time (the parent) may die with the supervisor any time
    value = os.environ.get(SUPERVISOR_ENV) or "0"
    if not (value.isascii() and value.isdigit() and len(value) <= 10):
        raise EdgeprofError(f"{SUPERVISOR_ENV}={value!r:.40} is not a process id; the child "
                            f"verb is run by `python -m engine run`, which sets it")
    supervisor = int(value) or None
    if supervisor is not None and os.getppid() == supervisor:
        die_with_parent(parent=supervisor)  # run without GNU time
    else:
        die_with_parent(grandparent=supervisor)
    from engine.runner.child import child_main

    exit_now(child_main(args.spec))  # its files written and closed: the record is whole

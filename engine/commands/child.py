"""``python -m engine child SPEC`` (hidden): the measured child process of a run."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("child", help=argparse.SUPPRESS)
    p.add_argument("spec")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    import os

    from engine.procs import SUPERVISOR_ENV, die_with_parent

    # before the heavy imports: GNU time (the parent) may die with the supervisor any time
    supervisor = int(os.environ.get(SUPERVISOR_ENV) or 0) or None
    if supervisor is not None and os.getppid() == supervisor:
        die_with_parent(parent=supervisor)  # run without GNU time
    else:
        die_with_parent(grandparent=supervisor)
    from engine.runner.child import child_main

    return child_main(args.spec)

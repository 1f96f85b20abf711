"""``python -m engine supervise REQUEST`` (hidden): the vm backend's guest runs the host's
RunRequest through this."""

from __future__ import annotations

import argparse

from engine.commands.run import execute


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("supervise", help=argparse.SUPPRESS)
    p.add_argument("request", help="RunRequest JSON")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from engine.runner.request import RunRequest

    return execute(RunRequest.read(args.request))

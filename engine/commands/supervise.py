"""``python -m engine supervise REQUEST`` (hidden): the vm backend's guest runs the host's
RunRequest through this."""

from __future__ import annotations

import argparse

from engine.commands.run import check_numbers, execute
from engine.errors import EdgeprofError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("supervise", help="internal: a run request's supervisor (the vm guest's)")
    p.add_argument("request", help="RunRequest JSON")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from engine.runner.request import RunRequest

    request = RunRequest.read(args.request)
    o = request.options
    try:  # a request file is input like run's arguments: its numbers bounded the same
        check_numbers(o.batch, o.blas_threads, o.timeout_s, o.stall_s, o.seed,
                      request.probes.sample_hz)
    except TypeError:
        raise EdgeprofError(f"{args.request}: not a run request (a number of the wrong "
                            f"type)") from None
    return execute(request)

"""``python -m engine run-block``: several runs one after another in one boot of a
sandbox (``--backend uml`` or ``vm``), each its own measured process and run folder
(engine.sandbox.run.run_block_in_sandbox)."""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
import time
from pathlib import Path

from engine.errors import EdgeprofError

log = logging.getLogger(__name__)

SANDBOXES = ("uml", "vm")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run-block", help="several runs one after another in one sandbox boot "
                                         "(--backend uml or vm); writes a run folder each")
    p.add_argument("--run", action="append", required=True, metavar="ARGS",
                   help="one run's arguments as `python -m engine run` takes them, in one "
                        "quoted string; once per run, in the order they run. Every run names "
                        "the same --backend (uml or vm), --pin-cpu and --stall-timeout: they "
                        "share the guest, sized for every run's --limit and --swap")
    p.add_argument("--log", action="append", metavar="FILE",
                   help="a file for each run's own messages (how it ended), once per --run "
                        "in its order (default: standard error only)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from engine.commands.run import outcome, parse_run_args, run_request
    from engine.sandbox import run_block_in_sandbox
    from engine.signals import Interrupted

    logs = args.log or []
    if logs and len(logs) != len(args.run):
        raise EdgeprofError(f"{len(logs)} --log for {len(args.run)} --run: give one --log per "
                            f"--run, or none")
    parsed = []
    for words in args.run:
        try:
            parsed.append(parse_run_args(shlex.split(words)))
        except ValueError as exc:  # an unclosed quote
            raise EdgeprofError(f"--run {words!r}: {exc}") from None
    backends = {a.backend for a in parsed}
    if len(backends) > 1 or not backends <= set(SANDBOXES):
        raise EdgeprofError(f"--run: backends {', '.join(sorted(backends))}; the runs of a "
                            f"block share one sandbox boot: give each --backend uml, or each "
                            f"--backend vm")
    requests = [run_request(a) for a in parsed]
    outs = [str(Path(r.out).resolve()) for r in requests]
    if len(set(outs)) < len(outs):
        raise EdgeprofError("two --run name the same --out; give each run its own folder")
    t0 = time.perf_counter()
    try:
        metas = run_block_in_sandbox(requests, sandbox=backends.pop())
    except Interrupted as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 130
    shared = (time.perf_counter() - t0) / len(requests)  # the boot's, a run's share
    code = 0
    for i, (a, request, meta) in enumerate(zip(parsed, requests, metas)):
        # its own time in the guest where the guest said it, else its share of the block's
        said, error = outcome(request, meta, (meta.sandbox or {}).get("guest_job_s") or shared)
        lines = said + ([error] if error else [])
        for line in said:
            log.info(line)
        if error:
            print(error, file=sys.stderr)
            code = code or (0 if a.error_is_result else 1)
        if logs:
            Path(logs[i]).write_text("".join(f"{line}\n" for line in lines))
    return code

"""``python -m engine run``: run one pipeline under one policy; writes a run folder."""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from dataclasses import asdict
from typing import TYPE_CHECKING, NoReturn

from engine.commands.options import (
    MAX_BATCH,
    MAX_BLAS_THREADS,
    MAX_SAMPLE_HZ,
    MAX_SEED,
    MIN_SAMPLE_HZ,
    add_runtime_option,
    add_split_option,
    limit_size,
    positive,
    size,
    swap,
)
from engine.errors import EdgeprofError
from engine.limits import BACKENDS
from engine.units import format_size

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from engine.runner.meta import RunMeta
    from engine.runner.request import RunRequest


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run one pipeline under one policy; writes a run folder")
    p.add_argument("--pipeline", required=True, help="pipeline .json file")
    p.add_argument("--policy", required=True,
                   help="bulk, linear, partial[:k], deepeye, deepeye-frugal, execprio[:k], "
                        "execprio-inter[:k], masa[:k]")
    add_split_option(p, help="folder of the split networks' *.description.json (python -m "
                     "engine split's --out)")
    p.add_argument("--out", required=True, help="run folder to write")
    p.add_argument("--limit", help="RAM limit, e.g. 512M (omit it for none)")
    p.add_argument("--swap", help="swap allowed on top of the limit: a size, 0, or max "
                   "(default: max, as EdgeCaffe's memsw of several GB)")
    p.add_argument("--backend", default="auto", choices=BACKENDS,
                   help="how the limit is enforced (vm: in a qemu guest with its own cgroup v2 "
                        "and swap; auto: first that works, the vm when a limit is asked for "
                        "and nothing else can enforce it; a run whose "
                        "limit is not enforced is marked limit_enforced=false)")
    p.add_argument("--budget", help="masa admission budget (default: the limit)")
    p.add_argument("--estimates", help="JSON of network -> peak bytes for masa (profiling run)")
    p.add_argument("--blas-threads", type=int, default=1,
                   help="BLAS threads per operation (default 1; keep it equal across "
                        "policies: the thread count changes float rounding)")
    p.add_argument("--seed", type=int, default=0, help="input image seed")
    p.add_argument("--batch", type=int, help="override every network's batch size")
    add_runtime_option(p)
    p.add_argument("--timeout", type=float, help="wall-clock limit in seconds (termination "
                   "'timeout')")
    p.add_argument("--stall-timeout", type=float, metavar="S",
                   help="end the run as a 'timeout' once for S seconds no task started or "
                        "ended and its memory and swap did not change (a sandbox stuck "
                        "under swap: docs/sandboxes.md)")
    p.add_argument("--heap-profile", action="store_true",
                   help="preload tcmalloc and dump a heap profile at every task boundary")
    p.add_argument("--cpu-profile", action="store_true", help="gperftools CPU profile (yep)")
    p.add_argument("--sample-hz", type=float, default=100.0,
                   help="sampler rate (default 100; 0 disables)")
    p.add_argument("--sample-uss", action="store_true",
                   help="sampler also reads USS (smaps_rollup: costly, disturbs the run)")
    p.add_argument("--pin-cpu", action="store_true",
                   help="run the measured child alone on one CPU and the supervisor and "
                        "sampler on the others (recorded as cpu_affinity)")
    p.add_argument("--no-probes", action="store_true",
                   help="no per-window probes, GNU time or sampler (overhead baseline)")
    p.add_argument("--force", action="store_true", help="replace an existing run folder")
    p.add_argument("--error-is-result", action="store_true",
                   help="a run that ends 'error' (its process crashed) exits 0: its folder "
                        "records the crash, counted in the tables (the workflow's sandbox "
                        "runs; exit 1 otherwise)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    return execute(run_request(args), args.error_is_result)


def _estimates(path: str) -> dict[str, int]:
    """masa's --estimates file: {network: peak bytes}."""
    from engine.files import parse_json, read_regular

    try:
        data = parse_json(read_regular(path, "estimates file", 2**20))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        estimates = {}
        for name, peak in data.items():
            if (isinstance(peak, bool) or not isinstance(peak, (int, float))
                    or not math.isfinite(peak) or peak != int(peak)):
                raise ValueError(f"{name}: {peak!r:.40} is not a whole number of bytes")
            estimates[str(name)] = int(peak)
    except (OSError, ValueError, TypeError) as exc:
        raise EdgeprofError(f"--estimates {path}: {exc}; it must hold {{network: peak "
                            f"bytes}}") from None
    if any(v <= 0 for v in estimates.values()):
        raise EdgeprofError(f"--estimates {path}: every peak must be > 0 bytes")
    return estimates


def check_numbers(batch: int | None, blas_threads: int, timeout_s: float | None,
                  stall_s: float | None, seed: int, sample_hz: float) -> None:
    """A run's numbers within their bounds, named by their flags: for ``run``'s arguments
    and for a request read from a file (``supervise``)."""
    positive(batch, "--batch", most=MAX_BATCH)
    positive(blas_threads, "--blas-threads", most=MAX_BLAS_THREADS)
    positive(timeout_s, "--timeout")
    positive(stall_s, "--stall-timeout")
    positive(seed, "--seed", allow_zero=True, most=MAX_SEED)
    positive(sample_hz, "--sample-hz", allow_zero=True, most=MAX_SAMPLE_HZ)
    if 0 < sample_hz < MIN_SAMPLE_HZ:
        raise EdgeprofError(f"--sample-hz {sample_hz:g}: 0 (no sampler) or from "
                            f"{MIN_SAMPLE_HZ:g} to {MAX_SAMPLE_HZ:g}")


def run_request(args: argparse.Namespace) -> RunRequest:
    """The RunRequest of ``run``'s arguments, checked (sizes, ranges, the policy)."""
    from engine.limits import LimitRequest
    from engine.runner.request import ProbeOptions, RunOptions, RunRequest
    from engine.sandbox.paths import check_share
    from engine.schedule.policies import parse_policy

    policy = parse_policy(args.policy)  # fail fast, before any process starts
    limit = None if args.limit is None else limit_size(args.limit)
    swap_bytes = swap(args.swap)
    check_numbers(args.batch, args.blas_threads, args.timeout, args.stall_timeout, args.seed,
                  args.sample_hz)
    if args.swap is not None and args.limit is None:
        raise EdgeprofError("--swap is the swap allowed on top of --limit; give a --limit too")
    check_share(args.out, args.backend)  # a sandbox named: its share, before anything runs
    if (args.budget or args.estimates) and not policy.admission:
        raise EdgeprofError(f"--budget and --estimates set masa's admission; {policy.name} "
                            f"admits every network: drop them or use masa")
    estimates = None
    if args.estimates:
        estimates = _estimates(args.estimates)
    options = RunOptions(blas_threads=args.blas_threads, seed=args.seed, batch=args.batch,
                         budget=size(args.budget, "--budget") if args.budget else limit,
                         timeout_s=args.timeout, stall_s=args.stall_timeout,
                         estimates=estimates, pin_cpu=args.pin_cpu,
                         runtime=args.runtime)
    on = not args.no_probes
    probes = ProbeOptions(process=on, cgroup=on, gnu_time=on, heap_profile=args.heap_profile,
                          cpu_profile=args.cpu_profile, sample_hz=args.sample_hz if on else 0,
                          sample_uss=args.sample_uss)
    return RunRequest(pipeline=args.pipeline, policy=policy.name, split=args.split,
                      out=args.out, options=options,
                      limits=LimitRequest(limit, swap_bytes, args.backend), probes=probes,
                      force=args.force)


class _WordsParser(argparse.ArgumentParser):
    """A parser of run arguments given as words (not the command line): a bad one is an
    EdgeprofError naming it, never an exit."""

    def error(self, message: str) -> NoReturn:
        raise EdgeprofError(f"python -m engine run: {message}")


def parse_run_args(words: list[str]) -> argparse.Namespace:
    """``python -m engine run``'s arguments ``words``, parsed by its own parser."""
    parser = _WordsParser(prog="python -m engine", exit_on_error=False)
    add_parser(parser.add_subparsers())
    return parser.parse_args(["run", *words])


def parse_request(words: list[str]) -> RunRequest:
    """The request ``python -m engine run`` makes of ``words`` (its arguments): how the
    workflow learns what its run rules' flags ask for, from this parser, not a copy."""
    return run_request(parse_run_args(words))


def execute(request: RunRequest, error_is_result: bool = False) -> int:
    """One run on this host, or in the vm backend's guest when the session says so; exit
    1 when its process crashed (termination ``error``), unless ``error_is_result``."""
    from engine.runner.supervise import open_run_session, run_supervised
    from engine.signals import Interrupted

    t0 = time.perf_counter()
    try:
        session = open_run_session(request)
        where = "in a sandbox" if session.runs_elsewhere else "here"
        log.debug(f"backend {session.backend}, {where} ({session.notes or 'no notes'}); the "
                  f"request: {json.dumps(asdict(request))}")
        if session.runs_elsewhere:
            from engine.sandbox import run_in_sandbox

            session.close()  # nothing to close here: the guest opens its own
            meta = run_in_sandbox(request, auto=session.notes.get("auto"), sandbox=session.backend)
        else:
            meta = run_supervised(request, session)  # closes the session
    except Interrupted as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 130
    said, error = outcome(request, meta, time.perf_counter() - t0)
    for line in said:
        log.info(line)
    if error is not None:
        print(error, file=sys.stderr)
        return 0 if error_is_result else 1
    return 0


def outcome(request: RunRequest, meta: RunMeta, seconds: float) -> tuple[list[str], str | None]:
    """How a run ended, in lines, and its error line (None unless its process crashed:
    termination ``error``)."""
    enforced = f"enforced by {meta.backend}" if meta.limit_enforced else "NOT enforced"
    limit = request.limits.limit_bytes
    limit_text = "unlimited" if limit is None else f"{format_size(limit)} {enforced}"
    said = [f"{meta.pipeline.name} under {meta.policy} ({limit_text}): {meta.termination} "
            f"in {seconds:.2f} s -> {os.path.normpath(request.out)}"]
    if meta.termination == "memory":
        said.append(f"  {_oom_moment(meta.running_at_end, meta.tasks_finished)}")
    elif meta.termination == "ok" and meta.termination_detail:  # killed only as it exited
        said.append(f"  {meta.termination_detail}")
    error = f"error: {meta.termination_detail}" if meta.termination == "error" else None
    return said, error


def _oom_moment(running: list[str], finished: int | None) -> str:
    """When a run killed for memory was killed: the tasks it was running, or else where
    between them."""
    if running:
        return f"OOM while running: {', '.join(running)}"
    if not finished:
        return ("OOM before its first task started (the engine's own start-up: the limit is "
                "below what the interpreter and numpy need)")
    return f"OOM between tasks, after {finished} had finished"

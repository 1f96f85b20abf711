"""``python -m engine fit-model``: fit the slowdown model on the aggregate tables."""

from __future__ import annotations

import argparse
import logging
import time

from engine.commands.options import add_tables_options, not_over_inputs, output_file

log = logging.getLogger(__name__)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fit-model", help="fit the slowdown model on the aggregate tables")
    add_tables_options(p)
    p.add_argument("--out", default="results/model/model.json", help="model file to write")
    p.add_argument("--policies", nargs="+", help="what advise ranks by default (default: "
                   "the policies of the runs)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> None:
    from engine.model.train import fit_model_files
    from engine.schedule.policies import parse_policy

    for policy in args.policies or ():
        parse_policy(policy)  # before the fit, not after it
    output_file(args.out, "--out")
    not_over_inputs(args.out, "--out", [*args.tables, *args.split],
                    "the tables or descriptions it fits on")

    t0 = time.perf_counter()
    model = fit_model_files(args.tables, args.split, args.out, args.policies)
    for name, mode in model.modes.items():
        swap = ("none (no finished limited runs)" if mode.swap is None
                else f"unknown where no page moved ({mode.swap.unknown_why})"
                if mode.swap.unknown_why
                else "fitted")
        log.info(f"{name}: {mode.runs} runs of {len(mode.pipelines)} pipelines; baseline "
                 f"{mode.baseline_bytes / 2**20:.1f} MiB, parallel CPUs {mode.parallel_cpus:.2f} "
                 f"of {mode.cpus:g}, swap cost {swap}")
    log.info(f"-> {args.out} in {time.perf_counter() - t0:.1f} s")

"""``python -m engine results-report``: a campaign's RAM and swap per size bin and limit,
least and most per policy, as the Markdown tables the docs quote."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("results-report", help="a campaign's least and most RAM and swap "
                       "per size bin and limit, as Markdown tables")
    p.add_argument("--tables", default="results/tables",
                   help="the campaign's aggregate tables (default results/tables)")
    p.add_argument("--mode", help="only this execution mode's rows (native, uml, vm) in "
                   "the side-by-side table")
    p.add_argument("--peaks-only", action="store_true",
                   help="only the side-by-side table of peak RAM and swap")
    p.add_argument("--batch-crossings", action="store_true",
                   help="instead, the batch at which each policy's unconstrained peak RAM "
                   "first passes each of the paper's limits (runs at two batches or more)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> None:

    from engine.analysis.report import report

    print(report(args.tables, args.mode, args.peaks_only, args.batch_crossings))

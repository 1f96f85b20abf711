"""``python -m engine model-report``: the model's results as the Markdown tables
docs/model.md quotes."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("model-report", help="the model's results as the Markdown tables "
                       "docs/model.md quotes")
    p.add_argument("--dir", default="results/model", help="the model's results folder")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> None:
    from engine.model.report import report

    print(report(args.dir))

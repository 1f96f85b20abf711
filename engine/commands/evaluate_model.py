"""``python -m engine evaluate-model``: cross-validate the model (leave pipelines out) and
tabulate its per-layer residuals."""

from __future__ import annotations

import argparse
import sys
import time


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evaluate-model", help="cross-validate the model (leave pipelines "
                       "out) and tabulate its per-layer residuals")
    p.add_argument("--tables", default="results/tables")
    p.add_argument("--models", default="results/split")
    p.add_argument("--model", default="results/model/model.json")
    p.add_argument("--out", default="results/model", help="folder for the cv_* tables, "
                   "layer_residuals and cv.json")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> None:
    from engine.model.evaluate import evaluate_files

    t0 = time.perf_counter()
    summary = evaluate_files(args.tables, args.models, args.model, args.out)
    for mode, scores in summary.items():
        print(f"{mode}: {scores}", file=sys.stderr)
    print(f"-> {args.out} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)

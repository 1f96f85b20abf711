"""``python -m engine evaluate-model``: cross-validate the model (leave pipelines out,
leave networks out, leave batches out) and tabulate its per-layer residuals."""

from __future__ import annotations

import argparse
import logging
import time

from engine.commands.options import (
    MAX_ORDERINGS,
    add_model_tables_parser,
    not_over_inputs,
    output_dir,
    positive,
)
from engine.files import flat_paths

log = logging.getLogger(__name__)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = add_model_tables_parser(sub, "evaluate-model", "cross-validate the model (leave "
                                "pipelines, networks or batches out) and tabulate its "
                                "per-layer residuals",
                                "the cv_* tables, layer_residuals and cv.json")
    p.add_argument("--orderings", type=int, default=40, help="orderings replayed per "
                   "multi-worker cell for its peak's range (default 40)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> None:
    from engine.analysis.tablefiles import check_table_outputs
    from engine.model.evaluate import CV_SUMMARY, EVALUATE_TABLES, evaluate_files

    positive(args.orderings, "--orderings", most=MAX_ORDERINGS)
    output_dir(args.out, "--out")  # before the work, not after it
    check_table_outputs(args.out, EVALUATE_TABLES, [CV_SUMMARY])
    not_over_inputs(args.out, "--out", flat_paths(args.tables, args.split, args.model),
                    "the tables, descriptions or model it scores")
    t0 = time.perf_counter()
    summary = evaluate_files(args.tables, args.split, args.model, args.out, args.orderings)
    for line in summary_lines(summary):
        log.info(line)
    log.info(f"-> {args.out} in {time.perf_counter() - t0:.1f} s")


def summary_lines(summary: dict) -> list[str]:
    """``evaluate_files``' summary as text, one line per note or score (a log reader
    reads sentences, not a dict's repr)."""
    lines = []
    for mode, schemes in summary.items():
        if not isinstance(schemes, dict):  # the model's SHA-256
            continue
        for scheme, entry in schemes.items():
            if scheme.endswith("_log_error_pi"):  # advise's intervals, not scores
                continue
            lines += [f"{mode} {scheme}: {note}" for note in entry.get("notes", [])]
            for name, value in entry.items():
                if name == "notes":
                    continue
                shown = "n/a" if value is None else (
                    f"{value:.3g}" if isinstance(value, float) else value)
                lines.append(f"{mode} {scheme} {name}: {shown}")
    return lines

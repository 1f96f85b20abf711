"""``python -m engine score-holdout``: score the fitted model on pipelines drawn with a
seed never used in fitting."""

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
    p = add_model_tables_parser(sub, "score-holdout", "score the fitted model on pipelines "
                                "drawn with a seed never used in fitting (--tables: the "
                                "held-out runs, aggregated apart)", "the holdout_* tables")
    p.add_argument("--orderings", type=int, default=40)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> None:
    from engine.analysis.tablefiles import check_table_outputs
    from engine.model.evaluate import HOLDOUT_TABLES, score_holdout_files

    positive(args.orderings, "--orderings", most=MAX_ORDERINGS)
    output_dir(args.out, "--out")  # before the work, not after it
    check_table_outputs(args.out, HOLDOUT_TABLES, ())
    not_over_inputs(args.out, "--out", flat_paths(args.tables, args.split, args.model),
                    "the tables, descriptions or model it scores")
    t0 = time.perf_counter()
    table = score_holdout_files(args.tables, args.split, args.model, args.out,
                                args.orderings)
    for row in table[table["metric"] == "cross-validation"].itertuples():
        log.info(f"{row.mode}: {row.note}")  # what was left out, and why
    for row in table.dropna(subset=["value"]).itertuples():
        if "," not in row.scope:
            log.info(f"{row.mode} {row.metric} ({row.scope}): {row.value:.3g}")
    log.info(f"-> {args.out} in {time.perf_counter() - t0:.1f} s")

"""``python -m engine reconstruct-model``: native-speed times under each limit from native
task times and the sandbox's page traffic, its validation in the sandbox, the swap-cost
axis."""

from __future__ import annotations

import argparse
import logging
import time

from engine.commands.options import (
    MAX_RESAMPLES,
    MIN_RESAMPLES,
    add_model_tables_parser,
    not_over_inputs,
    output_dir,
    positive,
)
from engine.errors import EdgeprofError
from engine.files import flat_paths

log = logging.getLogger(__name__)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = add_model_tables_parser(sub, "reconstruct-model", "native-speed times under each "
                                "limit from native task times and the sandbox's page "
                                "traffic; its validation in the sandbox; the swap-cost axis",
                                "the reconstruction and swap_cost_* tables")
    p.add_argument("--resamples", type=int, default=200, help="bootstrap resamples of "
                   "each CI (default 200)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> None:
    from engine.analysis.tablefiles import check_table_outputs
    from engine.model.reconstruct import RECONSTRUCT_TABLES, reconstruct_files

    positive(args.resamples, "--resamples", most=MAX_RESAMPLES)
    if args.resamples < MIN_RESAMPLES:
        raise EdgeprofError(f"--resamples {args.resamples}: at least {MIN_RESAMPLES} for a "
                            f"bootstrap CI (the schema's model.resamples minimum too)")
    output_dir(args.out, "--out")  # before the work, not after it
    check_table_outputs(args.out, RECONSTRUCT_TABLES, ())
    not_over_inputs(args.out, "--out", flat_paths(args.tables, args.split, args.model),
                    "the tables, descriptions or model it rebuilds from")
    t0 = time.perf_counter()
    tables = reconstruct_files(args.tables, args.split, args.model, args.out,
                               args.resamples)
    for row in tables["reconstruction_scores"].itertuples():
        log.info(f"{row.sandbox}/{row.runtime} {row.scope}: {row.metric} {row.value:.1f} "
                 f"[{row.ci_low:.1f}, {row.ci_high:.1f}] over {row.n} values of "
                 f"{row.pipelines} pipelines")
    log.info(f"-> {args.out} in {time.perf_counter() - t0:.1f} s")

"""``python -m engine calibrate``: measure a device's per-page swap costs from short
limited runs (for ``advise --swap-cost``)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from engine.commands.options import (
    add_split_option,
    limit_size,
    not_over_inputs,
    output_dir,
    output_file,
    positive,
)
from engine.limits import BACKENDS
from engine.signals import signals_unwind
from engine.units import format_size

log = logging.getLogger(__name__)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="measure a device's per-page swap costs from "
                       "short limited runs (for advise --swap-cost)")
    p.add_argument("--limit", required=True, help="a limit that makes the network swap, "
                   "e.g. 48M for AgeNet")
    p.add_argument("--backend", choices=BACKENDS, default="auto",
                   help="how the limit is enforced (default auto; none and inherit set none)")
    p.add_argument("--network", default="AgeNet", help="the network run (default AgeNet)")
    add_split_option(p, default="results/split", help="folder of the split networks' "
                     "*.description.json (default results/split)")
    p.add_argument("--repetitions", type=int, default=3,
                   help="runs unconstrained and under the limit, each (default 3)")
    p.add_argument("--out", required=True, help="device file to write (.json)")
    p.add_argument("--name", help="the device's name (default: --out's stem)")
    p.add_argument("--work", help="folder for the runs (default: <out stem>.runs beside it)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> None:
    from engine.model.calibrate import calibrate

    limit = limit_size(args.limit)
    positive(args.repetitions, "--repetitions", most=100)
    out = output_file(args.out, "--out")  # before any run, not after them
    not_over_inputs(out, "--out", [args.split], "the descriptions it runs")
    work = Path(args.work) if args.work else out.with_name(out.stem + ".runs")
    output_dir(str(work), "--work")
    not_over_inputs(work, "--work", [args.split, out], "what it reads or writes")
    with signals_unwind():  # SIGTERM/SIGHUP end the run under way and remove --work too
        device = calibrate(args.split, args.network, format_size(limit), args.backend,
                           args.repetitions, work, out, args.name or out.stem)
    log.info(f"{device.name}: {device.per_page_in_s * 1e6:.1f} us per page in, "
             f"{device.per_page_out_s * 1e6:.1f} us out ({device.source}) -> {out}")

"""``python -m engine advise``: rank the policies for a pipeline under a limit, or find the
smallest limit without swap."""

from __future__ import annotations

import argparse

from engine.commands.options import MAX_BATCH, add_split_option, limit_size, positive, swap
from engine.errors import EdgeprofError
from engine.runtime import RUNTIMES


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("advise", help="rank the policies for a pipeline under a limit "
                       "(predicted time, peak RAM and swap), or find the smallest limit "
                       "without swap")
    p.add_argument("--pipeline", required=True, help="pipeline .json")
    p.add_argument("--limit", help="RAM limit, e.g. 512M (omit it for unconstrained)")
    p.add_argument("--swap", help="swap allowed on top of the limit: a size, 0, or max "
                   "(default max)")
    p.add_argument("--model", default="results/model/model.json",
                   help="model file (default results/model/model.json)")
    add_split_option(p, default="results/split", help="folder of the split networks' "
                     "*.description.json (default results/split)")
    p.add_argument("--policies", nargs="+", help="policies to rank (default: the ones the "
                   "model was fitted on)")
    p.add_argument("--mode", help="execution mode whose fit to use: native, a sandbox "
                   "(vm, uml) or emulated (the only sandbox fitted); default native")
    p.add_argument("--runtime", choices=RUNTIMES,
                   help="runtime whose fit to use (default lean, or the only one fitted)")
    p.add_argument("--batch", type=int, help="the batch size every network runs at "
                   "(default: the one the model was fitted at; needed where it was fitted at "
                   "several)")
    p.add_argument("--swap-cost", help="price the swap traffic on a device: a profile ("
                   "zram-rpi4, nvme, sd-a2, sd-a1), a sandbox the model measured (vm, uml), "
                   "a file of python -m engine calibrate, or a time per page (50us)")
    p.add_argument("--strict", action="store_true", help="refuse (exit 2) a pipeline, "
                   "policy, limit or batch outside what the model was fitted on")
    p.add_argument("--find-limit", action="store_true",
                   help="the smallest limit at which each policy runs without swapping")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> None:
    from engine.model.advise import run_advise

    if args.find_limit and args.limit is not None:
        raise EdgeprofError("--find-limit finds the limit itself; drop --limit")
    limit = None if args.limit in (None, "none") else limit_size(args.limit)
    if args.swap is not None and limit is None:
        raise EdgeprofError("--swap is the swap allowed on top of --limit; give a --limit too")
    positive(args.batch, "--batch", most=MAX_BATCH)
    print(run_advise(args.pipeline, args.model, args.split, limit, swap(args.swap),
                     args.policies, args.mode, args.find_limit, args.json, args.runtime,
                     args.swap_cost, args.strict, args.batch))

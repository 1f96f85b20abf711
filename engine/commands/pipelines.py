"""``python -m engine pipelines``: generate seeded multi-network pipelines."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from engine.commands.options import (
    MAX_SEED,
    add_split_option,
    folder_lock,
    not_over_inputs,
    output_dir,
    output_file,
    positive,
)
from engine.errors import EdgeprofError
from engine.files import staged

log = logging.getLogger(__name__)

# Far above any sweep this project runs, low enough that a typo (1e12) is refused at once,
# not after an hour (documented in --help)
MAX_PIPELINES = 10_000  # the config schema's pipelines.count too


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pipelines", help="generate seeded multi-network pipelines")
    add_split_option(p, help="folder of the split networks' *.description.json (python -m "
                     "engine split's --out)")
    p.add_argument("--out", required=True, help="folder for <prefix>NNN.json pipeline files")
    p.add_argument("--count", type=int, default=5,
                   help=f"pipelines to write, 1 to {MAX_PIPELINES:,} (default 5)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--length", type=int, nargs=2, default=[2, 5], metavar=("MIN", "MAX"),
                   help="networks per pipeline (default 2 5)")
    p.add_argument("--arrival", choices=["batch", "poisson", "normal"], default="batch")
    p.add_argument("--rate", type=float, help="poisson: networks per second (default 1)")
    p.add_argument("--mean", type=float, help="normal: mean gap in seconds (default 1)")
    p.add_argument("--sd", type=float, help="normal: gap sd in seconds (default 0.5)")
    bins = p.add_mutually_exclusive_group()
    bins.add_argument("--bins", type=float, nargs="+", default=[100, 300],
                      help="upper edges (MiB) of the pipeline-size bins (default 100 300)")
    bins.add_argument("--bins-mb", type=float, nargs="+",
                      help="the same in decimal MB (10**6 bytes), e.g. 400 800 1200")
    p.add_argument("--networks", nargs="+", help="draw from these (default: all split models)")
    p.add_argument("--prefix", default="p", help="pipeline names: <prefix>NNN (default p)")
    p.add_argument("--force", action="store_true",
                   help="replace pipeline files in --out that differ from the ones written")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> None:
    from engine.caffe.splitter import Description, description_index
    from engine.schedule import pipelines
    from engine.schedule.pipelines import ARRIVAL_DEFAULTS, ARRIVAL_PARAMS

    models = description_index(args.split)
    if not models:
        raise EdgeprofError(f"--split {args.split} holds no network descriptions; split "
                            f"the models first (python -m engine split) or point --split "
                            f"at the folder split wrote")
    names = args.networks or sorted(models)
    unknown = sorted(set(names) - set(models))
    if unknown:
        raise EdgeprofError(f"no split model for {', '.join(unknown)} in {args.split} "
                            f"(available: {', '.join(sorted(models)) or 'none'})")
    sizes = {n: Description.load_checked(models[n], files=False).param_bytes for n in names}
    given = {k: getattr(args, k) for k in ARRIVAL_DEFAULTS if getattr(args, k) is not None}
    wrong = sorted(set(given) - set(ARRIVAL_PARAMS[args.arrival]))
    if wrong:
        mode = next(m for m, params in ARRIVAL_PARAMS.items() if wrong[0] in params)
        raise EdgeprofError(f"--{wrong[0]} is for {mode} arrivals, not {args.arrival}; drop "
                            f"it or give --arrival {mode}")
    arrival = {"mode": args.arrival, **{k: given.get(k, ARRIVAL_DEFAULTS[k])
                                        for k in ARRIVAL_PARAMS[args.arrival]}}
    positive(args.count, "--count", most=MAX_PIPELINES)
    positive(args.seed, "--seed", allow_zero=True, most=MAX_SEED)
    made = pipelines.generate_pipelines(args.seed, args.count, sizes, tuple(args.length),
                                        arrival, args.bins_mb or args.bins, prefix=args.prefix,
                                        bin_unit="MB" if args.bins_mb else "MiB")
    out = output_dir(args.out, "--out")
    not_over_inputs(out, "--out", [args.split], "the split models it draws from")
    for p in made:  # every file checked before the first is written: no half a set
        output_file(str(out / f"{p.name}.json"), "--out")
    out.mkdir(parents=True, exist_ok=True)
    with folder_lock(out, "--out", "pipelines", f"{args.prefix}NNN.json"):
        _write(args, made, out)


def _write(args: argparse.Namespace, made: list, out: Path) -> None:
    from engine.schedule import pipelines

    names = {f"{p.name}.json" for p in made}
    stale = sorted(f.name for f in out.glob(f"{args.prefix}[0-9][0-9][0-9].json")
                   if f.name not in names)
    if stale:
        raise EdgeprofError(f"--out {out} holds {', '.join(stale[:3])} of an earlier set, "
                            f"which this one would sit beside; remove them or choose another "
                            f"--out")
    # a file of the same name that differs (another seed, one written by hand) is never
    # replaced unasked; the same set again is left as it is
    differ = [p.name for p in made if (out / f"{p.name}.json").is_file()
              and (out / f"{p.name}.json").read_text(errors="replace") != p.to_json()]
    if differ and not args.force:
        raise EdgeprofError(f"--out {out}: {differ[0]}.json exists and is not the pipeline "
                            f"this set writes (another seed, or a file of yours); remove it, "
                            f"choose another --out, or pass --force to replace it")
    with staged(out, f".{args.prefix}NNN.") as tmp:  # an interrupted set leaves none
        for p in made:
            pipelines.save_pipeline(p, tmp / f"{p.name}.json")
    for p in made:
        log.info(f"{p.name}: {len(p.networks())} networks, {p.param_bytes / 2**20:.0f} MiB "
                 f"({p.size_bin}), {args.arrival}")

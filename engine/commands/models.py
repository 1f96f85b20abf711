"""``python -m engine models``: write the zoo networks as prototxt + caffemodel."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from engine.commands.options import MAX_SEED, output_dir, output_file, positive
from engine.errors import EdgeprofError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="write the zoo networks as prototxt + caffemodel")
    p.add_argument("--out", required=True, help="folder for <stem>.prototxt/.caffemodel")
    p.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    p.add_argument("networks", nargs="*", help="zoo networks (default: all of them)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> None:
    from engine.caffe import generate, zoo

    positive(args.seed, "--seed", allow_zero=True, most=MAX_SEED)
    output_dir(args.out, "--out")
    names = list(dict.fromkeys(args.networks or zoo.ZOO))  # each network once
    for name in names:
        if name not in zoo.ZOO:
            raise EdgeprofError(f"unknown zoo network '{name}' (known: {', '.join(zoo.ZOO)})")
    for name in names:  # every file checked before the first is written: no half a zoo
        for suffix in (".prototxt", ".caffemodel"):
            output_file(str(Path(args.out) / f"{zoo.ZOO[name].stem}{suffix}"), "--out")
    for name in names:
        t0 = time.perf_counter()
        prototxt, caffemodel = generate.write_zoo_model(name, args.out, args.seed)
        size = caffemodel.stat().st_size
        print(f"{name}: wrote {caffemodel} ({size / 2**20:.1f} MiB) and {prototxt.name} "
              f"in {time.perf_counter() - t0:.2f} s", file=sys.stderr)

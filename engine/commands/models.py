"""``python -m engine models``: write the zoo networks as prototxt + caffemodel."""

from __future__ import annotations

import argparse
import filecmp
import logging
import time
from pathlib import Path

from engine.commands.options import MAX_SEED, output_dir, output_file, positive
from engine.errors import EdgeprofError
from engine.files import made_folder, staged

log = logging.getLogger(__name__)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="write the zoo networks as prototxt + caffemodel")
    p.add_argument("--out", required=True, help="folder for <stem>.prototxt/.caffemodel")
    p.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    p.add_argument("--force", action="store_true",
                   help="replace model files in --out that differ from the ones written")
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
    # written aside first: a file already in --out that differs (another seed, a model of
    # the user's) is never replaced unasked, and an identical one is left as it is; a
    # --out this made is gone again if that fails
    with made_folder(args.out) as out, staged(out, ".models.") as tmp:
        made = []
        for name in names:
            t0 = time.perf_counter()
            files = generate.write_zoo_model(name, tmp, args.seed)
            made += [(name, f, time.perf_counter() - t0) for f in files]
        differ = [(name, out / f.name) for name, f, _ in made if (out / f.name).exists()
                  and not filecmp.cmp(f, out / f.name, shallow=False)]
        if differ and not args.force:
            name, path = differ[0]
            raise EdgeprofError(f"--out {out}: {path.name} exists and is not {name} at seed "
                                f"{args.seed} (another seed, or a model of yours); remove it, "
                                f"choose another --out, or pass --force to replace it")
    for name, f, took in made:
        if f.suffix == ".caffemodel":
            size = (out / f.name).stat().st_size
            log.info(f"{name}: wrote {out / f.name} ({size / 2**20:.1f} MiB) and its prototxt "
                     f"in {took:.2f} s")

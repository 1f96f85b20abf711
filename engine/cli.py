"""Command line of the engine: one subcommand per workflow stage.

Every subcommand reports bad input as one line naming the problem and exits 2; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from engine.errors import EdgeprofError


def _cmd_models(args: argparse.Namespace) -> None:
    from engine.caffe import generate, zoo

    names = args.networks or list(zoo.ZOO)
    for name in names:
        if name not in zoo.ZOO:
            raise EdgeprofError(f"unknown zoo network '{name}' (known: {', '.join(zoo.ZOO)})")
    for name in names:
        t0 = time.perf_counter()
        prototxt, caffemodel = generate.write_zoo_model(name, args.out, args.seed)
        size = caffemodel.stat().st_size
        print(f"{name}: wrote {caffemodel} ({size / 2**20:.1f} MiB) and {prototxt.name} "
              f"in {time.perf_counter() - t0:.2f} s", file=sys.stderr)


def _cmd_split(args: argparse.Namespace) -> None:
    from engine.caffe import splitter, zoo

    model = Path(args.model)
    prototxt = Path(args.prototxt) if args.prototxt else model.with_suffix(".prototxt")
    for path in (model, prototxt):
        if not path.is_file():
            raise EdgeprofError(f"{path} does not exist (a split needs a .caffemodel and its "
                                "deploy .prototxt side by side, or --prototxt)")
    entry = zoo.ZOO.get(args.network or "")
    fc_start = args.fc_start or (entry.fc_start if entry else None)
    t0 = time.perf_counter()
    path = splitter.split_model(model, prototxt, args.out, network=args.network,
                                fc_start=fc_start)
    desc = splitter.Description.load(path)
    print(f"{desc.network}: {len(desc.layers)} layers, {desc.num_conv_layers}|"
          f"{desc.num_fc_layers} conv|fc, {desc.param_count:,} parameters -> {path} "
          f"in {time.perf_counter() - t0:.2f} s", file=sys.stderr)


def _cmd_forward(args: argparse.Namespace) -> None:
    import numpy as np

    from engine.network import run_standalone

    t0 = time.perf_counter()
    outputs = run_standalone(args.description, seed=args.seed, batch=args.batch, bulk=args.bulk)
    elapsed = time.perf_counter() - t0
    for name, value in outputs.items():
        flat = value.reshape(value.shape[0], -1)[0]
        top = np.argsort(flat)[::-1][:5]
        print(f"{name} {tuple(value.shape)}: top-5 of image 0 "
              + ", ".join(f"{i}={flat[i]:.4f}" for i in top))
    print(f"load+forward took {elapsed:.3f} s", file=sys.stderr)
    if args.out:
        from engine.caffe.io import atomic_path

        with atomic_path(args.out) as tmp, open(tmp, "wb") as f:
            np.savez(f, **outputs)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m engine", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("models", help="write the zoo networks as prototxt + caffemodel")
    p.add_argument("--out", required=True, help="folder for <stem>.prototxt/.caffemodel")
    p.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    p.add_argument("networks", nargs="*", help="zoo networks (default: all five)")
    p.set_defaults(func=_cmd_models)

    p = sub.add_parser("split", help="split a caffemodel into per-layer partial files")
    p.add_argument("model", help="the whole .caffemodel")
    p.add_argument("--prototxt", help="deploy prototxt (default: beside the model)")
    p.add_argument("--out", required=True, help="folder for <stem>_partials/ and the description")
    p.add_argument("--network", help="display name (zoo names also set the conv|fc split)")
    p.add_argument("--fc-start", help="first layer of DeepEye's fc part "
                   "(default: the first InnerProduct layer)")
    p.set_defaults(func=_cmd_split)

    p = sub.add_parser("forward", help="load and run one split network on its own")
    p.add_argument("description", help="<stem>.description.json written by split")
    p.add_argument("--bulk", action="store_true", help="load the whole caffemodel at once")
    p.add_argument("--batch", type=int, help="override the deploy batch size")
    p.add_argument("--seed", type=int, default=0, help="input image seed")
    p.add_argument("--out", help="write the output blobs to this .npz")
    p.set_defaults(func=_cmd_forward)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except EdgeprofError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0

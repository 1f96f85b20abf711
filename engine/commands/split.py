"""``python -m engine split``: split a caffemodel into per-layer partial files."""

from __future__ import annotations

import argparse
import logging
import re
import time
from pathlib import Path

from engine.commands.options import output_dir
from engine.errors import EdgeprofError
from engine.signals import signals_unwind

log = logging.getLogger(__name__)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("split", help="split a caffemodel into per-layer partial files")
    p.add_argument("model", help="the whole .caffemodel")
    p.add_argument("--prototxt", help="deploy prototxt (default: beside the model)")
    p.add_argument("--out", required=True, help="folder for <stem>_partials/ and the description")
    p.add_argument("--network", help="display name (zoo names also set the conv|fc split)")
    p.add_argument("--fc-start", help="first layer of DeepEye's fc part "
                   "(default: the first InnerProduct layer)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> None:
    from engine.caffe import splitter, zoo
    from engine.files import SNAKEMAKE_MARKER, file_kind

    output_dir(args.out, "--out")
    model = Path(args.model)
    prototxt = Path(args.prototxt) if args.prototxt else model.with_suffix(".prototxt")

    for path in (model, prototxt):
        kind = file_kind(path)
        if kind != "a regular file":
            what = "does not exist" if kind == "missing" else f"is {kind}, not a file"
            raise EdgeprofError(f"{path} {what} (a split needs a .caffemodel and its "
                                "deploy .prototxt side by side, or --prototxt)")
    name = args.network
    if name is not None and (not name.strip() or name != name.strip()
                             or set(name) & set("/\\\n")):
        raise EdgeprofError(f"--network {args.network!r}: a display name, without slashes, "
                            f"newlines or spaces around it (pipelines name networks by it)")
    stem = model.name.removesuffix(".caffemodel")
    # where the set goes, checked before the work (split replaces the partials folder)
    partials, described = Path(args.out) / f"{stem}_partials", Path(args.out) / (
        f"{stem}.description.json")
    for target, want in ((partials, "a folder"), (described, "a regular file")):
        kind = "a link" if target.is_symlink() else file_kind(target)
        if kind not in ("missing", want):
            raise EdgeprofError(f"--out {args.out}: {target}, where the split writes "
                                f"{'its partials' if want == 'a folder' else 'its description'}"
                                f", is {kind}; move it away or choose another --out")
    # the partials folder is replaced whole: only if it holds nothing but a split's partials
    if partials.is_dir():
        theirs = re.compile(rf"{re.escape(stem)}\d{{2,}}\.partial\.caffemodel")
        other = sorted(e.name for e in partials.iterdir() if e.name != SNAKEMAKE_MARKER and
                       not (theirs.fullmatch(e.name) and e.is_file() and not e.is_symlink()))
        if other:
            raise EdgeprofError(f"--out {args.out}: {partials} holds {other[0]!r}"
                                f"{f' and {len(other) - 1} more' if len(other) > 1 else ''}, "
                                f"which a split does not write, and the split replaces that "
                                f"folder whole; move them away or choose another --out")
    # A zoo file keeps its zoo name and conv|fc split even when --network is not given.
    entry = zoo.ZOO.get(args.network or "") or next(
        (e for e in zoo.ZOO.values() if e.stem == stem and not args.network), None)
    fc_start = args.fc_start or (entry.fc_start if entry else None)
    network = args.network or (entry.name if entry else None)
    t0 = time.perf_counter()
    with signals_unwind():  # SIGTERM/SIGHUP clean up the half-written partials too
        path = splitter.split_model(model, prototxt, args.out, network=network,
                                    fc_start=fc_start)
    desc = splitter.Description.load(path)
    log.info(f"{desc.network}: {len(desc.layers)} layers, {desc.num_conv_layers}|"
             f"{desc.num_fc_layers} conv|fc, {desc.param_count:,} parameters -> {path} "
             f"in {time.perf_counter() - t0:.2f} s")

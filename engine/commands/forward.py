"""``python -m engine forward``: load and run one split network on its own."""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from engine.commands.options import (
    MAX_BATCH,
    MAX_BLAS_THREADS,
    MAX_SEED,
    add_runtime_option,
    not_over_inputs,
    output_file,
    positive,
)
from engine.errors import EdgeprofError

log = logging.getLogger(__name__)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("forward", help="load and run one split network on its own")
    p.add_argument("description", help="<stem>.description.json written by split")
    p.add_argument("--bulk", action="store_true", help="load the whole caffemodel at once")
    p.add_argument("--batch", type=int, help="override the deploy batch size")
    p.add_argument("--seed", type=int, default=0, help="input image seed")
    p.add_argument("--blas-threads", type=int, default=1,
                   help="BLAS threads per operation (default 1, as run's: the thread count "
                        "changes float rounding)")
    add_runtime_option(p)
    p.add_argument("--out", help="write the output blobs to this .npz, keyed as a run's "
                   "outputs.npz (0:<network>/<blob>)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> None:
    import numpy as np
    from threadpoolctl import threadpool_limits

    from engine.caffe.splitter import Description, check_batch_fits
    from engine.network import run_standalone
    from engine.runner.execute import output_key

    positive(args.batch, "--batch", most=MAX_BATCH)
    positive(args.blas_threads, "--blas-threads", most=MAX_BLAS_THREADS)
    positive(args.seed, "--seed", allow_zero=True, most=MAX_SEED)
    if args.out is not None:
        output_file(args.out, "--out")  # before the forward pass, not after it
        if not args.out.endswith(".npz"):  # np.savez's file: never over a table or JSON
            raise EdgeprofError(f"--out {args.out}: forward writes an .npz archive; name "
                                f"the file so")
    desc = Description.load_checked(args.description)
    if args.out is not None:  # its split folder holds the description and the partials
        not_over_inputs(args.out, "--out", [Path(desc.path).parent, desc.resolve(desc.prototxt),
                                            desc.resolve(desc.caffemodel)],
                        "the model files forward reads")
    check_batch_fits([[desc]], args.batch)
    desc.check_reads(bulk=args.bulk)
    t0 = time.perf_counter()
    with threadpool_limits(args.blas_threads, "blas"):  # as a run sets it
        blobs = run_standalone(desc, seed=args.seed, batch=args.batch, bulk=args.bulk,
                               runtime_name=args.runtime)
    elapsed = time.perf_counter() - t0
    # keyed as the network alone in a run (instance 0), so the two archives compare
    outputs = {output_key(0, desc.network, blob): value for blob, value in blobs.items()}
    for name, value in outputs.items():
        flat = value.reshape(value.shape[0], -1)[0]
        top = np.argsort(flat)[::-1][:5]
        print(f"{name} {tuple(value.shape)}: top-5 of image 0 "
              + ", ".join(f"{i}={flat[i]:.4f}" for i in top))
    log.info(f"load+forward took {elapsed:.3f} s")
    if args.out:
        from engine.files import atomic_path

        with atomic_path(args.out) as tmp, open(tmp, "wb") as f:
            np.savez(f, **outputs)

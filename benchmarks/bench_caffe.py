"""Forward time per network: the engine (lean and caffe runtimes) against real Caffe 1.0.

For each paper network and batch (1, and each network's deploy batch), every round runs
one fresh forward pass per side, interleaved in a rotated order: real Caffe in the
bullseye chroot (``engine/realcaffe/probe.cpp time``: a new Net, the whole caffemodel
copied in, one timed ``Forward()``, as EdgeCaffe runs each network once), and the engine
in one process per runtime (a new Network, INIT, bulk LOAD, one timed forward pass).
Everything single-threaded (OpenBLAS 1 thread: Debian's 0.3.13 in the chroot, numpy's own
here) under the measured child's allocator settings. Prints per network and batch the
median and range of each side and the median of the per-round ratios engine / Caffe,
with the load average before and after.

Usage: python benchmarks/bench_caffe.py [--rounds 7] [--networks AgeNet ...]
Needs root and the chroot (python -m engine.realcaffe build).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import zoo_split

from engine.caffe.splitter import Description
from engine.network import Network, input_blob
from engine.realcaffe import chroot, reference

PAPER = ["AgeNet", "GenderNet", "FaceNet", "SoS-AlexNet", "SoS-GoogleNet"]

ENGINE = r"""
import json, sys, time
from threadpoolctl import threadpool_limits
from engine.network import Network
desc, runtime, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]) or None
with threadpool_limits(1, "blas"):
    warm = Network(desc, batch=1, runtime_name=runtime); warm.init(0); warm.load_all()
    warm.forward(); del warm
    net = Network(desc, batch=batch, runtime_name=runtime)
    net.init(0)
    net.load_all()
    t0 = time.perf_counter()
    net.forward()
    print(json.dumps({"forward_ms": 1e3 * (time.perf_counter() - t0)}))
"""


def _engine(desc: Path, runtime: str, batch: int) -> float:
    env = {**os.environ, **reference._measured_env()}
    out = subprocess.run([sys.executable, "-c", ENGINE, str(desc), runtime, str(batch)],
                         capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout)["forward_ms"]


def _caffe(desc: Description, data: Path, work: Path, batch: int) -> float:
    argv = [chroot.PROBE, "time", chroot.WARMUP,
            reference._inside(desc.resolve(desc.prototxt), data),
            reference._inside(desc.resolve(desc.caffemodel), data),
            f"{chroot.OUT}/input.bin", "1", str(batch)]
    proc = chroot.run(argv, data, work, env=reference._measured_env())
    return json.loads(proc.stdout.splitlines()[-1])["forward_ms"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--networks", nargs="+", default=PAPER)
    args = parser.parse_args()
    why = chroot.why_unavailable()
    if why:
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    chroot.ensure_built(log=lambda m: print(m, file=sys.stderr))
    load0 = os.getloadavg()[0]
    print(f"rounds {args.rounds}; load average before: {load0:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        split = zoo_split(args.networks, root)
        sides = ("caffe (real)", "lean", "caffe runtime")
        print(f"{'network':14s} {'batch':>5s}  " + "  ".join(f"{s:>26s}" for s in sides)
              + "   lean/real  caffe-runtime/real")
        for name in args.networks:
            desc_path = next(p for p in split.glob("*.description.json")
                             if Description.load(p).network == name)
            desc = Description.load(desc_path)
            shape = next(layer.top_shapes[0] for layer in Network(desc).layers
                         if layer.type == "Input")
            work = root / "work" / name
            work.mkdir(parents=True)
            input_blob(shape, 0).tofile(work / "input.bin")
            for batch in sorted({1, shape[0]}):
                times: dict[str, list[float]] = {s: [] for s in sides}
                for r in range(args.rounds):
                    order = sides[r % 3:] + sides[:r % 3]  # rotated: no side always first
                    for side in order:
                        if side == "caffe (real)":
                            times[side].append(_caffe(desc, root, work, batch))
                        else:
                            runtime = "lean" if side == "lean" else "caffe"
                            times[side].append(_engine(desc_path, runtime, batch))
                cells = []
                for side in sides:
                    t = times[side]
                    cells.append(f"{statistics.median(t):8.2f} [{min(t):7.2f}, {max(t):7.2f}] ms")
                ratios = [statistics.median([a / b for a, b in zip(times[s], times[sides[0]])])
                          for s in sides[1:]]
                print(f"{name:14s} {batch:5d}  " + "  ".join(f"{c:>26s}" for c in cells)
                      + f"   {ratios[0]:9.2f}  {ratios[1]:18.2f}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

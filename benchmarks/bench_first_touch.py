"""What the first touch of fresh memory costs on this host, by how much the process
already holds: is a LOAD's time set by its bytes, or by the machine under it?

Each round starts a fresh interpreter, pinned to one CPU, that reads a warm file of
``--mib`` MiB ``--arrays`` times, each into its own fresh numpy array kept alive (what a
LOAD of AlexNet's fc6 does: ``engine.caffe.wire`` reads each blob into a new array). It
times each read and its system CPU time. Rounds alternate numpy's transparent-hugepage
advice on and off (``NUMPY_MADVISE_HUGEPAGE``). On bare metal every read of one round
costs about the same; on a VM whose host backs guest memory lazily, reads past some
footprint can take several times longer, intermittently (docs/performance.md, "First
touch"). A read counts as a stall when it takes over 3x the median first read.

Usage: python benchmarks/bench_first_touch.py [--mib 144] [--arrays 6] [--rounds 10]
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

STALL_FACTOR = 3.0

CHILD = r"""
import json, os, resource, sys, time
import numpy as np
path, count = sys.argv[1], int(sys.argv[2])
size = os.path.getsize(path)
held, out = [], []
for _ in range(count):
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    a = np.empty(size, np.uint8)
    with open(path, "rb", buffering=0) as f:
        got = 0
        while got < size:
            got += f.readinto(memoryview(a)[got:])
    t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    held.append(a)
    out.append({"ms": 1e3 * (t1 - t0), "sys_ms": 1e3 * (r1.ru_stime - r0.ru_stime)})
print(json.dumps(out))
"""


def one_round(path: Path, arrays: int, thp: bool, cpu: int | None) -> list[dict]:
    env = dict(os.environ, NUMPY_MADVISE_HUGEPAGE="1" if thp else "0")
    pre = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
    r = subprocess.run([sys.executable, "-c", CHILD, str(path), str(arrays)], env=env,
                       capture_output=True, text=True, preexec_fn=pre, check=True)
    return json.loads(r.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=144, help="size of each read (MiB)")
    ap.add_argument("--arrays", type=int, default=6, help="reads kept alive per process")
    ap.add_argument("--rounds", type=int, default=10, help="fresh processes per setting")
    args = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    cpu = cpus[-1] if len(cpus) > 1 else None
    results: dict[bool, list[list[dict]]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "weights.bin"
        path.write_bytes(os.urandom(args.mib * 2**20))
        path.read_bytes()  # warm the page cache, as the workflow's split files are
        for i in range(args.rounds):
            for thp in (True, False):
                results[thp].append(one_round(path, args.arrays, thp, cpu))
            print(f"round {i + 1}/{args.rounds}", file=sys.stderr)
    print(f"{args.rounds} fresh processes per setting, {args.arrays} reads of {args.mib} MiB "
          f"each, pinned to CPU {cpu}; ms per read: median [min, max]; stall: > "
          f"{STALL_FACTOR:g}x the median first read")
    for thp in (True, False):
        rounds = results[thp]
        first = statistics.median(r[0]["ms"] for r in rounds)
        print(f"\nnumpy hugepage advice {'on' if thp else 'off'}:")
        print(f"{'read':>5} {'held before':>12} {'ms median':>10} {'[min, max]':>18} "
              f"{'sys ms':>8} {'stalls':>7}")
        for k in range(args.arrays):
            ms = [r[k]["ms"] for r in rounds]
            stalls = sum(m > STALL_FACTOR * first for m in ms)
            print(f"{k + 1:>5} {k * args.mib:>8} MiB {statistics.median(ms):>10.1f} "
                  f"[{min(ms):>7.1f}, {max(ms):>7.1f}] "
                  f"{statistics.median(r[k]['sys_ms'] for r in rounds):>8.1f} "
                  f"{stalls:>3}/{len(rounds)}")
        stalled = sum(any(x["ms"] > STALL_FACTOR * first for x in r) for r in rounds)
        print(f"processes with a stall: {stalled}/{len(rounds)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

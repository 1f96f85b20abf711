"""The sandboxes' distortion, measured: what each costs against native, side by side.

Every round runs one fixed workload natively, in the user-mode Linux kernel (``uml``)
and in the qemu guest (``vm``), in a rotated order, each as the engine's runs do (one
BLAS thread; the qemu guest with its OpenBLAS core type for TCG). Parts:

- compute: a float32 sgemm (512 x 512, 4 times) and an im2col convolution
  (``engine.ops.convolution``, AlexNet's conv2: 96 x 27 x 27 in, 256 x 5 x 5 kernels);
- elementwise float32 (4M elements, 20 passes);
- first touch of fresh memory: 64 MiB written into a new buffer, per 4 KiB page;
- file read: a 64 MiB file of the host read into a new buffer (a partial's LOAD);
- a system call: ``os.stat``, per call;
- swap, in the sandboxes only (nothing can limit a native run here): under a 64 MiB
  cgroup limit, 192 MiB written once (pages swapped out), then read twice (swapped back
  in), per page moved (the guest's pswpout and pswpin).

Prints per part the median and range over ``--rounds`` of each environment and the
median of its per-round ratio to native, with the load average before and after, and
the boot time of each sandbox.

Usage: python benchmarks/bench_vm.py [--rounds 5] [--sandboxes uml vm]
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

from engine.sandbox import run_command_in_sandbox
from engine.sandbox.run import SandboxConfig

REPO = Path(__file__).resolve().parents[1]
MIB = 2**20

WORKLOAD = r"""
import json, os, sys, time
import numpy as np
sys.path.insert(0, sys.argv[2])
from engine import ops
path = sys.argv[1]
out = {}
def timed(name, f, per=1):
    t = time.perf_counter(); f(); out[name] = (time.perf_counter() - t) / per
a = np.ones((512, 512), np.float32)
timed("sgemm 512 x4 (s)", lambda: [a @ a for _ in range(4)])
x = np.ones((1, 96, 27, 27), np.float32); w = np.ones((256, 96, 5, 5), np.float32)
timed("im2col conv, AlexNet conv2 (s)", lambda: ops.convolution(x, w, None, pad=(2, 2)))
e = np.arange(4 * 2**20, dtype=np.float32)
def elementwise():
    y = e
    for _ in range(20):
        y = y * np.float32(1.0001) + np.float32(0.5)
timed("elementwise 4M x20 (s)", elementwise)
timed("first touch (us/page)", lambda: np.empty(64 * 2**20, np.uint8).fill(1),
      per=64 * 2**20 / 4096 / 1e6)
def read():
    buf = np.empty(os.path.getsize(path), np.uint8)
    with open(path, "rb", buffering=0) as f:
        got = 0
        while got < buf.size:
            got += f.readinto(memoryview(buf)[got:])
timed("file read 64 MiB (s)", read)
timed("stat (us/call)", lambda: [os.stat(path) for _ in range(2000)], per=2000 / 1e6)
print("WORKLOAD " + json.dumps(out))
"""

SWAP = r"""
import json, time
import numpy as np
def vm(k):
    for line in open("/proc/vmstat"):
        if line.startswith(k + " "):
            return int(line.split()[1])
o0, i0 = vm("pswpout"), vm("pswpin")
t = time.perf_counter()
a = np.empty(192 * 2**20, np.uint8); a.fill(1)
t_out, o1 = time.perf_counter() - t, vm("pswpout")
t = time.perf_counter()
for _ in range(2):
    s = int(a[::4096].sum())
t_in, i1 = time.perf_counter() - t, vm("pswpin")
print("WORKLOAD " + json.dumps({"swap-out (us/page)": 1e6 * t_out / max(o1 - o0, 1),
                                "swap-in (us/page)": 1e6 * t_in / max(i1 - i0, 1)}))
"""


def _parse(text: str) -> dict[str, float]:
    line = next(ln for ln in text.splitlines() if ln.startswith("WORKLOAD "))
    return json.loads(line.removeprefix("WORKLOAD "))


def _native(data: Path) -> dict[str, float]:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", NUMPY_MADVISE_HUGEPAGE="0")
    out = subprocess.run([sys.executable, "-c", WORKLOAD, str(data), str(REPO)], env=env,
                         check=True, capture_output=True, text=True).stdout
    return _parse(out)


def _sandbox(sandbox: str, argv: list[str], limit: int | None, cfg: SandboxConfig) -> tuple:
    res = run_command_in_sandbox(["/usr/bin/env", "OPENBLAS_NUM_THREADS=1",
                             "NUMPY_MADVISE_HUGEPAGE=0", *argv], limit,
                                 None if limit is None else 512 * MIB, cfg, timeout_s=900,
                                 sandbox=sandbox)
    if not res["guest"] or res["guest"]["exit_code"] != 0:
        sys.exit(f"{sandbox} workload failed:\n{res['job_log'][-2000:]}")
    return _parse(res["job_log"]), res["sandbox"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sandboxes", nargs="+", default=["uml", "vm"],
                        choices=["uml", "vm"])
    args = parser.parse_args()
    cfg = SandboxConfig.from_env()
    print(f"rounds {args.rounds}; load average before: {os.getloadavg()[0]:.2f}")
    envs = ["native", *args.sandboxes]
    times: dict[str, dict[str, list[float]]] = {e: {} for e in envs}
    facts: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data.bin"
        data.write_bytes(os.urandom(64 * MIB))
        for r in range(args.rounds):
            for env in envs[r % len(envs):] + envs[:r % len(envs)]:
                if env == "native":
                    parts = _native(data)
                else:
                    parts, facts[env] = _sandbox(
                        env, [sys.executable, "-c", WORKLOAD, str(data), str(REPO)], None, cfg)
                    swap, _ = _sandbox(env, [sys.executable, "-c", SWAP], 64 * MIB, cfg)
                    parts |= swap
                    parts["boot (s)"] = facts[env]["boot_s"]
                for name, value in parts.items():
                    times[env].setdefault(name, []).append(value)
    for env, vm in facts.items():
        print(f"{env}: Linux {vm['guest_kernel']}, {vm['accelerator']} "
              f"({vm['accelerator_reason']})"
              + (f", userspace {vm['uml_userspace']}" if vm.get("uml_userspace") else ""))
    names = list(dict.fromkeys(n for e in envs for n in times[e]))
    print(f"\n{'part':32s} " + " ".join(f"{e + ': median [range]':>30s}" for e in envs)
          + "  " + " ".join(f"{e + '/native':>11s}" for e in args.sandboxes))
    for name in names:
        cells, ratios = [], []
        for env in envs:
            v = times[env].get(name)
            cells.append(f"{statistics.median(v):10.4g} [{min(v):.4g}, {max(v):.4g}]"
                         if v else "n/a")
        base = times["native"].get(name)
        for env in args.sandboxes:
            v = times[env].get(name)
            ratios.append(f"{statistics.median([a / b for a, b in zip(v, base)]):10.1f}x"
                          if v and base else f"{'n/a':>11s}")
        print(f"{name:32s} " + " ".join(f"{c:>30s}" for c in cells) + "  " + " ".join(ratios))
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

"""The vm backend's costs: guest boot time and the emulation slowdown, in one run.

1. Boot: host wall time from starting qemu to init starting the job (``boot_s``) and to
   the first instruction of the guest's engine job (``job_start_s``: the Python
   interpreter has started and imported it), over ``--rounds`` empty boots.
2. Slowdown: a fixed numpy workload (elementwise float32, a float32 matmul, a pure-Python
   loop) timed on the host and in the guest back to back; the ratio guest/host per part.
   Both sides use the guest's OpenBLAS core type, so the ratio is the emulation's alone.

Usage: python benchmarks/bench_vm.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from engine.vm import run_command_in_vm
from engine.vm.run import VmConfig

WORKLOAD = """
import json, time
import numpy as np
out = {}
x = np.arange(4 * 2**20, dtype=np.float32)
t = time.perf_counter()
for _ in range(20):
    x = x * np.float32(1.0001) + np.float32(0.5)
out["elementwise 4M f32 x20"] = time.perf_counter() - t
a = np.ones((512, 512), np.float32)
t = time.perf_counter()
for _ in range(4):
    a @ a
out["sgemm 512 f32 x4"] = time.perf_counter() - t
t = time.perf_counter()
s = 0
for i in range(1_000_000):
    s += i
out["python loop 1M"] = time.perf_counter() - t
print("WORKLOAD " + json.dumps(out))
"""


def _parse(text: str) -> dict[str, float]:
    line = next(ln for ln in text.splitlines() if ln.startswith("WORKLOAD "))
    return json.loads(line.removeprefix("WORKLOAD "))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="empty boots to time")
    args = parser.parse_args()
    cfg = VmConfig.from_env()

    boots, starts, totals = [], [], []
    accel = "?"
    for _ in range(args.rounds):
        res = run_command_in_vm(["true"], None, None, cfg, timeout_s=300)
        vm = res["vm"]
        if vm["boot_s"] is None or vm["job_start_s"] is None:
            sys.exit(f"boot failed: {vm['error']}\n{res['console'][-2000:]}")
        boots.append(vm["boot_s"])
        starts.append(vm["job_start_s"])
        totals.append(vm["vm_total_s"])
        accel = vm["accelerator"]
    print(f"guest: {vm['guest_kernel']}, accelerator {accel} ({vm['accelerator_reason']}), "
          f"{vm['guest_ram_bytes'] // 2**20} MiB")
    print(f"boot to job start (init):      median {statistics.median(boots):.2f} s "
          f"(min {min(boots):.2f}, max {max(boots):.2f}, {args.rounds} boots)")
    print(f"boot to first engine instr.:   median {statistics.median(starts):.2f} s "
          f"(min {min(starts):.2f}, max {max(starts):.2f})")
    print(f"empty job, qemu start to exit: median {statistics.median(totals):.2f} s")

    env = dict(os.environ, OPENBLAS_CORETYPE="Nehalem", OPENBLAS_NUM_THREADS="1")
    host = _parse(subprocess.run([sys.executable, "-c", WORKLOAD], env=env, check=True,
                                 capture_output=True, text=True).stdout)
    res = run_command_in_vm(["/usr/bin/env", "OPENBLAS_NUM_THREADS=1", sys.executable, "-c",
                             WORKLOAD], None, None, cfg, timeout_s=900)
    if not res["guest"] or res["guest"]["exit_code"] != 0:
        sys.exit(f"guest workload failed:\n{res['job_log'][-2000:]}")
    guest = _parse(res["job_log"])
    print(f"\n{'workload':26s} {'host s':>9s} {'guest s':>9s} {'guest/host':>11s}")
    for name, t_host in host.items():
        print(f"{name:26s} {t_host:9.4f} {guest[name]:9.3f} {guest[name] / t_host:10.1f}x")
    total_h, total_g = sum(host.values()), sum(guest.values())
    print(f"{'all':26s} {total_h:9.4f} {total_g:9.3f} {total_g / total_h:10.1f}x")


if __name__ == "__main__":
    main()

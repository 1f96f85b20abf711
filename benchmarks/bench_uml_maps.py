"""Why a user-mode Linux guest process under heavy swap holds so many host mappings.

Boots the built UML kernel (``python -m engine.sandbox build``) once with a swap-heavy job: a
guest process in a cgroup of ``--limit`` touches ``--gib`` GiB in 16 MiB numpy pieces,
three times over in a shuffled order, so its pages go out to swap and come back. The
host samples every process of the session every 0.5 s and keeps the largest one's
/proc/<pid>/maps at its peak, then prints what those mappings are
(engine.sandbox.hostmaps.why_split: one page long, young/old/clean, neighbours split by
access or by scatter in guest-physical memory), with the commit and the load average.
About five minutes for 2 GiB through 256M; docs/sandboxes.md quotes it.

Usage: python benchmarks/bench_uml_maps.py [--limit 256M] [--gib 2]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from engine.sandbox import uml  # noqa: E402
from engine.sandbox.hostmaps import why_split  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
JOB = """
cd /sys/fs/cgroup/edgeprof || exit 3
echo +memory > cgroup.subtree_control && mkdir probe && echo {limit} > probe/memory.max || exit 4
echo $$ > probe/cgroup.procs || exit 4
{python} -c '
import numpy as np
rng = np.random.default_rng(0)
pieces = [np.ones(4 << 20, np.float32) for _ in range({pieces})]
for _ in range(3):
    for i in rng.permutation(len(pieces)):
        pieces[i] += 1.0
' || exit 7
exit 0
"""
TIMEOUT_S = 900


def largest_maps(leader: int) -> str:
    """The maps text of the session's process with the most mappings now ("" if none)."""
    best = ""
    try:
        pids = [leader, *(p.pid for p in psutil.Process(leader).children(recursive=True))]
    except psutil.Error:
        return best
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        if text.count("\n") > best.count("\n"):
            best = text
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", default="256M")
    ap.add_argument("--gib", type=int, default=2)
    args = ap.parse_args()
    found = uml.load_uml()
    if found is None:
        raise SystemExit(f"no UML kernel: {uml.why_none()}")
    binary, preload = found.binary, found.preload
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="edgeprof-umlmaps.") as tmp:
        share = uml.job_share(Path(tmp), preload, JOB.format(
            python=sys.executable, limit=args.limit, pieces=64 * args.gib))
        image = Path(tmp) / "swap.img"
        with open(image, "wb") as f:
            f.truncate((args.gib + 2) << 30)
        argv = uml.boot_argv(binary, share, uml.PROBE_RAM_MB, image)
        with open(Path(tmp) / "console.log", "wb") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, env=uml.environ(),
                                    start_new_session=True)
        peak, t0 = "", time.monotonic()
        try:
            while proc.poll() is None and time.monotonic() - t0 < TIMEOUT_S:
                now = largest_maps(proc.pid)
                if now.count("\n") > peak.count("\n"):
                    peak = now
                time.sleep(0.5)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        rc = (share / "rc").read_text().strip() if (share / "rc").is_file() else None
    print(f"{args.gib} GiB through {args.limit}: job rc {rc}, "
          f"{time.monotonic() - t0:.0f} s, commit {commit}, load {load:.2f} before")
    for name, count in why_split(peak).items():
        print(f"  {name}: {count}")
    return 0 if rc == "0" else 1


if __name__ == "__main__":
    raise SystemExit(main())

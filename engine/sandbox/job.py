"""Guest side: what the job script runs inside the VM (``python -m engine.sandbox.job``).

Two modes, both writing ``guest.json`` into the writable share (/run/vmout):

- ``engine REQUEST``: ``python -m engine supervise REQUEST``, the host's RunRequest (JSON,
  backend cgroup2), under the guest's delegated cgroup root (EDGEPROF_CGROUP_ROOT,
  created empty by init).
- ``command LIMIT SWAP ARGV...``: ARGV in a cgroup2 session with memory.max=LIMIT and
  memory.swap.max=SWAP (bytes, or "max"), for the real-kernel tests of the cgroup v2
  backend; the run cgroup's final counters go into guest.json.

Both record /proc/vmstat deltas over the whole job (the guest runs nothing else).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from engine.probes.vmstat import read_vmstat

SHARE = Path("/run/vmout")  # where init mounts the host's run share
JOB_KEYS = ("pswpin", "pswpout", "pgmajfault", "pgfault", "workingset_refault_anon",
            "workingset_refault_file", "oom_kill", "thp_swpout_fallback",
            # pages swapped without I/O (all zeros: a bitmap, not the device), and swap
            # readahead's reads and hits: what pswpin/pswpout alone do not show
            "swpin_zero", "swpout_zero", "swap_ra", "swap_ra_hit")


def _uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


def _meminfo() -> dict[str, int]:
    out = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, rest = line.split(":", 1)
        if key in ("MemTotal", "SwapTotal"):
            out[key] = int(rest.split()[0]) * 1024
    return out


def _bytes(text: str) -> int | None:
    # the host passes exact byte counts ("0" is a real swap limit) or "max"
    return None if text == "max" else int(text)


def run_command(limit: str, swap: str, argv: list[str]) -> tuple[int, dict]:
    """ARGV under a fresh session of the project's cgroup2 backend."""
    from engine.limits import LimitRequest
    from engine.limits.cgroupfs import reader_for
    from engine.limits.select import open_backend

    request = LimitRequest(_bytes(limit), _bytes(swap), "cgroup2")
    session = open_backend(request.backend, request, f"vmjob-{os.getpid()}")
    try:
        proc = subprocess.Popen(argv, preexec_fn=session.preexec(), start_new_session=True)
        session.attach_pid(proc.pid)
        code = proc.wait()
        facts = {"exit_code": code, "oom_kills": session.oom_kills(),
                 "hit_limit": session.hit_limit(), "limits": session.metadata(),
                 "cgroup": reader_for(session.cgroup_dir, session.cgroup_version).snapshot()}
    finally:
        session.close()
    return code, facts


def main(argv: list[str]) -> int:
    started = _uptime()  # the job's first instruction, for the boot-time benchmark
    mode, rest = argv[0], argv[1:]
    before = read_vmstat(JOB_KEYS)
    t0 = time.monotonic()
    if mode == "engine":
        code = subprocess.call([sys.executable, "-m", "engine", "supervise", rest[0]])
        facts: dict = {"exit_code": code}
    elif mode == "command":
        code, facts = run_command(rest[0], rest[1], rest[2:])
    else:
        print(f"engine.sandbox.job: unknown mode {mode!r}", file=sys.stderr)
        return 2
    after = read_vmstat(JOB_KEYS)
    facts.update(
        job_start_uptime_s=started, job_s=time.monotonic() - t0, kernel=platform.release(),
        vmstat_delta={k: after[k] - before[k] for k in before if k in after},
        swaps=Path("/proc/swaps").read_text().splitlines()[1:], **_meminfo())
    tmp = SHARE / "guest.json.tmp"
    tmp.write_text(json.dumps(facts, indent=1))
    os.replace(tmp, SHARE / "guest.json")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

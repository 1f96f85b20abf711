"""Guest side: what the job script runs inside the VM (``python -m engine.guestjob``, which
enters here).

Two modes:

- ``engines I ...``: for each index I in turn, the host's RunRequest ``request-I.json``
  (backend cgroup2, out ``run-I``) by ``python -m engine supervise`` (in the job's own
  process: engine.guestjob) under the guest's delegated cgroup root
  (EDGEPROF_CGROUP_ROOT, created empty by init), its output in ``job-I.log`` and its
  facts in ``guest-I.json``. No pipeline starts before the kernel has settled
  (``SETTLE_S``), and before each run the page cache is dropped and the swap device
  switched off and on (``reset``), so every run of one boot starts from the same state
  (engine.sandbox.run runs a block of runs in one boot).
- ``command LIMIT SWAP ARGV...``: ARGV in a cgroup2 session with memory.max=LIMIT and
  memory.swap.max=SWAP (bytes, or "max"), for the real-kernel tests of the cgroup v2
  backend; the run cgroup's final counters go into ``guest.json``.

All in the writable share (/run/vmout). Both record /proc/vmstat deltas over each run
(the guest runs nothing else).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from engine.probes.vmstat import read_vmstat
from engine.runner.gate import START_UPTIME_ENV, uptime

SHARE = Path("/run/vmout")  # where init mounts the host's run share
JOB_KEYS = ("pswpin", "pswpout", "pgmajfault", "pgfault", "workingset_refault_anon",
            "workingset_refault_file", "oom_kill", "thp_swpout_fallback",
            # pages swapped without I/O (all zeros: a bitmap, not the device), and swap
            # readahead's reads and hits: what pswpin/pswpout alone do not show
            "swpin_zero", "swpout_zero", "swap_ra", "swap_ra_hit")


def _meminfo(*keys: str) -> dict[str, int]:
    """/proc/meminfo's ``keys``, in bytes."""
    out = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, rest = line.split(":", 1)
        if key in keys:
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


def reset() -> None:
    """What one run could leave the next in a boot, undone: the page cache (dropped, after
    a sync) and the swap device's slots (switched off, which swaps any page back in, and
    on). The run's cgroup is its supervisor's and goes with it."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")
    for line in Path("/proc/swaps").read_text().splitlines()[1:]:
        device = line.split()[0]
        subprocess.run(["swapoff", device], check=True)
        subprocess.run(["swapon", device], check=True)


def swap_used() -> int:
    """Bytes in use on the guest's swap devices (/proc/swaps, KiB)."""
    return sum(int(line.split()[3]) * 1024
               for line in Path("/proc/swaps").read_text().splitlines()[1:])


def _facts(started: float, before: dict[str, int], t0: float) -> dict:
    """What a run's guest record holds beside its exit code: when it started (guest
    uptime), how long it took, the kernel, the vmstat deltas, the swap and the RAM."""
    after = read_vmstat(JOB_KEYS)
    return dict(job_start_uptime_s=started, job_s=time.monotonic() - t0,
                kernel=platform.release(),
                vmstat_delta={k: after[k] - before[k] for k in before if k in after},
                swaps=Path("/proc/swaps").read_text().splitlines()[1:],
                **_meminfo("MemTotal", "SwapTotal"))


def _write(name: str, facts: dict) -> None:
    tmp = SHARE / f"{name}.tmp"
    tmp.write_text(json.dumps(facts, indent=1))
    os.replace(tmp, SHARE / name)


Supervise = Callable[[Path, int], int]  # (request file, log fd) -> the run's exit code


# A pipeline that starts within two seconds of the guest's boot swaps differently: linear
# on v001 at 48M swapped in 5,100-5,500 pages where later runs swap in 7,700-8,200
# (user-mode Linux 7.2). Holding the pipeline until an uptime T, four runs each: 1.6 s
# 5,360-5,470; 1.8 s 5,900-7,800; 2.0 s 8,040-8,260; 2.2 s 7,840-8,060. Two seconds is
# the period of the kernel's memory cgroup statistics flush, whose first run comes two
# seconds after boot: the likely cause (reclaim reads those statistics), not proven.
# Reading the root cgroup's memory.stat (a flush) just before the run brought 7,000-7,900:
# part of the way. So no pipeline starts before this uptime (engine.runner.gate); the
# child's start and imports go on meanwhile. A kernel up for a while is in the later
# state, as a device is.
SETTLE_S = 2.1


# The guest's RAM is host memory that the host allocates, and UML's kernel maps, as each
# page is first touched: a boot's first unconstrained run of bulk on v001 took 0.742-0.771 s
# where the runs after it in the same boot took 0.668-0.728 s (docs/sandboxes.md). A
# device's RAM is there from the start. So before its first run the guest writes its
# free RAM once, into a tmpfs file it then deletes, and every run finds its pages backed.
WARM_DIR = Path("/run/warm")
WARM_KEEP = 128 * 2**20  # not written: the kernel's reserves, far above its watermarks
WARM_CHUNK = 4 * 2**20


def warm_ram() -> dict:
    """Write the guest's free RAM but ``WARM_KEEP`` once, and free it; what and how long."""
    t0 = time.monotonic()
    WARM_DIR.mkdir(exist_ok=True)
    # its own tmpfs: /dev/shm's holds half the RAM
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=100%", "tmpfs", str(WARM_DIR)],
                   check=True)
    try:
        size = max(0, _meminfo("MemFree")["MemFree"] - WARM_KEEP)
        chunk = memoryview(b"\1" * WARM_CHUNK)
        with open(WARM_DIR / "ram", "wb", buffering=0) as f:
            left = size
            while left > 0:
                left -= f.write(chunk[:min(left, WARM_CHUNK)])
        (WARM_DIR / "ram").unlink()
    finally:
        subprocess.run(["umount", str(WARM_DIR)], check=True)
    return {"ram_warmed_bytes": size, "ram_warm_s": time.monotonic() - t0}


def run_engines(indexes: list[str], supervise: Supervise) -> int:
    """Each request of the share in turn, by ``supervise``, after the guest's RAM is
    warmed; the first non-zero exit code, else 0."""
    os.environ[START_UPTIME_ENV] = f"{SETTLE_S}"  # read by the supervisor's gate
    warmed = warm_ram()
    code = 0
    for i in indexes:
        reset()
        # what the run starts from: no swap in use, and in the page cache only what the
        # guest's own processes hold mapped (an earlier run's reads are dropped)
        at_start = {"swap_used_at_start": swap_used(),
                    "page_cache_at_start": _meminfo("Cached")["Cached"], **warmed}
        started, before, t0 = uptime(), read_vmstat(JOB_KEYS), time.monotonic()
        with open(SHARE / f"job-{i}.log", "wb") as log:
            rc = supervise(SHARE / f"request-{i}.json", log.fileno())
        _write(f"guest-{i}.json", {"exit_code": rc, **at_start, **_facts(started, before, t0)})
        if rc:  # the console's tail shows why
            print(f"run {i} ended with code {rc}:", flush=True)
            sys.stdout.buffer.write(b"".join((SHARE / f"job-{i}.log").read_bytes()
                                             .splitlines(keepends=True)[-10:]))
            sys.stdout.flush()
        code = code or rc
    return code


def main(argv: list[str], supervise: Supervise) -> int:
    """The job's mode and its arguments (``argv``); ``supervise`` runs one request (the
    entry point, engine.guestjob, gives it)."""
    mode, rest = argv[0], argv[1:]
    if mode == "engines":
        return run_engines(rest, supervise)
    if mode != "command":
        print(f"engine.sandbox.job: unknown mode {mode!r}", file=sys.stderr)
        return 2
    started, before, t0 = uptime(), read_vmstat(JOB_KEYS), time.monotonic()
    code, facts = run_command(rest[0], rest[1], rest[2:])
    _write("guest.json", {**facts, **_facts(started, before, t0)})
    return code


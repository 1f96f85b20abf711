"""An asynchronous memory sampler in its own process: ``start_sampler(pid, csv_path)``.

A separate process (``python -m engine.probes.sampler``) so the sampled process is not
perturbed by the sampling work, the GIL or the sampler's allocations. Each tick sums
over the process tree of ``pid``: VmRSS and VmSwap from /proc/<pid>/status (one pread on
a kept fd each), USS from psutil's ``memory_full_info`` (smaps_rollup: expensive, it walks
page tables under the target's mm lock, so only on request), and, given a cgroup
directory, its usage and swap counters (read only, through the cgroup reader of
``engine.limits.cgroupfs`` on kept fds). RSS of the tree is a sum, so pages shared between
its processes count once per process.

Rows are ``t_ns`` (``time.monotonic_ns``: CLOCK_MONOTONIC, the clock behind
``time.perf_counter_ns`` on Linux, so the child's task times compare directly), then the
byte columns; unmeasured columns are empty. Ticks follow a fixed schedule (tick k at
start + k/hz, missed ticks skipped, never bunched). The process tree is re-read every
``TREE_REFRESH_S`` (psutil scans all of /proc, ~5 ms). The sampler stops when the root
pid is gone or a zombie, or when its stdin closes (``Sampler.stop()``, or the parent
died). It says "ready" on stdout after its first row (``start_sampler`` waits for that,
~0.1 s of interpreter start-up) and its statistics as JSON at the end.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from engine.errors import EdgeprofError
from engine.limits.cgroupfs import CgroupReader, reader_for
from engine.probes.process import status_bytes
from engine.procs import exit_now, preexec

COLUMNS = ["t_ns", "procs", "rss_bytes", "uss_bytes", "swap_bytes", "cg_current_bytes",
           "cg_swap_current_bytes"]
TREE_REFRESH_S = 0.5
FLUSH_S = 1.0


class Sampler:
    """Handle on a running sampler process."""

    def __init__(self, proc: subprocess.Popen, csv_path: str) -> None:
        self._proc, self.csv_path = proc, csv_path
        self._stats: dict | None = None

    def stop(self, timeout: float = 10.0) -> dict:
        """Stop sampling (closing its stdin) and wait: the csv is complete on return.
        Returns samples, achieved_hz, mean_sample_us, cpu_s (the sampler's overhead)..."""
        if self._stats is None:
            try:
                out, _ = self._proc.communicate(timeout=timeout)
                self._stats = _statistics(out, self._proc.returncode)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
                self._stats = {"error": f"sampler did not stop within {timeout} s; killed"}
        return self._stats


def _statistics(out: bytes, code: int | None) -> dict:
    """The sampler's statistics: the last line it printed (one JSON object). Whatever else
    it printed, or a line cut short, is recorded as an error, never raised: the run's own
    result must not depend on its sampler's."""
    lines = out.strip().splitlines()
    if not lines:
        return {"error": f"sampler exited with code {code}"}
    try:
        stats = json.loads(lines[-1])
    except ValueError:
        stats = None
    if not isinstance(stats, dict):
        return {"error": f"sampler printed no statistics (exit code {code}): "
                         f"{out[-200:].decode(errors='replace')!r}"}
    return stats


def start_sampler(pid: int, csv_path: str, hz: float = 100.0, cgroup_dir: str | None = None,
                  uss: bool = False) -> Sampler:
    """Start sampling the process tree of ``pid`` into ``csv_path`` at ``hz``."""
    argv = [sys.executable, "-m", "engine.probes.sampler", str(pid), str(csv_path),
            "--hz", str(hz)]
    if cgroup_dir is not None:
        argv += ["--cgroup", str(cgroup_dir)]
        _open_cgroup(cgroup_dir).close()  # fail here, not silently in the sampler
    if uss:
        argv.append("--uss")
    # unbuffered: the "ready" line is read byte by byte, so no part of the statistics a
    # short-lived sampler prints right after it is swallowed by a reader's buffer, out of
    # the reach of communicate() (which reads the pipe's fd directly)
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0,
                            preexec_fn=preexec())
    # Wait for its first row: sampling is under way when this returns. Whatever ends the
    # wait (a signal included), the sampler does not outlive it unowned.
    ready = False
    try:
        ready = proc.stdout.readline() == b"ready\n"
    finally:
        if not ready:
            proc.kill()
            proc.wait()
    if not ready:
        raise EdgeprofError(f"the memory sampler failed to start (exit code {proc.returncode}; "
                            "its error is on stderr)")
    return Sampler(proc, str(csv_path))


def _open_cgroup(folder: str | Path) -> CgroupReader:
    """The cgroup's reader, with its usage and swap counters kept open."""
    reader = reader_for(Path(folder))
    if not reader.has(reader.CURRENT):
        raise EdgeprofError(f"{folder}: no {reader.CURRENT} (the memory controller is not "
                            f"enabled there); not a memory cgroup directory")
    return reader.kept_open(reader.COUNTER_FILES)


class _Tree:
    """The processes of the sampled tree, each with its status fd kept open."""

    def __init__(self, pid: int, uss: bool) -> None:
        self.root = psutil.Process(pid)
        self.uss = uss
        self.fds: dict[int, int] = {}
        self.procs: dict[int, psutil.Process] = {}
        self.refresh()

    def refresh(self) -> None:
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except psutil.NoSuchProcess:
            procs = [self.root]
        self.procs = {p.pid: p for p in procs}
        for pid in set(self.fds) - set(self.procs):
            os.close(self.fds.pop(pid))
        for pid in set(self.procs) - set(self.fds):
            try:
                self.fds[pid] = os.open(f"/proc/{pid}/status", os.O_RDONLY)
            except FileNotFoundError:
                pass

    def sample(self) -> list | None:
        """[procs, rss, uss, swap] summed over the tree; None once the root is gone."""
        rss = swap = 0
        uss = 0 if self.uss else None
        alive = 0
        for pid, fd in self.fds.items():
            try:
                buf = os.pread(fd, 8192, 0)
            except ProcessLookupError:
                buf = b""
            r = status_bytes(buf, b"\nVmRSS:")
            if r is None:  # gone or a zombie: no memory left
                if pid == self.root.pid:
                    return None
                continue
            alive += 1
            rss += r
            swap += status_bytes(buf, b"\nVmSwap:") or 0
            if self.uss:
                try:
                    uss += self.procs[pid].memory_full_info().uss
                except psutil.Error:  # exited between the two reads
                    pass
        return [alive, rss, uss, swap]


def sample(pid: int, csv_path: str, hz: float, cgroup_dir: str | None, uss: bool,
           stop_fd: int) -> dict:
    """The sampling loop; returns its statistics."""
    period = int(1e9 / hz)
    cgroup = _open_cgroup(cgroup_dir) if cgroup_dir else None
    samples = missed = refreshes = max_procs = 0
    cost_ns = max_cost_ns = 0
    reason = "pid gone"
    cpu0 = time.process_time()
    with open(csv_path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        try:
            tree = _Tree(pid, uss)
        except psutil.NoSuchProcess:
            tree = None
        start = flush_at = time.monotonic_ns()
        refresh_at = start + int(TREE_REFRESH_S * 1e9)
        tick = 0
        while tree is not None:
            if time.monotonic_ns() >= refresh_at:
                tree.refresh()
                refreshes += 1
                refresh_at += int(TREE_REFRESH_S * 1e9)
            t = time.monotonic_ns()
            row = tree.sample()
            if row is None:
                break
            cg = cgroup.current_and_swap() if cgroup else (None, None)
            spent = time.monotonic_ns() - t
            cost_ns += spent
            max_cost_ns = max(max_cost_ns, spent)
            writer.writerow([t, *row, *cg])
            samples += 1
            if samples == 1:
                _ready()
            max_procs = max(max_procs, row[0])
            if t >= flush_at:  # a sampler killed hard still leaves most of its rows
                f.flush()
                flush_at = t + int(FLUSH_S * 1e9)
            tick += 1
            now = time.monotonic_ns()
            if now >= start + tick * period:  # late: skip the ticks already past
                behind = (now - start) // period - tick + 1
                missed += behind
                tick += behind
            ready, _, _ = select.select([stop_fd], [], [], (start + tick * period - now) / 1e9)
            if ready:
                reason = "stopped"
                break
        end = time.monotonic_ns()
    if cgroup is not None:
        cgroup.close()
    if samples == 0:
        _ready()
    duration = (end - start) / 1e9 if tree is not None else 0.0
    return {
        "samples": samples, "target_hz": hz,
        "achieved_hz": samples / duration if duration > 0 else 0.0,
        "missed_ticks": missed, "duration_s": duration,
        "mean_sample_us": cost_ns / samples / 1e3 if samples else None,
        "max_sample_us": max_cost_ns / 1e3,
        "cpu_s": time.process_time() - cpu0,
        "cpu_total_s": _own_cpu_s(),
        "tree_refreshes": refreshes,  # their cost is not in mean_sample_us
        "max_procs": max_procs, "ended": reason,
    }


def _ready() -> None:
    sys.stdout.write("ready\n")
    sys.stdout.flush()


def _own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.probes.sampler")
    parser.add_argument("pid", type=int)
    parser.add_argument("csv_path")
    parser.add_argument("--hz", type=float, default=100.0)
    parser.add_argument("--cgroup")
    parser.add_argument("--uss", action="store_true")
    args = parser.parse_args(argv)
    # Ctrl-C reaches the whole foreground group; the parent stops us through stdin.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        stats = sample(args.pid, args.csv_path, args.hz, args.cgroup, args.uss,
                       sys.stdin.fileno())
    except OSError as exc:  # a full disk: said in the statistics, never a traceback
        stats = {"error": f"cannot write {args.csv_path}: {exc.strerror or exc}"}
    try:
        json.dump(stats, sys.stdout)
        sys.stdout.flush()
    except BrokenPipeError:  # the supervisor is gone (and so, by its death signal, are we)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    exit_now(main())  # the statistics printed: no teardown for the supervisor to wait on

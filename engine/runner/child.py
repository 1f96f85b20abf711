"""The measured process: ``python -m engine child SPEC`` runs one pipeline as the
supervisor specified, inside the run's cgroup, under GNU time and (optionally) with
tcmalloc preloaded for heap profiling. It writes progress.jsonl as it goes and
outputs.npz + child.json at the end; the supervisor assembles the run folder."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from engine.caffe.splitter import Description
from engine.errors import EdgeprofError
from engine.files import (
    is_write_failure,
    naming,
    parse_json,
    read_regular,
    write_failure,
    write_text_atomic,
)
from engine.runner.execute import PipelineRun, ProbeSet
from engine.runner.gate import WRITE_FAILED, await_start
from engine.runner.meta import numpy_hugepage_advice
from engine.runner.request import RunOptions
from engine.schedule.pipelines import load_pipeline
from engine.schedule.policies import parse_policy


def build_probes(spec: dict, out: Path) -> tuple[ProbeSet, dict]:
    """The window probes the spec asks for, and metadata about them."""
    probes, meta = ProbeSet(), {}
    if spec.get("cgroup_dir"):
        from engine.probes.cgroup import CgroupCounters

        counters = CgroupCounters(Path(spec["cgroup_dir"]), spec["cgroup_version"])
        probes.windows.append(_Adapter(counters.open_window, counters.close_window))
        meta["cgroup_windowed_peak"] = counters.windowed_peak
    if spec.get("vmstat_probe"):  # the vm backend's guest: its /proc/vmstat is the run's
        from engine.probes.vmstat import VmstatWindows

        vmstat = VmstatWindows()
        probes.windows.append(_Adapter(vmstat.open, vmstat.close))
    if spec.get("process_probe", True):
        from engine.probes import process
        from engine.probes.process import PACKED_KEY, ProcessWindow

        meta["process_status"] = process.configure(spec.get("process_status", True))

        # heap dumps run between tasks: a window must not start at the previous one's end
        chain = not spec.get("heap_profile")
        probes.windows.append(_Adapter(lambda: ProcessWindow().open(chain),
                                       lambda w: {PACKED_KEY: w.close_packed()}))
        meta["process_windows_chained"] = chain  # per row: proc_chained
    if spec.get("heap_profile"):
        from engine.probes.heap import HeapDumper

        (out / "heap").mkdir(exist_ok=True)
        probes.heap = HeapDumper()
        probes.heap.start(out / "heap")
    return probes, meta


class _Adapter:
    def __init__(self, open_fn, close_fn) -> None:
        self.open, self.close = open_fn, close_fn


def read_spec(spec_path: str) -> dict:
    """The measured child's spec (the supervisor writes it): one EdgeprofError naming the
    file for anything that is not one."""
    try:
        spec = parse_json(read_regular(spec_path, "child spec", 2**20))
        if not isinstance(spec, dict):
            raise TypeError("not a JSON object")
        for key, kind in (("out", str), ("pipeline", str), ("policy", str),
                          ("descriptions", dict), ("options", dict)):
            if not isinstance(spec.get(key), kind):
                raise TypeError(f"{key!r} missing or not a {kind.__name__}")
        RunOptions(**spec["options"])
    except (OSError, ValueError, TypeError) as exc:
        raise EdgeprofError(f"{spec_path} is not a child spec ({exc}); the child runs what "
                            f"'python -m engine run' writes") from None
    return spec


def child_main(spec_path: str) -> int:
    """Run the spec's pipeline; exit 0 (ok, timeout), 1 (a task failed) or WRITE_FAILED."""
    try:
        return _child_main(spec_path)
    except OSError as exc:
        if not is_write_failure(exc):
            raise
        print(f"error: {write_failure(exc)}", file=sys.stderr)
        return WRITE_FAILED


def _child_main(spec_path: str) -> int:
    spec = read_spec(spec_path)
    out = Path(spec["out"])
    pipeline = load_pipeline(spec["pipeline"])
    policy = parse_policy(spec["policy"])
    descs = {name: Description.load(path) for name, path in spec["descriptions"].items()}
    options = RunOptions(**spec["options"])
    probes, probe_meta = build_probes(spec, out)
    state = PipelineRun(pipeline, policy, descs, options, probes, progress=out / "progress.jsonl")
    profile = contextlib.nullcontext()
    if spec.get("cpu_profile"):
        from engine.probes.cpuprofile import CpuProfile

        profile = CpuProfile(str(out / "cpu.prof"))
    await_start(spec.get("start_fd"))
    t0, cpu0 = time.perf_counter(), time.process_time()
    with profile:
        result = state.execute()
    if probes.heap is not None:
        probes.heap.stop()
    if is_write_failure(result.error):  # progress.jsonl: the record of the run is cut
        raise result.error
    with naming(out / "outputs.npz"), open(out / "outputs.npz", "wb") as f:
        np.savez(f, **state.outputs)
    failed = result.failed_task
    digest = hashlib.sha256()  # what was computed, independent of the archive's metadata
    for key in sorted(state.outputs):
        digest.update(key.encode())
        digest.update(np.ascontiguousarray(state.outputs[key]).tobytes())
    summary = {
        "status": result.status,
        "error": None if result.error is None else f"{type(result.error).__name__}: {result.error}",
        "failed_task": None if failed is None else f"{state.instance_key(failed.instance)} "
                                                   f"{failed.label}",
        "t0_monotonic_ns": result.t0_ns,
        "wall_s": time.perf_counter() - t0,
        "cpu_s": time.process_time() - cpu0,  # all threads, same span; other load on the
        # host stretches it far less than wall_s
        "blas": state.blas,
        "outputs_sha256": digest.hexdigest() if result.status == "ok" else None,
        "numpy_hugepage_advice": numpy_hugepage_advice(),
        "glibc_tunables": os.environ.get("GLIBC_TUNABLES"),
        "probes": probe_meta,
        "tasks": len(state.graph.tasks),
        "edges": len(state.graph.edges()),
    }
    write_text_atomic(out / "child.json", json.dumps(summary, indent=1))
    if result.error is not None:
        print(f"error: task {summary['failed_task']} failed: {summary['error']}", file=sys.stderr)
    return 0 if result.status in ("ok", "timeout") else 1

"""The supervisor behind ``python -m engine run``.

It opens the memory-limit session (a fresh cgroup per run, or none), starts the measured
child under GNU time inside that cgroup, samples it from a separate process, waits with a
wall-clock timeout, tells an OOM kill (termination ``memory``) from a crash (``error``),
kills every survivor, removes the cgroup, and renames the assembled run folder into
place. SIGINT/SIGTERM end the child tree and leave nothing behind.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from engine.errors import EdgeprofError
from engine.files import normal_mode
from engine.runner.execute import Interrupted, RunOptions, resolve_descriptions
from engine.runner.folder import assemble
from engine.schedule.pipelines import load_pipeline
from engine.schedule.policies import parse_policy


@dataclass
class ProbeOptions:
    process: bool = True  # per-window VmHWM/rusage
    cgroup: bool = True  # per-window cgroup counters when the backend gives a cgroup
    gnu_time: bool = True
    heap_profile: bool = False
    cpu_profile: bool = False
    sample_hz: float = 100.0  # 0 disables the sampler
    sample_uss: bool = False


@dataclass
class LimitOptions:
    backend: str = "none"
    ram_bytes: int | None = None
    swap_bytes: int | None = None


def refuse_existing(out: Path, force: bool) -> None:
    """A run never silently replaces an earlier one: an occupied ``out`` needs ``force``."""
    if out.exists() and not force:
        what = "a finished run" if (out / "meta.json").is_file() else "files"
        raise EdgeprofError(f"{out} already holds {what}; pass --force to replace it")


def run_supervised(pipeline_path: str, policy_name: str, models: dict[str, Path],
                   out: str | os.PathLike, options: RunOptions, limits: LimitOptions,
                   probes: ProbeOptions, force: bool = False) -> dict:
    """Run one pipeline in a measured child process; returns the written meta.json."""
    from engine.limits import LimitRequest, open_session

    out = Path(out)
    refuse_existing(out, force)
    policy = parse_policy(policy_name)
    pipeline = load_pipeline(pipeline_path)
    descs = resolve_descriptions(pipeline, models)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    normal_mode(tmp, directory=True)
    run_id = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    session = None
    proc = None
    sampler = None
    old_handlers = _raise_on_signals()
    try:
        session = open_session(limits.backend, LimitRequest(limits.ram_bytes, limits.swap_bytes),
                               run_id, allow_unenforced=limits.backend in ("none", "auto"))
        spec = {
            "out": str(tmp), "pipeline": str(Path(pipeline_path).resolve()),
            "policy": policy.name,
            "models": {n: str(Path(models[n]).resolve()) for n in sorted(descs)},
            "options": asdict(options) | {"timeout_s": None},
            "cgroup_dir": str(session.cgroup_dir) if probes.cgroup and session.cgroup_dir
            else None,
            "cgroup_version": session.cgroup_version,
            "process_probe": probes.process, "heap_profile": probes.heap_profile,
            "cpu_profile": probes.cpu_profile,
        }
        (tmp / "spec.json").write_text(json.dumps(spec, indent=1))
        argv = [sys.executable, "-m", "engine", "child", str(tmp / "spec.json")]
        if probes.gnu_time:
            from engine.probes.gnutime import gnu_time_argv

            argv = gnu_time_argv(str(tmp / "gnu_time.txt")) + argv
        argv = session.command_prefix() + argv
        env = dict(os.environ)
        if probes.heap_profile:
            from engine.probes.tcmalloc import preload_env

            env = preload_env(env)
        t_start = time.monotonic()
        proc = subprocess.Popen(argv, env=env, preexec_fn=session.preexec(),
                                start_new_session=True)
        session.attach_pid(proc.pid)
        if probes.sample_hz > 0:
            from engine.probes.sampler import start_sampler

            sampler = start_sampler(proc.pid, str(tmp / "samples.csv"), hz=probes.sample_hz,
                                    cgroup_dir=session.cgroup_dir, uss=probes.sample_uss)
        timed_out = False
        try:
            code = proc.wait(timeout=options.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_tree(proc, session)
            code = proc.wait()
        wall_s = time.monotonic() - t_start
        sampler_stats = sampler.stop() if sampler is not None else None
        sampler = None
        oom_kills = session.oom_kills()
        termination, reason = _termination(code, timed_out, oom_kills, session, tmp)
        limit_meta = session.metadata()
        session.close()
        session = None
        meta = {
            "pipeline": {"path": str(pipeline_path), "name": pipeline.name,
                         "arrival_mode": pipeline.arrival_mode, "size_bin": pipeline.size_bin,
                         "param_bytes": pipeline.param_bytes, "networks": pipeline.networks()},
            "policy": policy.name, "policy_family": policy.family, "workers": policy.workers,
            "blas_threads": options.blas_threads, "seed": options.seed, "batch": options.batch,
            "budget_bytes": options.budget,
            "limit_bytes": limits.ram_bytes, "swap_bytes": limits.swap_bytes,
            "backend": limit_meta.get("backend", limits.backend),
            "limit_enforced": bool(limit_meta.get("enforced")) and limits.ram_bytes is not None,
            "limits": limit_meta,
            "emulated": False,
            "termination": termination, "termination_detail": reason,
            "exit_code": code, "oom_kills": oom_kills, "wall_s": wall_s,
            "probes": asdict(probes), "sampler": sampler_stats,
            "host": {"kernel": platform.release(), "machine": platform.machine(),
                     "cpus": os.cpu_count(), "python": sys.version.split()[0]},
            "versions": _versions(),
            "description_files": spec["models"],
        }
        assemble(tmp, meta)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
        return meta
    except BaseException as exc:
        if proc is not None and proc.poll() is None:
            _kill_tree(proc, session)
            proc.wait()
        if sampler is not None:
            sampler.stop()
        if session is not None:
            session.close()
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, _Signalled):
            raise Interrupted(f"run interrupted by {exc.name}; nothing written") from None
        raise
    finally:
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)


class _Signalled(BaseException):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _raise_on_signals() -> dict:
    def handler(signum, frame):
        raise _Signalled(signal.Signals(signum).name)

    old = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        old[sig] = signal.signal(sig, handler)
    return old


def _kill_tree(proc: subprocess.Popen, session) -> None:
    """Kill the child's whole process group (it runs in its own session) and, where the
    backend has one, everything left in the run's cgroup."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if session is not None:
        session.kill_all()


def _termination(code: int, timed_out: bool, oom_kills: int, session, tmp: Path) -> tuple[str, str]:
    """ok | memory | timeout | error, and why (BenchExec's rules: OOM from kernel events,
    with the limit-reached fallback for a SIGKILLed child)."""
    if timed_out:
        return "timeout", "wall-clock timeout; the run was killed"
    child = tmp / "child.json"
    if oom_kills > 0:
        return "memory", f"kernel OOM killer: {oom_kills} process(es) killed in the run's cgroup"
    killed = code in (-signal.SIGKILL, 128 + signal.SIGKILL) or _gnu_time_signal(tmp) == 9
    if killed and session.hit_limit():
        return "memory", "killed by SIGKILL with the cgroup at its limit"
    if child.is_file():
        summary = json.loads(child.read_text())
        if summary["status"] == "ok" and code == 0:
            return "ok", ""
        if summary["status"] == "timeout":
            return "timeout", "the run's own timeout"
        return "error", summary.get("error") or f"exit code {code}"
    return "error", f"the run process ended with code {code} before finishing"


def _gnu_time_signal(tmp: Path) -> int | None:
    path = tmp / "gnu_time.txt"
    if not path.is_file():
        return None
    from engine.probes.gnutime import parse_gnu_time

    return parse_gnu_time(path.read_text()).get("gt_signal")


def _versions() -> dict[str, str]:
    import google.protobuf
    import numpy

    from engine import __version__
    return {"edgeprof": __version__, "numpy": numpy.__version__,
            "protobuf": google.protobuf.__version__}

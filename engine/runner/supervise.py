"""The supervisor behind ``python -m engine run``.

It opens the memory-limit session (a fresh cgroup per run, or none), starts the measured
child under GNU time inside that cgroup, samples it from a separate process, waits with a
wall-clock timeout, tells an OOM kill (termination ``memory``) from a crash (``error``),
kills every survivor, removes the cgroup, and renames the assembled run folder into
place. SIGINT, SIGTERM and SIGHUP end the child tree and leave nothing behind.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import asdict
from pathlib import Path

from engine.caffe.splitter import Description, check_batch_fits, description_index
from engine.errors import EdgeprofError, RunFailed
from engine.files import naming, sha256_file
from engine.limits import Session, open_session
from engine.probes import hostload
from engine.probes.vmstat import in_guest
from engine.procs import SUPERVISOR_ENV, preexec
from engine.runner.folder import assemble, read_child
from engine.runner.gate import WRITE_FAILED, StartGate
from engine.runner.meta import (
    HUGEPAGE_ENV,
    MALLOC_ENV,
    MALLOC_TUNABLES,
    PipelineInfo,
    RunMeta,
    host_facts,
    mmap_threshold,
    versions,
)
from engine.runner.outdir import OutClaim
from engine.runner.request import RunRequest
from engine.runner.stall import StallWatch, wait_child
from engine.schedule.pipelines import Pipeline, load_pipeline
from engine.schedule.plan import one_after_another, plan, resolve_descriptions
from engine.schedule.policies import Policy, parse_policy
from engine.signals import (
    Interrupted,
    Signalled,
    ignore_signals,
    signals_deferred,
    signals_unwind,
)

log = logging.getLogger(__name__)

# Backends under which a limit that cannot be enforced is recorded, never an error.
RECORDS_UNENFORCED = ("none", "auto", "inherit")



def child_env() -> dict[str, str]:
    """The measured child's environment: ours, its supervisor named, numpy's hugepage
    advice off and glibc's mmap threshold fixed, unless the caller set
    ``NUMPY_MADVISE_HUGEPAGE`` or the threshold in ``GLIBC_TUNABLES`` (other tunables there
    are kept beside ours)."""
    env = dict(os.environ, **{SUPERVISOR_ENV: str(os.getpid())})
    env.setdefault(HUGEPAGE_ENV, "0")
    # the caller's other tunables kept, the mmap threshold ours unless the caller set one
    tunables = env.get(MALLOC_ENV, "")
    if mmap_threshold(tunables) is None:
        env[MALLOC_ENV] = ":".join(filter(None, [tunables, MALLOC_TUNABLES]))
    return env


def open_run_session(request: RunRequest, run_id: str | None = None) -> Session:
    """The limit session ``request`` asks for. A limit that cannot be enforced is an
    error only when a backend that sets limits was named (cgroup2, cgroup1, systemd);
    ``none``, ``auto`` and ``inherit`` (which only finds a limit someone else set) record
    it instead: ``limit_enforced: false`` and the reason."""
    limits = request.limits
    return open_session(limits, run_id or f"{os.getpid()}-{uuid.uuid4().hex[:8]}",
                        allow_unenforced=limits.backend in RECORDS_UNENFORCED)


def request_meta(request: RunRequest, pipeline: Pipeline, policy: Policy) -> RunMeta:
    """The part of a run's record that the request alone decides."""
    options, limits = request.options, request.limits
    return RunMeta(
        pipeline=PipelineInfo(path=str(request.pipeline), name=pipeline.name,
                              arrival_mode=pipeline.arrival_mode, size_bin=pipeline.size_bin,
                              param_bytes=pipeline.param_bytes, networks=pipeline.networks(),
                              sha256=sha256_file(request.pipeline)),
        policy=policy.name, policy_family=policy.family, workers=policy.workers,
        blas_threads=options.blas_threads, seed=options.seed, batch=options.batch,
        runtime=options.runtime, budget_bytes=options.budget, timeout_s=options.timeout_s,
        stall_s=options.stall_s, estimates=options.estimates, limit_bytes=limits.limit_bytes,
        swap_bytes=limits.swap_bytes, backend=limits.backend, probes=asdict(request.probes),
        # what was asked, for a run that never started (a sandbox that did not boot): the
        # aggregate checks it against the config; the supervisor records what it got
        cpu_affinity={"asked": bool(options.pin_cpu), "pinned": False,
                      "why_not": "the run did not start"},
        host=host_facts(), versions=versions())


def check_inputs(request: RunRequest) -> tuple[Policy, Pipeline, dict[str, Path],
                                               dict[str, Description]]:
    """The request's policy, pipeline, model index and descriptions, each checked (model
    files against their split too): bad input fails here, before anything is written."""
    policy = parse_policy(request.policy)
    pipeline = load_pipeline(request.pipeline)
    models = description_index(request.split)
    descs = resolve_descriptions(pipeline, models)
    # an estimate of a network --split does not hold is a typo (masa would silently
    # admit the real one on its default estimate)
    unknown = sorted(set(request.options.estimates or {}) - set(models))
    if unknown:
        raise EdgeprofError(f"--estimates names {', '.join(map(repr, unknown))}, which "
                            f"--split {request.split} does not hold (known: "
                            f"{', '.join(sorted(models)) or 'none'}); fix the network names")
    # the networks that can be in memory at once, by the policy's task graph
    chains = one_after_another(plan(pipeline, policy, descs).graph)
    instances = pipeline.networks()
    check_batch_fits([[descs[instances[i]] for i in chain] for chain in chains],
                     request.options.batch)
    for _, desc in sorted(descs.items()):
        desc.check_reads(bulk=policy.family == "bulk")
    estimates = request.options.estimates
    missing = [] if estimates is None else sorted(set(descs) - set(estimates))
    if missing:  # not an error: masa estimates them, as it does without --estimates
        log.warning(f"note: --estimates names no peak for {', '.join(missing)}: masa estimates "
                    f"theirs from their descriptions")
    unused = [] if estimates is None else sorted(set(estimates) - set(descs))
    if unused:  # a split network this pipeline does not run: the estimate is not used
        log.warning(f"note: --estimates names {', '.join(unused)}, which this pipeline does "
                    f"not run: not used")
    return policy, pipeline, models, descs


def run_supervised(request: RunRequest, session: Session | None = None) -> RunMeta:
    """Run one pipeline in a measured child process; returns the written meta.json.
    ``session``: one already opened for this request (closed here in every case)."""
    try:
        policy, pipeline, models, descs = check_inputs(request)
        claim = OutClaim(request.out, request.force, request.inputs())
    except BaseException:
        if session is not None:
            session.close()
        raise
    options, probes, limits = request.options, request.probes, request.limits
    tmp = proc = sampler = claim_cpu = gate = None
    with claim, signals_unwind():
        try:
            tmp = claim.tempdir()
            if session is None:
                session = open_run_session(request)
            spec = {
                "out": str(tmp), "pipeline": str(Path(request.pipeline).resolve()),
                "policy": policy.name,
                "descriptions": {n: str(Path(models[n]).resolve()) for n in sorted(descs)},
                "options": asdict(options) | {"timeout_s": None},
                "cgroup_dir": str(session.cgroup_dir) if probes.cgroup and session.cgroup_dir
                else None,
                "cgroup_version": session.cgroup_version,
                "process_probe": probes.process, "vmstat_probe": in_guest(),
                # the RSS split and VmSwap per window: for the reconciliation and under
                # a limit; elsewhere the leaner window end (engine.probes.process)
                "process_status": probes.heap_profile or limits.limit_bytes is not None,
                "heap_profile": probes.heap_profile, "cpu_profile": probes.cpu_profile,
            }
            gate = StartGate()
            spec["start_fd"] = gate.child_fd
            with naming(tmp / "spec.json"):
                (tmp / "spec.json").write_text(json.dumps(spec, indent=1))
            argv = [sys.executable, "-m", "engine", "child", str(tmp / "spec.json")]
            if probes.gnu_time:
                from engine.probes.gnutime import gnu_time_argv

                argv = gnu_time_argv(str(tmp / "gnu_time.txt")) + argv
            argv = session.command_prefix() + argv
            env = child_env()
            if probes.heap_profile:
                from engine.probes.tcmalloc import preload_env

                env = preload_env(env)
            claim_cpu = hostload.claim_cpus() if options.pin_cpu else None
            child_cpus = claim_cpu.child if claim_cpu else None
            probe_cpus = claim_cpu.probes if claim_cpu else None
            pin = (lambda: os.sched_setaffinity(0, child_cpus)) if child_cpus else None
            load_start = hostload.snapshot()
            started_at = time.time()
            t_start = time.monotonic()
            # held back while it starts: a signal inside Popen (after the fork, before it
            # returns) left the child running unnamed, past the cleanup that removes its
            # folder (GNU time then said its output file was gone)
            with signals_deferred():
                proc = subprocess.Popen(argv, env=env,
                                        preexec_fn=preexec(session.preexec(), pin),
                                        start_new_session=True, pass_fds=gate.pass_fds())
            gate.started()
            session.attach_pid(proc.pid)
            own_cpus = os.sched_getaffinity(0)
            affinity = {"asked": bool(options.pin_cpu), "pinned": bool(child_cpus),
                        "child": sorted(child_cpus or own_cpus),
                        "probes": sorted(probe_cpus or own_cpus),
                        "why_not": claim_cpu.reason if claim_cpu else "not asked (--pin-cpu)"}
            if probes.sample_hz > 0:
                from engine.probes.sampler import start_sampler

                if probe_cpus:  # the sampler inherits it
                    os.sched_setaffinity(0, probe_cpus)
                try:
                    sampler = start_sampler(proc.pid, str(tmp / "samples.csv"),
                                            hz=probes.sample_hz, cgroup_dir=session.cgroup_dir,
                                            uss=probes.sample_uss)
                finally:
                    os.sched_setaffinity(0, own_cpus)
            gate.open()  # every probe watches: the pipeline may start
            watch = (StallWatch(tmp / "progress.jsonl", proc.pid, session.cgroup_dir,
                                session.cgroup_version) if options.stall_s else None)
            waited = wait_child(proc, options.timeout_s, options.stall_s, watch,
                                max((a.time_s for a in pipeline.arrivals), default=0.0))
            timed_out = waited.why
            if timed_out:
                _kill_tree(proc, session)
                code = proc.wait()
            else:
                code = waited.code
            wall_s = time.monotonic() - t_start
            if claim_cpu:
                claim_cpu.close()
            sampler_stats = sampler.stop() if sampler is not None else None
            sampler = None
            # after the sampler is reaped: its CPU time is the run's own, not other work's
            load = hostload.host_load(load_start, hostload.snapshot())
            oom_kills = session.oom_kills()
            if code == WRITE_FAILED and not (timed_out or oom_kills):
                # not a result: the record of the run is cut (the child said which file)
                raise RunFailed(f"the run could not write its own files in {tmp} (the error "
                                f"above); nothing was written to {request.out}")
            termination, reason = _termination(code, timed_out, oom_kills, session, tmp,
                                               options.stall_s)
            limit_meta = session.metadata()
            session.close()
            session = None
            meta = request_meta(request, pipeline, policy)
            meta.backend = limit_meta.get("backend", limits.backend)
            meta.limit_enforced = (bool(limit_meta.get("enforced"))
                                   and limits.limit_bytes is not None)
            meta.limits = limit_meta
            meta.termination, meta.termination_detail = termination, reason
            meta.exit_code, meta.oom_kills, meta.wall_s = code, oom_kills, wall_s
            meta.started_at, meta.host_load, meta.cpu_affinity = started_at, load, affinity
            meta.sampler = sampler_stats
            meta.description_files = spec["descriptions"]
            meta.description_sha256 = {net: sha256_file(path)
                                       for net, path in spec["descriptions"].items()}
            assemble(tmp, meta)
            if meta.termination == "ok" and meta.tasks_finished != meta.child["tasks"]:
                meta.termination = "error"
                meta.termination_detail = (
                    f"progress.jsonl holds {meta.tasks_finished} finished tasks but the run "
                    f"had {meta.child['tasks']}: the record of the run was damaged")
                meta.write(tmp)
            failed = meta.termination == "error"
            claim.publish(tmp, (meta.termination_detail or "error") if failed else None)
            return meta
        except BaseException as exc:
            ignore_signals()  # the run is ending: a second signal must not cut the cleanup
            if gate is not None:
                gate.close()
            if proc is not None and proc.poll() is None:
                _kill_tree(proc, session)
                proc.wait()
            if sampler is not None:
                sampler.stop()
            if claim_cpu is not None:
                claim_cpu.close()
            if session is not None:
                session.close()
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(exc, Signalled):
                raise Interrupted(f"run interrupted by {exc.name}; nothing written") from None
            raise


def _kill_tree(proc: subprocess.Popen, session) -> None:
    """Kill the child's whole process group (it runs in its own session) and, where the
    backend has one, everything left in the run's cgroup."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if session is not None:
        session.kill_all()


def _termination(code: int, timed_out: str | None, oom_kills: int | None, session: Session,
                 tmp: Path, stall_s: float | None = None) -> tuple[str, str]:
    """ok | memory | timeout | error, and why (BenchExec's rules: OOM from kernel events,
    with the limit-reached fallback for a SIGKILLed child). ``timed_out``: None,
    "timeout" or "stalled" (engine.runner.stall)."""
    summary = read_child(tmp)
    # the child writes its summary last, atomically, after every task and its outputs: a
    # kill after that ended a finished run as it exited (nineteenth held-out pass D2:
    # near the limit, most "OOM-killed" uml runs had finished every task; twentieth D2:
    # the same of a timeout)
    done = ("every task finished and the outputs were written; then "
            if summary is not None and summary["status"] == "ok" else "")
    if timed_out == "stalled":
        if done:
            return "ok", f"{done}the stall watch ({stall_s:g} s) killed it as it exited"
        return "timeout", (f"stalled: no task started or ended and the run's memory and "
                           f"swap did not change for {stall_s:g} s; the run was killed")
    if timed_out:
        if done:
            return "ok", f"{done}the wall-clock timeout killed it as it exited"
        return "timeout", "wall-clock timeout; the run was killed"
    if oom_kills:
        killed_by = f"the kernel OOM killer ended {oom_kills} process(es) in the run's cgroup"
        if done:
            return "ok", f"{done}{killed_by} as it exited"
        return "memory", f"kernel OOM killer: {oom_kills} process(es) killed in the run's cgroup"
    killed = code in (-signal.SIGKILL, 128 + signal.SIGKILL) or _gnu_time_signal(tmp) == 9
    if killed and session.hit_limit():
        if done:
            return "ok", f"{done}it was killed by SIGKILL with the cgroup at its limit as it exited"
        return "memory", "killed by SIGKILL with the cgroup at its limit"
    if summary is not None:
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

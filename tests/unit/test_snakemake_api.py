"""engine.workflow.snakemake_api against the installed Snakemake: its private override is
used only where it still does what the workflow relies on, and either way Snakemake sees
each function's true parameters."""

from __future__ import annotations

import inspect

import pytest
import snakemake
from snakemake.common import get_function_params, get_input_function_aux_params

from engine.workflow import snakemake_api


def _functions():
    def run_mem(wildcards):
        return 1

    def vm_env(wildcards, input):
        return ""

    return run_mem, vm_env


def test_the_installed_snakemake_is_one_the_override_was_checked_on():
    """Fails after a Snakemake upgrade out of PRIVATE_VERSIONS or one without
    overwrite_function_params: read its get_function_params again, then move the range."""
    low, high = snakemake_api.PRIVATE_VERSIONS
    assert snakemake_api.private_override() is not None, (
        f"Snakemake {snakemake.__version__} is outside [{low}, {high}) or has no "
        f"snakemake.common.overwrite_function_params")


def test_snakemake_returns_the_declared_parameters_without_inspecting_again(monkeypatch):
    functions = _functions()
    assert snakemake_api.declare_signatures(functions)
    declared = [f.__signature__.parameters for f in functions]

    def no_inspecting(*args, **kwargs):
        raise AssertionError("Snakemake inspected a declared function's signature")

    monkeypatch.setattr(inspect, "signature", no_inspecting)
    for function, params in zip(functions, declared, strict=True):
        assert get_function_params(function) is params
    run_mem, vm_env = functions
    candidates = {"input": ["a"], "output": ["b"], "threads": 1}
    assert get_input_function_aux_params(run_mem, candidates) == {}
    assert get_input_function_aux_params(vm_env, candidates) == {"input": ["a"]}


def test_outside_the_checked_versions_only_the_public_signature_is_set(monkeypatch):
    monkeypatch.setattr(snakemake_api, "PRIVATE_VERSIONS", ((0, 0), (0, 1)))
    functions = _functions()
    assert not snakemake_api.declare_signatures(functions)
    for function in functions:
        assert not hasattr(function, "_overwrite_params")
        assert list(get_function_params(function)) == list(
            inspect.signature(function, follow_wrapped=False).parameters)
    assert list(get_function_params(functions[1])) == ["wildcards", "input"]


@pytest.mark.parametrize("text, version", [("9.27.1", (9, 27)), ("10.0.0a1", (10, 0)),
                                           ("9.17.0.post1+g1", (9, 17))])
def test_versions_are_read_as_major_minor(text, version):
    assert snakemake_api._version(text) == version


SNAKEFILE = """
from engine.workflow.snakemake_api import coalesce_reevaluations
assert coalesce_reevaluations()
rule all:
    input: expand("out/{i}.txt", i=range(JOBS))
rule one:
    output: "out/{i}.txt"
    shell: "sleep 0.5; echo {wildcards.i} > {output}"
"""


def test_snakemakes_scheduler_keeps_one_reevaluation_pending(tmp_path):
    """A real Snakemake run of 15 half-second jobs on one core: its scheduling passes
    (one "Ready jobs" line each) are at most one per event and one per second of waiting.
    Snakemake's own reevaluation adds a never-ending chain of passes per finished job: 66
    passes here against 23 with one timer pending (measured), about jobs^2 / 4."""
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    jobs = 15
    (tmp_path / "Snakefile").write_text(SNAKEFILE.replace("JOBS", str(jobs)))
    repo = Path(__file__).resolve().parents[2]
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "--verbose", "all"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=str(repo)))
    wall = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-2000:]
    passes = (r.stdout + r.stderr).count("Ready jobs")
    # a pass per finished job, one per second of the rate limit's timer, and the first few
    assert jobs <= passes <= jobs + wall + 5, (passes, wall)


def test_snakemakes_sigterm_handler_never_waits_on_the_lock_its_thread_holds():
    """Snakemake's own handler takes the scheduler's lock, which the main thread (where
    the handler runs) may hold while it selects jobs: it waits on itself. Checked with
    Snakemake's method first, then with the repair: the flag set, a pass released."""
    import threading
    from types import SimpleNamespace

    from snakemake.scheduling.job_scheduler import JobScheduler

    original = JobScheduler.exit_gracefully

    def handled(method) -> SimpleNamespace:
        sched = SimpleNamespace(_lock=threading.Lock(), _open_jobs=threading.Semaphore(0),
                                _user_kill=None)

        def in_the_main_thread() -> None:  # it holds the lock, and the signal lands
            with sched._lock:
                method(sched)

        t = threading.Thread(target=in_the_main_thread, daemon=True)
        t.start()
        t.join(1.0)
        sched.finished = not t.is_alive()
        return sched

    assert not handled(original).finished  # Snakemake's own: stuck for good
    try:
        assert snakemake_api.exit_without_lock()
        sched = handled(JobScheduler.exit_gracefully)
        assert sched.finished and sched._user_kill == "graceful"
        assert sched._open_jobs.acquire(blocking=False)
    finally:
        JobScheduler.exit_gracefully = original

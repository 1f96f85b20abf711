"""engine.workflow.interrupt with a real Snakemake: a SIGINT or SIGTERM to Snakemake's
PID alone reaches its running job, and a second SIGINT while that job cleans up neither
ends Snakemake before the job nor in a chain of tracebacks (twenty-second pass M6)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.signals import default_signals

REPO = Path(__file__).resolve().parents[2]

SNAKEFILE = """
from engine.workflow.interrupt import forward_interrupts
from engine.workflow.snakemake_api import exit_without_lock
assert exit_without_lock()
if workflow.is_main_process:
    assert forward_interrupts()
rule all:
    input: "done"
rule job:
    output: "done"
    shell: "PYTHON job.py && touch {output}"
"""

# A job that records every SIGINT and SIGTERM it gets and, after the first, "cleans up"
# until the test releases it (as the engine does in a sandbox), then exits as
# interrupted.
JOB = """
import os, signal, sys, time
from pathlib import Path

def on_signal(signum, frame):
    with open("signals", "a") as f:
        f.write(signal.Signals(signum).name + "\\n")

signal.signal(signal.SIGINT, on_signal)
signal.signal(signal.SIGTERM, on_signal)
Path("job.pid").write_text(str(os.getpid()))
for wanted in ("signals", "release"):
    for _ in range(6000):  # at most 5 minutes: never outlive a failed test for long
        if Path(wanted).exists():
            break
        time.sleep(0.05)
sys.exit(130)
"""


def _start_snakemake(folder: Path, snakefile: str) -> subprocess.Popen:
    """Snakemake on ``snakefile`` (and JOB) in ``folder``, in a session of its own."""
    (folder / "Snakefile").write_text(snakefile.replace("PYTHON", shlex.quote(sys.executable)))
    (folder / "job.py").write_text(JOB)
    return subprocess.Popen([sys.executable, "-m", "snakemake", "--cores", "1", "all"],
                            cwd=folder, env=dict(os.environ, PYTHONPATH=str(REPO)),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=default_signals, start_new_session=True)


def _wait_for(condition, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _signals(tmp_path: Path) -> list[str]:
    path = tmp_path / "signals"
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.parametrize("sig, target, second", [
    (signal.SIGINT, "pid", False), (signal.SIGINT, "pid", True),
    (signal.SIGINT, "group", True), (signal.SIGTERM, "pid", False)],
    ids=["one-SIGINT-to-the-pid", "two-SIGINTs-to-the-pid", "double-ctrl-c",
         "SIGTERM-to-the-pid"])
def test_a_signal_to_snakemake_stops_its_job_before_snakemake_ends(tmp_path, sig, target,
                                                                    second):
    proc = _start_snakemake(tmp_path, SNAKEFILE)

    def interrupt() -> None:
        if target == "pid":
            proc.send_signal(sig)
        else:  # a terminal's Ctrl-C: the whole foreground group
            os.killpg(proc.pid, sig)

    job = None
    try:
        _wait_for(lambda: (tmp_path / "job.pid").exists() or proc.poll() is not None,
                  "the job started")
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        job = int((tmp_path / "job.pid").read_text())
        interrupt()
        _wait_for(lambda: _signals(tmp_path), f"the job got the {sig.name}", 60)
        assert set(_signals(tmp_path)) == {sig.name}
        # Snakemake waits while the job cleans up (fifteenth held-out pass: after a
        # SIGTERM it left 1-3 s before the job, whose shell had ended at once)
        time.sleep(1.5)
        assert proc.poll() is None, "Snakemake ended while its job was cleaning up"
        if second:
            got = len(_signals(tmp_path))
            interrupt()
            _wait_for(lambda: len(_signals(tmp_path)) > got, "the job got the second one", 60)
            assert proc.poll() is None  # still waiting for the job, which cleans up
        (tmp_path / "release").write_text("")
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        alive = job is not None and _alive(job)
        if alive:  # a failed test leaves nothing running
            os.kill(job, signal.SIGKILL)
    assert not alive, "the job outlived Snakemake"
    assert proc.returncode != 0
    assert "Traceback" not in out and "Cannot close a running event loop" not in out, out
    assert not (tmp_path / "done").exists()


# The same workflow, held while Snakemake parses it (after the handler is installed)
PARSING = SNAKEFILE.replace("""    assert forward_interrupts()
""", """    assert forward_interrupts()
    import time
    from pathlib import Path
    Path("parsing").touch()
    for _ in range(6000):
        if Path("release").exists():
            break
        time.sleep(0.05)
""")


def test_a_sigint_before_any_job_runs_stops_snakemake_in_one_line(tmp_path):
    """Sixth held-out pass M2: a Ctrl-C while Snakemake was not in its scheduling loop (it
    parsed, built its DAG or imported) ended in a KeyboardInterrupt traceback and a death
    by SIGINT: Snakemake catches one only in that loop."""
    proc = _start_snakemake(tmp_path, PARSING)
    try:
        _wait_for(lambda: (tmp_path / "parsing").exists() or proc.poll() is not None,
                  "the parse started")
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, out
    assert "Traceback" not in out and "error: interrupted (no job was running)" in out, out
    assert not (tmp_path / "job.pid").exists()

"""Waiting for a process (engine.procs.wait_exit): woken by its exit, not by polls."""

from __future__ import annotations

import subprocess
import sys

import pytest

from engine.procs import wait_exit


def _no_polling(monkeypatch) -> None:
    """Popen.wait(timeout) polls with time.sleep: make any poll an error."""
    def poll(_seconds: float) -> None:
        raise AssertionError("polled")

    monkeypatch.setattr(subprocess.time, "sleep", poll)


def test_wait_exit_returns_the_exit_code_without_polling(monkeypatch):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3); exit(7)"])
    _no_polling(monkeypatch)
    assert wait_exit(proc, 30) == 7
    assert wait_exit(proc, 30) == 7  # reaped already: its code again


def test_wait_exit_times_out_as_popen_does(monkeypatch):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        _no_polling(monkeypatch)
        with pytest.raises(subprocess.TimeoutExpired):
            wait_exit(proc, 0.1)
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_exit_now_keeps_what_was_written_and_skips_the_teardown(tmp_path):
    """The measured child and the sampler end with exit_now: what they printed to a pipe
    (block-buffered) still arrives, with the exit status, and nothing of the interpreter's
    teardown (here an atexit handler) runs."""
    from pathlib import Path

    code = ("import atexit, sys\nfrom engine.procs import exit_now\n"
            "atexit.register(lambda: open(sys.argv[1], 'w').write('torn down'))\n"
            "print('said', end='')\nsys.stderr.write('and this')\nexit_now(3)\n")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "teardown")],
                       capture_output=True, text=True, timeout=60,
                       cwd=Path(__file__).resolve().parents[2])
    assert (r.returncode, r.stdout, r.stderr) == (3, "said", "and this")
    assert not (tmp_path / "teardown").exists()

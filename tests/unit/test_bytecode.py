"""The engine's bytecode cache (engine.bytecode): what the interpreter itself loads, with
``PYTHONDONTWRITEBYTECODE=1`` as on this project's machines."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from engine.bytecode import compile_package
from engine.sandbox.run import job_script

REPO = Path(__file__).resolve().parents[2]


def _python(code: str, cwd: Path, *flags: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPYCACHEPREFIX"}
    env |= {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(cwd)}
    return subprocess.run([sys.executable, *flags, "-c", code], cwd=cwd, env=env,
                          capture_output=True, text=True, check=True)


def _package(root: Path, **modules: str) -> Path:
    """A package ``pkg`` under ``root`` of the given modules' sources."""
    pkg = root / "pkg"
    pkg.mkdir()
    for name, source in modules.items():
        (pkg / f"{name}.py").write_text(source)
    return pkg


def test_a_run_supervisors_engine_modules_load_from_the_compiled_cache(tmp_path):
    shutil.copytree(REPO / "engine", tmp_path / "engine",
                    ignore=shutil.ignore_patterns("__pycache__"))
    loaded = "# code object from '{}'".format
    pyc = Path(importlib.util.cache_from_source(str(tmp_path / "engine/runner/supervise.py")))
    before = _python("import engine.runner.supervise", tmp_path, "-v").stderr
    assert loaded(pyc) not in before and not pyc.exists()  # compiled anew, nothing written

    assert compile_package(tmp_path / "engine")
    after = _python("import engine.runner.supervise", tmp_path, "-v").stderr
    assert loaded(pyc) in after
    # every engine module the supervisor imports comes from the cache, none from source
    from_source = [line for line in after.splitlines()
                   if line.startswith("# code object from") and str(tmp_path) in line
                   and line.rstrip("'").endswith(".py")]
    assert from_source == []


def test_an_edit_that_keeps_size_and_times_is_never_run_stale(tmp_path):
    module = _package(tmp_path, mod="VALUE = 1\n") / "mod.py"
    assert compile_package(module.parent)
    assert _python("import pkg.mod; print(pkg.mod.VALUE)", tmp_path).stdout == "1\n"
    stat = module.stat()
    module.write_text("VALUE = 2\n")  # same size, its times set back
    os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert _python("import pkg.mod; print(pkg.mod.VALUE)", tmp_path).stdout == "2\n"


def test_only_what_changed_is_compiled_again(tmp_path):
    pkg = _package(tmp_path, a="A = 1\n", b="B = 1\n")
    assert compile_package(pkg)
    cached = {name: Path(importlib.util.cache_from_source(str(pkg / name)))
              for name in ("a.py", "b.py")}
    written = {name: path.stat().st_mtime_ns for name, path in cached.items()}
    (pkg / "b.py").write_text("B = 22\n")
    assert compile_package(pkg)
    assert cached["a.py"].stat().st_mtime_ns == written["a.py"]
    assert cached["b.py"].stat().st_mtime_ns != written["b.py"]
    assert _python("import pkg.b; print(pkg.b.B)", tmp_path).stdout == "22\n"


def test_a_cache_that_cannot_be_written_is_said_and_the_module_still_imports(tmp_path):
    pkg = _package(tmp_path, mod="VALUE = 3\n")
    (pkg / "__pycache__").write_text("a file where the cache folder would go\n")
    assert compile_package(pkg) is False
    assert _python("import pkg.mod; print(pkg.mod.VALUE)", tmp_path).stdout == "3\n"


def test_a_sandbox_guest_looks_for_bytecode_where_the_host_does(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "pycache_prefix", None)
    assert "PYTHONPYCACHEPREFIX" not in job_script(["run"], "uml", tmp_path)
    monkeypatch.setattr(sys, "pycache_prefix", "/var/cache/py")
    assert "export PYTHONPYCACHEPREFIX=/var/cache/py\n" in job_script(["run"], "uml", tmp_path)

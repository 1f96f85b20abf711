"""Which code each kind of workflow job runs: the engine modules it imports, followed from
its entry modules, and a hash of their source that the rules put in the job's params, so a
code change reruns exactly the jobs that run that code."""

from __future__ import annotations

import ast
import functools
import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

# The CLI registers every verb, and each verb imports its stage's modules inside its
# function: follow only the top-level imports of the CLI and of the verbs a job does not
# run, and name each job's own verbs (and stage modules) as entries. Likewise the engine.vm
# package, whose names are lazy re-exports of engine.vm.run (the run job names that
# module): importing engine.vm.uml to read its build record is not running a guest.
SHALLOW = frozenset({"engine.cli", "engine.vm"})
VERBS = "engine.commands."
# What each kind of job runs, as engine modules; their imports are followed (function-level
# ones too: they run when the job does).
JOB_ENTRIES = {
    "models": ("engine.__main__", "engine.cli", "engine.commands.models",
               "engine.caffe.generate"),
    "split": ("engine.__main__", "engine.cli", "engine.commands.split", "engine.caffe.splitter"),
    "pipelines": ("engine.__main__", "engine.cli", "engine.commands.pipelines",
                  "engine.schedule.pipelines", "engine.caffe.splitter"),
    # the supervisor (in the guest too: the supervise verb), the measured child, the
    # sampler process, the vm path and its guest
    "run": ("engine.__main__", "engine.cli", "engine.commands.run", "engine.commands.supervise",
            "engine.commands.child", "engine.runner.supervise", "engine.runner.child",
            "engine.probes.sampler", "engine.vm.run", "engine.vm.job"),
    "tidy": ("engine.__main__", "engine.cli", "engine.commands.tidy", "engine.analysis.tables"),
    "tables": ("engine.analysis.tables", "engine.analysis.reconcile"),
    "plots": ("engine.analysis.plots",),
    "model": ("engine.__main__", "engine.cli", "engine.commands.fit_model",
              "engine.commands.evaluate_model", "engine.commands.reconstruct_model",
              "engine.commands.score_holdout", "engine.model.train", "engine.model.evaluate",
              "engine.model.reconstruct"),
    "model_plots": ("engine.model.figures",),
}
POLICIES_MODULE = "engine.schedule.policies"


def _module_file(root: Path, name: str) -> Path | None:
    base = root.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _engine_imports(tree: ast.Module, package: str, nested: bool) -> set[str]:
    """engine modules (and their parent packages) that ``tree``, a module of ``package``,
    imports."""
    nodes = ast.walk(tree) if nested else tree.body
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: "from .conv import x" in engine.ops
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            # "from engine.x import y": y may be a module of package engine.x
            names = [base, *(f"{base}.{a.name}" for a in node.names)]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "engine":
                found.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return found


def job_modules(entries: Iterable[str], root: Path) -> dict[str, Path]:
    """Every engine module a job with these entry modules can run: the entries and,
    transitively, what they import (package ``__init__``s included)."""
    seen: dict[str, Path] = {}
    todo = list(entries)
    own = set(todo)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = _module_file(root, name)
        if path is None:  # a name imported from a module, not a module
            continue
        seen[name] = path
        tree = ast.parse(path.read_text(), str(path))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        shallow = name in SHALLOW or (name.startswith(VERBS) and name not in own)
        todo.extend(_engine_imports(tree, package, nested=not shallow))
    return dict(sorted(seen.items()))


def _without_functions(source: str, names: set[str]) -> str:
    """``source`` minus its top-level functions called ``names``."""
    lines = source.splitlines(keepends=True)
    drop = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            drop.update(range(first - 1, node.end_lineno))
    return "".join(line for i, line in enumerate(lines) if i not in drop)


def code_fingerprint(job: str, root: Path) -> str:
    """A hash of the source of every module a ``job`` (a key of JOB_ENTRIES) runs, less the
    policies' graph builders: only a run calls those, and each run adds its own policy's
    fingerprint (policies.policy_fingerprint), so editing one policy reruns only its runs
    while any other shared line reruns every job that imports it."""
    from engine.schedule.policies import builder_function_names

    policy_builders = builder_function_names()
    modules = job_modules(JOB_ENTRIES[job], root)
    if not modules:  # a wrong root must not give every job the same, constant hash
        raise ValueError(f"no engine modules under {root}")
    h = hashlib.sha256()
    for name, path in modules.items():
        source = path.read_text()
        if name == POLICIES_MODULE:
            source = _without_functions(source, policy_builders)
        h.update(f"{name}\n{source}\n".encode())
    return h.hexdigest()[:16]


@functools.cache
def _content_digest(path: str, stamp: tuple[int, int, int]) -> str:
    from engine.files import sha256_file

    return sha256_file(path)


def content_digest(paths: Iterable[str]) -> str:
    """One SHA-256 over the contents of ``paths``: the params of a job whose inputs the
    workflow does not make (the user's models), so that a file replaced by another
    rerun it whatever its time (Snakemake compares times: a file copied in with its older
    one kept, ``cp -p`` or ``rsync -a``, would keep the old split). Each file is hashed
    once per process and state (size, time, inode)."""
    digest = hashlib.sha256()
    for path in paths:
        st = os.stat(path)
        digest.update(_content_digest(path, (st.st_size, st.st_mtime_ns, st.st_ino)).encode())
    return digest.hexdigest()

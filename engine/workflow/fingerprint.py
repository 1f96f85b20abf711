"""Which code each kind of workflow job runs: the engine modules it imports, followed from
its entry modules, and a hash of their code (their syntax trees, without comments or
docstrings) that the rules put in the job's params, so a code change reruns exactly the
jobs that run that code, and an edit to a comment none."""

from __future__ import annotations

import ast
import functools
import hashlib
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

# A module a job only imports runs only its top level: follow its import-time imports, not
# the ones inside its functions. So the engine.sandbox package, whose names are lazy
# re-exports of engine.sandbox.run (the run job names that module): importing
# engine.sandbox.paths to check a path is not running a guest. (The CLI imports the verb
# it runs alone: each job names its verbs' modules.)
IMPORT_ONLY = frozenset({"engine.sandbox"})
# What each kind of job runs, as engine modules; their imports are followed (function-level
# ones too: they run when the job does).
JOB_ENTRIES = {
    "models": ("engine.__main__", "engine.cli", "engine.commands.models",
               "engine.caffe.generate"),
    "split": ("engine.__main__", "engine.cli", "engine.commands.split", "engine.caffe.splitter"),
    "pipelines": ("engine.__main__", "engine.cli", "engine.commands.pipelines",
                  "engine.schedule.pipelines", "engine.caffe.splitter"),
    # the supervisor (in the guest too: the supervise verb), the measured child, the
    # sampler process, the vm path and its guest, a sandbox block's verb
    "run": ("engine.__main__", "engine.cli", "engine.commands.run", "engine.commands.run_block",
            "engine.commands.supervise", "engine.commands.child", "engine.runner.supervise",
            "engine.runner.child", "engine.probes.sampler", "engine.sandbox.run",
            "engine.sandbox.job", "engine.guestjob"),
    # the aggregate scripts (campaign and held-out): the reconciliation comes with aggregate,
    # run.sequential's looks are read by it
    "tables": ("engine.analysis.aggregate", "engine.analysis.provenance",
               "engine.analysis.tablefiles", "engine.analysis.sequential"),
    # run.sequential's look at a pipeline's first repetitions
    "look": ("engine.analysis.sequential", "engine.analysis.provenance",
             "engine.analysis.tablefiles", "engine.analysis.summaries"),
    "plots": ("engine.analysis.plots",),
    # the model's verbs, each its own: an edit to one reruns its job and what follows it
    "fit_model": ("engine.__main__", "engine.cli", "engine.commands.fit_model"),
    "evaluate_model": ("engine.__main__", "engine.cli", "engine.commands.evaluate_model"),
    "reconstruct_model": ("engine.__main__", "engine.cli", "engine.commands.reconstruct_model"),
    "score_holdout": ("engine.__main__", "engine.cli", "engine.commands.score_holdout"),
    "model_plots": ("engine.model.figures",),
}
POLICIES_MODULE = "engine.schedule.policies"


def _module_file(root: Path, name: str) -> Path | None:
    base = root.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _is_type_checking(node: ast.AST) -> bool:
    """``if TYPE_CHECKING:``: imports for annotations only, never run."""
    return (isinstance(node, ast.If)
            and (getattr(node.test, "id", None) == "TYPE_CHECKING"
                 or getattr(node.test, "attr", None) == "TYPE_CHECKING"))


def _import_nodes(nodes: Iterable[ast.AST], calls: bool) -> Iterator[ast.AST]:
    """The import statements in ``nodes`` and under them that run: at import time only
    (``calls`` false: not inside a function or lambda), or at any time."""
    for node in nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif _is_type_checking(node):
            yield from _import_nodes(node.orelse, calls)
        elif calls or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                              ast.Lambda)):
            yield from _import_nodes(ast.iter_child_nodes(node), calls)


def _engine_imports(tree: ast.Module, package: str, calls: bool) -> set[str]:
    """engine modules (and their parent packages) that ``tree``, a module of ``package``,
    imports: when it is imported (``calls`` false) or also when its functions run."""
    found = set()
    for node in _import_nodes(tree.body, calls):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:  # relative: "from .conv import x" in engine.ops
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            # "from engine.x import y": y may be a module of package engine.x
            names = [base, *(f"{base}.{a.name}" for a in node.names)]
        for name in names:
            parts = name.split(".")
            if parts[0] == "engine":
                found.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return found


@functools.lru_cache(maxsize=4096)
def _imports_of(source: str, package: str, calls: bool) -> frozenset[str]:
    # by text: Snakemake computes a fingerprint per job kind, each over the same modules
    return frozenset(_engine_imports(ast.parse(source), package, calls))


def _closure(entries: Iterable[str], root: Path) -> tuple[dict[str, Path], dict[str, Path]]:
    """The engine modules a job with these entry modules runs: those whose functions it
    may call, and those it only imports (their top level alone runs)."""
    runs: dict[str, Path] = {}
    imported: dict[str, Path] = {}
    todo = [(name, True) for name in entries]
    while todo:
        name, called = todo.pop()
        if name in runs or (not called and name in imported):
            continue
        path = _module_file(root, name)
        if path is None:  # a name imported from a module, not a module
            continue
        source = path.read_text()
        if name in IMPORT_ONLY:
            called = False
            if name in imported:
                continue
        (runs if called else imported)[name] = path
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        todo.extend((m, called) for m in _imports_of(source, package, called))
    return runs, {name: path for name, path in imported.items() if name not in runs}


def job_modules(entries: Iterable[str], root: Path) -> dict[str, Path]:
    """Every engine module a job with these entry modules can run: the entries and,
    transitively, what they import (package ``__init__``s included). A module reached
    only through modules the job merely imports counts with its top level's imports."""
    runs, imported = _closure(entries, root)
    return dict(sorted((imported | runs).items()))


@functools.lru_cache(maxsize=4096)
def code_text(source: str, filename: str = "<code>") -> str:
    """What of ``source`` is code: its syntax tree, without comments, docstrings or
    layout, so that an edit to those changes no fingerprint."""
    tree = ast.parse(source, filename)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                             ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                node.body = node.body[1:] or [ast.Pass()]
    return ast.dump(tree)


def _policies_tree(root: Path) -> ast.Module:
    path = _module_file(root, POLICIES_MODULE)
    return ast.parse(path.read_text(), str(path))


def _builder_code(tree: ast.Module) -> dict[str, list[ast.AST]]:
    """Policy family -> its graph builder in the policies module (the value of its key in
    ``_BUILDERS``: a function's name or a lambda) and every module-level function that
    calls, transitively: read from the code, as the fingerprints are."""
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    table = next(n.value for n in tree.body
                 if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", "") == "_BUILDERS"
                 or isinstance(n, ast.Assign)
                 and "_BUILDERS" in {getattr(t, "id", None) for t in n.targets})

    def reachable(start: ast.AST) -> list[ast.AST]:
        found: list[ast.AST] = [start]
        names: set[str] = set()
        for node in found:
            for ref in ast.walk(node):
                if isinstance(ref, ast.Name) and ref.id in functions and ref.id not in names:
                    names.add(ref.id)
                    found.append(functions[ref.id])
        return found

    return {key.value: reachable(value) for key, value in zip(table.keys, table.values)}


def code_fingerprint(job: str, root: Path) -> str:
    """A hash of the code of every module a ``job`` (a key of JOB_ENTRIES) runs, less the
    policies' graph builders: only a run calls those, and each run adds its own policy's fingerprint
    (policy_fingerprint), so editing one policy reruns only its runs while any other
    shared line reruns every job that imports it."""
    runs, imported = _closure(JOB_ENTRIES[job], root)
    if not runs:  # a wrong root must not give every job the same, constant hash
        raise ValueError(f"no engine modules under {root}")
    h = hashlib.sha256()
    for name, path in sorted((imported | runs).items()):
        source = path.read_text()
        if name == POLICIES_MODULE:
            tree = _policies_tree(root)
            builders = {id(node) for nodes in _builder_code(tree).values() for node in nodes}
            tree.body = [node for node in tree.body if id(node) not in builders]
            source = ast.unparse(tree)
        h.update(f"{name}\n{code_text(source, str(path))}\n".encode())
    # what the code runs that is not Python: the sandboxes' init scripts, the preload's C
    # source, real Caffe's probe, beside the modules whose functions use them
    for folder in sorted({path.parent for path in runs.values()}):
        for data in sorted(folder.iterdir()):
            if data.is_file() and data.suffix not in (".py", ".pyc"):
                h.update(f"{data.relative_to(root)}\n".encode() + data_code(data))
    return h.hexdigest()[:16]


_HASH_COMMENTS = (".sh", ".prototxt")  # a line starting with # is a comment
_C_COMMENTS = (".c", ".cpp", ".h")
# a C comment, or a string or character literal (kept: a // inside one is no comment)
_C_TOKEN = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'',
                      re.S)


def data_code(path: Path) -> bytes:
    """What of a file beside the engine's modules is code: a shell script or a prototxt
    without its comment lines (a shebang stays), C/C++ without its comments, each
    without blank lines and trailing blanks; any other file whole (eleventh held-out
    pass M4: a comment in uml_init.sh reran every run)."""
    if path.suffix not in _HASH_COMMENTS + _C_COMMENTS:
        return path.read_bytes()
    text = path.read_text()
    if path.suffix in _C_COMMENTS:
        text = _C_TOKEN.sub(lambda m: " " if m[0][0] == "/" else m[0], text)
        lines = text.splitlines()
    else:
        lines = [line for i, line in enumerate(text.splitlines())
                 if not line.lstrip().startswith("#") or (i == 0 and line.startswith("#!"))]
    return "\n".join(line.rstrip() for line in lines if line.strip()).encode()


def policy_fingerprint(family: str, root: Path) -> str:
    """A hash of the code of this policy family's graph builder and every function of the
    policies module it calls, so the workflow reruns a policy's runs only when that
    policy's code changes."""
    nodes = _builder_code(_policies_tree(root))[family]
    parts = sorted(code_text(ast.unparse(node)) for node in nodes)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


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

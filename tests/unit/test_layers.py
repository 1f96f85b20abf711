"""The engine's layering contract (docs/engine.md, "The engine's layers"): every import
of an engine module, the ones inside functions included (they run when the function
does) and ``if TYPE_CHECKING:`` ones excluded (annotations only), goes down the layers
or stays inside its own package, and no modules import each other in a circle.

Read from the source, not by importing it: a function-level import is found without
running the function, and the test needs nothing beyond the standard library."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[2] / "engine"

# Bottom to top. A part is a top-level module or package of engine ("" is the root
# package's __init__); the parts of one layer are siblings and import none of each
# other. A part may import only parts of layers below its own.
LAYERS: list[tuple[str, ...]] = [
    ("",),  # engine/__init__.py: the version, nothing else
    ("errors", "log"),
    ("units", "procs", "signals", "shapes"),
    ("files",),
    ("digests", "bytecode"),
    ("ops",),
    ("caffe",),
    ("runtime",),
    ("network", "schedule"),
    ("limits",),
    ("probes",),
    ("runner",),
    ("sandbox", "realcaffe", "analysis"),
    ("model",),
    ("commands",),
    ("cli", "workflow", "vm"),  # vm: engine.sandbox's old name, a forwarder
    ("__main__", "guestjob"),  # the entry points: python -m engine, the sandbox guest's job
]
LAYER_OF = {part: i for i, parts in enumerate(LAYERS) for part in parts}


def _modules() -> dict[str, Path]:
    """Every engine module by dotted name (a package by its own name)."""
    found = {}
    for path in sorted(ENGINE.rglob("*.py")):
        parts = ["engine", *path.relative_to(ENGINE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and (getattr(node.test, "id", None) == "TYPE_CHECKING"
                                         or getattr(node.test, "attr", None) == "TYPE_CHECKING")


def _import_nodes(nodes: list[ast.AST]) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: module level and inside functions, not
    under ``if TYPE_CHECKING:`` (its ``else:`` does run)."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif _is_type_checking(node):
            found += _import_nodes(node.orelse)
        else:
            found += _import_nodes(list(ast.iter_child_nodes(node)))
    return found


def _module_of(name: str) -> str | None:
    """The engine module a dotted name is, or is in ("engine.x.y.NAME" -> "engine.x.y")."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(name: str, path: Path, source: str | None = None) -> list[tuple[int, str]]:
    """(line, engine module) for each engine module that module ``name`` imports."""
    tree = ast.parse(path.read_text() if source is None else source, str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in _import_nodes(tree.body):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:  # relative: resolved against the importing module's package
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            # "from engine.x import y": y is a module of package engine.x, or a name in it
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                       for a in node.names]
        for target in dict.fromkeys(targets):  # once per statement
            module = _module_of(target) if target.split(".")[0] == "engine" else None
            if module is not None and module != name:
                found.append((node.lineno, module))
    return found


def part_of(module: str) -> str:
    """The contract's part of an engine module: "engine.runner.meta" -> "runner"."""
    return module.split(".")[1] if "." in module else ""


def upward_imports(graph: dict[str, list[tuple[int, str]]]) -> list[str]:
    """Each import that is not down the layers nor inside its own part, said in a line."""
    bad = []
    for module, imports in sorted(graph.items()):
        here = part_of(module)
        for line, target in imports:
            there = part_of(target)
            if there == here:
                continue
            if LAYER_OF[there] >= LAYER_OF[here]:
                how = "a sibling in its layer" if LAYER_OF[there] == LAYER_OF[here] else "up"
                bad.append(f"{MODULES[module].relative_to(ENGINE.parent)}:{line} imports "
                           f"{target}: {here or 'engine'} (layer {LAYER_OF[here]}) -> "
                           f"{there or 'engine'} (layer {LAYER_OF[there]}), {how}")
    return bad


def cycles(graph: dict[str, list[tuple[int, str]]]) -> list[list[str]]:
    """The modules that import each other in a circle, one sorted list per circle
    (Tarjan's strongly connected components with more than one module)."""
    edges = {m: sorted({t for _, t in imports}) for m, imports in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:  # the engine's import depth is far below the recursion limit
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(found)


@functools.cache
def _graph() -> dict[str, list[tuple[int, str]]]:
    return {name: imports_of(name, path) for name, path in MODULES.items()}


def test_every_engine_part_has_its_place_in_the_layers():
    missing = sorted({part_of(m) for m in MODULES} - set(LAYER_OF))
    assert not missing, (f"engine parts outside the layering contract: {missing}; add each "
                         f"to LAYERS here and to docs/engine.md's layers")


def test_no_engine_import_runs_up_the_layers():
    bad = upward_imports(_graph())
    assert not bad, ("imports against the layering contract (docs/engine.md): move the "
                     "shared code down instead:\n" + "\n".join(bad))


def test_no_engine_modules_import_each_other_in_a_circle():
    found = cycles(_graph())
    assert not found, "modules that import each other in a circle:\n" + "\n".join(
        " <-> ".join(c) for c in found)


@pytest.mark.parametrize("source, expected", [
    # a function-level import counts: it runs when the function does
    ("def f():\n    from engine.runner.meta import RunMeta\n", ["engine.runner.meta"]),
    # an annotation-only import does not; its else branch does
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import engine.sandbox.run\n"
     "else:\n    import engine.errors\n", ["engine.errors"]),
    # "from package import module" is that module; "from module import name" the module
    ("from engine.caffe import wire\nfrom engine.units import MIB\n",
     ["engine.caffe.wire", "engine.units"]),
    # relative imports, resolved against the importing module's package
    ("from . import base\nfrom ..errors import EdgeprofError\n",
     ["engine.limits.base", "engine.errors"]),
])
def test_the_parser_finds_the_imports_that_run(source, expected):
    found = imports_of("engine.limits.sandbox", ENGINE / "limits" / "sandbox.py", source)
    assert [m for _, m in found] == expected


def test_the_checks_name_an_upward_import_and_a_circle():
    """The checks themselves, on a made-up graph: files importing runner is up three
    layers' worth of parts; a and b importing each other is a circle."""
    graph = {"engine.files": [(7, "engine.runner.meta")],
             "engine.analysis.a": [(1, "engine.analysis.b")],
             "engine.analysis.b": [(2, "engine.analysis.a")]}
    bad = upward_imports(graph)
    assert len(bad) == 1 and bad[0].startswith("engine/files.py:7 imports engine.runner.meta")
    assert "files (layer 3) -> runner (layer 11), up" in bad[0]
    assert cycles(graph) == [["engine.analysis.a", "engine.analysis.b"]]

"""A task graph as Graphviz DOT (EdgeCaffe's ``ndg`` tool draws the same)."""

from __future__ import annotations

from engine.schedule.tasks import WHOLE_NET, Kind, TaskGraph

_COLOURS = {Kind.INIT: "lightgrey", Kind.LOAD: "lightblue", Kind.EXEC: "palegreen"}


def to_dot(graph: TaskGraph, title: str, instance_names: dict[int, str],
           layer_names: dict[tuple[int, int], str]) -> str:
    lines = [f'digraph "{title}" {{', "  rankdir=LR;", '  node [shape=box, style=filled];',
             f'  label="{title}"; labelloc=t;']
    for instance, name in instance_names.items():
        lines.append(f'  subgraph "cluster_{instance}" {{ label="{instance}: {name}";')
        for t in graph.of_instance(instance):
            layer = "" if t.layer == WHOLE_NET else f"\\n{layer_names.get((instance, t.layer), '')}"
            pool = f"\\npool {t.pool}" if graph.pools > 1 else ""
            lines.append(f'    t{t.id} [label="{t.label}{layer}{pool}", '
                         f'fillcolor={_COLOURS[t.kind]}];')
        lines.append("  }")
    lines += [f"  t{a} -> t{b};" for a, b in graph.edges()]
    lines.append("}")
    return "\n".join(lines) + "\n"

"""Tasks and task graphs: what a policy hands to the dispatcher.

A network instance has an INIT task, then a LOAD and an EXEC task per layer (bulk: one
LOAD of the whole model and one EXEC of the whole forward pass). Task ids follow creation
order (instances in arrival order; INIT, LOAD_0, EXEC_0, LOAD_1, ...), which is the FCFS
order of EdgeCaffe's pools.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum


class Kind(IntEnum):
    """Task types with EdgeCaffe's numbering (EXEC=0, LOAD=1, INIT=2); lower runs first in
    the exec-priority and SNF pools."""

    EXEC = 0
    LOAD = 1
    INIT = 2


WHOLE_NET = -1  # layer index of INIT and of bulk LOAD/EXEC


@dataclass(eq=False)
class Task:
    id: int
    instance: int
    kind: Kind
    layer: int  # runtime layer index, or WHOLE_NET
    pool: int = 0  # which pool (and so which pinned workers) may take it
    deps: set[int] = field(default_factory=set)
    dependants: list[int] = field(default_factory=list)
    required_memory: int = 0  # bytes an INIT must reserve (memory-aware admission)

    @property
    def label(self) -> str:
        where = "" if self.layer == WHOLE_NET else f"_{self.layer}"
        return f"{self.kind.name}{where}"


@dataclass
class Instance:
    """One network of a pipeline, as the graph builders see it."""

    id: int
    network: str
    arrival: int  # index of its arrival (networks of one arrival form a batch)
    num_layers: int
    fc_start: int  # first layer of DeepEye's fc part (== num_layers if none)


@dataclass
class TaskGraph:
    tasks: list[Task]
    pools: int = 1

    def add(self, instance: int, kind: Kind, layer: int = WHOLE_NET, pool: int = 0) -> Task:
        task = Task(len(self.tasks), instance, kind, layer, pool)
        self.tasks.append(task)
        return task

    def edge(self, before: Task | None, after: Task | None) -> None:
        """``after`` may start only once ``before`` has finished."""
        if before is None or after is None or before is after:
            return
        if before.id not in after.deps:
            after.deps.add(before.id)
            before.dependants.append(after.id)

    def of_instance(self, instance: int) -> list[Task]:
        return [t for t in self.tasks if t.instance == instance]

    def edges(self) -> list[tuple[int, int]]:
        return sorted((d, t.id) for t in self.tasks for d in t.deps)

    def check_acyclic(self) -> None:
        """Kahn's algorithm; a cycle would hang a run, so it is a bug to report early."""
        indeg = {t.id: len(t.deps) for t in self.tasks}
        ready = [tid for tid, n in indeg.items() if n == 0]
        seen = 0
        while ready:
            tid = ready.pop()
            seen += 1
            for d in self.tasks[tid].dependants:
                indeg[d] -= 1
                if indeg[d] == 0:
                    ready.append(d)
        if seen != len(self.tasks):
            raise AssertionError(f"task graph has a cycle ({len(self.tasks) - seen} tasks stuck)")

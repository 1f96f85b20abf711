"""Loading policies: each one is a task graph, a set of pools with an order, and workers.

Semantics follow EdgeCaffe's task graphs (its InferenceNetwork and Orchestrator):

- ``bulk``: INIT -> LOAD(whole model) -> EXEC(whole forward); networks run one after another.
- ``linear``: one chain INIT -> LOAD_0 -> EXEC_0 -> LOAD_1 -> ...; networks one after another.
- ``partial:k``: LOAD_i <- INIT; EXEC_i <- EXEC_{i-1}, LOAD_i; k generic workers share one
  FCFS pool (EdgeCaffe has no dedicated loader threads: with k >= 2 the extra workers in
  effect prefetch loads, which is what "k loader workers" means here).
- ``deepeye``: two pinned workers; worker 0 does INIT and the conv part, worker 1 the fc
  part, with EdgeCaffe's batch linking; ``deepeye-frugal`` also waits for the previous
  network's last fc EXEC before loading fc weights.
- ``execprio:k`` / ``execprio-inter:k``: partial graph, any ready EXEC before LOAD/INIT;
  ``-inter`` runs networks one after another.
- ``masa:k``: partial graph; EXEC pool first, LOAD/INIT pool in shortest-network-first
  order; an INIT is admitted only if no network is active, its estimated peak fits the
  remaining budget, or its estimate is 0. Reserved memory is released when the network ends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from engine.errors import EdgeprofError
from engine.schedule.tasks import WHOLE_NET, Instance, Kind, Task, TaskGraph

MAX_WORKERS = 8


class PolicyError(EdgeprofError):
    """An unknown policy name or an invalid worker count."""


@dataclass(frozen=True)
class Policy:
    """A parsed policy string such as ``partial:2``."""

    name: str  # canonical, e.g. "partial:2"
    family: str  # bulk | linear | partial | deepeye | deepeye-frugal | execprio | ...
    workers: int
    worker_pools: tuple[tuple[int, ...], ...]  # pools each worker serves, in order
    order: str  # fcfs | execprio | snf
    admission: bool = False

    def build(self, instances: list[Instance]) -> TaskGraph:
        graph = _BUILDERS[self.family](instances)
        if self.family == "masa":  # EXEC pool 0, LOAD/INIT pool 1
            graph.pools = 2
            for task in graph.tasks:
                task.pool = 0 if task.kind == Kind.EXEC else 1
        graph.check_acyclic()
        return graph


_DEFAULT_WORKERS = {"partial": 2, "execprio": 2, "execprio-inter": 2, "masa": 2}
FAMILIES = ("bulk", "linear", "partial", "deepeye", "deepeye-frugal", "execprio",
            "execprio-inter", "masa")


def parse_policy(text: str) -> Policy:
    """``name`` or ``name:k`` (k workers, for partial, execprio(-inter) and masa)."""
    family, colon, count = text.strip().partition(":")
    if colon and not count:
        raise PolicyError(f"policy '{text}' has ':' but no worker count; write "
                          f"'{family}' or '{family}:k'")
    if family not in FAMILIES:
        raise PolicyError(f"unknown policy '{text}' (known: {', '.join(FAMILIES)}; "
                          "partial, execprio, execprio-inter and masa take ':k' workers)")
    if count and family not in _DEFAULT_WORKERS:
        raise PolicyError(f"policy '{family}' has a fixed number of workers; drop ':{count}'")
    workers = _DEFAULT_WORKERS.get(family, 1)
    if count:
        if not count.isdigit() or not 1 <= int(count) <= MAX_WORKERS:
            raise PolicyError(f"worker count in '{text}' must be 1..{MAX_WORKERS}")
        workers = int(count)
    if family in ("deepeye", "deepeye-frugal"):
        return Policy(family, family, 2, ((0,), (1,)), "fcfs")
    name = f"{family}:{workers}" if family in _DEFAULT_WORKERS else family
    order = {"execprio": "execprio", "execprio-inter": "execprio", "masa": "snf"}.get(
        family, "fcfs")
    pools = (0, 1) if family == "masa" else (0,)
    return Policy(name, family, workers, (pools,) * workers, order, admission=family == "masa")


# ---- graph builders ----

def _partial_net(g: TaskGraph, inst: Instance) -> tuple[Task, list[Task], list[Task]]:
    init = g.add(inst.id, Kind.INIT)
    loads, execs = [], []
    for i in range(inst.num_layers):
        load, exe = g.add(inst.id, Kind.LOAD, i), g.add(inst.id, Kind.EXEC, i)
        g.edge(init, load)
        g.edge(load, exe)
        g.edge(execs[-1] if execs else init, exe)
        loads.append(load)
        execs.append(exe)
    return init, loads, execs


def _sequential(g: TaskGraph, firsts: list[Task], lasts: list[Task]) -> None:
    """INIT of network k waits for the last task of network k-1 (linear, bulk, -inter)."""
    for prev_last, first in zip(lasts, firsts[1:]):
        g.edge(prev_last, first)


def _build_partial(instances: list[Instance], sequential: bool = False) -> TaskGraph:
    g = TaskGraph([])
    inits, lasts = [], []
    for inst in instances:
        init, _, execs = _partial_net(g, inst)
        inits.append(init)
        lasts.append(g.tasks[-1])
    if sequential:
        _sequential(g, inits, lasts)
    return g


def _build_linear(instances: list[Instance]) -> TaskGraph:
    g = TaskGraph([])
    inits, lasts = [], []
    for inst in instances:
        prev = init = g.add(inst.id, Kind.INIT)
        for i in range(inst.num_layers):
            for kind in (Kind.LOAD, Kind.EXEC):
                task = g.add(inst.id, kind, i)
                g.edge(prev, task)
                prev = task
        inits.append(init)
        lasts.append(prev)
    _sequential(g, inits, lasts)
    return g


def _build_bulk(instances: list[Instance]) -> TaskGraph:
    g = TaskGraph([])
    inits, lasts = [], []
    for inst in instances:
        init = g.add(inst.id, Kind.INIT)
        load = g.add(inst.id, Kind.LOAD, WHOLE_NET)
        exe = g.add(inst.id, Kind.EXEC, WHOLE_NET)
        g.edge(init, load)
        g.edge(load, exe)
        inits.append(init)
        lasts.append(exe)
    _sequential(g, inits, lasts)
    return g


@dataclass
class _ConvFC:
    init: Task
    conv_loads: list[Task]
    conv_execs: list[Task]
    fc_loads: list[Task]
    fc_execs: list[Task]


def _convfc_net(g: TaskGraph, inst: Instance) -> _ConvFC:
    """EdgeCaffe's createTasksConvFCV2 (conv part on pool 0, fc part on pool 1)."""
    init = g.add(inst.id, Kind.INIT, pool=0)
    net = _ConvFC(init, [], [], [], [])
    for i in range(inst.num_layers):
        fc = i >= inst.fc_start
        pool = 1 if fc else 0
        load, exe = g.add(inst.id, Kind.LOAD, i, pool), g.add(inst.id, Kind.EXEC, i, pool)
        loads, execs = (net.fc_loads, net.fc_execs) if fc else (net.conv_loads, net.conv_execs)
        g.edge(loads[-1] if loads else init, load)  # loads chained within each part
        g.edge(load, exe)
        if execs:
            g.edge(execs[-1], exe)
        elif not fc:
            g.edge(init, exe)
        loads.append(load)
        execs.append(exe)
    if net.fc_execs:
        first_fc = net.fc_execs[0]
        g.edge(net.conv_execs[-1] if net.conv_execs else init, first_fc)
        g.edge(net.fc_loads[-1], first_fc)  # all fc weights loaded before fc runs
    return net


def _build_deepeye(instances: list[Instance], frugal: bool = False) -> TaskGraph:
    g = TaskGraph([], pools=2)
    batches: dict[int, list[_ConvFC]] = {}
    for inst in instances:
        batches.setdefault(inst.arrival, []).append(_convfc_net(g, inst))
    for nets in batches.values():
        # All conv weights of the batch are loaded before its first convolution runs.
        first, last = nets[0], nets[-1]
        if first.conv_execs and last.conv_loads:
            g.edge(last.conv_loads[-1], first.conv_execs[0])
        prev_fc: _ConvFC | None = None
        for prev, net in zip([None, *nets], nets):
            if prev is not None:
                g.edge(prev.conv_loads[-1] if prev.conv_loads else prev.init, net.init)
                if prev.conv_execs and net.conv_execs:
                    g.edge(prev.conv_execs[-1], net.conv_execs[0])
            if net.fc_loads:
                if prev_fc is not None:
                    g.edge(prev_fc.fc_loads[-1], net.fc_loads[0])
                    if frugal:
                        g.edge(prev_fc.fc_execs[-1], net.fc_loads[0])
                prev_fc = net
    return g


_BUILDERS: dict[str, Callable[[list[Instance]], TaskGraph]] = {
    "bulk": _build_bulk,
    "linear": _build_linear,
    "partial": _build_partial,
    "execprio": _build_partial,
    "masa": _build_partial,
    "execprio-inter": lambda inst: _build_partial(inst, sequential=True),
    "deepeye": _build_deepeye,
    "deepeye-frugal": lambda inst: _build_deepeye(inst, frugal=True),
}

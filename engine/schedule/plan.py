"""What the dispatcher needs to run a pipeline under a policy, built in one place for the
measured run (``engine.runner.execute``) and for the model's simulator
(``engine.model.simulate``): the network instances in arrival order, when each arrives,
the policy's task graph with each INIT's memory reservation (masa's admission), and each
instance's shortest-network-first key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from engine.caffe.splitter import Description
from engine.errors import EdgeprofError
from engine.schedule.pipelines import Pipeline, bin_holds
from engine.schedule.policies import Policy
from engine.schedule.tasks import Instance, Kind, Task, TaskGraph


def estimate_peak_bytes(desc: Description) -> int:
    """Masa's admission estimate when no profile is given: every weight of the network
    resident (loads may run ahead of execution) plus its two largest activations."""
    outputs = sorted((4 * math.prod(s) for layer in desc.layers for s in layer.output_shapes),
                     reverse=True)
    return desc.param_bytes + sum(outputs[:2])


def resolve_descriptions(pipeline: Pipeline, models: dict[str, Path],
                         check_files: bool = True) -> dict[str, Description]:
    """The description of every network ``pipeline`` names (one line naming what is
    missing and the fix otherwise); ``check_files``: also refuse model files that changed
    since their split (a run reads them; the model needs only the descriptions)."""
    missing = sorted(set(pipeline.networks()) - set(models))
    if missing:
        raise EdgeprofError(
            f"pipeline '{pipeline.name}' names networks with no split model: "
            f"{', '.join(missing)} (available: {', '.join(sorted(models)) or 'none'}); "
            "run the split stage for them or point --split at the right folder"
        )
    descs = {net: Description.load_checked(models[net], files=check_files)
             for net in set(pipeline.networks())}
    total = sum(descs[net].param_bytes for net in pipeline.networks())
    if pipeline.size_bin and not bin_holds(pipeline.size_bin, total):
        raise EdgeprofError(
            f"pipeline '{pipeline.name}' is in size bin {pipeline.size_bin!r}, but its "
            f"networks hold {total} bytes of weights; regenerate it with the pipelines "
            f"stage (or drop size_bin)")
    if pipeline.param_bytes:  # a generated pipeline's count: of these networks' weights
        if total != pipeline.param_bytes:
            raise EdgeprofError(
                f"pipeline '{pipeline.name}' says its networks hold {pipeline.param_bytes} "
                f"bytes of weights, but their descriptions hold {total}; regenerate it with "
                f"the pipelines stage (or drop param_bytes and size_bin)")
    return descs


@dataclass
class Plan:
    instances: list[Instance]
    arrivals_ns: dict[int, int]  # instance -> when it arrives, ns after the run's start
    graph: TaskGraph
    network_time: dict[int, float]  # instance -> SNF key (the network's FLOPs)


def plan(pipeline: Pipeline, policy: Policy, descriptions: dict[str, Description],
         estimates: dict[str, int] | None = None) -> Plan:
    """The instances, arrivals and task graph of ``pipeline`` under ``policy``; an INIT
    reserves ``estimates[network]`` bytes, else ``estimate_peak_bytes``."""
    instances = [Instance(i, net, a_index, len(descriptions[net].layers),
                          descriptions[net].num_conv_layers)
                 for i, net, a_index, _ in pipeline.instances()]
    arrivals_ns = {i: int(round(t * 1e9)) for i, _, _, t in pipeline.instances()}
    graph = policy.build(instances)
    estimates = estimates or {}
    for task in graph.tasks:
        if task.kind == Kind.INIT:
            net = instances[task.instance].network
            task.required_memory = estimates.get(net) or estimate_peak_bytes(descriptions[net])
    network_time = {i.id: float(sum(x.flops for x in descriptions[i.network].layers))
                    for i in instances}
    return Plan(instances, arrivals_ns, graph, network_time)


def one_after_another(graph: TaskGraph) -> list[list[int]]:
    """The graph's instances in chains (by id, each instance in one chain): an instance
    joins the chain of the one before it when its INIT waits for every task of that one
    (bulk, linear, execprio-inter), so at most one network of a chain is in memory at a
    time. Any set of networks in memory at once holds at most one of each chain."""
    by_instance: dict[int, list[Task]] = {}
    for task in graph.tasks:
        by_instance.setdefault(task.instance, []).append(task)
    chains: list[list[int]] = []
    for instance in sorted(by_instance):
        before = instance - 1
        if chains and before in by_instance and _waits_for_all(
                graph, by_instance[instance], by_instance[before]):
            chains[-1].append(instance)
        else:
            chains.append([instance])
    return chains


def _waits_for_all(graph: TaskGraph, tasks: list[Task], before: list[Task]) -> bool:
    """``tasks``' INIT depends, directly or not, on every task of ``before`` (enough: on
    each of its last ones, those no other task of ``before`` waits for)."""
    init = next(t for t in tasks if t.kind == Kind.INIT)
    ids = {t.id for t in before}
    wanted = {t.id for t in before if not ids.intersection(t.dependants)}
    seen, todo = set(), list(init.deps)
    while todo and wanted:  # backwards from the INIT, until every last task is found
        tid = todo.pop()
        if tid not in seen:
            seen.add(tid)
            wanted.discard(tid)
            todo.extend(graph.tasks[tid].deps)
    return not wanted

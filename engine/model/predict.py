"""One pipeline under one policy and memory limit, predicted: the policy's real task
graph (``engine.schedule.plan``) replayed on a virtual clock with each task's predicted
work (``engine.model.params``) and the memory it holds (``engine.model.memory``); under
a limit, the swap traffic a task causes costs it the fitted seconds per page, as a wait
that takes no CPU."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from engine.caffe.splitter import Description
from engine.model.memory import NetworkMemory, RunMemory, demand_peak, network_memory
from engine.model.params import (
    ModeModel,
    NetworkFeatures,
    SwapCost,
    batch_value,
    exec_layer_s,
    exec_whole_s,
    load_whole_s,
    network_features,
)
from engine.model.simulate import SimResult, simulate
from engine.runtime import DEFAULT_RUNTIME
from engine.schedule.pipelines import Pipeline
from engine.schedule.plan import Plan, plan
from engine.schedule.policies import Policy, parse_policy
from engine.schedule.tasks import WHOLE_NET, Kind, Task
from engine.units import MIB, parse_swap


@dataclass
class Prediction:
    policy: str
    limit_bytes: int | None
    makespan_s: float
    peak_ram_bytes: float  # resident: the runtime's baseline + the run's own peak
    peak_swap_bytes: float
    swap_in_bytes: float
    swap_out_bytes: float
    oom: bool  # predicted to be killed: needs more swap than allowed
    why: str = ""
    # why the swap it predicts has no price ("": priced, or no swap): the makespan then
    # leaves the swapping out, a lower bound
    unpriced: str = ""


class Networks:
    """Each network's features and memory replay at one batch in one runtime, computed
    once."""

    def __init__(self, descriptions: dict[str, Description], batch: int | None,
                 runtime: str = DEFAULT_RUNTIME) -> None:
        self.descriptions, self.batch, self.runtime = descriptions, batch, runtime
        self._features: dict[str, NetworkFeatures] = {}
        self._memory: dict[str, NetworkMemory] = {}
        self._work: dict[tuple, float] = {}
        self._plans: dict[tuple, Plan] = {}

    def features(self, net: str) -> NetworkFeatures:
        if net not in self._features:
            self._features[net] = network_features(self.descriptions[net], self.batch)
        return self._features[net]

    def work_s(self, mode: ModeModel, net: str, kind: Kind, layer: int) -> float:
        """``task_work_s``, computed once per (mode, network, task)."""
        key = (id(mode), net, kind, layer)
        if key not in self._work:
            self._work[key] = task_work_s(mode, self.features(net), kind, layer)
        return self._work[key]

    def plan(self, pipeline: Pipeline, policy: Policy) -> Plan:
        """``engine.schedule.plan`` of ``pipeline`` under ``policy``, made once: a
        simulation reads it and never changes it (its state is the Scheduler's)."""
        key = (pipeline.name, tuple(pipeline.instances()), policy.name)
        if key not in self._plans:
            self._plans[key] = plan(pipeline, policy, self.descriptions)
        return self._plans[key]

    def memory(self, net: str) -> NetworkMemory:
        if net not in self._memory:
            self._memory[net] = network_memory(self.descriptions[net], self.batch,
                                               self.runtime)
        return self._memory[net]


class NetworksByBatch:
    """``Networks`` at each batch asked for (``networks[batch]``: an int, or None, NaN or
    NA for each network's deploy batch), each built once."""

    def __init__(self, descriptions: dict[str, Description],
                 runtime: str = DEFAULT_RUNTIME) -> None:
        self.descriptions, self.runtime = descriptions, runtime
        self._at: dict[int | None, Networks] = {}

    def __getitem__(self, batch: object) -> Networks:
        b = batch_value(batch)
        if b not in self._at:
            self._at[b] = Networks(self.descriptions, b, self.runtime)
        return self._at[b]


def task_work_s(mode: ModeModel, feats: NetworkFeatures, kind: Kind | str, layer: int) -> float:
    """A task's predicted seconds on one CPU (``layer`` WHOLE_NET: bulk's whole network),
    the dispatch gap after it included."""
    kind = Kind[kind] if isinstance(kind, str) else kind
    if kind == Kind.INIT:
        work = mode.init({"input_bytes": feats.input_bytes})
    elif kind == Kind.LOAD:
        work = (load_whole_s(mode, feats) if layer == WHOLE_NET
                else mode.load_layer({"bytes": feats.weight_bytes[layer]}))
    else:
        work = (exec_whole_s(mode, feats) if layer == WHOLE_NET
                else exec_layer_s(mode, feats, layer))
    return work + mode.gap_s


def predict(mode: ModeModel, pipeline: Pipeline, networks: Networks, policy: Policy | str,
            limit_bytes: int | None = None, swap_bytes: int | None = None,
            budget: int | None = None, swap_cost: SwapCost | None = None,
            work_scale: Callable[[Task], float] | None = None
            ) -> tuple[Prediction, SimResult]:
    """``pipeline`` under ``policy`` with ``limit_bytes`` of RAM (None: unconstrained) and
    ``swap_bytes`` of swap on top (None: unlimited); masa's budget defaults to the limit,
    as ``python -m engine run`` does. ``swap_cost``: a device's per-page costs instead of
    the mode's fitted ones (``engine.model.devices``); ``work_scale``: a factor on each
    task's work (orderings of concurrent workers: ``engine.model.evaluate``)."""
    policy = parse_policy(policy) if isinstance(policy, str) else policy
    planned = networks.plan(pipeline, policy)
    nets = {i.id: i.network for i in planned.instances}
    # the runtime's file-backed pages (libraries) are reclaimed before anything swaps
    anon_baseline = mode.baseline_bytes - mode.baseline_file_bytes
    capacity = None if limit_bytes is None else int(limit_bytes - anon_baseline)
    memory = RunMemory({i: networks.memory(n) for i, n in nets.items()},
                       None if capacity is None else max(capacity, 0))
    swap = swap_cost if swap_cost is not None else mode.swap
    per_in, per_out = swap.per_byte_s() if swap else (0.0, 0.0)

    def on_start(task: Task) -> float:
        swap_in, swap_out = memory.start(task)
        return swap_in * per_in + swap_out * per_out

    result = simulate(planned.graph, policy,
                      {i: t / 1e9 for i, t in planned.arrivals_ns.items()},
                      (lambda task: networks.work_s(mode, nets[task.instance], task.kind,
                                                    task.layer))
                      if work_scale is None else
                      (lambda task: networks.work_s(mode, nets[task.instance], task.kind,
                                                    task.layer) * work_scale(task)),
                      budget=budget if budget is not None else limit_bytes,
                      network_time=planned.network_time, cpus=mode.parallel_cpus,
                      on_start=on_start, on_finish=lambda task: memory.finish(task) * per_out,
                      on_end=memory.end)
    mem = memory.mem
    # a runtime whose own anonymous memory is over the limit swaps that excess out as
    # anything else beyond it: killed only if memory + swap cannot hold the run
    over = 0 if capacity is None else max(-capacity, 0)
    peak_swap = (over + mem.peak_swapped) * mode.swap_scale
    why = ""
    floor = mode.startup_floor_bytes
    floor_swap = parse_swap(mode.startup_floor_swap)
    within_floor_swap = floor_swap is None or (swap_bytes is not None
                                               and swap_bytes <= floor_swap)
    if (limit_bytes is not None and floor is not None and limit_bytes <= floor
            and within_floor_swap):
        why = (f"at or below {floor / MIB:.0f} MiB, where a fitted run was killed in the "
               f"engine's own start-up (the interpreter and numpy), "
               + ("whatever the swap" if floor_swap is None else
                  f"with at most {mode.startup_floor_swap} of swap as that run had"))
    elif swap_bytes is not None and peak_swap > swap_bytes:
        why = (f"needs {peak_swap / MIB:.0f} MiB of swap"
               + (f" (the runtime's own anonymous {anon_baseline / MIB:.0f} MiB is over the "
                  f"limit by {over / MIB:.0f} MiB)" if over else "")
               + f", {swap_bytes / MIB:.0f} MiB allowed")
    # what is resident at the peak: the bytes held (LOADs growing over their run); under
    # a limit no more than it leaves (the rest is in swap)
    held = demand_peak(memory.effects, result.start_s, result.end_s)
    if capacity is not None:
        held = min(held, max(capacity, 0))
    unpriced = ""
    if mem.swap_in or mem.swap_out:
        unpriced = (swap.unknown(mem.swap_in / swap.page_bytes, mem.swap_out / swap.page_bytes)
                    if swap is not None else f"the {mode.mode} model has no swap cost (no "
                    f"finished limited {mode.mode} runs with swap counters to fit it from)")
    prediction = Prediction(policy.name, limit_bytes, result.makespan_s,
                            mode.baseline_bytes - over + held, float(peak_swap),
                            float(mem.swap_in), float(mem.swap_out), bool(why), why,
                            unpriced)
    return prediction, result


def predict_against_unconstrained(mode: ModeModel, pipeline: Pipeline, networks: Networks,
                                  policy: str, limit_bytes: int | None,
                                  swap_bytes: int | None, swap_cost: SwapCost | None = None
                                  ) -> tuple[Prediction, Prediction]:
    """(under the limit, unconstrained): the two sides of a slowdown; one simulation when
    there is no limit. Masa's budget is the limit, so its schedule changes too."""
    free, _ = predict(mode, pipeline, networks, policy)
    if limit_bytes is None:
        return free, free
    limited, _ = predict(mode, pipeline, networks, policy, limit_bytes, swap_bytes,
                         swap_cost=swap_cost)
    return limited, free

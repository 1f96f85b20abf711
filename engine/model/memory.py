"""The memory model: what a network instance holds at each task, and what a limit does.

``network_memory`` replays a network's deploy graph stage by stage the way its runtime
(``engine.runtime``) runs it; what each stage allocates and frees is the runtime's, and
lives in one function per runtime (``REPLAYS``):

- ``lean``: INIT creates the input blobs; LOAD of layer i brings its weights in; EXEC of
  layer i reads its bottoms, creates its tops (unless the operator returns its input
  itself: Split, Dropout, in-place ReLU), holds the operator's scratch while it runs
  (``engine.ops.scratch_bytes``), then frees its weights and every array no later layer
  reads.
- ``caffe`` (Caffe 1.0 under EdgeCaffe): INIT allocates and fills every parameter blob
  besides the inputs; a LOAD parses its file into a message (what of it is resident at
  most: ``engine.runtime.protobuf.message_peak_bytes``, checked against real Caffe: up to
  twice a blob while its RepeatedField grows, three times the weights for a V1 file
  upgraded), copies it into the parameters (touching them) and frees it;
  an EXEC creates
  its tops, holds the operator's scratch, then the buffers the layer object owns
  (``engine.runtime.caffe.layer_buffers``: im2col, max pooling's argmax, LRN's scale),
  which its reset frees and a bulk forward pass keeps; nothing else is freed until the
  network ends.

In both, the network's outputs are kept until the run ends (the run keeps them to check
that policies agree), and everything else of an instance is gone once its last EXEC ends.

``Memory`` is the resident set of one run under a limit: blocks (a layer's weights, an
array) in least-recently-used order. When the blocks no longer fit in the capacity the
limit leaves (the limit less the runtime's own baseline), the least recently used bytes
go to swap; a task that touches swapped bytes brings them back. Without a limit nothing
is swapped and the resident set is the sum of the blocks. Counts are bytes; the time
model turns swap traffic into seconds.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from engine import ops
from engine.caffe import graph
from engine.caffe.splitter import Description
from engine.network import deploy_graph
from engine.ops.workspace import F32
from engine.runtime import DEFAULT_RUNTIME, RUNTIMES
from engine.schedule.tasks import WHOLE_NET, Kind, Task


@dataclass(frozen=True)
class Step:
    """What LOAD and EXEC of one layer do to memory (array ids are the network's own)."""

    layer: int
    weights: int  # bytes of the layer's parameters
    reads: tuple[int, ...]  # arrays it reads
    allocs: tuple[tuple[int, int], ...]  # (array, bytes) it creates and keeps
    scratch: int  # the operator's temporaries while it runs
    frees: tuple[int, ...]  # arrays freed once it has run
    owned: int = 0  # buffers the layer object keeps after its forward (caffe)
    load_transient: int = 0  # what its LOAD holds besides the weights (caffe: the message)


@dataclass(frozen=True)
class NetworkMemory:
    network: str
    inputs: tuple[tuple[int, int], ...]  # (array, bytes) INIT creates
    steps: tuple[Step, ...]  # one per runtime layer, in order
    outputs: tuple[int, ...] = ()  # arrays kept to the run's end
    runtime: str = DEFAULT_RUNTIME
    weights_at_init: bool = False  # INIT allocates every parameter; a LOAD fills them
    frees_weights: bool = True  # an EXEC frees its layer's weights
    whole_load_transient: int = 0  # a bulk LOAD's message (the whole caffemodel)

    @property
    def weight_bytes(self) -> int:
        return sum(s.weights for s in self.steps)

    @property
    def input_bytes(self) -> int:
        return sum(b for _, b in self.inputs)


def description_graph(desc: Description, batch: int | None) -> graph.NetGraph:
    """The runtime graph of a split network at ``batch``, as ``engine.network`` builds it."""
    return deploy_graph(desc.resolve(desc.prototxt), batch)


@dataclass
class _Arrays:
    """The arrays of a graph replayed layer by layer: which blob names which array, when
    each is created, read and (with ``free_dead``) freed after its last reader."""

    inputs: list[tuple[int, int]]
    steps: list[tuple[graph.Layer, tuple[int, ...], list[tuple[int, int]], int, tuple[int, ...]]]
    outputs: tuple[int, ...]


def _arrays(g: graph.NetGraph, free_dead: bool) -> _Arrays:
    last = g.last_readers()
    names: dict[str, int] = {}  # blob name -> array
    shapes: dict[str, tuple[int, ...]] = {}
    next_id = 0
    inputs: list[tuple[int, int]] = []
    steps = []
    for layer in g.layers:
        before = set(names.values())
        reads = tuple(dict.fromkeys(names[b] for b in layer.bottoms))
        allocs: list[tuple[int, int]] = []
        shared = (len(layer.bottoms) > 0
                  and sum(v == names[layer.bottoms[0]] for v in names.values()) > 1)
        in_place = (layer.type == "ReLU" and layer.tops[0] == layer.bottoms[0] and not shared)
        if layer.type != "Input" and ops.aliases_input(layer.type, in_place):
            for top in layer.tops:
                names[top] = names[layer.bottoms[0]]
        else:
            for top, shape in zip(layer.tops, layer.top_shapes):
                nbytes = F32 * math.prod(shape)
                names[top] = next_id
                (inputs if layer.type == "Input" else allocs).append((next_id, nbytes))
                next_id += 1
        for top, shape in zip(layer.tops, layer.top_shapes):
            shapes[top] = shape
        scratch = ops.scratch_bytes(layer.type, layer.args, layer.param_shapes,
                                    [shapes[b] for b in layer.bottoms])
        frees: tuple[int, ...] = ()
        if free_dead:
            for b in set(layer.bottoms):
                if last.get(b) == layer.index and b not in layer.tops and b not in g.outputs:
                    del names[b]
            alive = set(names.values())
            frees = tuple(sorted((before | {a for a, _ in allocs}) - alive))
        steps.append((layer, reads, allocs, scratch, frees))
    outputs = tuple(dict.fromkeys(names[b] for b in g.outputs))
    return _Arrays(inputs, steps, outputs)


def lean_memory(desc: Description, g: graph.NetGraph) -> NetworkMemory:
    """The lean runtime's stages (module docstring)."""
    a = _arrays(g, free_dead=True)
    steps = tuple(Step(layer.index, layer.param_bytes, reads, tuple(allocs), scratch, frees)
                  for layer, reads, allocs, scratch, frees in a.steps)
    return NetworkMemory(desc.network, tuple(a.inputs), steps, a.outputs, "lean")


def caffe_memory(desc: Description, g: graph.NetGraph) -> NetworkMemory:
    """The Caffe-faithful runtime's stages (module docstring)."""
    from engine.runtime.caffe import layer_buffers
    from engine.runtime.protobuf import message_peak_bytes

    a = _arrays(g, free_dead=False)
    v1 = desc.format == "V1"
    steps = []
    for (layer, reads, allocs, scratch, frees), info in zip(a.steps, desc.layers):
        blobs = [F32 * math.prod(s) for s in layer.param_shapes]
        owned = sum(n * np.dtype(dtype).itemsize for n, dtype in layer_buffers(layer))
        partial = desc.resolve(info.partial) if info.partial else None
        steps.append(Step(layer.index, layer.param_bytes, reads, tuple(allocs), scratch, frees,
                          owned, message_peak_bytes(partial, blobs, v1) if blobs else 0))
    whole = message_peak_bytes(desc.resolve(desc.caffemodel),
                               [F32 * math.prod(s) for layer in g.layers
                                for s in layer.param_shapes], v1)
    return NetworkMemory(desc.network, tuple(a.inputs), tuple(steps), a.outputs, "caffe",
                         weights_at_init=True, frees_weights=False, whole_load_transient=whole)


# runtime -> its replay: what plugs in a runtime's stage semantics
REPLAYS: dict[str, Callable[[Description, graph.NetGraph], NetworkMemory]] = {
    "lean": lean_memory,
    "caffe": caffe_memory,
}
assert set(REPLAYS) == set(RUNTIMES)


def network_memory(desc: Description, batch: int | None,
                   runtime: str = DEFAULT_RUNTIME) -> NetworkMemory:
    """Replay ``desc``'s layers at ``batch`` in ``runtime`` (see the module docstring)."""
    if runtime not in REPLAYS:
        raise ValueError(f"no memory replay for runtime {runtime!r}; one of "
                         f"{', '.join(REPLAYS)}")
    return REPLAYS[runtime](desc, description_graph(desc, batch))


class Memory:
    """The resident set of one run: blocks in least-recently-used order. ``capacity``:
    the bytes the run's arrays and weights may keep resident (None: no limit). Making
    room swaps out the least recently used bytes of the other tasks' blocks first, then,
    when the running task's own blocks alone exceed the capacity, its own oldest bytes
    (it streams through them: each such byte goes out and, read again, comes back in)."""

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = capacity
        self.blocks: OrderedDict[tuple, list[int]] = OrderedDict()  # key -> [resident, swapped]
        self.resident = 0
        self.swapped = 0
        self.peak_swapped = 0
        self.swap_in = 0
        self.swap_out = 0

    def _make_room(self, need: int, protect: set) -> int:
        """Swap bytes out until ``need`` more fit; returns the bytes swapped out."""
        if self.capacity is None:
            return 0
        excess = self.resident + need - self.capacity
        out = 0
        for own in (False, True):  # others' blocks first, the running task's last
            if out >= excess:
                break
            for key, block in self.blocks.items():
                if (key in protect) != own or block[0] == 0:
                    continue
                moved = min(block[0], excess - out)
                block[0] -= moved
                block[1] += moved
                out += moved
                if out >= excess:
                    break
        self.resident -= out
        self.swapped += out
        self.swap_out += out
        self.peak_swapped = max(self.peak_swapped, self.swapped)
        return out

    def touch(self, keys: list[tuple]) -> tuple[int, int]:
        """A task reads these blocks: swapped parts come back (swap in, possibly swapping
        others out); they become the most recently used. Returns (in, out) bytes."""
        keys = [k for k in keys if k in self.blocks]
        protect = set(keys)
        swap_in = swap_out = 0
        for key in keys:
            block = self.blocks[key]
            back = block[1]
            if back:
                block[0], block[1] = block[0] + back, 0
                self.resident += back
                self.swapped -= back
                swap_in += back
                swap_out += self._make_room(0, protect)
            self.blocks.move_to_end(key)
        self.swap_in += swap_in
        return swap_in, swap_out

    def alloc(self, key: tuple, nbytes: int, protect: Iterable[tuple] = ()) -> int:
        """A new block; returns bytes swapped out to make room for it."""
        self.blocks[key] = [nbytes, 0]
        self.resident += nbytes
        return self._make_room(0, {key, *protect})

    def transient(self, nbytes: int, protect: Iterable[tuple] = ()) -> int:
        """Scratch held for a moment (an operator's temporaries): may push other bytes
        out; returns bytes swapped out."""
        return self._make_room(nbytes, set(protect))

    def free(self, key: tuple) -> None:
        block = self.blocks.pop(key, None)
        if block is not None:
            self.resident -= block[0]
            self.swapped -= block[1]


@dataclass
class TaskMemory:
    """One task's effect on the bytes held (resident or swapped): ``held`` more from
    its start on (a LOAD's weights arrive over its run instead, as readinto faults the
    pages in: ``ramp``), a ``transient`` peak above that while it runs (an operator's
    scratch, a bulk pass's layers), ``freed`` at its end."""

    held: int = 0
    ramp: bool = False
    transient: int = 0
    freed: int = 0


class RunMemory:
    """The memory effects of a run's tasks, for the simulator. ``start(task)`` applies
    what it reads and allocates as it begins (an EXEC's weights and inputs, its outputs
    and scratch; an INIT's input, and in caffe every parameter; a LOAD's message in
    caffe, and the parameters it fills) and returns the swap traffic (in, out) that
    causes; ``finish(task)`` what exists once its computing is done (a lean LOAD's
    weights) and the bytes that pushes out; ``end(task)`` what it frees. ``effects``
    keeps each task's ``TaskMemory``. Bulk LOAD brings every weight in; bulk EXEC runs
    every step in turn, each freeing what it may before the next allocates. An
    instance's last EXEC frees everything of it but its outputs."""

    def __init__(self, profiles: dict[int, NetworkMemory], capacity: int | None) -> None:
        self.profiles = profiles  # instance -> its network's replay
        self.mem = Memory(capacity)
        self.effects: dict[int, TaskMemory] = {}
        self._pending: dict[int, list[tuple]] = {}  # task id -> blocks it frees at its end

    def _demand(self) -> int:
        return self.mem.resident + self.mem.swapped

    def _exec_step(self, inst: int, prof: NetworkMemory, step: Step, bulk: bool
                   ) -> tuple[int, int, int, list[tuple]]:
        """(in, out, the step's transient peak of demand, what it frees)."""
        w = (inst, "w", step.layer)
        reads = [w] + [(inst, "a", a) for a in step.reads]
        swap_in, swap_out = self.mem.touch(reads)
        for array, nbytes in step.allocs:
            swap_out += self.mem.alloc((inst, "a", array), nbytes, reads)
        # the operator's scratch while it computes, then (caffe) the layer's own buffers
        # once its temporaries are gone: kept by a bulk pass, freed by a layer's reset
        transient = step.scratch if bulk else max(step.scratch, step.owned)
        swap_out += self.mem.transient(transient, reads)
        peak = self._demand() + transient
        if bulk and step.owned:
            swap_out += self.mem.alloc((inst, "o", step.layer), step.owned, reads)
            peak = max(peak, self._demand())
        frees = ([w] if prof.frees_weights else []) + [(inst, "a", a) for a in step.frees]
        return swap_in, swap_out, peak, frees

    def _weight_keys(self, inst: int, prof: NetworkMemory, layer: int) -> list[tuple]:
        steps = prof.steps if layer == WHOLE_NET else (prof.steps[layer],)
        return [(inst, "w", s.layer) for s in steps if s.weights]

    def start(self, task: Task) -> tuple[int, int]:
        prof = self.profiles[task.instance]
        inst = task.instance
        before = self._demand()
        effect = self.effects[task.id] = TaskMemory(
            ramp=task.kind == Kind.LOAD and not prof.weights_at_init)
        if task.kind == Kind.LOAD:
            if not prof.weights_at_init:
                return 0, 0  # lean: the weights arrive over the LOAD (finish)
            keys = self._weight_keys(inst, prof, task.layer)
            swap_in, swap_out = self.mem.touch(keys)  # the copy writes the parameters
            effect.transient = (prof.whole_load_transient if task.layer == WHOLE_NET
                                else prof.steps[task.layer].load_transient)
            swap_out += self.mem.transient(effect.transient, keys)
            effect.held = self._demand() - before
            return swap_in, swap_out
        if task.kind == Kind.INIT:
            out = sum(self.mem.alloc((inst, "a", a), b) for a, b in prof.inputs)
            if prof.weights_at_init:
                out += sum(self.mem.alloc((inst, "w", s.layer), s.weights)
                           for s in prof.steps if s.weights)
            effect.held = self._demand() - before
            return 0, out
        bulk = task.layer == WHOLE_NET
        steps = prof.steps if bulk else (prof.steps[task.layer],)
        swap_in = swap_out = peak = 0
        frees: list[tuple] = []
        for step in steps:
            for key in frees:  # the previous layer's, within one bulk forward pass
                self.mem.free(key)
            i, o, top, frees = self._exec_step(inst, prof, step, bulk)
            swap_in, swap_out, peak = swap_in + i, swap_out + o, max(peak, top)
        if bulk or task.layer == len(prof.steps) - 1:  # the network's end
            kept = {(inst, "a", a) for a in prof.outputs}
            frees = [k for k in self.mem.blocks if k[0] == inst and k not in kept]
        self._pending[task.id] = frees
        effect.held = self._demand() - before
        effect.transient = max(peak - self._demand(), 0)
        return swap_in, swap_out

    def finish(self, task: Task) -> int:
        """A lean LOAD's weights are in: returns the bytes that pushes out."""
        prof = self.profiles[task.instance]
        if task.kind != Kind.LOAD or prof.weights_at_init:
            return 0
        steps = prof.steps if task.layer == WHOLE_NET else (prof.steps[task.layer],)
        before = self._demand()
        out = sum(self.mem.alloc((task.instance, "w", s.layer), s.weights)
                  for s in steps if s.weights)
        self.effects[task.id].held = self._demand() - before
        return out

    def end(self, task: Task) -> None:
        before = self._demand()
        for key in self._pending.pop(task.id, ()):
            self.mem.free(key)
        self.effects[task.id].freed = before - self._demand()


def demand_peak(effects: dict[int, TaskMemory], start_s: list[float],
                end_s: list[float]) -> float:
    """The highest demand over a simulated run, each task's bytes placed on its start
    and end times: ``held`` from its start (a LOAD's growing linearly to its end),
    ``transient`` while it runs, ``freed`` at its end. The curve is piecewise linear, so
    its maximum is just before or just after some task's start or end: one sorted sweep
    over those events."""
    events = []  # (time, order, jump, slope change)
    for tid, e in effects.items():
        s, t = start_s[tid], end_s[tid]
        ramp = e.ramp and t > s
        if ramp:
            rate = e.held / (t - s)
            events.append((s, 1, e.transient, rate))
            events.append((t, 0, -e.transient - e.freed, -rate))
        else:
            events.append((s, 1, e.held + e.transient, 0.0))
            # a task that takes no time ends after its own start
            events.append((t, 0 if t > s else 2, -e.transient - e.freed, 0.0))
    events.sort(key=lambda ev: (ev[0], ev[1]))
    level = peak = slope = 0.0
    last = events[0][0] if events else 0.0
    for time, _, jump, dslope in events:
        level += slope * (time - last)  # the ramps up to just before this event
        peak = max(peak, level)
        last = time
        level += jump
        slope += dslope
        peak = max(peak, level)
    return peak


def schedule_peak(profiles: dict[int, NetworkMemory], tasks: Sequence[Task],
                  start_s: Sequence[float], end_s: Sequence[float]) -> float:
    """The highest demand of an unconstrained run whose tasks (``tasks[i].id == i``)
    started and ended at the given times: a measured run's own schedule replayed with
    the bookkeeping the simulator uses, so that its peak against the run's VmHWM is the
    memory model's error alone, without the schedule's. At one instant a task ends
    before another starts (the worker that frees is the one that takes next), as
    ``demand_peak`` orders them."""
    memory = RunMemory(profiles, None)
    events = []
    for task in tasks:
        s, t = start_s[task.id], end_s[task.id]
        events.append((s, 1, task.id))
        events.append((t, 0 if t > s else 2, task.id))
    for _, kind, tid in sorted(events):
        if kind == 1:
            memory.start(tasks[tid])
        else:
            memory.finish(tasks[tid])
            memory.end(tasks[tid])
    return demand_peak(memory.effects, list(start_s), list(end_s))

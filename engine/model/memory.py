"""The memory model: what a network instance holds at each task, and what a limit does.

``network_memory`` replays a network's deploy graph the way ``engine.network.Network``
runs it: INIT creates the input blobs; LOAD of layer i brings its weights in; EXEC of
layer i reads its bottoms, creates its tops (unless the operator returns its input
itself: Split, Dropout, in-place ReLU), holds the operator's scratch while it runs
(``engine.ops.scratch_bytes``), then frees its weights and every array no later layer
reads. The network's output blobs are kept until the run ends (the run keeps them to
check that policies agree).

``Memory`` is the resident set of one run under a limit: blocks (a layer's weights, an
array) in least-recently-used order. When the blocks no longer fit in the capacity the
limit leaves (the limit less the runtime's own baseline), the least recently used bytes
go to swap; a task that touches swapped bytes brings them back. Without a limit nothing
is swapped and the resident set is the sum of the blocks. Counts are bytes; the time
model turns swap traffic into seconds.
"""

from __future__ import annotations

import functools
import math
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine import ops
from engine.caffe import graph, io
from engine.caffe.splitter import Description
from engine.schedule.tasks import WHOLE_NET, Kind, Task

F32 = 4


@dataclass(frozen=True)
class Step:
    """What EXEC of one layer does to memory (array ids are the network's own)."""

    layer: int
    weights: int  # bytes its LOAD brought in; freed once it has run
    reads: tuple[int, ...]  # arrays it reads
    allocs: tuple[tuple[int, int], ...]  # (array, bytes) it creates and keeps
    scratch: int  # temporaries while it runs
    frees: tuple[int, ...]  # arrays no later layer reads, freed once it has run


@dataclass(frozen=True)
class NetworkMemory:
    network: str
    inputs: tuple[tuple[int, int], ...]  # (array, bytes) INIT creates
    steps: tuple[Step, ...]  # one per runtime layer, in order

    @property
    def weight_bytes(self) -> int:
        return sum(s.weights for s in self.steps)

    @property
    def input_bytes(self) -> int:
        return sum(b for _, b in self.inputs)


@functools.lru_cache(maxsize=64)
def deploy_graph(prototxt: str, batch: int | None) -> graph.NetGraph:
    """The runtime graph of a deploy prototxt at ``batch`` (None: the deploy batch)."""
    return graph.build_graph(io.read_prototxt(prototxt), batch=batch, source=prototxt)


def description_graph(desc: Description, batch: int | None) -> graph.NetGraph:
    return deploy_graph(str(Path(desc.resolve(desc.prototxt)).resolve()), batch)


def network_memory(desc: Description, batch: int | None) -> NetworkMemory:
    """Replay ``desc``'s layers at ``batch`` (see the module docstring)."""
    g = description_graph(desc, batch)
    last = g.last_readers()
    names: dict[str, int] = {}  # blob name -> array
    shapes: dict[str, tuple[int, ...]] = {}
    next_id = 0
    inputs: list[tuple[int, int]] = []
    steps: list[Step] = []
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
        for b in set(layer.bottoms):
            if last.get(b) == layer.index and b not in layer.tops and b not in g.outputs:
                del names[b]
        alive = set(names.values())
        frees = tuple(sorted((before | {a for a, _ in allocs}) - alive))
        steps.append(Step(layer.index, layer.param_bytes, reads, tuple(allocs), scratch,
                          frees))
    return NetworkMemory(desc.network, tuple(inputs), tuple(steps))


class Memory:
    """The resident set of one run: blocks in least-recently-used order. ``capacity``:
    the bytes the run's arrays and weights may keep resident (None: no limit)."""

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = capacity
        self.blocks: OrderedDict[tuple, list[int]] = OrderedDict()  # key -> [resident, swapped]
        self.resident = 0
        self.swapped = 0
        self.peak_resident = 0
        self.peak_swapped = 0
        self.peak_demand = 0  # resident + swapped: what an unlimited run would hold
        self.swap_in = 0
        self.swap_out = 0
        self.task_peak = 0  # the highest demand since ``task_peak`` was last set

    @property
    def demand(self) -> int:
        """Bytes held, resident or swapped: what an unlimited run would have resident."""
        return self.resident + self.swapped

    def _note(self, transient: int = 0) -> None:
        self.peak_resident = max(self.peak_resident, self.resident + transient)
        self.peak_swapped = max(self.peak_swapped, self.swapped)
        self.peak_demand = max(self.peak_demand, self.demand + transient)
        self.task_peak = max(self.task_peak, self.demand + transient)

    def _make_room(self, need: int, protect: set) -> int:
        """Swap out least recently used bytes until ``need`` more fit; returns bytes
        swapped out. Blocks in ``protect`` (the running task's own) stay."""
        if self.capacity is None:
            return 0
        excess = self.resident + need - self.capacity
        out = 0
        if excess <= 0:
            return 0
        for key, block in self.blocks.items():
            if key in protect or block[0] == 0:
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
        return out

    def touch(self, keys: Iterable[tuple]) -> tuple[int, int]:
        """A task reads these blocks: swapped parts come back (swap in, possibly swapping
        others out); they become the most recently used. Returns (in, out) bytes."""
        keys = [k for k in keys if k in self.blocks]
        protect = set(keys)
        swap_in = swap_out = 0
        for key in keys:
            block = self.blocks[key]
            if block[1]:
                swap_out += self._make_room(block[1], protect)
                swap_in += block[1]
                self.resident += block[1]
                self.swapped -= block[1]
                block[0], block[1] = block[0] + block[1], 0
            self.blocks.move_to_end(key)
        self.swap_in += swap_in
        self._note()
        return swap_in, swap_out

    def alloc(self, key: tuple, nbytes: int, protect: Iterable[tuple] = ()) -> int:
        """A new block; returns bytes swapped out to make room for it."""
        out = self._make_room(nbytes, set(protect))
        self.blocks[key] = [nbytes, 0]
        self.resident += nbytes
        self._note()
        return out

    def transient(self, nbytes: int, protect: Iterable[tuple] = ()) -> int:
        """Scratch held for a moment (an operator's temporaries): counted in the peaks,
        may push other bytes out; returns bytes swapped out."""
        out = self._make_room(nbytes, set(protect))
        self._note(nbytes)
        return out

    def free(self, key: tuple) -> None:
        block = self.blocks.pop(key, None)
        if block is not None:
            self.resident -= block[0]
            self.swapped -= block[1]


@dataclass
class TaskMemory:
    """One task's effect on the bytes held (demand): ``held`` at its start (a LOAD's
    weights arrive over its run, as readinto faults the pages in: ``ramp``), its
    ``transient`` peak above that while it runs, ``freed`` at its end."""

    held: int = 0
    ramp: bool = False
    transient: int = 0
    freed: int = 0


class RunMemory:
    """The memory effects of a run's tasks, for the simulator: ``start(task)`` applies
    what the task allocates and reads (returns the swap traffic in bytes it causes),
    ``end(task)`` what it frees; ``effects`` keeps each task's ``TaskMemory``. Bulk LOAD
    brings every weight in; bulk EXEC runs every step in turn, each freeing what it may
    before the next allocates."""

    def __init__(self, profiles: dict[int, NetworkMemory], capacity: int | None) -> None:
        self.profiles = profiles  # instance -> its network's replay
        self.mem = Memory(capacity)
        self.effects: dict[int, TaskMemory] = {}
        self._pending: dict[int, list[tuple]] = {}  # task id -> blocks it frees at its end

    def _exec_step(self, inst: int, step: Step) -> tuple[int, int, list[tuple]]:
        w = (inst, "w", step.layer)
        reads = [w] + [(inst, "a", a) for a in step.reads]
        swap_in, swap_out = self.mem.touch(reads)
        for array, nbytes in step.allocs:
            swap_out += self.mem.alloc((inst, "a", array), nbytes, reads)
        swap_out += self.mem.transient(step.scratch, reads)
        return swap_in, swap_out, [w] + [(inst, "a", a) for a in step.frees]

    def start(self, task: Task) -> tuple[int, int]:
        before = self.mem.demand
        self.mem.task_peak = before
        swap = self._apply(task)
        after = self.mem.demand
        self.effects[task.id] = TaskMemory(after - before, task.kind == Kind.LOAD,
                                           max(self.mem.task_peak - after, 0))
        return swap

    def _apply(self, task: Task) -> tuple[int, int]:
        prof = self.profiles[task.instance]
        inst = task.instance
        if task.kind == Kind.INIT:
            return 0, sum(self.mem.alloc((inst, "a", a), b) for a, b in prof.inputs)
        steps = prof.steps if task.layer == WHOLE_NET else (prof.steps[task.layer],)
        if task.kind == Kind.LOAD:
            return 0, sum(self.mem.alloc((inst, "w", s.layer), s.weights)
                          for s in steps if s.weights)
        swap_in = swap_out = 0
        frees: list[tuple] = []
        for step in steps:
            for key in frees:  # the previous layer's, within one bulk forward pass
                self.mem.free(key)
            i, o, frees = self._exec_step(inst, step)
            swap_in, swap_out = swap_in + i, swap_out + o
        self._pending[task.id] = frees
        return swap_in, swap_out

    def end(self, task: Task) -> None:
        before = self.mem.demand
        for key in self._pending.pop(task.id, ()):
            self.mem.free(key)
        self.effects[task.id].freed = before - self.mem.demand


def demand_peak(effects: dict[int, TaskMemory], start_s: list[float],
                end_s: list[float]) -> float:
    """The highest demand over a simulated run: every task's bytes placed on its start
    and end times, a LOAD's weights growing linearly over its run, transients held while
    their task runs. The curve is piecewise linear, so its maximum is at a task's start
    or end."""
    ids = np.array(sorted(effects), dtype=int)
    if len(ids) == 0:
        return 0.0
    s = np.asarray(start_s, dtype=float)[ids]
    e = np.asarray(end_s, dtype=float)[ids]
    held = np.array([effects[i].held for i in ids], dtype=float)
    ramp = np.array([effects[i].ramp for i in ids], dtype=bool)
    transient = np.array([effects[i].transient for i in ids], dtype=float)
    freed = np.array([effects[i].freed for i in ids], dtype=float)
    # at a start, the starting task's instant bytes and transient count already
    times = np.unique(np.concatenate([s, e]))
    instant = ~ramp
    order_s, order_e = np.argsort(s), np.argsort(e)
    held_instant = np.where(instant, held, 0.0)[order_s].cumsum()
    freed_sum = freed[order_e].cumsum()
    n_started = np.searchsorted(s[order_s], times, side="right")
    n_ended = np.searchsorted(e[order_e], times, side="right")
    total = (np.where(n_started > 0, held_instant[np.maximum(n_started - 1, 0)], 0.0)
             - np.where(n_ended > 0, freed_sum[np.maximum(n_ended - 1, 0)], 0.0))
    # running tasks' transients (started at or before t, ending after t)
    t = np.flatnonzero(transient > 0)
    if len(t):
        running = (s[t][None, :] <= times[:, None]) & (e[t][None, :] > times[:, None])
        total += (running * transient[t][None, :]).sum(axis=1)
    if ramp.any():
        r = np.flatnonzero(ramp)
        span = np.maximum(e[r] - s[r], 1e-12)
        frac = np.clip((times[:, None] - s[r][None, :]) / span[None, :], 0.0, 1.0)
        total += (frac * held[r][None, :]).sum(axis=1)
    return float(total.max())

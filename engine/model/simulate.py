"""A policy's task graph replayed on a virtual clock, with the dispatcher's own rules.

The order in which tasks become ready, which pool a worker serves, the pools' order
(FCFS, exec-priority, shortest-network-first) and masa's admission are
``engine.schedule.dispatch.Scheduler``, the same object the threaded dispatcher drives;
only the clock is virtual. Each task has a known amount of work (seconds on one CPU);
the running tasks share the measured child's CPUs (``cpus``: with more running tasks
than CPUs each progresses at sharing x cpus / running, as threads of one process pinned to
fewer CPUs do; ``sharing`` < 1 is what time-slicing costs them: context switches, caches
they evict from each other, the GIL), or run at full speed each (``cpus=None``: tasks
that wait rather than compute). A worker that finishes a task takes its next one before
workers that were
idle (it is already running; they must be woken), then idle workers in index order.
No sleeping: a 10-network pipeline simulates in milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from engine.errors import EdgeprofError
from engine.schedule.dispatch import Scheduler
from engine.schedule.policies import Policy
from engine.schedule.tasks import Task, TaskGraph

EPS = 1e-12


class SimulationError(EdgeprofError):
    """The task graph cannot finish (a task that no worker may ever take)."""


@dataclass
class SimResult:
    start_s: list[float]  # per task id
    end_s: list[float]
    worker: list[int]
    order: list[int]  # task ids in the order they started
    makespan_s: float  # first arrival to the last task's end


def simulate(graph: TaskGraph, policy: Policy, arrivals_s: dict[int, float],
             work_s: Callable[[Task], float], *, budget: int | None = None,
             network_time: dict[int, float] | None = None, cpus: float | None = None,
             sharing: float = 1.0, on_start: Callable[[Task], float] | None = None,
             on_end: Callable[[Task], None] | None = None) -> SimResult:
    """Run ``graph`` under ``policy`` in virtual time. ``work_s(task)``: its work in
    seconds; ``on_start(task)`` may add seconds (e.g. the swap traffic it causes) and
    ``on_end(task)`` sees it finish."""
    sched = Scheduler(graph, policy, budget=budget, network_time=network_time)
    n = len(graph.tasks)
    start, end, worker_of = [float("nan")] * n, [float("nan")] * n, [-1] * n
    order: list[int] = []
    arrivals = sorted(arrivals_s.items(), key=lambda kv: (kv[1], kv[0]))
    next_arrival = 0
    now = arrivals[0][1] if arrivals else 0.0
    first = now
    running: dict[int, list] = {}  # worker -> [task, work left]
    idle = list(range(policy.workers))
    while True:
        while next_arrival < len(arrivals) and arrivals[next_arrival][1] <= now + EPS:
            sched.arrive(arrivals[next_arrival][0])
            next_arrival += 1
        for w in list(idle):
            task = sched.take(w)
            if task is None:
                continue
            idle.remove(w)
            extra = on_start(task) if on_start is not None else 0.0
            running[w] = [task, max(work_s(task), 0.0) + extra]
            start[task.id], worker_of[task.id] = now, w
            order.append(task.id)
        if not running:
            if next_arrival < len(arrivals):
                now = arrivals[next_arrival][1]
                continue
            if sched.finished:
                break
            raise SimulationError(f"{policy.name}: {n - sched.done} task(s) can never run "
                                  f"(nothing running, nothing left to arrive)")
        rate = 1.0 if cpus is None or len(running) <= cpus else sharing * cpus / len(running)
        step = min(left for _, left in running.values()) / rate
        due = arrivals[next_arrival][1] if next_arrival < len(arrivals) else float("inf")
        if due < now + step:
            step = due - now
        now += step
        for slot in running.values():
            slot[1] -= step * rate
        done = sorted(w for w, (_, left) in running.items() if left <= EPS * max(1.0, now))
        for w in done:
            task = running.pop(w)[0]
            end[task.id] = now
            if on_end is not None:
                on_end(task)
            if sched.complete(task):
                sched.release(task.instance)
        idle = done + idle
    return SimResult(start, end, worker_of, order, (max(end) - first) if n else 0.0)

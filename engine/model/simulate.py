"""A policy's task graph replayed on a virtual clock, with the dispatcher's own rules.

The order in which tasks become ready, which pool a worker serves, the pools' order
(FCFS, exec-priority, shortest-network-first) and masa's admission are
``engine.schedule.dispatch.Scheduler``, the same object the threaded dispatcher drives;
only the clock is virtual.

A task runs in three phases: waiting for I/O before it computes (``on_start``: e.g. the
pages it must swap in), computing (``work_s``: seconds on one CPU), waiting for I/O
after (``on_finish``: e.g. the pages its new weights push out). A task computing alone
runs at full speed; several computing together make ``cpus`` CPUs' worth of progress
between them (each at cpus / computing, at most full speed): the child's CPUs less what
time-slicing costs them (context switches, caches they evict from each other, the GIL),
or, in a guest, what the host really gives it. ``cpus=None``: each at full speed (tasks
that wait rather than compute). A task waiting for I/O takes no CPU; the tasks waiting
at once share one device (the swap disk), each at 1 / waiting of its speed.

When several workers are idle, the one that finished a task most recently takes first
(it is already running; the others must be woken). No sleeping: a 10-network pipeline
simulates in milliseconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from engine.errors import EdgeprofError
from engine.schedule.dispatch import Scheduler
from engine.schedule.policies import Policy
from engine.schedule.tasks import Task, TaskGraph

EPS = 1e-12
IO_BEFORE, COMPUTE, IO_AFTER = 0, 1, 2


class SimulationError(EdgeprofError):
    """The task graph cannot finish (a task no worker may ever take), or a task's time
    is not a finite number of seconds."""


@dataclass
class SimResult:
    start_s: list[float]  # per task id
    end_s: list[float]
    order: list[int]  # task ids in the order they started
    makespan_s: float  # first arrival to the last task's end


def _seconds(value: float, what: str, task: Task) -> float:
    if not math.isfinite(value) or value < 0:
        raise SimulationError(f"task {task.label} of instance {task.instance}: {what} is "
                              f"{value!r}, not a number of seconds (a damaged model file?)")
    return value


def simulate(graph: TaskGraph, policy: Policy, arrivals_s: dict[int, float],
             work_s: Callable[[Task], float], *, budget: int | None = None,
             network_time: dict[int, float] | None = None, cpus: float | None = None,
             on_start: Callable[[Task], float] | None = None,
             on_finish: Callable[[Task], float] | None = None,
             on_end: Callable[[Task], None] | None = None) -> SimResult:
    """Run ``graph`` under ``policy`` in virtual time: ``work_s(task)`` its CPU seconds;
    ``on_start(task)`` the seconds it waits before computing, ``on_finish(task)`` after;
    ``on_end(task)`` sees it end."""
    if cpus is not None and not (math.isfinite(cpus) and cpus > 0):
        raise SimulationError(f"cpus {cpus!r}: need a number of CPUs > 0")
    sched = Scheduler(graph, policy, budget=budget, network_time=network_time)
    n = len(graph.tasks)
    start, end = [math.nan] * n, [math.nan] * n
    order: list[int] = []
    arrivals = sorted(arrivals_s.items(), key=lambda kv: (kv[1], kv[0]))
    next_arrival = 0
    now = arrivals[0][1] if arrivals else 0.0
    first = now
    running: dict[int, list] = {}  # worker -> [task, phase, seconds left in the phase]
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
            wait = _seconds(on_start(task), "its wait", task) if on_start else 0.0
            running[w] = [task, IO_BEFORE, wait]
            start[task.id] = now
            order.append(task.id)
        done = _advance_phases(running, work_s, on_finish)
        if not running and not done:
            if next_arrival < len(arrivals):
                now = arrivals[next_arrival][1]
                continue
            if sched.finished:
                break
            raise SimulationError(f"{policy.name}: {n - sched.done} task(s) can never run "
                                  f"(nothing running, nothing left to arrive)")
        if not done:
            computing = sum(slot[1] == COMPUTE for slot in running.values())
            rate = 1.0 if cpus is None or computing <= 1 else min(1.0, cpus / computing)
            # one swap device: the tasks waiting for it share it
            io_rate = 1.0 / max(len(running) - computing, 1)
            step = min(left / (rate if phase == COMPUTE else io_rate)
                       for _, phase, left in running.values())
            due = arrivals[next_arrival][1] if next_arrival < len(arrivals) else math.inf
            step = min(step, due - now)
            now += step
            for slot in running.values():
                slot[2] -= step * (rate if slot[1] == COMPUTE else io_rate)
            done = _advance_phases(running, work_s, on_finish)
        for w in done:
            task = running.pop(w)[0]
            end[task.id] = now
            if on_end is not None:
                on_end(task)
            if sched.complete(task):
                sched.release(task.instance)
        idle = done + idle
    return SimResult(start, end, order, (max(end) - first) if n else 0.0)


def _advance_phases(running: dict[int, list], work_s: Callable[[Task], float],
                    on_finish: Callable[[Task], float] | None) -> list[int]:
    """Move every slot whose phase is over to its next phase; the workers whose task is
    done, in worker order."""
    done = []
    for w in sorted(running):
        slot = running[w]
        while slot[2] <= EPS:
            task = slot[0]
            if slot[1] == IO_BEFORE:
                slot[1], slot[2] = COMPUTE, _seconds(work_s(task), "its work", task)
            elif slot[1] == COMPUTE:
                wait = _seconds(on_finish(task), "its wait", task) if on_finish else 0.0
                slot[1], slot[2] = IO_AFTER, wait
            else:
                done.append(w)
                break
    return done

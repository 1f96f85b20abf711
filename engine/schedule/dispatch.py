"""Event-driven dispatch of a task graph onto worker threads.

There is no polling loop (EdgeCaffe's orchestrator wakes every 1 ms, so each dependency
edge costs it up to 1 ms): a finishing task decrements its dependants' counters under one
condition variable and wakes the workers at once. Arrivals gate INIT tasks; the main
thread sleeps on the same condition until the next arrival is due. A task that raises
stops the whole run: workers finish what they hold, nothing new starts, the error is
kept for the caller. numpy releases the GIL in BLAS and file reads, so loads on one
worker overlap with execution on another. The rules (readiness, pool order, admission)
live in ``Scheduler``, which the model's simulator replays in virtual time.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.schedule.policies import Policy
from engine.schedule.tasks import Kind, Task, TaskGraph


@dataclass
class TaskRecord:
    """When and where a task ran (ns since the run's start)."""

    worker: int = -1
    start_ns: int = -1
    end_ns: int = -1
    cpu_ns: int = -1  # CPU time of the worker thread (BLAS helper threads not included)
    extra: dict = field(default_factory=dict)


@dataclass
class DispatchResult:
    records: list[TaskRecord]
    released_ns: dict[int, int]  # instance -> when its arrival released its INIT
    finished_ns: dict[int, int]  # instance -> when its last task ended
    status: str  # ok | error | timeout | interrupted
    error: BaseException | None = None
    failed_task: Task | None = None
    t0_ns: int = 0


class Scheduler:
    """The dispatcher's rules, without threads or clocks: which tasks are ready, in what
    order each pool hands them out, memory-aware admission of INIT tasks, and what a
    finished task releases. The threaded ``Dispatcher`` calls it under its lock; the
    model's virtual-clock simulator (``engine.model.simulate``) calls it in virtual time,
    so both follow the same rules."""

    def __init__(self, graph: TaskGraph, policy: Policy, *, budget: int | None = None,
                 network_time: dict[int, float] | None = None) -> None:
        self.graph, self.policy = graph, policy
        self.budget = budget
        self.network_time = network_time or {}
        tasks = graph.tasks
        self.missing = [len(t.deps) + (t.kind == Kind.INIT) for t in tasks]  # +1: arrival
        self.left: dict[int, int] = {}
        for t in tasks:
            self.left[t.instance] = self.left.get(t.instance, 0) + 1
        self.ready: list[list[tuple]] = [[] for _ in range(max(graph.pools, 1))]
        self.reserved: dict[int, int] = {}
        self.active: set[int] = set()
        self.inits = {t.instance: t for t in tasks if t.kind == Kind.INIT}
        self.done = 0

    @property
    def finished(self) -> bool:
        return self.done == len(self.graph.tasks)

    def _key(self, task: Task) -> tuple:
        order = self.policy.order
        if order == "execprio":
            return (0 if task.kind == Kind.EXEC else 1, task.id)
        if order == "snf":  # EdgeCaffe's SNFTypePriorityTaskPool key
            return (self.network_time.get(task.instance, 0.0), int(task.kind), task.id)
        return (task.id,)

    def _push(self, task: Task) -> None:
        heapq.heappush(self.ready[task.pool], (self._key(task), task.id))

    def _admissible(self, task: Task) -> bool:
        if not self.policy.admission or task.kind != Kind.INIT or self.budget is None:
            return True
        need = task.required_memory
        free = self.budget - sum(self.reserved.values())
        return not self.active or need == 0 or need <= free

    def arrive(self, instance: int) -> None:
        """The instance's arrival is due: its INIT may run once nothing else holds it."""
        init = self.inits[instance]
        self.missing[init.id] -= 1
        if self.missing[init.id] == 0:
            self._push(init)

    def take(self, worker: int) -> Task | None:
        """The next task for ``worker`` from the pools it serves, in their order; an INIT
        it takes reserves the instance's memory (admission)."""
        for pool in self.policy.worker_pools[worker]:
            heap = self.ready[pool]
            skipped = []
            chosen = None
            while heap:
                entry = heapq.heappop(heap)
                task = self.graph.tasks[entry[1]]
                if self._admissible(task):
                    chosen = task
                    break
                skipped.append(entry)
            for entry in skipped:
                heapq.heappush(heap, entry)
            if chosen is not None:
                if chosen.kind == Kind.INIT:
                    self.active.add(chosen.instance)
                    self.reserved[chosen.instance] = chosen.required_memory
                return chosen
        return None

    def complete(self, task: Task) -> bool:
        """Release dependants; True if this was the instance's last task."""
        self.done += 1
        for dep_id in task.dependants:
            self.missing[dep_id] -= 1
            if self.missing[dep_id] == 0:
                self._push(self.graph.tasks[dep_id])
        self.left[task.instance] -= 1
        return self.left[task.instance] == 0

    def release(self, instance: int) -> None:
        """The instance has ended: its reserved memory is free again."""
        self.active.discard(instance)
        self.reserved.pop(instance, None)


class Dispatcher:
    """Runs ``graph`` under ``policy``; ``run_task(task)`` does the work and may return a
    dict of extra columns; ``on_task_done(task, record)`` runs as each task ends;
    ``on_instance_done(instance)`` runs after an instance's last task (before its reserved
    memory is released)."""

    def __init__(self, graph: TaskGraph, policy: Policy, run_task: Callable[[Task], dict | None],
                 arrivals_ns: dict[int, int], *, budget: int | None = None,
                 network_time: dict[int, float] | None = None,
                 on_instance_done: Callable[[int], None] | None = None,
                 on_task_done: Callable[[Task, TaskRecord], None] | None = None) -> None:
        self.graph, self.policy = graph, policy
        self.run_task, self.on_instance_done = run_task, on_instance_done
        self.on_task_done = on_task_done
        self.arrivals_ns = arrivals_ns
        self.sched = Scheduler(graph, policy, budget=budget, network_time=network_time)
        self.cond = threading.Condition(threading.Lock())
        self.records = [TaskRecord() for _ in graph.tasks]
        self.released_ns: dict[int, int] = {}
        self.finished_ns: dict[int, int] = {}
        self.status = "ok"
        self.error: BaseException | None = None
        self.failed_task: Task | None = None
        self.t0 = 0

    # -- threads --

    def _now(self) -> int:
        return time.perf_counter_ns() - self.t0

    def _worker(self, index: int) -> None:
        while True:
            with self.cond:
                while True:
                    if self.status != "ok" or self.sched.finished:
                        return
                    task = self.sched.take(index)
                    if task is not None:
                        break
                    self.cond.wait()
            rec = self.records[task.id]
            rec.worker = index
            cpu0 = time.thread_time_ns()
            rec.start_ns = self._now()
            try:
                rec.extra = self.run_task(task) or {}
                rec.end_ns = self._now()
                rec.cpu_ns = time.thread_time_ns() - cpu0
                if self.on_task_done is not None:
                    self.on_task_done(task, rec)
                with self.cond:
                    last = self.sched.complete(task)
                if last:
                    if self.on_instance_done is not None:
                        self.on_instance_done(task.instance)
                    with self.cond:
                        self.finished_ns[task.instance] = rec.end_ns
                        self.sched.release(task.instance)
            except BaseException as exc:  # noqa: BLE001 - any failure ends the run cleanly
                rec.end_ns = self._now()
                self.stop("error", exc, task)
                return
            finally:
                with self.cond:
                    self.cond.notify_all()

    def stop(self, status: str, error: BaseException | None = None,
             task: Task | None = None) -> None:
        """End the run: no new task starts; running tasks finish."""
        with self.cond:
            if self.status == "ok":
                self.status, self.error, self.failed_task = status, error, task
            self.cond.notify_all()

    def run(self, timeout_s: float | None = None,
            on_start: Callable[[int], None] | None = None) -> DispatchResult:
        """Run to completion (or error/timeout/stop); ``on_start(t0_ns)`` is called with the
        monotonic time all records are relative to, before any task starts."""
        threads = [threading.Thread(target=self._worker, args=(i,), name=f"worker-{i}")
                   for i in range(self.policy.workers)]
        order = sorted(self.arrivals_ns.items(), key=lambda kv: (kv[1], kv[0]))
        self.t0 = time.perf_counter_ns()
        if on_start is not None:
            on_start(self.t0)
        deadline = None if timeout_s is None else timeout_s * 1e9
        for t in threads:
            t.start()
        try:
            with self.cond:
                for instance, due in order:
                    while self.status == "ok" and self._now() < due:
                        if deadline is not None and self._now() >= deadline:
                            break
                        wake = due if deadline is None else min(due, deadline)
                        self.cond.wait((wake - self._now()) / 1e9)
                    if self.status != "ok" or (deadline is not None and self._now() >= deadline):
                        break
                    self.released_ns[instance] = self._now()
                    self.sched.arrive(instance)
                    self.cond.notify_all()
                while self.status == "ok" and not self.sched.finished:
                    if deadline is not None:
                        left = deadline - self._now()
                        if left <= 0:
                            break
                        self.cond.wait(left / 1e9)
                    else:
                        self.cond.wait()
            if self.status == "ok" and not self.sched.finished:
                self.stop("timeout")
        except BaseException as exc:
            self.stop("interrupted", exc)
            raise
        finally:
            for t in threads:
                t.join()
        return DispatchResult(self.records, self.released_ns, self.finished_ns, self.status,
                              self.error, self.failed_task, self.t0)

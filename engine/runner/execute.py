"""Executing one pipeline under one policy inside the measured process.

``PipelineRun`` holds the network instances and does each task's work; around every task
it opens the probe windows (cgroup counters, process RSS, heap dumps) and streams one
JSON line per task start and end to ``progress.jsonl``, so even a run the kernel
OOM-kills leaves a record of what ran and which layer was running.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from engine.caffe.splitter import Description
from engine.files import naming
from engine.network import Network
from engine.runner.request import RunOptions
from engine.schedule.dispatch import Dispatcher, DispatchResult
from engine.schedule.pipelines import Pipeline
from engine.schedule.plan import plan
from engine.schedule.policies import Policy
from engine.schedule.tasks import WHOLE_NET, Kind, Task


@dataclass
class ProbeSet:
    """Window probes opened around every task; each has open() -> token and
    close(token) -> dict of columns."""

    windows: list = field(default_factory=list)
    heap: object | None = None  # HeapDumper: dumps at each task's start and end


def output_key(instance: int, network: str, blob: str) -> str:
    """An output blob's key in a run's ``outputs.npz`` (and ``forward --out``'s)."""
    return f"{instance}:{network}/{blob}"


class PipelineRun:
    """The state of one run: network instances and the work each task does."""

    def __init__(self, pipeline: Pipeline, policy: Policy, descriptions: dict[str, Description],
                 options: RunOptions, probes: ProbeSet | None = None,
                 progress: str | os.PathLike | None = None) -> None:
        self.pipeline, self.policy, self.options = pipeline, policy, options
        self.descs = descriptions
        self.probes = probes or ProbeSet()
        planned = plan(pipeline, policy, descriptions, options.estimates)
        self.instances, self.arrivals_ns = planned.instances, planned.arrivals_ns
        self.graph, self.network_time = planned.graph, planned.network_time
        self.nets: dict[int, Network] = {}
        self.outputs: dict[str, np.ndarray] = {}
        self.lock = threading.Lock()
        self._progress = open(progress, "a", buffering=1) if progress else None
        self._progress_path = progress
        self.t0_ns = 0
        self.blas: list[dict] = []

    def instance_key(self, instance: int) -> str:
        return f"{instance}:{self.instances[instance].network}"

    def task_fields(self, task: Task) -> dict:
        """The descriptive columns of a task (who, which layer, what kind)."""
        inst = self.instances[task.instance]
        desc = self.descs[inst.network]
        row = {"instance": task.instance, "network": inst.network, "layer": task.layer,
               "task_id": task.id, "task_type": task.kind.name}
        if task.layer == WHOLE_NET:
            row.update(layer_name="", layer_type="", layer_kind="",
                       param_bytes=desc.param_bytes if task.kind != Kind.INIT else 0)
        else:
            info = desc.layers[task.layer]
            row.update(layer_name=info.name, layer_type=info.type, layer_kind=info.kind,
                       param_bytes=info.param_bytes)
        return row

    def _emit(self, record: dict) -> None:
        if self._progress is not None:
            with self.lock, naming(self._progress_path):  # a full disk names the file
                self._progress.write(json.dumps(record) + "\n")

    def run_task(self, task: Task) -> dict:
        self._emit({"event": "start", **self.task_fields(task),
                    "start_ns": time.perf_counter_ns() - self.t0_ns})
        self._heap_dump(task, "start")
        tokens = [probe.open() for probe in self.probes.windows]
        extra = self._work(task)
        # the work is done here; the probes' close, after it, can wait for the GIL
        # under concurrent workers, and the task's end_ns includes that wait
        extra["work_end_ns"] = time.perf_counter_ns() - self.t0_ns
        for probe, token in zip(self.probes.windows, tokens):
            extra.update(probe.close(token))
        self._heap_dump(task, "end")
        return extra

    def _heap_dump(self, task: Task, phase: str) -> None:
        if self.probes.heap is None:
            return
        with self.lock:  # dump numbers must follow the order of the events
            number = self.probes.heap.dump((task.id, phase))
            if self._progress is not None:
                with naming(self._progress_path):
                    self._progress.write(json.dumps({"event": "heap", "dump": number,
                                                     "task_id": task.id,
                                                     "phase": phase}) + "\n")

    def _work(self, task: Task) -> dict:
        inst = self.instances[task.instance]
        if task.kind == Kind.INIT:
            net = Network(self.descs[inst.network], batch=self.options.batch,
                          instance=self.instance_key(task.instance),
                          runtime_name=self.options.runtime)
            net.init(self.options.seed)
            with self.lock:
                self.nets[task.instance] = net
            return {}
        net = self.nets[task.instance]
        if task.kind == Kind.LOAD:
            loaded = net.load_all() if task.layer == WHOLE_NET else net.load_layer(task.layer)
            return {"bytes_loaded": loaded}
        if task.layer == WHOLE_NET:
            net.forward()
        else:
            net.exec_layer(task.layer)
        return {}

    def _task_done(self, task: Task, record) -> None:
        row = self.task_fields(task)
        row.update(worker=record.worker, start_ns=record.start_ns, end_ns=record.end_ns,
                   duration_ns=record.end_ns - record.start_ns, cpu_ns=record.cpu_ns,
                   **record.extra)
        self._emit({"event": "end", **row})

    def instance_done(self, instance: int) -> None:
        # streamed at once: a run killed later still knows this network finished
        self._emit({"event": "done", "instance": instance,
                    "end_ns": time.perf_counter_ns() - self.t0_ns})
        with self.lock:
            net = self.nets.pop(instance)
        for blob, value in net.result().items():
            self.outputs[output_key(instance, self.instances[instance].network, blob)] = value

    def execute(self) -> DispatchResult:
        dispatcher = Dispatcher(self.graph, self.policy, self.run_task, self.arrivals_ns,
                                budget=self.options.budget, network_time=self.network_time,
                                on_instance_done=self.instance_done,
                                on_task_done=self._task_done)
        with threadpool_limits(self.options.blas_threads, "blas"):
            self.blas = self._blas_info()  # as set for the run, not as restored after it
            result = dispatcher.run(self.options.timeout_s, on_start=self._started)
        self._network_rows(result)
        if self._progress is not None:
            self._progress.close()
        return result

    def _started(self, t0_ns: int) -> None:
        self.t0_ns = t0_ns
        self._emit({"event": "begin", "t0_monotonic_ns": t0_ns})

    def _network_rows(self, result: DispatchResult) -> None:
        starts = {t.instance: result.records[t.id].start_ns for t in self.graph.tasks
                  if t.kind == Kind.INIT and result.records[t.id].start_ns >= 0}
        for inst in self.instances:
            arrival, start = self.arrivals_ns[inst.id], starts.get(inst.id)
            end = result.finished_ns.get(inst.id)
            self._emit({"event": "network", "instance": inst.id, "network": inst.network,
                        "arrival": inst.arrival, "arrival_ns": arrival,
                        "released_ns": result.released_ns.get(inst.id),
                        "init_start_ns": start, "end_ns": end,
                        "waiting_ns": None if start is None else start - arrival,
                        "execution_ns": None if None in (start, end) else end - start,
                        "response_ns": None if end is None else end - arrival})

    @staticmethod
    def _blas_info() -> list[dict]:
        return [{k: v for k, v in info.items()
                 if k in ("internal_api", "version", "architecture", "num_threads")}
                for info in threadpool_info()]

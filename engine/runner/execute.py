"""``run``: execute one pipeline under one policy and write its run folder.

The run folder (meta.json, tasks.csv, networks.csv, outputs.npz) is assembled in a
temporary sibling folder and renamed into place only when complete; an interrupted run
(SIGINT/SIGTERM) leaves nothing behind and exits non-zero. A run that fails inside a task
or hits its timeout is a result: its folder records termination ``error``/``timeout``.
"""

from __future__ import annotations

import os
import platform
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from engine.caffe.splitter import Description
from engine.errors import EdgeprofError
from engine.network import Network
from engine.runner.folder import RunFolder
from engine.schedule.dispatch import Dispatcher, DispatchResult
from engine.schedule.pipelines import Pipeline
from engine.schedule.policies import Policy
from engine.schedule.tasks import WHOLE_NET, Instance, Kind, Task


class Interrupted(EdgeprofError):
    """The run was stopped by a signal; nothing was written."""


def model_index(folder: str | os.PathLike) -> dict[str, Path]:
    """Network name -> description file, for every ``*.description.json`` in ``folder``."""
    found = {}
    for path in sorted(Path(folder).glob("*.description.json")):
        found[Description.load(path).network] = path
    return found


def estimate_peak_bytes(desc: Description) -> int:
    """Masa's admission estimate when no profile is given: every weight of the network
    resident (loads may run ahead of execution) plus its two largest activations."""
    outputs = sorted((4 * int(np.prod(s)) for layer in desc.layers for s in layer.output_shapes),
                     reverse=True)
    return desc.param_bytes + sum(outputs[:2])


@dataclass
class RunOptions:
    blas_threads: int = 1
    seed: int = 0
    batch: int | None = None
    budget: int | None = None  # memory budget for admission (bytes)
    timeout_s: float | None = None
    estimates: dict[str, int] | None = None  # network -> peak bytes from a profiling run


class PipelineRun:
    """The state of one run: network instances and the work each task does."""

    def __init__(self, pipeline: Pipeline, policy: Policy, descriptions: dict[str, Description],
                 options: RunOptions) -> None:
        self.pipeline, self.policy, self.options = pipeline, policy, options
        self.descs = descriptions
        self.instances = [
            Instance(i, net, a_index, len(descriptions[net].layers),
                     descriptions[net].num_conv_layers)
            for i, net, a_index, _ in pipeline.instances()
        ]
        self.arrivals_ns = {i: int(round(t * 1e9)) for i, _, _, t in pipeline.instances()}
        self.graph = policy.build(self.instances)
        estimates = options.estimates or {}
        for task in self.graph.tasks:
            if task.kind == Kind.INIT:
                net = self.instances[task.instance].network
                task.required_memory = estimates.get(net) or estimate_peak_bytes(self.descs[net])
        self.nets: dict[int, Network] = {}
        self.outputs: dict[str, np.ndarray] = {}
        self.lock = threading.Lock()

    def instance_key(self, instance: int) -> str:
        return f"{instance}:{self.instances[instance].network}"

    def run_task(self, task: Task) -> dict:
        inst = self.instances[task.instance]
        if task.kind == Kind.INIT:
            net = Network(self.descs[inst.network], batch=self.options.batch,
                          instance=self.instance_key(task.instance))
            net.set_input(self.options.seed)
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

    def instance_done(self, instance: int) -> None:
        with self.lock:
            net = self.nets.pop(instance)
        for blob, value in net.result().items():
            self.outputs[f"{self.instance_key(instance)}/{blob}"] = value

    def execute(self) -> DispatchResult:
        network_time = {i.id: float(sum(x.flops for x in self.descs[i.network].layers))
                        for i in self.instances}
        dispatcher = Dispatcher(self.graph, self.policy, self.run_task, self.arrivals_ns,
                                budget=self.options.budget, network_time=network_time,
                                on_instance_done=self.instance_done)
        with _signals_raise(dispatcher), threadpool_limits(self.options.blas_threads, "blas"):
            result = dispatcher.run(self.options.timeout_s)
        return result


class _signals_raise:
    """SIGINT/SIGTERM stop the dispatcher and surface as ``Interrupted``."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        self.old: dict[int, object] = {}

    def _handler(self, signum, frame) -> None:
        raise Interrupted(f"run interrupted by {signal.Signals(signum).name}; nothing written")

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.old[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc) -> None:
        for sig, old in self.old.items():
            signal.signal(sig, old)


def resolve_descriptions(pipeline: Pipeline, models: dict[str, Path]) -> dict[str, Description]:
    missing = sorted(set(pipeline.networks()) - set(models))
    if missing:
        raise EdgeprofError(
            f"pipeline '{pipeline.name}' names networks with no split model: "
            f"{', '.join(missing)} (available: {', '.join(sorted(models)) or 'none'}); "
            "run the split stage for them or point --models at the right folder"
        )
    return {net: Description.load(models[net]) for net in set(pipeline.networks())}


def run_pipeline(pipeline: Pipeline, policy: Policy, models: dict[str, Path],
                 out: str | os.PathLike, options: RunOptions, *, force: bool = False,
                 pipeline_path: str = "", backend: str = "none",
                 limit: int | None = None) -> RunFolder:
    """Run and write the folder ``out``; returns the written folder."""
    folder = RunFolder(out)
    folder.check_writable(force)
    descs = resolve_descriptions(pipeline, models)
    state = PipelineRun(pipeline, policy, descs, options)
    result = state.execute()
    meta = {
        "pipeline": {"path": pipeline_path, "name": pipeline.name,
                     "arrival_mode": pipeline.arrival_mode, "size_bin": pipeline.size_bin,
                     "param_bytes": pipeline.param_bytes,
                     "networks": pipeline.networks()},
        "policy": policy.name, "workers": policy.workers,
        "blas_threads": options.blas_threads, "seed": options.seed, "batch": options.batch,
        "backend": backend, "limit_bytes": limit, "limit_enforced": False,
        "budget_bytes": options.budget,
        "termination": {"ok": "ok", "timeout": "timeout"}.get(result.status, "error"),
        "error": None if result.error is None else f"{type(result.error).__name__}: {result.error}",
        "failed_task": (None if result.failed_task is None
                        else _task_name(state, result.failed_task)),
        "host": {"kernel": platform.release(), "machine": platform.machine(),
                 "cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "versions": _versions(),
        "blas": [{k: v for k, v in info.items() if k in ("internal_api", "version",
                                                         "architecture", "num_threads")}
                 for info in threadpool_info()],
        "description_files": {n: str(models[n]) for n in sorted(descs)},
    }
    folder.write(state, result, meta)
    return folder


def _task_name(state: PipelineRun, task: Task) -> str:
    return f"{state.instance_key(task.instance)} {task.label}"


def _versions() -> dict[str, str]:
    import google.protobuf

    from engine import __version__
    return {"edgeprof": __version__, "numpy": np.__version__,
            "protobuf": google.protobuf.__version__}

"""The per-run output folder, written atomically (temp folder, then rename)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from engine.caffe.io import normal_mode
from engine.errors import EdgeprofError
from engine.schedule.tasks import WHOLE_NET, Kind

if TYPE_CHECKING:
    from engine.runner.execute import PipelineRun
    from engine.schedule.dispatch import DispatchResult

TASK_COLUMNS = ["instance", "network", "layer", "layer_name", "layer_type", "layer_kind",
                "task_id", "task_type", "worker", "start_ns", "end_ns", "duration_ns", "cpu_ns",
                "bytes_loaded", "param_bytes"]
NETWORK_COLUMNS = ["instance", "network", "arrival", "arrival_ns", "released_ns",
                   "init_start_ns", "end_ns", "waiting_ns", "execution_ns", "response_ns"]


class RunFolder:
    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    @property
    def finished(self) -> bool:
        return (self.path / "meta.json").is_file()

    def check_writable(self, force: bool) -> None:
        if self.path.exists() and not force:
            what = "a finished run" if self.finished else "files"
            raise EdgeprofError(f"{self.path} already holds {what}; pass --force to replace it")

    def write(self, state: PipelineRun, result: DispatchResult, meta: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.", dir=self.path.parent))
        normal_mode(tmp, directory=True)
        try:
            self._tasks(tmp / "tasks.csv", state, result)
            self._networks(tmp / "networks.csv", state, result)
            with open(tmp / "outputs.npz", "wb") as f:
                np.savez(f, **state.outputs)
            (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
            if self.path.exists():
                shutil.rmtree(self.path)
            os.replace(tmp, self.path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    @staticmethod
    def _tasks(path: Path, state: PipelineRun, result: DispatchResult) -> None:
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(TASK_COLUMNS)
            for task, rec in zip(state.graph.tasks, result.records):
                if rec.start_ns < 0:
                    continue  # never started (run stopped early)
                inst = state.instances[task.instance]
                desc = state.descs[inst.network]
                if task.layer == WHOLE_NET:
                    name = ltype = kind = ""
                    pbytes = desc.param_bytes if task.kind != Kind.INIT else 0
                else:
                    info = desc.layers[task.layer]
                    name, ltype, kind, pbytes = info.name, info.type, info.kind, info.param_bytes
                w.writerow([task.instance, inst.network, task.layer, name, ltype, kind, task.id,
                            task.kind.name, rec.worker, rec.start_ns, rec.end_ns,
                            rec.end_ns - rec.start_ns, rec.cpu_ns,
                            rec.extra.get("bytes_loaded", ""), pbytes])

    @staticmethod
    def _networks(path: Path, state: PipelineRun, result: DispatchResult) -> None:
        starts: dict[int, int] = {}
        for task, rec in zip(state.graph.tasks, result.records):
            if task.kind == Kind.INIT and rec.start_ns >= 0:
                starts[task.instance] = rec.start_ns
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(NETWORK_COLUMNS)
            for inst in state.instances:
                arrival = state.arrivals_ns[inst.id]
                start = starts.get(inst.id)
                end = result.finished_ns.get(inst.id)
                row = [inst.id, inst.network, inst.arrival, arrival,
                       result.released_ns.get(inst.id, ""), "" if start is None else start,
                       "" if end is None else end,
                       "" if start is None else start - arrival,
                       "" if None in (start, end) else end - start,
                       "" if end is None else end - arrival]
                w.writerow(row)

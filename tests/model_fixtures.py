"""Small networks whose bytes can be counted by hand, and synthetic campaigns of them:
runs, tasks and networks tables shaped as the aggregate writes them, with task times from
known coefficients laid out by the simulator (so multi-worker policies overlap as they
would)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd

from engine.caffe import io, schema, splitter
from engine.model.params import network_features
from engine.model.simulate import simulate
from engine.schedule.pipelines import Arrival, Pipeline
from engine.schedule.plan import plan
from engine.schedule.policies import parse_policy

TINY = """name: "Tiny"
input: "data"
input_dim: 1 input_dim: 1 input_dim: 4 input_dim: 4
layer { name: "ip1" type: "InnerProduct" bottom: "data" top: "ip1"
        inner_product_param { num_output: 8 } }
layer { name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
        inner_product_param { num_output: 2 } }
"""
# a second architecture: other shapes, so that holding one network out leaves layers of
# sizes the fit has not seen
WIDE = TINY.replace('"Tiny"', '"Wide"').replace("input_dim: 4 input_dim: 4",
                                                "input_dim: 8 input_dim: 8").replace(
    "num_output: 8", "num_output: 32")


def write_network(root: Path, text: str) -> splitter.Description:
    """Write ``text``'s network with seeded weights, split it; its description."""
    from google.protobuf import text_format

    net = text_format.Parse(text, schema.NetParameter())
    stem = net.name.lower()
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{stem}.prototxt").write_text(text)
    rng = np.random.default_rng(0)
    shapes = {}
    dims = list(net.input_dim)
    fan_in = int(np.prod(dims[1:]))
    for layer in net.layer:
        if layer.type == "InnerProduct":
            n = layer.inner_product_param.num_output
            shapes[layer.name] = [(n, fan_in), (n,)]
            fan_in = n
    io.write_caffemodel(root / f"{stem}.caffemodel", net,
                        lambda i, layer: [rng.standard_normal(s, dtype=np.float32)
                                          for s in shapes.get(layer.name, [])])
    path = splitter.split_model(root / f"{stem}.caffemodel", root / f"{stem}.prototxt",
                                root / "split")
    return splitter.Description.load(path)


# seconds: LOAD = 1e-4 + 2e-9 x bytes; EXEC = 5e-5 + 1e-8 x MACs; INIT 10 ms
def task_seconds(feats, kind: str, layer: int) -> float:
    if kind == "INIT":
        return 0.01
    if kind == "LOAD":
        nbytes = feats.weight_bytes[layer] if layer >= 0 else feats.total_weight_bytes
        return 1e-4 + 2e-9 * nbytes
    if layer >= 0:
        return 5e-5 + 1e-8 * feats.layers[layer]["macs"]
    return sum(5e-5 + 1e-8 * f["macs"] for f in feats.layers)


def campaign(descriptions: dict[str, splitter.Description], pipelines: dict[str, list[str]],
             policies: tuple[str, ...] = ("linear", "partial:2"), reps: int = 2,
             noise: float = 0.02, batches: tuple[int | None, ...] = (None,)
             ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(runs, tasks, networks) of every pipeline (all networks arriving at 0) under every
    policy at each of ``batches`` (None: the deploy batch; run ids end /b<N> where there
    are several), unconstrained, ``reps`` repetitions; each task's time ``task_seconds`` times
    a log-normal factor of sd ``noise``, laid out by the simulator (two workers computing
    at once each run at half speed, as on one CPU)."""
    runs, tasks, nets = [], [], []
    rng = np.random.default_rng(7)
    for batch, name, networks in ((b, n, members) for b in batches
                                  for n, members in pipelines.items()):
        feats = {n: network_features(d, batch) for n, d in descriptions.items()}
        pipe = Pipeline(name, [Arrival(0.0, list(networks))])
        param_bytes = sum(descriptions[n].param_bytes for n in networks)
        for policy in policies:
            pol = parse_policy(policy)
            for rep in range(reps):
                planned = plan(pipe, pol, descriptions)
                inst = {i.id: i.network for i in planned.instances}
                factor = np.exp(rng.normal(0, noise, len(planned.graph.tasks)))
                sim = simulate(planned.graph, pol, {i: 0.0 for i in inst},
                               lambda t, f=factor, i=inst, w=feats: task_seconds(
                                   w[i[t.instance]], t.kind.name, t.layer) * f[t.id],
                               cpus=1.0, network_time=planned.network_time)
                run_id = f"{name}/{policy}/none/rep{rep}" + (
                    f"/b{batch}" if len(batches) > 1 else "")
                runs.append({
                    "run_id": run_id, "pipeline": name, "policy": policy, "limit": "none",
                    "limit_bytes": np.nan, "swap_bytes": np.nan, "limit_enforced": False,
                    "backend": "none", "emulated": False, "runtime": "lean", "rep": rep,
                    "page_bytes": 4096,
                    "termination": "ok", "workers": pol.workers, "child_cpus": 1.0,
                    "batch": batch, "makespan_s": sim.makespan_s, "hwm_rss_bytes": 5e7,
                    "networks": " ".join(networks), "n_networks": len(networks),
                    "size_bin": "small", "param_bytes": param_bytes,
                    "policy_family": pol.family,
                    # what a run and its pipeline file are, as the aggregate records
                    # them: the same run id and pipeline in two calls are the same run
                    "record_digest": _sha(run_id),
                    "pipeline_sha256": _sha(f"{name} {' '.join(networks)}")})
                start = np.array(sim.start_s)
                end = np.array(sim.end_s)
                for t in planned.graph.tasks:
                    s, e = start[t.id], end[t.id]
                    overlap = int(((start < e) & (end > s)).sum()) - 1
                    tasks.append({
                        "run_id": run_id, "pipeline": name, "policy": policy, "limit": "none",
                        "emulated": False, "rep": rep, "instance": t.instance,
                        "network": inst[t.instance], "layer": t.layer,
                        "task_type": t.kind.name, "task_id": t.id, "overlap": overlap,
                        "start_ns": int(s * 1e9), "end_ns": int(e * 1e9),
                        "duration_ns": int((e - s) * 1e9), "proc_rss_bytes": 4e7,
                        "proc_rss_delta_bytes": 0})
                for i, net in inst.items():
                    nets.append({"run_id": run_id, "pipeline": name, "instance": i,
                                 "network": net, "arrival": 0, "arrival_ns": 0})
    return pd.DataFrame(runs), pd.DataFrame(tasks), pd.DataFrame(nets)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()

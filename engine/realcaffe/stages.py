"""The engine's resident set stage by stage, measured as ``probe.cpp`` measures real Caffe.

``python -m engine.realcaffe.stages bulk|layers DESCRIPTION [--runtime R]`` runs one
network alone in this process through the same sequence of stages as the probe and
prints the same JSON lines (stage, layer, VmRSS and the VmHWM since the previous line,
in KiB). In ``layers`` mode the engine's EXEC is forward and reset in one step, so it
reports ``reset`` only.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from engine.network import Network
from engine.probes.process import hwm_rss
from engine.runtime import DEFAULT_RUNTIME, RUNTIMES


def reset_hwm() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def _report(stage: str, layer: int = -1) -> None:
    hwm, rss = hwm_rss(Path("/proc/self/status").read_bytes())
    print(json.dumps({"stage": stage, "layer": layer, "rss_kib": rss // 1024,
                      "hwm_kib": hwm // 1024}), flush=True)
    reset_hwm()


WARMUP = Path(__file__).with_name("warmup.prototxt")


def warm_up(runtime_name: str) -> None:
    """What the probe's warm-up does once per process: the warm-up net (every layer type
    of the paper's networks) written with zero weights, split, and run alone, bulk and
    layer by layer, in ``runtime_name``; for the caffe runtime also the parse of a V1
    file (the upgrade's path)."""
    from engine.caffe import graph, io, schema, splitter
    from engine.network import run_standalone
    from engine.runtime.protobuf import Message

    deploy = io.read_prototxt(WARMUP)
    shapes = {layer.name: layer.param_shapes
              for layer in graph.build_graph(deploy, source=str(WARMUP)).layers}

    def zeros(index: int, layer) -> list[np.ndarray]:
        return [np.zeros(s, np.float32) for s in shapes.get(layer.name, ())]

    with tempfile.TemporaryDirectory(prefix="edgeprof-warmup") as tmp:
        folder = Path(tmp)
        prototxt = folder / "warmup.prototxt"
        prototxt.write_text(WARMUP.read_text())
        model = folder / "warmup.caffemodel"
        io.write_caffemodel(model, deploy, zeros)
        description = splitter.split_model(model, prototxt, folder / "split")
        for bulk in (True, False):
            run_standalone(description, bulk=bulk, runtime_name=runtime_name)
        if runtime_name == "caffe":
            v1 = schema.NetParameter(name="warmup")
            for layer in deploy.layer:
                if shapes[layer.name]:
                    v1.layers.add(name=layer.name, type=schema.V1_ENUM_BY_TYPE[layer.type])
            io.write_caffemodel(folder / "v1.caffemodel", v1, zeros)
            Message(folder / "v1.caffemodel").release()


def run(mode: str, description: str, runtime_name: str, seed: int = 0,
        batch: int | None = None) -> np.ndarray:
    """Run ``description`` (at ``batch``; None: the deploy batch) through the probe's
    ``mode`` sequence, reporting each stage; returns the output blobs concatenated (as the
    probe writes them)."""
    warm_up(runtime_name)
    gc.collect()
    reset_hwm()
    _report("start")
    net = Network(description, batch=batch, runtime_name=runtime_name)
    net.runtime.init(net)
    _report("init")
    if mode == "bulk":
        net.load_all()
        _report("load")
        net.set_input(seed)
        net.forward()
        _report("forward")
    else:
        net.set_input(seed)
        _report("input")
        for layer in net.layers:
            if net.desc.layers[layer.index].partial is not None:
                net.load_layer(layer.index)
                _report("load", layer.index)
            net.exec_layer(layer.index)
            _report("reset", layer.index)
    outputs = np.concatenate([v.reshape(-1) for v in net.result().values()])
    del net
    gc.collect()
    _report("delete")
    return outputs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.realcaffe.stages", description=__doc__)
    p.add_argument("mode", choices=("bulk", "layers"))
    p.add_argument("description")
    p.add_argument("--runtime", choices=RUNTIMES, default=DEFAULT_RUNTIME)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--outputs", help="write the output blobs here (.npy)")
    p.add_argument("--batch", type=int, help="the inputs' batch (default: the deploy's)")
    args = p.parse_args(argv)
    with threadpool_limits(1, "blas"):  # as runs do by default, and as the probe runs Caffe
        outputs = run(args.mode, args.description, args.runtime, args.seed, args.batch)
    if args.outputs:
        np.save(args.outputs, outputs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

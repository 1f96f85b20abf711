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
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from engine import ops
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


def warm_up() -> None:
    """What the probe's warm-up net does once per process: the operators' first BLAS
    calls (OpenBLAS sets up its buffers)."""
    x = np.zeros((1, 3, 16, 16), np.float32)
    y = ops.pooling(ops.convolution(x, np.zeros((8, 3, 3, 3), np.float32), None),
                    kernel=(2, 2), stride=(2, 2))
    ops.softmax(ops.inner_product(y, np.zeros((4, y.size), np.float32), None), 1)


def run(mode: str, description: str, runtime_name: str, seed: int = 0) -> np.ndarray:
    """Run ``description`` through the probe's ``mode`` sequence, reporting each stage;
    returns the output blobs concatenated (as the probe writes them)."""
    warm_up()
    gc.collect()
    reset_hwm()
    _report("start")
    net = Network(description, runtime_name=runtime_name)
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
    args = p.parse_args(argv)
    with threadpool_limits(1, "blas"):  # as runs do by default, and as the probe runs Caffe
        outputs = run(args.mode, args.description, args.runtime, args.seed)
    if args.outputs:
        np.save(args.outputs, outputs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

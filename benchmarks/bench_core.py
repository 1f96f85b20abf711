"""Core engine benchmarks (issue: engine speed targets), printed as medians and ratios.

1. Forward pass of AlexNet and GoogLeNet at batch 1 against PyTorch CPU built from the
   same Caffe graph and weights, same thread count (n = 1 and 2): target <= 1.3x torch.
2. Loading all of AlexNet's partial files from a warm page cache with the wire loader:
   target >= 3 GB/s and peak RSS during loading <= 1.1x the weight bytes. The generic
   protobuf parse (reference path) and bulk loading are shown for comparison.
3. Generating and splitting all five zoo models: target < 30 s.

Every timing runs in a fresh child process of this script, engine and torch alternately,
so the figures of one line were measured side by side in one run. Engine and torch are
never timed in the same process: on 2 cores their thread pools (OpenBLAS, OpenMP) spin
against each other and give 2-10x outliers.

Usage: python benchmarks/bench_core.py [--split DIR] [--rounds 4] [--reps 15]
           [--load-repeats 9] [--parts forward load generate] [--profile]
(--profile prints the per-layer comparison for every forward row, not only failing ones.)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ZOO = ["AgeNet", "GenderNet", "FaceNet", "AlexNet", "GoogLeNet"]
FORWARD_NETS = ["AlexNet", "GoogLeNet"]
THREADS = [1, 2]
FORWARD_TARGET = 1.3  # engine / torch
LOAD_GBPS_TARGET = 3.0
LOAD_RSS_TARGET = 1.1  # peak RSS growth / weight bytes
GENERATE_TARGET_S = 30.0
TORCH_HINT = "skipped: torch not installed (pip install torch==2.13.0)"

# ---------------------------------------------------------------------------------------
# Children: each prints one JSON line on stdout as its last line.
# ---------------------------------------------------------------------------------------


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


def _time_net(reset: Callable[[], None], run: Callable[[], Any],
              run_layer: Callable[[int], Any], n_layers: int, reps: int,
              layer_reps: int) -> dict[str, Any]:
    """Whole-forward samples, then per-layer medians from separate passes (timing each
    layer adds perf_counter calls, so the whole-forward figure is measured without them)."""
    for _ in range(3):  # warm-up: caches, BLAS/OpenMP thread start, allocator pools
        reset()
        run()
    forward = []
    for _ in range(reps):
        reset()
        t0 = time.perf_counter()
        run()
        forward.append(time.perf_counter() - t0)
    per_layer: list[list[float]] = [[] for _ in range(n_layers)]
    for _ in range(layer_reps):
        reset()
        for i in range(n_layers):
            t0 = time.perf_counter()
            run_layer(i)
            per_layer[i].append(time.perf_counter() - t0)
    return {"forward_ms": [t * 1e3 for t in forward],
            "layers_ms": [_median_ms(s) for s in per_layer]}


def child_engine_forward(models: dict[str, Path], threads: int, reps: int,
                         layer_reps: int) -> dict[str, Any]:
    from threadpoolctl import threadpool_limits

    from engine.network import Network

    out = {}
    with threadpool_limits(threads, "blas"):
        for name in FORWARD_NETS:
            net = Network(models[name], batch=1)
            net.set_input(0)
            inputs = dict(net.blobs)
            for layer in net.layers:
                net.load_layer(layer.index)
            weights = dict(net.weights)

            def reset(net: Network = net, weights: dict = weights, inputs: dict = inputs) -> None:
                # EXEC frees each layer's weights; hand the same arrays back (no copy).
                net.weights = dict(weights)
                net.blobs = {k: v.copy() for k, v in inputs.items()}

            out[name] = _time_net(reset, net.forward, net.exec_layer, len(net.layers),
                                  reps, layer_reps)
            out[name]["names"] = [[x.name, x.type] for x in net.layers]
    return out


class TorchNet:
    """The same runtime graph as ``engine.network.Network``, run with torch ops on the
    same weights (Caffe semantics: ceil-mode pooling, Caffe LRN, in-place ReLU)."""

    def __init__(self, graph: Any, weights: dict[int, list[np.ndarray]]) -> None:
        import torch

        self.graph = graph
        shapes = {t: s for layer in graph.layers for t, s in zip(layer.tops, layer.top_shapes)}
        self.ops = []
        for layer in graph.layers:
            w = [torch.from_numpy(np.ascontiguousarray(a)) for a in weights.get(layer.index, [])]
            self.ops.append(self._op(layer, w, [shapes[b] for b in layer.bottoms]))
        self.last_reader = {b: layer.index for layer in graph.layers for b in layer.bottoms}
        self.blobs: dict[str, Any] = {}

    @staticmethod
    def _op(layer: Any, w: list[Any], bottom_shapes: list[tuple[int, ...]]) -> Callable:
        import torch
        import torch.nn.functional as F

        a, t = layer.args, layer.type
        bias = w[1] if len(w) > 1 else None
        if t == "Input":
            return lambda x: []
        if t == "Convolution":
            return lambda x: [F.conv2d(x[0], w[0], bias, a["stride"], a["pad"], a["dilation"],
                                       a["group"])]
        if t == "InnerProduct":
            weight = w[0].t().contiguous() if a["transpose"] else w[0]
            return lambda x: [F.linear(x[0].flatten(a["axis"]), weight, bias)]
        if t == "Pooling":
            if a["global_pooling"]:
                kernel, stride, pad = bottom_shapes[0][2:], (1, 1), (0, 0)
            else:
                kernel, stride, pad = a["kernel"], a["stride"], a["pad"]
            if a["method"] == "max":
                return lambda x: [F.max_pool2d(x[0], kernel, stride, pad,
                                               ceil_mode=a["ceil_mode"])]
            # Caffe AVE divides by the window clipped to size + pad, as count_include_pad.
            return lambda x: [F.avg_pool2d(x[0], kernel, stride, pad, ceil_mode=a["ceil_mode"],
                                           count_include_pad=True)]
        if t == "ReLU":
            # Caffe runs top == bottom ReLUs in place (safe: split blobs have other names).
            inplace, slope = layer.tops[0] == layer.bottoms[0], a["negative_slope"]
            if slope:
                return lambda x: [F.leaky_relu(x[0], slope, inplace=inplace)]
            return lambda x: [torch.relu_(x[0]) if inplace else torch.relu(x[0])]
        if t == "LRN":
            # torch divides alpha by size like Caffe: x / (k + alpha/n * sum x^2)^beta.
            return lambda x: [F.local_response_norm(x[0], a["local_size"], a["alpha"],
                                                    a["beta"], a["k"])]
        if t == "Concat":
            return lambda x: [torch.cat(x, dim=a["axis"])]
        if t == "Softmax":
            return lambda x: [F.softmax(x[0], dim=a["axis"])]
        if t in ("Dropout", "Split"):
            n = len(layer.tops)
            return lambda x: [x[0]] * n
        raise ValueError(f"no torch op for layer type {t}")

    def exec_layer(self, i: int) -> None:
        layer = self.graph.layers[i]
        tops = self.ops[i]([self.blobs[b] for b in layer.bottoms])
        for name, value in zip(layer.tops, tops):
            self.blobs[name] = value
        for b in set(layer.bottoms):  # free like the engine, so both hold the same blobs
            if self.last_reader.get(b) == i and b not in layer.tops and b not in self.graph.outputs:
                del self.blobs[b]

    def forward(self) -> dict[str, Any]:
        for i in range(len(self.graph.layers)):
            self.exec_layer(i)
        return {k: self.blobs[k] for k in self.graph.outputs}


def _torch_net(desc: Path) -> tuple[Any, Any, dict[str, np.ndarray]]:
    """A loaded engine Network (weights kept) and the TorchNet on the same arrays."""
    from engine.network import Network

    net = Network(desc, batch=1)
    net.set_input(0)
    inputs = {k: v.copy() for k, v in net.blobs.items()}
    for layer in net.layers:
        net.load_layer(layer.index)
    return net, TorchNet(net.graph, dict(net.weights)), inputs


def child_torch_forward(models: dict[str, Path], threads: int, reps: int,
                        layer_reps: int) -> dict[str, Any]:
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(threads)
    out = {}
    # numpy's OpenBLAS idles here; at 1 thread it keeps no spinning workers around.
    with threadpool_limits(1, "blas"), torch.inference_mode():
        for name in FORWARD_NETS:
            _, tnet, inputs = _torch_net(models[name])
            tin = {k: torch.from_numpy(v) for k, v in inputs.items()}

            def reset(tnet: TorchNet = tnet, tin: dict = tin) -> None:
                tnet.blobs = dict(tin)  # no layer writes its input in place

            out[name] = _time_net(reset, tnet.forward, tnet.exec_layer,
                                  len(tnet.graph.layers), reps, layer_reps)
    return out


def child_check(models: dict[str, Path]) -> dict[str, Any]:
    """Engine and torch outputs on the same input and weights (before any timing)."""
    import torch
    from threadpoolctl import threadpool_limits

    out = {}
    with threadpool_limits(1, "blas"), torch.inference_mode():
        for name in FORWARD_NETS:
            net, tnet, inputs = _torch_net(models[name])
            tnet.blobs = {k: torch.from_numpy(v.copy()) for k, v in inputs.items()}
            ours = net.forward()
            theirs = {k: v.numpy() for k, v in tnet.forward().items()}
            ok, worst = True, 0.0
            for k, v in ours.items():
                if v.shape != theirs[k].shape:
                    ok = False
                    continue
                ok &= bool(np.allclose(v, theirs[k], rtol=1e-3))
                worst = max(worst, float(np.max(np.abs(v - theirs[k]))))
            out[name] = {"ok": ok, "max_abs_diff": worst}
    return out


def _aligned_empty(nbytes: int) -> np.ndarray:
    """A uint8 buffer starting on a 64-byte boundary. np.empty's large blocks start 16
    bytes into a page; reading a page-aligned file offset into that ran ~3x slower here
    (kernel copy alignment), which would make the raw rows an unfair ceiling."""
    raw = np.empty(nbytes + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start:start + nbytes]


def child_load(desc_path: Path, loader: str) -> dict[str, Any]:
    """Load all weights of one network in this fresh process; time and peak RSS."""
    import resource

    import psutil

    from engine.caffe import io
    from engine.network import Network

    net = Network(desc_path, batch=1)
    files = [net.desc.resolve(x.partial) for x in net.desc.layers if x.partial]
    sizes = [f.stat().st_size for f in files]
    if loader == "raw-reused":
        # Faulted in before timing: this row is the page-cache copy ceiling. Only this
        # loader allocates it: an extra 151 MB mapping slowed the others' first touch.
        reused = _aligned_empty(max(sizes))
        reused.fill(0)
    # Baseline = current RSS right before loading (after imports and the graph build);
    # ru_maxrss at the end is the peak, so the difference bounds the growth from above.
    base = psutil.Process().memory_info().rss
    kept: list[Any] = []
    t0 = time.perf_counter()
    if loader == "wire":
        nbytes = sum(net.load_layer(layer.index) for layer in net.layers)
    elif loader == "bulk":
        nbytes = net.load_all()
    elif loader == "protobuf":
        nbytes = 0
        for info in net.desc.layers:
            if info.partial is None:
                continue
            msg = io.read_caffemodel(net.desc.resolve(info.partial))
            for layer in list(msg.layer) + list(msg.layers):
                arrays = [io.blob_array(b) for b in layer.blobs]
                kept.append(arrays)
                nbytes += sum(x.nbytes for x in arrays)
            del msg
    elif loader in ("raw-fresh", "raw-reused"):
        # Machine ceilings for the same bytes: readinto with no parsing, into a fresh
        # buffer per file (pays page faults, as any loader must) or one pre-faulted buffer.
        nbytes = 0
        for f, size in zip(files, sizes):
            buf = _aligned_empty(size) if loader == "raw-fresh" else reused[:size]
            with open(f, "rb", buffering=0) as fh:
                view, got = memoryview(buf), 0
                while got < size:
                    got += fh.readinto(view[got:])
            if loader == "raw-fresh":
                kept.append(buf)
            nbytes += size
    elif loader == "mmap":
        # An alternative the engine does not use: user-space memcpy from a mapping of the
        # page cache into fresh aligned arrays (mapped pages count in RSS while mapped).
        import mmap

        from engine.caffe import wire

        nbytes = 0
        for f in files:
            (rec,) = wire.scan(f)
            with open(f, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                for blob in rec.blobs:
                    src = np.frombuffer(mm, "<f4", blob.nbytes // 4, blob.offset)
                    dst = np.empty(src.size, "<f4")
                    np.copyto(dst, src)
                    kept.append(dst)
                    nbytes += dst.nbytes
                    del src  # the mapping cannot close while a view of it is alive
    else:
        raise ValueError(loader)
    elapsed = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    return {"seconds": elapsed, "bytes": nbytes, "peak_growth": peak - base}


# ---------------------------------------------------------------------------------------
# Parent
# ---------------------------------------------------------------------------------------


def run_child(kind: str, **spec: Any) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", kind,
           "--spec", json.dumps(spec, default=str)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"child {kind} {spec} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def generate_and_split(root: Path) -> tuple[Path, list[tuple[str, float, float]]]:
    """Part 3, with the functions ``python -m engine models`` and ``split`` call."""
    from engine.caffe import generate, splitter, zoo

    models_dir, split_dir = root / "models", root / "split"
    models_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in ZOO:
        t0 = time.perf_counter()
        prototxt, caffemodel = generate.write_zoo_model(name, models_dir, 0)
        t1 = time.perf_counter()
        splitter.split_model(caffemodel, prototxt, split_dir, network=name,
                             fc_start=zoo.ZOO[name].fc_start)
        rows.append((name, t1 - t0, time.perf_counter() - t1))
    return split_dir, rows


def warm_page_cache(paths: list[Path]) -> None:
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while f.read(1 << 24):
                pass


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def part_forward(models: dict[str, Path], rounds: int, reps: int,
                 results: list[tuple[str, bool]], profile_all: bool) -> None:
    print(f"\n1. forward pass, batch 1: engine vs torch, same threads "
          f"(median of {rounds} processes x {reps} forwards; target <= {FORWARD_TARGET}x)")
    if importlib.util.find_spec("torch") is None:
        print(f"   {TORCH_HINT}")
        return
    check = run_child("check", models=models)
    for name, c in check.items():
        print(f"   check {name}: engine vs torch outputs allclose(rtol=1e-3) "
              f"{'ok' if c['ok'] else 'MISMATCH'} (max |diff| {c['max_abs_diff']:.2e})")
    if not all(c["ok"] for c in check.values()):
        raise SystemExit("torch and engine outputs differ: timings would not compare")
    layer_reps = max(3, reps // 3)
    runs: dict[tuple[str, int], list[dict]] = {}
    for r in range(rounds):
        for n in THREADS:
            # Alternate who goes first, so slow drift of the VM hits both alike.
            order = ["engine", "torch"] if r % 2 == 0 else ["torch", "engine"]
            for fw in order:
                res = run_child(f"{fw}_forward", models=models, threads=n, reps=reps,
                                layer_reps=layer_reps)
                runs.setdefault((fw, n), []).append(res)
    print(f"   {'model':<10} {'threads':>7} {'engine ms':>10} {'torch ms':>9} {'ratio':>6}  "
          f"result  (conv+fc only: engine / torch ms = ratio)")
    profiled = []
    for name in FORWARD_NETS:
        for n in THREADS:
            # Median over processes of each process's median forward time.
            e = statistics.median(statistics.median(x[name]["forward_ms"])
                                  for x in runs[("engine", n)])
            t = statistics.median(statistics.median(x[name]["forward_ms"])
                                  for x in runs[("torch", n)])
            ok = e / t <= FORWARD_TARGET
            results.append((f"forward {name} {n} thread(s)", ok))
            # Shown because torch's LRN and pooling are slow: the full-forward ratio alone
            # would hide how the engine's own conv/fc kernels compare.
            types = [typ for _, typ in runs[("engine", n)][0][name]["names"]]
            heavy = [i for i, typ in enumerate(types) if typ in ("Convolution", "InnerProduct")]
            ec = sum(layer_medians(runs, "engine", n, name)[i] for i in heavy)
            tc = sum(layer_medians(runs, "torch", n, name)[i] for i in heavy)
            print(f"   {name:<10} {n:>7} {e:>10.2f} {t:>9.2f} {e / t:>6.2f}  {verdict(ok):<6}  "
                  f"({ec:.2f} / {tc:.2f} = {ec / tc:.2f})")
            if not ok or profile_all:
                profiled.append((name, n))
    for name, n in profiled:
        print_profile(name, n, runs)


def layer_medians(runs: dict[tuple[str, int], list[dict]], fw: str, n: int,
                  name: str) -> list[float]:
    """Per-layer ms: median over processes of each process's per-layer median."""
    per_proc = [x[name]["layers_ms"] for x in runs[(fw, n)]]
    return [statistics.median(col) for col in zip(*per_proc)]


def print_profile(name: str, n: int, runs: dict[tuple[str, int], list[dict]]) -> None:
    """Where the engine loses: per-layer medians by type and the layers with the largest
    gap to torch (the gap, not the share, is what would have to shrink)."""
    names = runs[("engine", n)][0][name]["names"]
    e, t = layer_medians(runs, "engine", n, name), layer_medians(runs, "torch", n, name)
    print(f"\n   profile {name}, {n} thread(s): per-layer medians, ms (sum engine "
          f"{sum(e):.2f}, torch {sum(t):.2f})")
    by_type: dict[str, list[float]] = {}
    for (_, typ), a, b in zip(names, e, t):
        acc = by_type.setdefault(typ, [0.0, 0.0, 0])
        acc[0] += a
        acc[1] += b
        acc[2] += 1
    print(f"   {'layer type':<14} {'n':>4} {'engine':>8} {'torch':>8} {'gap':>7}")
    for typ, (a, b, k) in sorted(by_type.items(), key=lambda kv: kv[1][1] - kv[1][0]):
        print(f"   {typ:<14} {k:>4} {a:>8.2f} {b:>8.2f} {a - b:>+7.2f}")
    top = sorted(range(len(names)), key=lambda i: t[i] - e[i])[:8]
    print(f"   {'largest gaps':<26} {'engine':>8} {'torch':>8} {'ratio':>6}")
    for i in top:
        print(f"   {names[i][0][:26]:<26} {e[i]:>8.2f} {t[i]:>8.2f} {e[i] / t[i]:>6.2f}")


def part_load(models: dict[str, Path], repeats: int, results: list[tuple[str, bool]]) -> None:
    from engine.caffe.splitter import Description

    desc = Description.load(models["AlexNet"])
    files = [desc.resolve(x.partial) for x in desc.layers if x.partial]
    warm_page_cache(files + [desc.resolve(desc.caffemodel)])
    weight = desc.param_bytes
    print(f"\n2. loading AlexNet from a warm page cache: {weight / 1e6:.1f} MB of weights in "
          f"{len(files)} partials (median of {repeats} fresh processes; target >= "
          f"{LOAD_GBPS_TARGET} GB/s and peak RSS <= {LOAD_RSS_TARGET}x weights)")
    loaders = {"wire": "wire: partials, Network.load_layer",
               "protobuf": "protobuf reference: partials, read_caffemodel",
               "bulk": "wire: whole caffemodel, Network.load_all",
               "raw-fresh": "ceiling: readinto partials, fresh buffers",
               "raw-reused": "ceiling: readinto partials, pre-faulted buffer",
               "mmap": "alternative: mmap + memcpy into fresh arrays"}
    os.sync()  # part 3 wrote ~1 GB: keep its writeback out of these timings
    samples: dict[str, list[dict]] = {k: [] for k in loaders}
    names = list(loaders)
    for r in range(repeats):
        # Interleaved and rotated: a child's first-touch speed depends on what the previous
        # child left behind (freed huge pages, fragmentation), so no loader always follows
        # the same one.
        for loader in names[r % len(names):] + names[:r % len(names)]:
            samples[loader].append(run_child("load", desc=models["AlexNet"], loader=loader))
    print(f"   {'loader':<46} {'ms':>6} {'min-max ms':>11} {'GB/s':>5} {'peak MiB':>8} "
          f"{'x wts':>5}  result")
    for loader, label in loaders.items():
        s = samples[loader]
        secs = statistics.median(x["seconds"] for x in s)
        lo, hi = min(x["seconds"] for x in s) * 1e3, max(x["seconds"] for x in s) * 1e3
        nbytes = s[0]["bytes"]
        growth = statistics.median(x["peak_growth"] for x in s)
        gbps, ratio = nbytes / secs / 1e9, growth / weight
        line = (f"   {label:<46} {secs * 1e3:>6.1f} {f'{lo:.0f}-{hi:.0f}':>11} {gbps:>5.2f} "
                f"{growth / 2**20:>8.1f} {ratio:>5.2f}")
        if loader == "wire":
            ok_speed, ok_rss = gbps >= LOAD_GBPS_TARGET, ratio <= LOAD_RSS_TARGET
            results.append(("load AlexNet partials: speed", ok_speed))
            results.append(("load AlexNet partials: peak RSS", ok_rss))
            line += f"  speed {verdict(ok_speed)}, RSS {verdict(ok_rss)}"
        print(line)


def part_generate(rows: list[tuple[str, float, float]], results: list[tuple[str, bool]]) -> None:
    print(f"\n3. generating and splitting all five zoo models (target < {GENERATE_TARGET_S:.0f} s)")
    print(f"   {'model':<10} {'generate s':>10} {'split s':>8}")
    for name, g, s in rows:
        print(f"   {name:<10} {g:>10.2f} {s:>8.2f}")
    total = sum(g + s for _, g, s in rows)
    ok = total < GENERATE_TARGET_S
    results.append(("generate + split", ok))
    print(f"   {'total':<10} {total:>19.2f}  {verdict(ok)}")


def header() -> None:
    from threadpoolctl import threadpool_info

    blas = ", ".join(f"{i.get('internal_api')} {i.get('version')} {i.get('architecture')} "
                     f"({i.get('num_threads')} threads)"
                     for i in threadpool_info() if i.get("user_api") == "blas")
    torch = "not installed"
    if importlib.util.find_spec("torch") is not None:
        from importlib.metadata import version
        torch = version("torch")
    env = {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OMP_NUM_THREADS",
                                      "OPENBLAS_NUM_THREADS") if k in os.environ}
    print(f"edgeprof core benchmarks: Python {platform.python_version()}, numpy "
          f"{np.__version__}, torch {torch}, {os.cpu_count()} CPUs")
    print(f"BLAS: {blas or 'none found'}; env overrides: {env or 'none'}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", help="split folder with *.description.json to reuse "
                    "(default: the one generated by part 3 in a temp folder)")
    ap.add_argument("--rounds", type=int, default=4, help="processes per framework and "
                    "thread count (default 4)")
    ap.add_argument("--reps", type=int, default=15, help="timed forwards per process")
    ap.add_argument("--load-repeats", type=int, default=9, help="processes per loader")
    ap.add_argument("--parts", nargs="+", choices=["forward", "load", "generate"],
                    default=["forward", "load", "generate"])
    ap.add_argument("--profile", action="store_true", help="per-layer profile of every "
                    "forward row (default: only of rows that miss the target)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.child:
        spec = json.loads(args.spec)
        if "models" in spec:
            spec["models"] = {k: Path(v) for k, v in spec["models"].items()}
        funcs = {"engine_forward": child_engine_forward, "torch_forward": child_torch_forward,
                 "check": child_check, "load": child_load}
        if args.child == "load":
            spec["desc_path"] = Path(spec.pop("desc"))
        print(json.dumps(funcs[args.child](**spec)))
        return 0

    from engine.caffe.splitter import description_index

    t_start = time.perf_counter()
    header()
    results: list[tuple[str, bool]] = []
    tmp = Path(tempfile.mkdtemp(prefix="bench_core."))
    try:
        split_dir = Path(args.models) if args.models else None
        rows = None
        if "generate" in args.parts or split_dir is None:
            # Part 3 runs first: it also makes the model files the other parts use.
            generated, rows = generate_and_split(tmp)
            split_dir = split_dir or generated
        models = {k: v.resolve() for k, v in description_index(split_dir).items()}
        missing = [n for n in FORWARD_NETS if n not in models]
        if missing:
            raise SystemExit(f"{split_dir} has no split model for {', '.join(missing)}")
        if "forward" in args.parts:
            part_forward(models, args.rounds, args.reps, results, args.profile)
        if "load" in args.parts:
            part_load(models, args.load_repeats, results)
        if "generate" in args.parts and rows is not None:
            part_generate(rows, results)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    passed = sum(ok for _, ok in results)
    print(f"\nsummary: {passed}/{len(results)} targets passed"
          + "".join(f"\n   FAIL {what}" for what, ok in results if not ok)
          + f"\n(total {time.perf_counter() - t_start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The slowdown model's speed (issue: slowdown model and policy advisor).

``python -m engine advise`` on a 10-network pipeline of the zoo (two of each network),
ranking every policy of the model under a 512M limit: the whole command's wall time, as
a user waits for it (interpreter start, imports, the descriptions and prototxts read,
each policy simulated unconstrained and under the limit), median and range over
``--repeats`` runs. Target: under 1 s. Also timed: one policy's simulation alone, in
process.

It needs a fitted model and the split networks: by default those of the default
workflow (``snakemake --cores 1`` writes results/model/model.json and results/split).

Usage: python benchmarks/bench_model.py [--model results/model/model.json]
       [--split results/split] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from engine.caffe.splitter import Description, description_index
from engine.model.params import Model
from engine.model.predict import Networks, predict
from engine.schedule.pipelines import Arrival, Pipeline, save_pipeline

REPO = Path(__file__).resolve().parents[1]
TARGET_S = 1.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(REPO / "results/model/model.json"))
    ap.add_argument("--split", default=str(REPO / "results/split"))
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    if not Path(args.model).is_file():
        raise SystemExit(f"no model at {args.model}: run `snakemake --cores 1` first, or "
                         f"give --model and --split")
    index = description_index(args.models)
    names = sorted(index)[:5]
    networks = [n for n in names for _ in range(2)]
    pipe = Pipeline("bench10", [Arrival(0.0, networks)])
    model = Model.read(args.model)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench10.json"
        save_pipeline(pipe, path)
        cmd = [sys.executable, "-m", "engine", "advise", "--pipeline", str(path), "--limit",
               "512M", "--model", args.model, "--split", args.models]
        walls = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            r = subprocess.run(cmd, capture_output=True, text=True)
            walls.append(time.perf_counter() - t0)
            if r.returncode != 0:
                raise SystemExit(r.stderr)
    descs = {n: Description.load(index[n]) for n in names}
    mode = model.mode(None)
    nets = Networks(descs, mode.batch)
    predict(mode, pipe, nets, "linear")  # graphs parsed once
    sims = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        predict(mode, pipe, nets, "partial:2", 512 * 2**20)
        sims.append(time.perf_counter() - t0)
    med = statistics.median(walls)
    print(f"advise, {len(networks)} networks ({', '.join(names)} x 2), "
          f"{len(model.policies)} policies under 512M: median {med:.3f} s, range "
          f"{min(walls):.3f}..{max(walls):.3f} s over {args.repeats} runs "
          f"{'PASS' if med < TARGET_S else 'FAIL'} (target < {TARGET_S:g} s)")
    print(f"one policy simulated under the limit, in process: median "
          f"{statistics.median(sims) * 1e3:.1f} ms")
    return 0 if med < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())

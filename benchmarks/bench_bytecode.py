"""What the engine's bytecode cache saves a run (engine.bytecode, issue 39): the same run
with ``PYTHONDONTWRITEBYTECODE=1`` (as on this project's machines), compiled from source
at every import or read from the bytecode the workflow writes, side by side.

Each round runs the cell once each way in a private copy of the engine (its ``__pycache__``
folders removed for one way, written by ``engine.bytecode.compile_package`` for the
other), alternating which goes first. Printed per place (native, and uml with --limit):
the median [range] of the command's wall, the run's own wall (its child's start to end)
and makespan, and the child's peak RSS, and the ratio cached/compiled of each median with
its bootstrap 95 % CI (``*`` where it excludes 1).

Usage: python benchmarks/bench_bytecode.py [--rounds 8] [--places native uml]
           [--limit 48M] [--networks AgeNet GenderNet]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import alternate, print_ratios, zoo_split  # noqa: E402

from engine.analysis.tidy import tidy_run  # noqa: E402
from engine.bytecode import compile_package  # noqa: E402
from engine.schedule.pipelines import Arrival, Pipeline, save_pipeline  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
METRICS = {"command_s": "command wall (s)", "wall_s": "run's wall (s)",
           "makespan_s": "makespan (s)", "hwm_mib": "child peak RSS (MiB)"}


def one_run(code: Path, split: Path, pipeline: Path, place: str, limit: str,
            out: Path) -> dict:
    """One ``python -m engine run`` of ``code``'s engine; its wall and record."""
    limits = ["--backend", "uml", "--limit", limit] if place == "uml" else []
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(code)}
    env.pop("PYTHONPYCACHEPREFIX", None)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "engine", "run", "-q", "--pipeline", str(pipeline),
                    "--policy", "linear", "--split", str(split), "--out", str(out),
                    "--batch", "1", *limits], cwd=code, env=env, check=True)
    command_s = time.perf_counter() - t0
    meta = json.loads((out / "meta.json").read_text())
    if meta["termination"] != "ok":
        raise SystemExit(f"{out}: {meta['termination']} ({meta['termination_detail']})")
    row = tidy_run(out)["runs"].iloc[0]
    return {"command_s": command_s, "wall_s": meta["wall_s"],
            "makespan_s": float(row["makespan_s"]), "hwm_mib": meta["hwm_rss_bytes"] / 2**20}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--places", nargs="+", choices=["native", "uml"], default=["native", "uml"])
    ap.add_argument("--limit", default="48M")
    ap.add_argument("--networks", nargs="+", default=["AgeNet", "GenderNet"])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        split = zoo_split(args.networks, root)
        pipeline = root / "p.json"
        save_pipeline(Pipeline("p", [Arrival(0.0, args.networks)]), pipeline)
        code = root / "code"
        shutil.copytree(REPO / "engine", code / "engine",
                        ignore=shutil.ignore_patterns("__pycache__"))

        def compiled(out: Path, place: str) -> dict:
            for cache in (code / "engine").rglob("__pycache__"):
                shutil.rmtree(cache)
            return one_run(code, split, pipeline, place, args.limit, out)

        def cached(out: Path, place: str) -> dict:
            compile_package(code / "engine")
            return one_run(code, split, pipeline, place, args.limit, out)

        rows, loads = alternate(args.rounds, args.places, {
            "compiled": lambda r, place: [compiled(root / f"r{r}-{place}-c", place)],
            "cached": lambda r, place: [cached(root / f"r{r}-{place}-k", place)]})
    print_ratios(f"{'+'.join(args.networks)} under linear, {args.rounds} rounds a way (uml "
                 f"at {args.limit})", rows, loads, args.places, METRICS, "compiled", "cached")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The hand-written numerics against their scipy references (issue 37, point 6): time
per call, median and range over rounds, on the shapes the engine calls them with.

- fit_linear (``scipy.optimize.nnls`` inside) whole, and its solver against the
  backward elimination it replaced (a copy below, kept only to time it) on the same
  scaled matrix: a layer type's EXEC fit (20 medians, 3 features, intercept) and the
  swap cost's (88 task windows, 3 counters, no intercept).
- the swap-cost crossover (``_root_log``: brentq in log cost) against 8 bisection steps:
  calls of the function (each a simulation of the bin's pipelines) and the root's error.
- bootstrap_ci against ``scipy.stats.bootstrap`` (percentile, 2000 resamples, same
  seed: the same numbers) on cell-sized inputs, per 1000 cells.
- kendall_tau against ``scipy.stats.kendalltau`` (tau-b) on 10-200 pipelines.
- the import of scipy.optimize and scipy.stats in a fresh interpreter.

Usage: python benchmarks/bench_numerics.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as sps
from scipy.optimize import nnls

from engine.analysis.stats import N_BOOT, bootstrap_ci, kendall_tau
from engine.model.fit import fit_linear
from engine.model.reconstruct import _root_log

REPO = Path(__file__).resolve().parents[1]


def _elimination(a: np.ndarray, y: np.ndarray, intercept: bool) -> np.ndarray:
    """The replaced solver on fit_linear's scaled matrix (first column the intercept's):
    least squares, the most negative coefficient dropped and the rest refitted."""
    cols, with_b = list(range(1 if intercept else 0, a.shape[1])), intercept
    while cols:
        sol, *_ = np.linalg.lstsq(a[:, ([0] if with_b else []) + cols], y, rcond=None)
        coefs = sol[1:] if with_b else sol
        if (coefs < 0).any():
            cols.pop(int(np.argmin(coefs)))
        elif with_b and sol[0] < 0:
            with_b = False
        else:
            return sol
    return np.array([np.median(y)])


def _bisect(f: Callable[[float], float], lo: float, hi: float, steps: int = 8) -> float:
    """The replaced crossover: 8 bisection steps in log cost."""
    flo = f(lo)
    for _ in range(steps):
        mid = math.sqrt(lo * hi)
        fm = f(mid)
        if (fm > 0) == (flo > 0):
            lo, flo = mid, fm
        else:
            hi = mid
    return math.sqrt(lo * hi)


def per_call(fn: Callable[[], object], calls: int, rounds: int) -> list[float]:
    """Seconds per call of ``fn``, one value per round of ``calls`` calls."""
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t0) / calls)
    return out


def paired(ours: Callable[[], object], theirs: Callable[[], object], calls: int,
           rounds: int) -> tuple[list[float], list[float]]:
    """``per_call`` of both, side by side in each round, in rotated order (a shared
    machine's load then falls on both alike)."""
    a, b = [], []
    for i in range(rounds):
        order = [(ours, a), (theirs, b)]
        for fn, out in order if i % 2 == 0 else order[::-1]:
            out += per_call(fn, calls, 1)
    return a, b


def row(name: str, secs: list[float], unit: float = 1e6, label: str = "us",
        ref: list[float] | None = None) -> None:
    ratio = (f" | {statistics.median(s / r for s, r in zip(secs, ref)):.2f}"
             if ref else " |")
    print(f"| {name} | {statistics.median(secs) * unit:.1f} | "
          f"{min(secs) * unit:.1f} - {max(secs) * unit:.1f} {label}{ratio} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    r = args.rounds
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()
    load = " ".join(f"{v:.1f}" for v in os.getloadavg())
    print(f"bench_numerics at commit {commit}, {r} rounds, load {load}: median | range (per "
          f"call) | median ratio to the line above, side by side in each round\n")
    print("| what | median | range | ratio |\n|---|---|---|---|")
    rng = np.random.default_rng(0)
    for n, k, icpt in [(20, 3, True), (88, 3, False)]:
        x = pd.DataFrame(rng.uniform(0, 1e8, (n, k)), columns=["a", "b", "c"][:k])
        y = x.to_numpy() @ rng.normal(1e-10, 1e-10, k) + rng.normal(1e-3, 1e-4, n)
        shape = f"{n} x {k}{' + intercept' if icpt else ''}"
        row(f"fit_linear, whole (nnls), {shape}",
            per_call(lambda x=x, y=y, i=icpt: fit_linear(x, y, i), 200, r))
        a = x.to_numpy()
        a = np.column_stack([np.ones(n), a]) if icpt else a
        a = a / np.abs(a).max(axis=0)
        ours, theirs = paired(lambda a=a, y=y: nnls(a, y),
                              lambda a=a, y=y, i=icpt: _elimination(a, y, i), 500, r)
        row(f"solver: scipy.optimize.nnls, {shape}", ours)
        row(f"solver: backward elimination (replaced), {shape}", theirs, ref=ours)

    calls: list[float] = []

    def speedup(c: float) -> float:  # crosses 1 at 5e-4 (tests/unit/test_numerics.py)
        calls.append(c)
        return (2 + 3000 * c) / (1 + 5000 * c) - 1

    lo, hi = 10 ** -3.5, 10 ** -3.25
    for name, root in [("crossover, brentq in log cost (_root_log)", _root_log),
                       ("crossover, 8 bisection steps (replaced)", _bisect)]:
        calls.clear()
        err = abs(math.log(root(speedup, lo, hi) / 5e-4))
        new = len(set(calls) - {lo, hi})  # costs off the grid: a simulation each
        print(f"| {name}: calls of f (new costs), error in log cost | {len(calls)} ({new}) "
              f"| {err:.1e} | |")

    for n in (6, 12, 20):
        v = rng.lognormal(0, 0.3, n)
        ours, theirs = paired(lambda v=v: bootstrap_ci(v, seed=1), lambda v=v: sps.bootstrap(
            (v,), np.median, n_resamples=N_BOOT, method="percentile", vectorized=True,
            rng=np.random.default_rng(1)), 50, r)
        row(f"bootstrap_ci, {n} values, 1000 cells", ours, 1e3, "s")
        row(f"scipy.stats.bootstrap percentile, {n} values, 1000 cells", theirs, 1e3, "s",
            ours)
    for n in (10, 50, 200):
        a, b = rng.integers(0, n // 2, n), rng.integers(0, n // 2, n)  # with ties
        ours, theirs = paired(lambda a=a, b=b: kendall_tau(a, b),
                              lambda a=a, b=b: sps.kendalltau(a, b), 200, r)
        row(f"kendall_tau, {n} pairs", ours)
        row(f"scipy.stats.kendalltau, {n} pairs", theirs, ref=ours)
    for mod in ("scipy.optimize", "scipy.stats"):
        code = (f"import time, numpy, pandas; t = time.perf_counter(); import {mod}; "
                f"print(time.perf_counter() - t)")
        secs = [float(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                     text=True, check=True).stdout) for _ in range(r)]
        row(f"import {mod} (after numpy, pandas)", secs, 1e3, "ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

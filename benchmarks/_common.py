"""What the benchmark scripts share: the zoo networks generated and split once, and the
ratio of two medians with its bootstrap CI."""

from __future__ import annotations

import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from engine.caffe import generate, splitter, zoo


def zoo_split(names: list[str], root: Path, seed: int = 0) -> Path:
    """Generate and split ``names`` under ``root``; returns the split folder."""
    out = root / "split"
    for name in names:
        prototxt, caffemodel = generate.write_zoo_model(name, root / "models", seed)
        splitter.split_model(caffemodel, prototxt, out, network=name,
                             fc_start=zoo.ZOO[name].fc_start)
    return out


def ratio_ci(a: list[float], b: list[float], seed: int = 0) -> tuple[float, float, float]:
    """median(a) / median(b) with a percentile bootstrap 95 % CI (each side resampled)."""
    rng = np.random.default_rng(seed)
    a_, b_ = np.asarray(a), np.asarray(b)
    boots = [np.median(rng.choice(a_, a_.size)) / np.median(rng.choice(b_, b_.size))
             for _ in range(2000)]
    return (float(np.median(a_) / np.median(b_)), *np.percentile(boots, [2.5, 97.5]))


Rows = dict[tuple[str, str], list[dict]]


def alternate(rounds: int, groups: list[str], ways: dict[str, Callable[[int, str], list[dict]]]
              ) -> tuple[Rows, list[float]]:
    """Each round, for each group, each way's runs (``ways[way](round, group)``), the ways
    in turn going first; the runs' rows by (group, way), and the 1-minute load at the
    start and after each round (printed as it goes)."""
    rows: Rows = {}
    loads = [os.getloadavg()[0]]
    for r in range(rounds):
        for group in groups:
            order = list(ways.items())
            for way, fn in order if r % 2 == 0 else order[::-1]:
                rows.setdefault((group, way), []).extend(fn(r, group))
        loads.append(os.getloadavg()[0])
        print(f"round {r + 1} of {rounds} done, load {loads[-1]:.2f}", file=sys.stderr)
    return rows, loads


def print_ratios(what: str, rows: Rows, loads: list[float], groups: list[str],
                 metrics: dict[str, str], base: str, other: str) -> None:
    """``what`` and the load's range, then per group and metric: the median [range] of
    ``base``'s runs and ``other``'s, and other/base with its bootstrap 95 % CI (``*``
    where it excludes 1)."""
    print(f"{what}; 1-minute load {min(loads):.2f} to {max(loads):.2f}")
    for group in groups:
        for key, label in metrics.items():
            b = [x[key] for x in rows[(group, base)]]
            o = [x[key] for x in rows[(group, other)]]
            if not any(b) and not any(o):  # e.g. an unconstrained run's swap
                print(f"  {group:8s} {label:22s} (none either way)")
                continue
            mid, lo, hi = ratio_ci(o, b)
            print(f"  {group:8s} {label:22s} {base} {statistics.median(b):8.3f} "
                  f"[{min(b):.3f}, {max(b):.3f}]  {other} {statistics.median(o):8.3f} "
                  f"[{min(o):.3f}, {max(o):.3f}]  {other}/{base} {mid:.3f} "
                  f"[{lo:.3f}, {hi:.3f}]{'' if lo <= 1 <= hi else '  *'}")

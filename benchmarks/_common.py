"""What the benchmark scripts share: the zoo networks generated and split once, and the
ratio of two medians with its bootstrap CI."""

from __future__ import annotations

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

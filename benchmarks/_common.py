"""What the benchmark scripts share: the zoo networks generated and split once."""

from __future__ import annotations

from pathlib import Path

from engine.caffe import generate, splitter, zoo


def zoo_split(names: list[str], root: Path, seed: int = 0) -> Path:
    """Generate and split ``names`` under ``root``; returns the split folder."""
    out = root / "split"
    for name in names:
        prototxt, caffemodel = generate.write_zoo_model(name, root / "models", seed)
        splitter.split_model(caffemodel, prototxt, out, network=name,
                             fc_start=zoo.ZOO[name].fc_start)
    return out

"""Shared fixtures: the five zoo networks generated and split once per test session."""

from __future__ import annotations

import pytest

from engine.caffe import generate, splitter, zoo

SEED = 7


@pytest.fixture(scope="session")
def zoo_split(tmp_path_factory) -> dict[str, splitter.Description]:
    """Every zoo network generated (seed 7) and split; name -> loaded description."""
    root = tmp_path_factory.mktemp("zoo")
    out = {}
    for name, entry in zoo.ZOO.items():
        prototxt, caffemodel = generate.write_zoo_model(name, root / "models", SEED)
        path = splitter.split_model(caffemodel, prototxt, root / "split", network=name,
                                    fc_start=entry.fc_start)
        out[name] = splitter.Description.load(path)
    return out

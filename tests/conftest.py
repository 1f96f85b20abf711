"""Shared fixtures: the zoo networks generated and split once per test session, and the
sandboxes' tiny pipeline; the engine's bytecode written first."""

from __future__ import annotations

import pytest

from engine.bytecode import compile_package
from engine.caffe import generate, splitter, zoo
from engine.schedule.pipelines import Arrival, Pipeline, save_pipeline

SEED = 7


def pytest_sessionstart(session: pytest.Session) -> None:
    # every `python -m engine` a test starts reads the engine's bytecode (engine.bytecode)
    compile_package()


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


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> dict:
    """AgeNet + GenderNet, split, and a pipeline of both (the smallest zoo networks): the
    sandboxes' runs (tests/integration/vm/test_vm.py, tests/integration/uml/test_uml.py)."""
    root = tmp_path_factory.mktemp("tiny")
    for name in ("AgeNet", "GenderNet"):
        prototxt, model = generate.write_zoo_model(name, root / "models", 7)
        splitter.split_model(model, prototxt, root / "split", network=name,
                             fc_start=zoo.ZOO[name].fc_start)
    save_pipeline(Pipeline("tiny", [Arrival(0.0, ["AgeNet", "GenderNet"])]), root / "p.json")
    return {"models": root / "split", "pipeline": root / "p.json"}

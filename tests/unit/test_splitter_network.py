"""Splitting into EdgeCaffe-named partials, description files, and layer-wise execution."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from google.protobuf import text_format

from engine.caffe import io, schema, splitter, wire
from engine.errors import ModelError
from engine.network import Network, run_standalone
from tests.unit.test_zoo_graph import PARAMS


def test_partial_names_follow_edgecaffe():
    assert splitter.partial_name("age_net", 1) == "age_net01.partial.caffemodel"
    assert splitter.partial_name("age_net", 12) == "age_net12.partial.caffemodel"
    assert splitter.partial_name("GoogleNet_SOS", 151) == "GoogleNet_SOS151.partial.caffemodel"


def test_every_partial_is_a_one_layer_caffemodel_copying_its_source_layer(zoo_split):
    for desc in zoo_split.values():
        model = desc.resolve(desc.caffemodel)
        source = io.read_caffemodel(model)
        source_layers = source.layers if desc.format == "V1" else source.layer
        folder = desc.resolve(f"{desc.stem}_partials")
        files = sorted(os.listdir(folder))
        assert len(files) == len(source_layers)
        for i, layer in enumerate(source_layers):
            part = io.read_caffemodel(folder / splitter.partial_name(desc.stem, i))
            assert part.name == f"{desc.stem}{i:02d}"
            layers = part.layers if desc.format == "V1" else part.layer
            assert len(layers) == 1 and layers[0] == layer


def test_descriptions_record_sizes_split_and_shapes(zoo_split):
    splits = {"AgeNet": (12, 8), "GenderNet": (12, 8), "FaceNet": (16, 8), "AlexNet": (16, 8),
              "GoogLeNet": (150, 2), "SoS-AlexNet": (16, 6), "SoS-GoogleNet": (10, 142)}
    for name, desc in zoo_split.items():
        assert desc.param_count == PARAMS[name]
        assert sum(layer.param_bytes for layer in desc.layers) == 4 * PARAMS[name]
        assert (desc.num_conv_layers, desc.num_fc_layers) == splits[name]
        assert desc.unmatched_partials == []
        for info in desc.layers:
            if info.partial is None:
                continue
            path = desc.resolve(info.partial)
            assert info.file_bytes == os.path.getsize(path)
            # the payload plus under 1 KiB of layer and blob headers
            assert info.param_bytes <= info.file_bytes < info.param_bytes + 1024
            assert info.kind == ("other" if info.param_count == 0 else
                                 "fc" if info.part == "fc" or info.type == "InnerProduct"
                                 else "conv")
    age = zoo_split["AgeNet"]
    assert age.format == "V1" and age.layers[0].partial is None  # legacy input, no partial
    assert age.layers[1].partial.endswith("age_net00.partial.caffemodel")
    assert age.layers[12].name == "fc6" and age.layers[12].part == "fc"
    face = zoo_split["FaceNet"]
    assert face.layers[16].name == "fc6-conv" and face.layers[16].kind == "fc"
    last = zoo_split["GoogLeNet"].layers[151]
    assert last.partial.endswith("bvlc_googlenet151.partial.caffemodel")
    assert age.input_shape == [1, 3, 227, 227]


def test_the_paper_models_are_edgecaffes_sos_variants(zoo_split):
    """SoS-AlexNet and SoS-GoogleNet as EdgeCaffe's job lists and the paper's Table 1 use
    them (their published deploy prototxts)."""
    sos = zoo_split["SoS-AlexNet"]
    assert sos.format == "V1" and sos.input_shape == [1, 3, 227, 227]
    assert [x.name for x in sos.layers[14:]] == ["relu5", "pool5", "fc6", "relu6", "fc7",
                                                 "relu7", "fc8_sbt", "prob"]  # no dropout
    assert [x.name for x in sos.layers[3:5]] == ["pool1", "norm1"]  # CaffeNet order
    assert sos.layers[20].output_shapes == [[1, 5]]
    goog = zoo_split["SoS-GoogleNet"]
    assert goog.format == "V2" and goog.input_shape == [10, 3, 224, 224]
    assert goog.layers[150].name == "loss3/classifier-sos"
    assert goog.layers[150].output_shapes == [[10, 5]]
    assert goog.layers[10].name == "pool2/3x3_s2" and goog.layers[10].part == "fc"
    # the generated files, byte for byte (seeded weights, the writer's exact encoding) ...
    assert sos.caffemodel_bytes == 227_555_785 and goog.caffemodel_bytes == 23_932_029
    # ... and the partials' total as EdgeCaffe's catalogue gives it: 227.6 MB and 23.9 MB
    for desc, megabytes in ((sos, 227.6), (goog, 23.9)):
        assert round(sum(x.file_bytes for x in desc.layers) / 1e6, 1) == megabytes


@pytest.mark.parametrize("name", ["AgeNet", "GenderNet", "FaceNet", "AlexNet", "GoogLeNet",
                                  "SoS-AlexNet", "SoS-GoogleNet"])
def test_layerwise_and_bulk_forward_are_bit_identical_and_sane(zoo_split, name):
    desc = zoo_split[name]
    layerwise = run_standalone(desc, seed=3)
    bulk = run_standalone(desc, seed=3, bulk=True)
    prob = layerwise["prob"]
    assert np.array_equal(prob, bulk["prob"])
    assert np.isfinite(prob).all()
    flat = prob.reshape(prob.shape[0], -1) if name != "FaceNet" else prob.sum(axis=1)
    np.testing.assert_allclose(prob.sum(axis=1), 1.0, rtol=1e-5)
    assert flat.shape[0] == desc.input_shape[0]
    assert prob[0].max() < 0.999  # random weights, but not a saturated softmax
    other = run_standalone(desc, seed=4)["prob"]
    assert not np.array_equal(prob, other)  # the input image matters


def test_exec_frees_weights_and_dead_blobs(zoo_split):
    net = Network(zoo_split["AlexNet"], batch=1)
    net.set_input(0)
    net.load_layer(1)  # conv1
    assert net.weights[1][0].shape == (96, 3, 11, 11)
    net.exec_layer(0)
    net.exec_layer(1)
    assert 1 not in net.weights
    net.exec_layer(2)  # relu1 in place
    net.exec_layer(3)  # norm1 reads conv1 for the last time
    assert "conv1" not in net.blobs and "data" not in net.blobs
    assert set(net.blobs) == {"norm1"}


def test_runtime_errors_name_the_problem(zoo_split, tmp_path):
    net = Network(zoo_split["AgeNet"])
    net.set_input(0)
    net.exec_layer(0)
    with pytest.raises(ModelError, match="executed before LOAD"):
        net.exec_layer(1)
    net = Network(zoo_split["AgeNet"])
    with pytest.raises(ModelError, match="not set"):
        net.exec_layer(0)
    # a missing partial file
    desc = splitter.Description.load(zoo_split["AgeNet"].path)
    desc.layers[1].partial = "age_net_partials/nope.partial.caffemodel"
    with pytest.raises(ModelError, match="nope.partial.caffemodel of layer 1 'conv1' is missing"):
        Network(desc).load_layer(1)


# A "real" user model: V1 caffemodel saved from a training net (data and loss layers,
# blobs_lr, legacy dims) with a V1 deploy prototxt, as published Caffe models are.
USER_DEPLOY = """
name: "UserNet"
input: "data"
input_dim: 2 input_dim: 3 input_dim: 20 input_dim: 20
layers { name: "conv1" type: CONVOLUTION bottom: "data" top: "conv1"
         convolution_param { num_output: 6 kernel_size: 5 stride: 2 } }
layers { name: "relu1" type: RELU bottom: "conv1" top: "conv1" }
layers { name: "pool1" type: POOLING bottom: "conv1" top: "pool1"
         pooling_param { pool: AVE kernel_size: 3 stride: 2 } }
layers { name: "fc" type: INNER_PRODUCT bottom: "pool1" top: "fc"
         inner_product_param { num_output: 4 } }
layers { name: "prob" type: SOFTMAX bottom: "fc" top: "prob" }
"""
USER_TRAIN_EXTRA = """
layers { name: "data" type: DATA top: "data" top: "label" }
layers { name: "loss" type: SOFTMAX_LOSS bottom: "fc" bottom: "label" top: "loss" }
"""


def _user_model(folder, stem="usernet", fc_in=96):
    deploy = folder / f"{stem}.prototxt"
    deploy.write_text(USER_DEPLOY)
    train = text_format.Parse(USER_DEPLOY + USER_TRAIN_EXTRA, schema.NetParameter())
    del train.input[:], train.input_dim[:]
    rng = np.random.default_rng(0)
    shapes = {"conv1": [(6, 3, 5, 5), (6,)], "fc": [(4, fc_in), (4,)]}

    def blobs_for(i, layer):
        if layer.name in shapes:
            layer.blobs_lr.extend([1, 2])
        return [rng.standard_normal(s, dtype=np.float32) for s in shapes.get(layer.name, [])]

    model = folder / f"{stem}.caffemodel"
    io.write_caffemodel(model, train, blobs_for)
    return model, deploy


def test_user_v1_model_with_training_layers_goes_through_the_same_path(tmp_path):
    model, deploy = _user_model(tmp_path)
    path = splitter.split_model(model, deploy, tmp_path / "split")
    desc = splitter.Description.load(path)
    assert desc.format == "V1" and desc.network == "UserNet"
    names = [r.name for r in wire.scan(model)]
    assert names[-2:] == ["data", "loss"]
    assert desc.unmatched_partials == ["usernet_partials/usernet05.partial.caffemodel",
                                       "usernet_partials/usernet06.partial.caffemodel"]
    assert desc.layers[4].name == "fc"
    assert desc.layers[4].partial.endswith("usernet03.partial.caffemodel")
    out = run_standalone(desc, seed=1)["prob"]
    assert out.shape == (2, 4)
    assert np.array_equal(out, run_standalone(desc, seed=1, bulk=True)["prob"])
    # the forward pass equals ops applied by hand to the generic-parse weights
    from engine import ops
    from engine.network import input_blob
    ref = io.read_caffemodel(model)
    w = {layer.name: [io.blob_array(b) for b in layer.blobs] for layer in ref.layers}
    x = input_blob((2, 3, 20, 20), 1)
    x = ops.relu(ops.convolution(x, w["conv1"][0], w["conv1"][1].reshape(6), stride=(2, 2)))
    x = ops.pooling(x, "ave", kernel=(3, 3), stride=(2, 2))
    x = ops.inner_product(x, w["fc"][0].reshape(4, 96), w["fc"][1].reshape(4))
    np.testing.assert_array_equal(out, ops.softmax(x))


def test_split_refuses_a_model_that_does_not_fit_its_prototxt(tmp_path):
    model, deploy = _user_model(tmp_path, fc_in=50)
    with pytest.raises(ModelError, match=r"layer 'fc' blob 0 has shape \(1, 1, 4, 50\) but the "
                                         r"prototxt needs \(4, 96\) \(384 values\); give "
                                         r"--prototxt the deploy prototxt"):
        splitter.split_model(model, deploy, tmp_path / "split")
    # nothing half-written: no partials folder, no description, no temp folders
    assert not (tmp_path / "split").exists() or list((tmp_path / "split").iterdir()) == []


def test_split_names_a_duplicated_layer_name(tmp_path, capsys):
    """A deploy prototxt whose fc layer is also named 'conv1' is refused as a duplicated
    layer name, not as a caffemodel that does not fit it."""
    from engine.cli import main

    model, deploy = _user_model(tmp_path)
    deploy.write_text(USER_DEPLOY.replace('name: "fc"', 'name: "conv1"'))
    assert main(["split", str(model), "--out", str(tmp_path / "split")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the layer name 'conv1' is duplicated" in err, err
    assert "layers 1 and 4" in err and "give --prototxt" not in err, err
    assert not (tmp_path / "split").exists() or list((tmp_path / "split").iterdir()) == []


def test_split_refuses_a_model_missing_parameter_layers(tmp_path):
    model, deploy = _user_model(tmp_path)
    deploy.write_text(USER_DEPLOY.replace('"fc"', '"fc_renamed"').replace(
        'bottom: "fc_renamed" top: "prob"', 'bottom: "fc_renamed" top: "prob"'))
    with pytest.raises(ModelError, match="has no layer named 'fc_renamed'"):
        splitter.split_model(model, deploy, tmp_path / "split")


def test_stale_description_is_detected(zoo_split, tmp_path):
    data = json.loads(open(zoo_split["AgeNet"].path).read())
    data["version"] = 0
    bad = tmp_path / "d.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(ModelError, match="re-run the split stage"):
        splitter.Description.load(bad)

"""Zoo architectures and Caffe's runtime-net rules (upgrade, inputs, splits, shapes)."""

from __future__ import annotations

import pytest
from google.protobuf import text_format

from engine.caffe import graph, schema, zoo
from engine.errors import ModelError

# Parameter counts of the real models (their published deploy prototxts).
PARAMS = {
    "AgeNet": 11_415_048,
    "GenderNet": 11_411_970,
    "FaceNet": 56_876_418,
    "AlexNet": 60_965_224,
    "GoogLeNet": 6_998_552,
    "SoS-AlexNet": 56_888_709,
    "SoS-GoogleNet": 5_978_677,
}
RUNTIME_LAYERS = {"AgeNet": 20, "GenderNet": 20, "FaceNet": 24, "AlexNet": 24, "GoogLeNet": 152,
                  "SoS-AlexNet": 22, "SoS-GoogleNet": 152}


@pytest.mark.parametrize("name", list(zoo.ZOO))
def test_zoo_parameter_and_layer_counts_match_the_real_models(name):
    g = graph.build_graph(zoo.deploy_net(name), source=name)
    assert g.param_count == PARAMS[name]
    assert sum(layer.param_bytes for layer in g.layers) == 4 * PARAMS[name]
    assert len(g.layers) == RUNTIME_LAYERS[name]
    assert g.layers[0].type == "Input"
    assert g.outputs == ("prob",)


def _shape(g, name):
    return g.layer(name).top_shapes[0]


def test_alexnet_blob_shapes_follow_caffe_rounding():
    g = graph.build_graph(zoo.deploy_net("AlexNet"))
    assert _shape(g, "conv1") == (10, 96, 55, 55)  # floor((227-11)/4)+1
    assert _shape(g, "pool1") == (10, 96, 27, 27)  # ceil((55-3)/2)+1
    assert _shape(g, "pool2") == (10, 256, 13, 13)
    assert _shape(g, "pool5") == (10, 256, 6, 6)
    assert g.layer("fc6").param_shapes == ((4096, 9216), (4096,))
    assert g.layer("conv2").param_shapes == ((256, 48, 5, 5), (256,))
    assert [layer.name for layer in g.layers[1:6]] == ["conv1", "relu1", "norm1", "pool1", "conv2"]


def test_levi_hassner_and_facenet_shapes():
    age = graph.build_graph(zoo.deploy_net("AgeNet"))
    assert _shape(age, "conv1") == (1, 96, 56, 56)
    assert _shape(age, "pool1") == (1, 96, 28, 28)
    assert _shape(age, "pool5") == (1, 384, 7, 7)
    assert age.layer("fc6").param_shapes[0] == (512, 18816)
    assert graph.build_graph(zoo.deploy_net("GenderNet")).layers[0].top_shapes[0][0] == 10
    face = graph.build_graph(zoo.deploy_net("FaceNet"))
    assert face.layer("fc6-conv").param_shapes[0] == (4096, 256, 6, 6)
    assert _shape(face, "prob") == (1, 2, 1, 1)


def test_googlenet_inception_shapes_and_caffe_split_layers():
    g = graph.build_graph(zoo.deploy_net("GoogLeNet"))
    assert _shape(g, "pool1/3x3_s2") == (10, 64, 56, 56)
    assert _shape(g, "inception_3a/output") == (10, 256, 28, 28)
    assert _shape(g, "inception_4e/output") == (10, 832, 14, 14)
    assert _shape(g, "inception_5b/output") == (10, 1024, 7, 7)
    assert _shape(g, "pool5/7x7_s1") == (10, 1024, 1, 1)
    splits = [layer for layer in g.layers if layer.type == "Split"]
    assert len(splits) == 9
    first = splits[0]
    assert first.name == "pool2/3x3_s2_pool2/3x3_s2_0_split"
    assert len(first.tops) == 4
    # the split sits right after its producer and feeds the four branches
    assert g.layers[first.index - 1].name == "pool2/3x3_s2"
    assert g.layer("inception_3a/1x1").bottoms == ("pool2/3x3_s2_pool2/3x3_s2_0_split_0",)
    assert g.layer("inception_3a/pool").bottoms == ("pool2/3x3_s2_pool2/3x3_s2_0_split_3",)


def test_batch_override_changes_only_the_batch_axis():
    g = graph.build_graph(zoo.deploy_net("AlexNet"), batch=1)
    assert _shape(g, "prob") == (1, 1000)
    assert g.layer("conv1").macs * 10 == graph.build_graph(zoo.deploy_net("AlexNet")).layer(
        "conv1").macs


def test_macs_of_conv_and_fc_layers():
    g = graph.build_graph(zoo.deploy_net("AlexNet"), batch=1)
    conv2 = g.layer("conv2")
    assert conv2.macs == 256 * 27 * 27 * 48 * 25
    assert conv2.flops == 2 * conv2.macs
    assert g.layer("fc6").macs == 4096 * 9216


def _parse(text: str):
    return text_format.Parse(text, schema.NetParameter())


V1_TEXT = """
name: "tiny"
input: "data"
input_dim: 1 input_dim: 3 input_dim: 8 input_dim: 8
layers { name: "conv" type: CONVOLUTION bottom: "data" top: "conv"
         convolution_param { num_output: 4 kernel_size: 3 } }
layers { name: "relu" type: RELU bottom: "conv" top: "conv" }
layers { name: "drop" type: DROPOUT bottom: "conv" top: "conv"
         include { phase: TRAIN } }
layers { name: "ip" type: INNER_PRODUCT bottom: "conv" top: "ip"
         inner_product_param { num_output: 5 } }
layers { name: "prob" type: SOFTMAX bottom: "ip" top: "prob" }
"""


def test_v1_net_is_upgraded_with_legacy_input_and_test_phase_filtering():
    g = graph.build_graph(_parse(V1_TEXT))
    assert [(layer.name, layer.type) for layer in g.layers] == [
        ("input", "Input"), ("conv", "Convolution"), ("relu", "ReLU"),
        ("ip", "InnerProduct"), ("prob", "Softmax"),
    ]
    assert g.layer("ip").param_shapes == ((5, 4 * 6 * 6), (5,))


@pytest.mark.parametrize("text, words", [
    ('layer { name: "d" type: "Input" top: "d" input_param { shape { dim: 1 dim: 3 dim: 4 '
     'dim: 4 } } } layer { name: "bn" type: "BatchNorm" bottom: "d" top: "bn" }',
     "type 'BatchNorm', which the engine does not implement"),
    ('layer { name: "c" type: "Convolution" bottom: "nothing" top: "c" }',
     "reads blob 'nothing' that no earlier layer produces"),
    ('input: "d" input_dim: 1 input_dim: 3 layer { name: "r" type: "ReLU" bottom: "d" top: "d" }',
     "need 4 input_dim values"),
    ('layer { name: "d" type: "Input" top: "d" input_param { shape { dim: 1 dim: 3 dim: 4 '
     'dim: 4 } } } layer { name: "c" type: "Convolution" bottom: "d" top: "c" '
     'convolution_param { num_output: 4 kernel_size: 9 } }', "empty blob"),
    ('layer { name: "d" type: "Input" top: "d" input_param { shape { dim: 1 dim: 3 dim: 4 '
     'dim: 4 } } } layer { name: "c" type: "Convolution" bottom: "d" top: "c" '
     'convolution_param { num_output: 4 kernel_size: 1 group: 2 } }', "multiples of group 2"),
])
def test_bad_nets_fail_with_specific_messages(text, words):
    with pytest.raises(ModelError, match=words):
        graph.build_graph(_parse(text))

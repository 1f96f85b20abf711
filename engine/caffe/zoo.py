"""The five EdgeCaffe networks as deploy ``NetParameter``s, layer for layer.

Sources (EdgeCaffe's deploy prototxts; tests/unit/test_zoo_graph.py checks the parameter
counts): AgeNet/GenderNet are Levi & Hassner's V1 deploy nets (legacy ``input_dim``),
FaceNet is DDFD's fully-convolutional CaffeNet
(V2 layers, legacy input, 227x227 as in EdgeCaffe's copy), AlexNet and GoogLeNet are
BVLC's ``deploy.prototxt`` files (V2, ``Input`` layer). Batch sizes are the deploy
files' own (GenderNet, AlexNet and GoogLeNet keep N=10 as EdgeCaffe ran them).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.caffe import schema


@dataclass(frozen=True)
class ZooEntry:
    """A zoo network: its display name, EdgeCaffe's file stem, and the first layer of the
    DeepEye "fc" part when it is not simply the first InnerProduct layer."""

    name: str
    stem: str
    fc_start: str | None = None


ZOO = {
    "AgeNet": ZooEntry("AgeNet", "age_net"),
    "GenderNet": ZooEntry("GenderNet", "gender_net"),
    # FaceNet's fc layers were converted to convolutions; EdgeCaffe's split is 16|8.
    "FaceNet": ZooEntry("FaceNet", "face_full_conv", fc_start="fc6-conv"),
    "AlexNet": ZooEntry("AlexNet", "bvlc_alexnet"),
    "GoogLeNet": ZooEntry("GoogLeNet", "bvlc_googlenet"),
    # EdgeCaffe's own AlexNet and GoogLeNet (the paper's "AlexNet" and "GoogleNet"):
    # 16|6 and 10|142, the latter putting almost the whole net in DeepEye's "fc" part.
    "SoS-AlexNet": ZooEntry("SoS-AlexNet", "alexnet_sos"),
    "SoS-GoogleNet": ZooEntry("SoS-GoogleNet", "googlenet_sos", fc_start="pool2/3x3_s2"),
}


class _NetBuilder:
    """Appends deploy layers; V1 nets get ``layers`` entries with enum types."""

    def __init__(self, name: str, v1: bool = False) -> None:
        self.net = schema.NetParameter(name=name)
        self.v1 = v1

    def legacy_input(self, blob: str, shape: tuple[int, ...]) -> None:
        self.net.input.append(blob)
        self.net.input_dim.extend(shape)

    def _add(self, name: str, type_: str, bottoms: list[str], tops: list[str]):
        if self.v1:
            layer = self.net.layers.add(name=name)
            layer.type = schema.V1LayerParameter.LayerType.Value(schema.V1_ENUM_BY_TYPE[type_])
        else:
            layer = self.net.layer.add(name=name, type=type_)
        layer.bottom.extend(bottoms)
        layer.top.extend(tops)
        return layer

    def input(self, blob: str, shape: tuple[int, ...]) -> None:
        layer = self._add(blob, "Input", [], [blob])
        layer.input_param.shape.add().dim.extend(shape)

    def conv(self, name: str, bottom: str, num: int, k: int, s: int = 1, p: int = 0,
             g: int = 1) -> str:
        c = self._add(name, "Convolution", [bottom], [name]).convolution_param
        c.num_output = num
        c.kernel_size.append(k)
        if p:
            c.pad.append(p)
        if s != 1:
            c.stride.append(s)
        if g != 1:
            c.group = g
        return name

    def relu(self, name: str, blob: str) -> str:
        self._add(name, "ReLU", [blob], [blob])
        return blob

    def pool(self, name: str, bottom: str, k: int, s: int, p: int = 0, ave: bool = False) -> str:
        c = self._add(name, "Pooling", [bottom], [name]).pooling_param
        c.pool = c.AVE if ave else c.MAX
        c.kernel_size, c.stride = k, s
        if p:
            c.pad = p
        return name

    def lrn(self, name: str, bottom: str) -> str:
        c = self._add(name, "LRN", [bottom], [name]).lrn_param
        c.local_size, c.alpha, c.beta = 5, 1e-4, 0.75
        return name

    def fc(self, name: str, bottom: str, num: int) -> str:
        self._add(name, "InnerProduct", [bottom], [name]).inner_product_param.num_output = num
        return name

    def dropout(self, name: str, blob: str, ratio: float) -> str:
        self._add(name, "Dropout", [blob], [blob]).dropout_param.dropout_ratio = ratio
        return blob

    def concat(self, name: str, bottoms: list[str]) -> str:
        self._add(name, "Concat", bottoms, [name])
        return name

    def softmax(self, name: str, bottom: str) -> str:
        self._add(name, "Softmax", [bottom], [name])
        return name


def _levi_hassner(name: str, batch: int, classes: int) -> schema.NetParameter:
    b = _NetBuilder(name, v1=True)
    b.legacy_input("data", (batch, 3, 227, 227))
    x = b.relu("relu1", b.conv("conv1", "data", 96, 7, s=4))
    x = b.lrn("norm1", b.pool("pool1", x, 3, 2))
    x = b.relu("relu2", b.conv("conv2", x, 256, 5, p=2))
    x = b.lrn("norm2", b.pool("pool2", x, 3, 2))
    x = b.relu("relu3", b.conv("conv3", x, 384, 3, p=1))
    x = b.pool("pool5", x, 3, 2)
    x = b.dropout("drop6", b.relu("relu6", b.fc("fc6", x, 512)), 0.5)
    x = b.dropout("drop7", b.relu("relu7", b.fc("fc7", x, 512)), 0.5)
    b.softmax("prob", b.fc("fc8", x, classes))
    return b.net


def agenet() -> schema.NetParameter:
    return _levi_hassner("CaffeNet", 1, 8)


def gendernet() -> schema.NetParameter:
    return _levi_hassner("CaffeNet", 10, 2)


def _caffenet_trunk(b: _NetBuilder) -> str:
    """CaffeNet's conv1 .. pool5 (pool before norm) on a legacy 1x3x227x227 input."""
    b.legacy_input("data", (1, 3, 227, 227))
    x = b.relu("relu1", b.conv("conv1", "data", 96, 11, s=4))
    x = b.lrn("norm1", b.pool("pool1", x, 3, 2))
    x = b.relu("relu2", b.conv("conv2", x, 256, 5, p=2, g=2))
    x = b.lrn("norm2", b.pool("pool2", x, 3, 2))
    x = b.relu("relu3", b.conv("conv3", x, 384, 3, p=1))
    x = b.relu("relu4", b.conv("conv4", x, 384, 3, p=1, g=2))
    x = b.relu("relu5", b.conv("conv5", x, 256, 3, p=1, g=2))
    return b.pool("pool5", x, 3, 2)


def facenet() -> schema.NetParameter:
    b = _NetBuilder("face_full_conv")
    x = _caffenet_trunk(b)
    x = b.dropout("drop6", b.relu("relu6", b.conv("fc6-conv", x, 4096, 6)), 0.5)
    x = b.dropout("drop7", b.relu("relu7", b.conv("fc7-conv", x, 4096, 1)), 0.5)
    b.softmax("prob", b.conv("fc8-conv", x, 2, 1))
    return b.net


def sos_alexnet() -> schema.NetParameter:
    """EdgeCaffe's SoS (``alexnet_sos_deploy.prototxt``): V1, CaffeNet order (pool before
    norm), no dropout in the deploy, a 5-output ``fc8_sbt``, N=1."""
    b = _NetBuilder("AlexNet_SoS", v1=True)
    x = _caffenet_trunk(b)
    x = b.relu("relu6", b.fc("fc6", x, 4096))
    x = b.relu("relu7", b.fc("fc7", x, 4096))
    b.softmax("prob", b.fc("fc8_sbt", x, 5))
    return b.net


def alexnet() -> schema.NetParameter:
    b = _NetBuilder("AlexNet")
    b.input("data", (10, 3, 227, 227))
    x = b.relu("relu1", b.conv("conv1", "data", 96, 11, s=4))
    x = b.pool("pool1", b.lrn("norm1", x), 3, 2)
    x = b.relu("relu2", b.conv("conv2", x, 256, 5, p=2, g=2))
    x = b.pool("pool2", b.lrn("norm2", x), 3, 2)
    x = b.relu("relu3", b.conv("conv3", x, 384, 3, p=1))
    x = b.relu("relu4", b.conv("conv4", x, 384, 3, p=1, g=2))
    x = b.relu("relu5", b.conv("conv5", x, 256, 3, p=1, g=2))
    x = b.pool("pool5", x, 3, 2)
    x = b.dropout("drop6", b.relu("relu6", b.fc("fc6", x, 4096)), 0.5)
    x = b.dropout("drop7", b.relu("relu7", b.fc("fc7", x, 4096)), 0.5)
    b.softmax("prob", b.fc("fc8", x, 1000))
    return b.net


# GoogLeNet inception modules: 1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool projection.
_INCEPTION = {
    "3a": (64, 96, 128, 16, 32, 32), "3b": (128, 128, 192, 32, 96, 64),
    "4a": (192, 96, 208, 16, 48, 64), "4b": (160, 112, 224, 24, 64, 64),
    "4c": (128, 128, 256, 24, 64, 64), "4d": (112, 144, 288, 32, 64, 64),
    "4e": (256, 160, 320, 32, 128, 128), "5a": (256, 160, 320, 32, 128, 128),
    "5b": (384, 192, 384, 48, 128, 128),
}


def _inception(b: _NetBuilder, m: str, x: str) -> str:
    n1, r3, n3, r5, n5, pp = _INCEPTION[m]
    p = f"inception_{m}/"
    a = b.relu(p + "relu_1x1", b.conv(p + "1x1", x, n1, 1))
    t = b.relu(p + "relu_3x3_reduce", b.conv(p + "3x3_reduce", x, r3, 1))
    c = b.relu(p + "relu_3x3", b.conv(p + "3x3", t, n3, 3, p=1))
    t = b.relu(p + "relu_5x5_reduce", b.conv(p + "5x5_reduce", x, r5, 1))
    d = b.relu(p + "relu_5x5", b.conv(p + "5x5", t, n5, 5, p=2))
    t = b.pool(p + "pool", x, 3, 1, p=1)
    e = b.relu(p + "relu_pool_proj", b.conv(p + "pool_proj", t, pp, 1))
    return b.concat(p + "output", [a, c, d, e])


def googlenet(sos: bool = False) -> schema.NetParameter:
    """BVLC's GoogLeNet; ``sos``: EdgeCaffe's SoS_GoogleNet, whose classifier is
    ``loss3/classifier-sos`` with 5 outputs."""
    b = _NetBuilder("GoogleNet")
    b.input("data", (10, 3, 224, 224))
    x = b.relu("conv1/relu_7x7", b.conv("conv1/7x7_s2", "data", 64, 7, s=2, p=3))
    x = b.lrn("pool1/norm1", b.pool("pool1/3x3_s2", x, 3, 2))
    x = b.relu("conv2/relu_3x3_reduce", b.conv("conv2/3x3_reduce", x, 64, 1))
    x = b.relu("conv2/relu_3x3", b.conv("conv2/3x3", x, 192, 3, p=1))
    x = b.pool("pool2/3x3_s2", b.lrn("conv2/norm2", x), 3, 2)
    for m in ("3a", "3b"):
        x = _inception(b, m, x)
    x = b.pool("pool3/3x3_s2", x, 3, 2)
    for m in ("4a", "4b", "4c", "4d", "4e"):
        x = _inception(b, m, x)
    x = b.pool("pool4/3x3_s2", x, 3, 2)
    for m in ("5a", "5b"):
        x = _inception(b, m, x)
    x = b.dropout("pool5/drop_7x7_s1", b.pool("pool5/7x7_s1", x, 7, 1, ave=True), 0.4)
    classifier = ("loss3/classifier-sos", 5) if sos else ("loss3/classifier", 1000)
    b.softmax("prob", b.fc(classifier[0], x, classifier[1]))
    return b.net


BUILDERS = {
    "AgeNet": agenet,
    "GenderNet": gendernet,
    "FaceNet": facenet,
    "AlexNet": alexnet,
    "GoogLeNet": googlenet,
    "SoS-AlexNet": sos_alexnet,
    "SoS-GoogleNet": lambda: googlenet(sos=True),
}


def deploy_net(name: str) -> schema.NetParameter:
    """The deploy ``NetParameter`` of zoo network ``name``."""
    try:
        return BUILDERS[name]()
    except KeyError:
        raise KeyError(f"unknown zoo network '{name}' (known: {', '.join(BUILDERS)})") from None

"""Caffe's protobuf messages, built at import time from a table of Caffe's field numbers.

The table mirrors the subset of BVLC ``caffe.proto`` (proto2, package ``caffe``) that deploy
nets and caffemodels use: every message, field number, type and default below is Caffe's.
Building the descriptor at run time needs no ``protoc`` and no generated code tied to one
protobuf release. Fields outside the subset survive a binary round trip (protobuf keeps
unknown fields) and are skipped, with a warning, when reading prototxt text.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
_SCALAR = {
    "double": _F.TYPE_DOUBLE,
    "float": _F.TYPE_FLOAT,
    "int64": _F.TYPE_INT64,
    "uint64": _F.TYPE_UINT64,
    "int32": _F.TYPE_INT32,
    "uint32": _F.TYPE_UINT32,
    "bool": _F.TYPE_BOOL,
    "string": _F.TYPE_STRING,
    "bytes": _F.TYPE_BYTES,
}
_LABEL = {"optional": _F.LABEL_OPTIONAL, "repeated": _F.LABEL_REPEATED}

# Field tuples: (label, type, name, number[, default or "packed"]).
# A type that is not a scalar names a message or an enum (nested enums as "Msg.Enum").
_ENGINE = {"DEFAULT": 0, "CAFFE": 1, "CUDNN": 2}

_MESSAGES: dict[str, dict] = {
    "BlobShape": {"fields": [("repeated", "int64", "dim", 1, "packed")]},
    "BlobProto": {
        "fields": [
            ("optional", "BlobShape", "shape", 7),
            ("repeated", "float", "data", 5, "packed"),
            ("repeated", "float", "diff", 6, "packed"),
            ("repeated", "double", "double_data", 8, "packed"),
            ("repeated", "double", "double_diff", 9, "packed"),
            ("optional", "int32", "num", 1, "0"),
            ("optional", "int32", "channels", 2, "0"),
            ("optional", "int32", "height", 3, "0"),
            ("optional", "int32", "width", 4, "0"),
        ]
    },
    "FillerParameter": {
        "enums": {"VarianceNorm": {"FAN_IN": 0, "FAN_OUT": 1, "AVERAGE": 2}},
        "fields": [
            ("optional", "string", "type", 1, "constant"),
            ("optional", "float", "value", 2, "0"),
            ("optional", "float", "min", 3, "0"),
            ("optional", "float", "max", 4, "1"),
            ("optional", "float", "mean", 5, "0"),
            ("optional", "float", "std", 6, "1"),
            ("optional", "int32", "sparse", 7, "-1"),
            ("optional", "FillerParameter.VarianceNorm", "variance_norm", 8, "FAN_IN"),
        ],
    },
    "NetParameter": {
        "fields": [
            ("optional", "string", "name", 1),
            ("repeated", "string", "input", 3),
            ("repeated", "BlobShape", "input_shape", 8),
            ("repeated", "int32", "input_dim", 4),
            ("optional", "bool", "force_backward", 5, "false"),
            ("optional", "NetState", "state", 6),
            ("optional", "bool", "debug_info", 7, "false"),
            ("repeated", "LayerParameter", "layer", 100),
            ("repeated", "V1LayerParameter", "layers", 2),
        ]
    },
    "NetState": {
        "fields": [
            ("optional", "Phase", "phase", 1, "TEST"),
            ("optional", "int32", "level", 2, "0"),
            ("repeated", "string", "stage", 3),
        ]
    },
    "NetStateRule": {
        "fields": [
            ("optional", "Phase", "phase", 1),
            ("optional", "int32", "min_level", 2),
            ("optional", "int32", "max_level", 3),
            ("repeated", "string", "stage", 4),
            ("repeated", "string", "not_stage", 5),
        ]
    },
    "ParamSpec": {
        "enums": {"DimCheckMode": {"STRICT": 0, "PERMISSIVE": 1}},
        "fields": [
            ("optional", "string", "name", 1),
            ("optional", "ParamSpec.DimCheckMode", "share_mode", 2),
            ("optional", "float", "lr_mult", 3, "1"),
            ("optional", "float", "decay_mult", 4, "1"),
        ],
    },
    "LayerParameter": {
        "fields": [
            ("optional", "string", "name", 1),
            ("optional", "string", "type", 2),
            ("repeated", "string", "bottom", 3),
            ("repeated", "string", "top", 4),
            ("optional", "Phase", "phase", 10),
            ("repeated", "float", "loss_weight", 5),
            ("repeated", "ParamSpec", "param", 6),
            ("repeated", "BlobProto", "blobs", 7),
            ("repeated", "bool", "propagate_down", 11),
            ("repeated", "NetStateRule", "include", 8),
            ("repeated", "NetStateRule", "exclude", 9),
            ("optional", "TransformationParameter", "transform_param", 100),
            ("optional", "ConcatParameter", "concat_param", 104),
            ("optional", "ConvolutionParameter", "convolution_param", 106),
            ("optional", "DropoutParameter", "dropout_param", 108),
            ("optional", "InnerProductParameter", "inner_product_param", 117),
            ("optional", "LRNParameter", "lrn_param", 118),
            ("optional", "PoolingParameter", "pooling_param", 121),
            ("optional", "ReLUParameter", "relu_param", 123),
            ("optional", "SoftmaxParameter", "softmax_param", 125),
            ("optional", "InputParameter", "input_param", 143),
        ]
    },
    "TransformationParameter": {
        "fields": [
            ("optional", "float", "scale", 1, "1"),
            ("optional", "bool", "mirror", 2, "false"),
            ("optional", "uint32", "crop_size", 3, "0"),
            ("optional", "string", "mean_file", 4),
            ("repeated", "float", "mean_value", 5),
            ("optional", "bool", "force_color", 6, "false"),
            ("optional", "bool", "force_gray", 7, "false"),
        ]
    },
    "ConcatParameter": {
        "fields": [
            ("optional", "int32", "axis", 2, "1"),
            ("optional", "uint32", "concat_dim", 1, "1"),
        ]
    },
    "ConvolutionParameter": {
        "enums": {"Engine": _ENGINE},
        "fields": [
            ("optional", "uint32", "num_output", 1),
            ("optional", "bool", "bias_term", 2, "true"),
            ("repeated", "uint32", "pad", 3),
            ("repeated", "uint32", "kernel_size", 4),
            ("repeated", "uint32", "stride", 6),
            ("repeated", "uint32", "dilation", 18),
            ("optional", "uint32", "pad_h", 9, "0"),
            ("optional", "uint32", "pad_w", 10, "0"),
            ("optional", "uint32", "kernel_h", 11),
            ("optional", "uint32", "kernel_w", 12),
            ("optional", "uint32", "stride_h", 13),
            ("optional", "uint32", "stride_w", 14),
            ("optional", "uint32", "group", 5, "1"),
            ("optional", "FillerParameter", "weight_filler", 7),
            ("optional", "FillerParameter", "bias_filler", 8),
            ("optional", "ConvolutionParameter.Engine", "engine", 15, "DEFAULT"),
            ("optional", "int32", "axis", 16, "1"),
            ("optional", "bool", "force_nd_im2col", 17, "false"),
        ],
    },
    "DropoutParameter": {"fields": [("optional", "float", "dropout_ratio", 1, "0.5")]},
    "InnerProductParameter": {
        "fields": [
            ("optional", "uint32", "num_output", 1),
            ("optional", "bool", "bias_term", 2, "true"),
            ("optional", "FillerParameter", "weight_filler", 3),
            ("optional", "FillerParameter", "bias_filler", 4),
            ("optional", "int32", "axis", 5, "1"),
            ("optional", "bool", "transpose", 6, "false"),
        ]
    },
    "InputParameter": {"fields": [("repeated", "BlobShape", "shape", 1)]},
    "LRNParameter": {
        "enums": {
            "NormRegion": {"ACROSS_CHANNELS": 0, "WITHIN_CHANNEL": 1},
            "Engine": _ENGINE,
        },
        "fields": [
            ("optional", "uint32", "local_size", 1, "5"),
            ("optional", "float", "alpha", 2, "1"),
            ("optional", "float", "beta", 3, "0.75"),
            ("optional", "LRNParameter.NormRegion", "norm_region", 4, "ACROSS_CHANNELS"),
            ("optional", "float", "k", 5, "1"),
            ("optional", "LRNParameter.Engine", "engine", 6, "DEFAULT"),
        ],
    },
    "PoolingParameter": {
        "enums": {
            "PoolMethod": {"MAX": 0, "AVE": 1, "STOCHASTIC": 2},
            "Engine": _ENGINE,
            "RoundMode": {"CEIL": 0, "FLOOR": 1},
        },
        "fields": [
            ("optional", "PoolingParameter.PoolMethod", "pool", 1, "MAX"),
            ("optional", "uint32", "pad", 4, "0"),
            ("optional", "uint32", "pad_h", 9, "0"),
            ("optional", "uint32", "pad_w", 10, "0"),
            ("optional", "uint32", "kernel_size", 2),
            ("optional", "uint32", "kernel_h", 5),
            ("optional", "uint32", "kernel_w", 6),
            ("optional", "uint32", "stride", 3, "1"),
            ("optional", "uint32", "stride_h", 7),
            ("optional", "uint32", "stride_w", 8),
            ("optional", "PoolingParameter.Engine", "engine", 11, "DEFAULT"),
            ("optional", "bool", "global_pooling", 12, "false"),
            ("optional", "PoolingParameter.RoundMode", "round_mode", 13, "CEIL"),
        ],
    },
    "ReLUParameter": {
        "enums": {"Engine": _ENGINE},
        "fields": [
            ("optional", "float", "negative_slope", 1, "0"),
            ("optional", "ReLUParameter.Engine", "engine", 2, "DEFAULT"),
        ],
    },
    "SoftmaxParameter": {
        "enums": {"Engine": _ENGINE},
        "fields": [
            ("optional", "SoftmaxParameter.Engine", "engine", 1, "DEFAULT"),
            ("optional", "int32", "axis", 2, "1"),
        ],
    },
    "V1LayerParameter": {
        "enums": {
            "LayerType": {
                "NONE": 0, "ABSVAL": 35, "ACCURACY": 1, "ARGMAX": 30, "BNLL": 2,
                "CONCAT": 3, "CONTRASTIVE_LOSS": 37, "CONVOLUTION": 4, "DATA": 5,
                "DECONVOLUTION": 39, "DROPOUT": 6, "DUMMY_DATA": 32, "EUCLIDEAN_LOSS": 7,
                "ELTWISE": 25, "EXP": 38, "FLATTEN": 8, "HDF5_DATA": 9, "HDF5_OUTPUT": 10,
                "HINGE_LOSS": 28, "IM2COL": 11, "IMAGE_DATA": 12, "INFOGAIN_LOSS": 13,
                "INNER_PRODUCT": 14, "LRN": 15, "MEMORY_DATA": 29,
                "MULTINOMIAL_LOGISTIC_LOSS": 16, "MVN": 34, "POOLING": 17, "POWER": 26,
                "RELU": 18, "SIGMOID": 19, "SIGMOID_CROSS_ENTROPY_LOSS": 27, "SILENCE": 36,
                "SOFTMAX": 20, "SOFTMAX_LOSS": 21, "SPLIT": 22, "SLICE": 33, "TANH": 23,
                "WINDOW_DATA": 24, "THRESHOLD": 31,
            },
            "DimCheckMode": {"STRICT": 0, "PERMISSIVE": 1},
        },
        "fields": [
            ("repeated", "string", "bottom", 2),
            ("repeated", "string", "top", 3),
            ("optional", "string", "name", 4),
            ("repeated", "NetStateRule", "include", 32),
            ("repeated", "NetStateRule", "exclude", 33),
            ("optional", "V1LayerParameter.LayerType", "type", 5),
            ("repeated", "BlobProto", "blobs", 6),
            ("repeated", "string", "param", 1001),
            ("repeated", "V1LayerParameter.DimCheckMode", "blob_share_mode", 1002),
            ("repeated", "float", "blobs_lr", 7),
            ("repeated", "float", "weight_decay", 8),
            ("repeated", "float", "loss_weight", 35),
            ("optional", "ConcatParameter", "concat_param", 9),
            ("optional", "ConvolutionParameter", "convolution_param", 10),
            ("optional", "DropoutParameter", "dropout_param", 12),
            ("optional", "InnerProductParameter", "inner_product_param", 17),
            ("optional", "LRNParameter", "lrn_param", 18),
            ("optional", "PoolingParameter", "pooling_param", 19),
            ("optional", "ReLUParameter", "relu_param", 30),
            ("optional", "SoftmaxParameter", "softmax_param", 39),
            ("optional", "TransformationParameter", "transform_param", 36),
        ],
    },
}
_TOP_ENUMS = {"Phase": {"TRAIN": 0, "TEST": 1}}


def _enum_names() -> set[str]:
    names = set(_TOP_ENUMS)
    for msg, spec in _MESSAGES.items():
        names.update(f"{msg}.{e}" for e in spec.get("enums", {}))
    return names


def _build_file() -> descriptor_pb2.FileDescriptorProto:
    fdp = descriptor_pb2.FileDescriptorProto(
        name="edgeprof/caffe.proto", package="caffe", syntax="proto2"
    )
    enums = _enum_names()
    for name, values in _TOP_ENUMS.items():
        e = fdp.enum_type.add(name=name)
        for vname, num in values.items():
            e.value.add(name=vname, number=num)
    for msg_name, spec in _MESSAGES.items():
        m = fdp.message_type.add(name=msg_name)
        for ename, values in spec.get("enums", {}).items():
            e = m.enum_type.add(name=ename)
            for vname, num in values.items():
                e.value.add(name=vname, number=num)
        for label, ftype, fname, number, *extra in spec["fields"]:
            f = m.field.add(name=fname, number=number, label=_LABEL[label])
            if ftype in _SCALAR:
                f.type = _SCALAR[ftype]
            else:
                f.type = _F.TYPE_ENUM if ftype in enums else _F.TYPE_MESSAGE
                f.type_name = f".caffe.{ftype}"
            if extra and extra[0] == "packed":
                f.options.packed = True
            elif extra:
                f.default_value = extra[0]
    return fdp


_POOL = descriptor_pool.DescriptorPool()
_FILE = _POOL.Add(_build_file())


def _cls(name: str):
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"caffe.{name}"))


NetParameter = _cls("NetParameter")
LayerParameter = _cls("LayerParameter")
V1LayerParameter = _cls("V1LayerParameter")
BlobProto = _cls("BlobProto")
BlobShape = _cls("BlobShape")

PHASE_TEST = _POOL.FindEnumTypeByName("caffe.Phase").values_by_name["TEST"].number

# Caffe's V1 enum names mapped to the V2 type strings (as UpgradeV1LayerType does).
V1_TYPE_NAMES = {
    "ABSVAL": "AbsVal", "ACCURACY": "Accuracy", "ARGMAX": "ArgMax", "BNLL": "BNLL",
    "CONCAT": "Concat", "CONTRASTIVE_LOSS": "ContrastiveLoss", "CONVOLUTION": "Convolution",
    "DATA": "Data", "DECONVOLUTION": "Deconvolution", "DROPOUT": "Dropout",
    "DUMMY_DATA": "DummyData", "EUCLIDEAN_LOSS": "EuclideanLoss", "ELTWISE": "Eltwise",
    "EXP": "Exp", "FLATTEN": "Flatten", "HDF5_DATA": "HDF5Data", "HDF5_OUTPUT": "HDF5Output",
    "HINGE_LOSS": "HingeLoss", "IM2COL": "Im2col", "IMAGE_DATA": "ImageData",
    "INFOGAIN_LOSS": "InfogainLoss", "INNER_PRODUCT": "InnerProduct", "LRN": "LRN",
    "MEMORY_DATA": "MemoryData", "MULTINOMIAL_LOGISTIC_LOSS": "MultinomialLogisticLoss",
    "MVN": "MVN", "POOLING": "Pooling", "POWER": "Power", "RELU": "ReLU",
    "SIGMOID": "Sigmoid", "SIGMOID_CROSS_ENTROPY_LOSS": "SigmoidCrossEntropyLoss",
    "SILENCE": "Silence", "SOFTMAX": "Softmax", "SOFTMAX_LOSS": "SoftmaxWithLoss",
    "SPLIT": "Split", "SLICE": "Slice", "TANH": "TanH", "WINDOW_DATA": "WindowData",
    "THRESHOLD": "Threshold",
}
V1_TYPE_BY_NUMBER = {
    v.number: V1_TYPE_NAMES.get(v.name, v.name)
    for v in V1LayerParameter.DESCRIPTOR.enum_types_by_name["LayerType"].values
}
V1_ENUM_BY_TYPE = {v2: v1 for v1, v2 in V1_TYPE_NAMES.items()}

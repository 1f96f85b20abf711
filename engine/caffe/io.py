"""Reading and writing deploy prototxts and caffemodels.

Reading a caffemodel here goes through the generic protobuf parse: it is the reference
path that ``engine.caffe.wire`` is tested against. Writing streams each layer's float
payload straight from numpy into the file with hand-encoded length prefixes (what
``SerializeToString`` would emit, byte for byte), because filling a repeated field from
numpy first costs seconds and gigabytes for AlexNet-sized models.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from google.protobuf import message, text_format

from engine.caffe import schema
from engine.errors import ModelError
from engine.files import atomic_path, read_regular

if TYPE_CHECKING:  # numpy is imported where used: a run's supervisor never needs it
    import numpy as np

MAX_PROTOTXT_BYTES = 16 * 2**20  # GoogLeNet's deploy prototxt is 36 kB


def _one_line(exc: Exception, most: int = 300) -> str:
    """An error's text as one printable line of at most ``most`` characters (a parse
    error can quote the whole input)."""
    text = " ".join(str(exc).split())
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= most else text[:most] + " ..."


def read_prototxt(path: str | os.PathLike) -> schema.NetParameter:
    """A deploy prototxt (text format, V1 or V2). Fields outside the supported subset of
    caffe.proto are skipped; unsupported layer types fail later, naming the layer."""
    path = os.fspath(path)
    try:
        text = read_regular(path, "prototxt", MAX_PROTOTXT_BYTES).decode()
    except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise ModelError(f"cannot read prototxt {path}: {_one_line(exc)}") from None
    net = schema.NetParameter()
    try:
        text_format.Parse(text, net, allow_unknown_field=True)
    except text_format.ParseError as exc:
        raise ModelError(f"{path}: not a valid Caffe prototxt: {_one_line(exc)}") from None
    if not len(net.layer) and not len(net.layers):
        raise ModelError(f"{path}: prototxt defines no layers")
    return net


def prototxt_text(net: schema.NetParameter) -> str:
    return text_format.MessageToString(net)


def read_caffemodel(path: str | os.PathLike) -> schema.NetParameter:
    """The whole caffemodel through the generic protobuf parse (reference path)."""
    path = os.fspath(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ModelError(f"cannot read caffemodel {path}: {exc}") from exc
    net = schema.NetParameter()
    try:
        net.ParseFromString(data)
    except message.DecodeError as exc:
        raise ModelError(f"{path}: corrupt or truncated caffemodel ({exc})") from exc
    return net


def blob_array(blob) -> np.ndarray:
    """A BlobProto's values as float32 in its declared shape (legacy 4-D dims if no shape)."""
    import numpy as np
    if len(blob.data):
        values = np.array(blob.data, dtype=np.float32)
    else:
        values = np.array(blob.double_data, dtype=np.float64).astype(np.float32)
    if blob.HasField("shape"):
        shape = tuple(blob.shape.dim)
    elif any(blob.HasField(f) for f in ("num", "channels", "height", "width")):
        shape = (blob.num, blob.channels, blob.height, blob.width)
    else:
        shape = (values.size,)
    return values.reshape(shape)


def legacy_dims(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """Caffe's legacy num/channels/height/width: the shape right-aligned in 4 axes."""
    if len(shape) > 4:
        raise ValueError(f"shape {shape} has more than 4 axes; legacy blobs are 4-D")
    return (1,) * (4 - len(shape)) + tuple(shape)  # type: ignore[return-value]


# ---- writing ----

def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _tag(number: int, wire_type: int) -> bytes:
    return _varint(number << 3 | wire_type)


def _blob_header(shape: tuple[int, ...], nbytes: int, legacy: bool) -> tuple[bytes, bytes]:
    """The shape (or legacy dims) field and the data field's tag + length of a BlobProto."""
    if legacy:
        head = b"".join(_tag(n, 0) + _varint(d) for n, d in zip((1, 2, 3, 4), legacy_dims(shape)))
    else:
        dims = b"".join(_varint(d) for d in shape)
        shape_msg = _tag(1, 2) + _varint(len(dims)) + dims
        head = _tag(7, 2) + _varint(len(shape_msg)) + shape_msg
    return head, _tag(5, 2) + _varint(nbytes)


def _split_fields(msg, number: int) -> tuple[bytes, bytes]:
    """Serialise the fields of ``msg`` numbered below and above ``number`` separately, so a
    hand-encoded field ``number`` can be placed between them in canonical order."""
    low, high = type(msg)(), type(msg)()
    for fd, value in msg.ListFields():
        if fd.number == number:
            continue
        target = low if fd.number < number else high
        if fd.is_repeated:
            getattr(target, fd.name).extend(value)
        elif fd.type == fd.TYPE_MESSAGE:
            getattr(target, fd.name).CopyFrom(value)
        else:
            setattr(target, fd.name, value)
    return low.SerializeToString(), high.SerializeToString()


def encode_blob_parts(arr: np.ndarray, legacy: bool) -> list[bytes | np.ndarray]:
    """The encoded BlobProto of ``arr`` as pieces: header bytes and the float payload."""
    import numpy as np
    arr = np.ascontiguousarray(arr, dtype="<f4")
    shape_part, data_tag = _blob_header(arr.shape, arr.nbytes, legacy)
    # Canonical field order: legacy dims (1-4), data (5), shape (7).
    if legacy:
        return [shape_part + data_tag, arr]
    return [data_tag, arr, shape_part]


def _size(parts: Iterable[bytes | np.ndarray]) -> int:
    return sum(len(p) if isinstance(p, bytes) else p.nbytes for p in parts)


def layer_parts(layer, blobs: list[np.ndarray], v1: bool) -> list[bytes | np.ndarray]:
    """An encoded layer message (without its own tag) with ``blobs`` in place of any it has."""
    blob_field = 6 if v1 else 7
    low, high = _split_fields(layer, blob_field)
    parts: list[bytes | np.ndarray] = [low]
    for arr in blobs:
        blob = encode_blob_parts(arr, legacy=v1)
        parts += [_tag(blob_field, 2) + _varint(_size(blob)), *blob]
    parts.append(high)
    return parts


def write_caffemodel(
    path: str | os.PathLike,
    net: schema.NetParameter,
    blobs_for: Callable[[int, object], list[np.ndarray]],
) -> int:
    """Write ``net`` as a binary caffemodel, asking ``blobs_for(index, layer)`` for each
    layer's parameters just before it is written (so only one layer's weights are ever
    in memory). V1 nets (``layers``) get legacy 4-D blob dims, as real V1 models have.
    Returns the file size."""
    v1 = bool(len(net.layers))
    layer_field = 2 if v1 else 100
    head, tail = _split_fields(net, layer_field)
    layers = net.layers if v1 else net.layer
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(head)
        for i, layer in enumerate(layers):
            parts = layer_parts(layer, blobs_for(i, layer), v1)
            f.write(_tag(layer_field, 2) + _varint(_size(parts)))
            _write_parts(f, parts)
        f.write(tail)
        size = f.tell()
    return size


def write_partial(path: str | os.PathLike, name: str, layer_bytes: bytes | memoryview,
                  v1: bool) -> int:
    """A one-layer NetParameter named ``name`` holding a verbatim copy of a layer message."""
    name_b = name.encode()
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        # name (field 1) sorts before both layers (2) and layer (100).
        f.write(_tag(1, 2) + _varint(len(name_b)) + name_b)
        f.write(_tag(2 if v1 else 100, 2) + _varint(len(layer_bytes)))
        f.write(layer_bytes)
        size = f.tell()
    return size


def _write_parts(f: BinaryIO, parts: list[bytes | np.ndarray]) -> None:
    for p in parts:
        f.write(p if isinstance(p, bytes) else memoryview(p).cast("B"))


"""Fast caffemodel weight loading: scan the protobuf wire format, read payloads in place.

The generic protobuf parse of a caffemodel holds the file bytes and a decoded copy at
once (2x the weights). Here only the tags and
lengths are decoded, through an mmap that touches just the header pages; each packed
float payload is then ``readinto`` its own freshly allocated, aligned numpy array, so
loading costs one copy and 1x the weight bytes. The scanner validates every length
against its enclosing message, so a truncated or corrupt file fails with the byte offset.
"""

from __future__ import annotations

import math
import mmap
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.caffe import schema
from engine.errors import CorruptModelError, ModelError

if TYPE_CHECKING:  # numpy is imported where used: a run's supervisor never needs it
    import numpy as np

# Field numbers from caffe.proto (BVLC Caffe 1.0, the schema in engine/caffe/schema.py).
NET_NAME, NET_LAYER, NET_LAYERS_V1 = 1, 100, 2
LAYER_NAME, LAYER_TYPE, LAYER_BLOBS = 1, 2, 7
V1_NAME, V1_TYPE, V1_BLOBS = 4, 5, 6
BLOB_SHAPE, BLOB_DATA, BLOB_DOUBLE = 7, 5, 8
BLOB_LEGACY = {1: 0, 2: 1, 3: 2, 4: 3}  # num, channels, height, width
SHAPE_DIM = 1

VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5
ITEMSIZE = {"<f4": 4, "<f8": 8}  # a blob's data (float) and double_data


@dataclass
class BlobRecord:
    """Where one BlobProto's values live in the file and what shape it declares."""

    shape: tuple[int, ...]
    offset: int = -1  # start of the packed payload
    nbytes: int = 0
    dtype: str = "<f4"
    unpacked: list[int] = field(default_factory=list)  # element offsets, unpacked encoding

    @property
    def count(self) -> int:
        return self.nbytes // ITEMSIZE[self.dtype] + len(self.unpacked)


@dataclass
class LayerRecord:
    """One layer message of a caffemodel: name, type, byte range and blobs."""

    index: int
    name: str
    type: str
    start: int  # offset of the layer's tag in the file
    body: int  # offset of the layer message's first byte
    end: int
    v1: bool
    blobs: list[BlobRecord]


def _varint(buf, pos: int, end: int, path: str) -> tuple[int, int]:
    result = shift = 0
    start = pos
    while True:
        if pos >= end:
            raise CorruptModelError(path, start, "varint runs past the end of its message")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise CorruptModelError(path, start, "varint longer than 10 bytes")


def _fields(buf, pos: int, end: int, path: str) -> Iterator[tuple[int, int, int, int, int]]:
    """Yield (field, wire type, value or payload start, payload end, tag offset)."""
    while pos < end:
        tag_at = pos
        key, pos = _varint(buf, pos, end, path)
        number, wtype = key >> 3, key & 7
        if number == 0:
            raise CorruptModelError(path, tag_at, "field number 0 is not valid protobuf")
        if wtype == VARINT:
            value, pos = _varint(buf, pos, end, path)
            yield number, wtype, value, pos, tag_at
        elif wtype == LENGTH:
            length, pos = _varint(buf, pos, end, path)
            if pos + length > end:
                raise CorruptModelError(
                    path, tag_at,
                    f"field {number} claims {length} bytes but only {end - pos} remain "
                    "in its message (file truncated?)",
                )
            yield number, wtype, pos, pos + length, tag_at
            pos += length
        elif wtype in (FIXED32, FIXED64):
            size = 4 if wtype == FIXED32 else 8
            if pos + size > end:
                raise CorruptModelError(path, tag_at, f"fixed-size field {number} truncated")
            yield number, wtype, pos, pos + size, tag_at
            pos += size
        else:
            raise CorruptModelError(path, tag_at, f"invalid wire type {wtype} (field {number})")


def _blob(buf, start: int, end: int, path: str) -> BlobRecord:
    dims: list[int] = []
    legacy = [None, None, None, None]
    rec = BlobRecord(shape=())
    for number, wtype, a, b, tag_at in _fields(buf, start, end, path):
        if number == BLOB_SHAPE and wtype == LENGTH:
            for n2, w2, a2, b2, _ in _fields(buf, a, b, path):
                if n2 != SHAPE_DIM:
                    continue
                if w2 == LENGTH:  # packed dims
                    p = a2
                    while p < b2:
                        d, p = _varint(buf, p, b2, path)
                        dims.append(d)
                elif w2 == VARINT:
                    dims.append(a2)
        elif number in BLOB_LEGACY and wtype == VARINT:
            legacy[BLOB_LEGACY[number]] = a
        elif number in (BLOB_DATA, BLOB_DOUBLE) and wtype == LENGTH:
            itemsize = 4 if number == BLOB_DATA else 8
            if (b - a) % itemsize:
                raise CorruptModelError(
                    path, tag_at, f"packed payload of {b - a} bytes is not a multiple of {itemsize}"
                )
            if rec.offset >= 0 or rec.unpacked:
                raise CorruptModelError(path, tag_at, "blob holds its values in several runs")
            rec.offset, rec.nbytes = a, b - a
            rec.dtype = "<f4" if number == BLOB_DATA else "<f8"
        elif number == BLOB_DATA and wtype == FIXED32:
            rec.unpacked.append(a)  # proto2 also allows one tag per float
    if dims:
        rec.shape = tuple(dims)
    elif any(v is not None for v in legacy):
        rec.shape = tuple(1 if v is None else v for v in legacy)
    else:
        rec.shape = (rec.count,)
    count = math.prod(rec.shape)  # Python ints: a huge declared shape must not wrap
    if count != rec.count:
        raise CorruptModelError(
            path, start, f"blob declares shape {rec.shape} ({count} values) but holds {rec.count}"
        )
    return rec


def scan(path: str | os.PathLike) -> list[LayerRecord]:
    """Layer and blob locations of a caffemodel, reading only its headers."""
    path = os.fspath(path)
    size = os.path.getsize(path)
    if size == 0:
        return []
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        layers = []
        for number, wtype, a, b, tag_at in _fields(buf, 0, size, path):
            if wtype != LENGTH or number not in (NET_LAYER, NET_LAYERS_V1):
                continue
            v1 = number == NET_LAYERS_V1
            name_f, type_f, blobs_f = (V1_NAME, V1_TYPE, V1_BLOBS) if v1 else (
                LAYER_NAME, LAYER_TYPE, LAYER_BLOBS)
            name, type_name, blobs = "", "", []
            for n2, w2, a2, b2, _ in _fields(buf, a, b, path):
                if n2 == name_f and w2 == LENGTH:
                    name = bytes(buf[a2:b2]).decode("utf-8", "replace")
                elif n2 == type_f and v1 and w2 == VARINT:
                    type_name = schema.V1_TYPE_BY_NUMBER.get(a2, str(a2))
                elif n2 == type_f and not v1 and w2 == LENGTH:
                    type_name = bytes(buf[a2:b2]).decode("utf-8", "replace")
                elif n2 == blobs_f and w2 == LENGTH:
                    blobs.append(_blob(buf, a2, b2, path))
            layers.append(LayerRecord(len(layers), name, type_name, tag_at, a, b, v1, blobs))
        return layers


def read_blobs(path: str | os.PathLike, layer: LayerRecord) -> list[np.ndarray]:
    """The layer's blobs as float32 arrays, each read straight from the file into its own
    aligned buffer (no intermediate bytes object)."""
    path = os.fspath(path)
    with open(path, "rb", buffering=0) as f:
        return [read_blob(f, blob, path) for blob in layer.blobs]


def read_blob(f, blob: BlobRecord, path: str) -> np.ndarray:
    """One blob as a float32 array of its shape, read from the open file ``f``."""
    import numpy as np
    if blob.unpacked:
        return _read_unpacked(f, blob).reshape(blob.shape)
    arr = np.empty(blob.nbytes // ITEMSIZE[blob.dtype], blob.dtype)
    if blob.nbytes == 0:  # a blob without values: nothing to read
        return arr.astype(np.float32).reshape(blob.shape)
    readinto_at(f, memoryview(arr).cast("B"), blob.offset, path)
    if blob.dtype != "<f4":
        arr = arr.astype(np.float32)  # double_data: Caffe nets compute in float
    return arr.reshape(blob.shape)


# User-mode Linux 7.2 loses what its kernel writes into an anonymous page that was swapped
# out and in before: reclaim drops the page as clean and the stale swap copy comes back
# (docs/sandboxes.md: a read() into swapped heap buffers, a third of them wrong afterwards,
# none with the same bytes stored from user space). Where the uml backend sets this, a
# blob is read through a small locked buffer and copied in from user space.
UML_READS_ENV = "EDGEPROF_UML_COPY_READS"
# ... and its destination is faulted in ascending page order first: glibc copies backward
# when the two buffers alias modulo 4 KiB, and pages faulted top-down each take a host
# mapping of their own under UML, up to the host's vm.max_map_count (docs/sandboxes.md).
# "unordered" leaves the copy's own fault order: only to reproduce that stall.
UNORDERED = "unordered"
SCRATCH_BYTES = 1 << 20
PAGE = 4096


_scratch = threading.local()


def _locked_scratch() -> memoryview:
    """SCRATCH_BYTES of anonymous memory, locked (never reclaimed) where mlock allows; one
    per thread: the workers of a multi-worker policy load at once, and a buffer they shared
    would hand one LOAD another's bytes."""
    view = getattr(_scratch, "view", None)
    if view is None:
        import ctypes

        buf = mmap.mmap(-1, SCRATCH_BYTES)
        address = ctypes.addressof(ctypes.c_char.from_buffer(buf))
        ctypes.CDLL(None, use_errno=True).mlock(ctypes.c_void_p(address),
                                                ctypes.c_size_t(SCRATCH_BYTES))
        view = _scratch.view = memoryview(buf)
    return view


def fault_ascending(view: memoryview) -> None:
    """Write a zero into each page of ``view``, lowest first: its fresh pages fault in
    ascending order (the bytes are about to be overwritten whole). Plain faults, as the
    copy's own: madvise(MADV_POPULATE_WRITE) faults faster under UML, but it takes each
    page as accessed, and a copy larger than the run's limit was OOM-killed with swap to
    spare (docs/sandboxes.md)."""
    import numpy as np
    if len(view):
        touched = np.frombuffer(view, np.uint8)
        touched[::PAGE] = 0
        touched[-1] = 0


def uml_ascending() -> bool:
    """Whether this process runs in a UML guest that keeps its faults ascending: it also
    writes memory before it reads it (a read of a never-written page maps the zero page,
    one host mapping per page under UML)."""
    return os.environ.get(UML_READS_ENV, UNORDERED) != UNORDERED


def readinto_at(f, view: memoryview, offset: int, path: str) -> None:
    """Fill ``view`` from the file ``f`` at ``offset`` (readinto may return short counts)."""
    f.seek(offset)
    scratch = _locked_scratch() if os.environ.get(UML_READS_ENV) else None
    ascending = uml_ascending()
    got = 0
    while got < len(view):
        if scratch is None:
            n = f.readinto(view[got:])
        else:
            n = f.readinto(scratch[:len(view) - got])
            if ascending:  # a piece at a time: the whole blob at once can outrun reclaim
                fault_ascending(view[got:got + n])  # under a limit smaller than the blob
            view[got:got + n] = scratch[:n]  # stored from user space: the kernel tracks it
        if not n:
            raise CorruptModelError(path, offset + got, "file ended inside a blob")
        got += n


def _read_unpacked(f, blob: BlobRecord) -> np.ndarray:
    import numpy as np

    out = np.empty(len(blob.unpacked), "<f4")
    for i, off in enumerate(blob.unpacked):
        f.seek(off)
        out[i] = np.frombuffer(f.read(4), "<f4")[0]
    return out


def load_partial(path: str | os.PathLike) -> tuple[LayerRecord, list[np.ndarray]]:
    """The single layer of a partial caffemodel and its blobs."""
    layers = scan(path)
    if len(layers) != 1:
        raise ModelError(
            f"{os.fspath(path)}: a partial caffemodel holds one layer, found {len(layers)}"
        )
    return layers[0], read_blobs(path, layers[0])

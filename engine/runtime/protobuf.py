"""Caffe's ``CopyTrainedLayersFrom`` parse, allocation by allocation: the message a LOAD
holds in the Caffe-faithful runtime (``engine.runtime``)."""

from __future__ import annotations

import os

import numpy as np

from engine.caffe import wire

# protobuf 3.12 (Caffe's in Debian bullseye) parses a file from a FileInputStream in 8 KiB
# chunks through an EpsCopyInputStream, which reads each chunk's last 16 bytes (its slop)
# through a 32-byte patch buffer that also holds the next chunk's first 16. A packed float
# field crossing chunks is copied one region at a time (a chunk, then a patch, ...), and
# before each copy its RepeatedField grows to max(4, 2 x capacity, needed) elements when
# full; every allocation holds an 8-byte header (the Rep's arena pointer) before the
# elements. (parse_context.h ReadPackedFixed, NextBuffer; repeated_field.h Reserve.)
STREAM_CHUNK = 8192
SLOP = 16
MIN_REPEATED = 4
REP_HEADER = 8
F32 = 4


def _varint_size(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def repeated_capacities(offset: int, nbytes: int, file_size: int) -> list[tuple[int, int]]:
    """(elements filled, new capacity) of each growth of the RepeatedField<float> that
    protobuf 3.12 fills from a packed field of ``nbytes`` starting at file ``offset``."""
    n = nbytes // F32
    if n == 0:
        return []
    tag = offset - 1 - _varint_size(nbytes)  # data is field 5, a one-byte tag
    chunk_end = (tag // STREAM_CHUNK + 1) * STREAM_CHUNK
    in_patch = tag >= chunk_end - SLOP
    region_end = chunk_end + SLOP if in_patch else chunk_end
    avail = min(region_end, file_size) - offset
    steps: list[tuple[int, int]] = []
    size = cap = 0
    left = nbytes
    while True:
        num = min(left, avail) // F32 if left > avail else left // F32
        if size + num > cap:
            cap = max(MIN_REPEATED, cap * 2, size + num)
            steps.append((size, cap))
        size += num
        if left <= avail:
            return steps
        rem = avail - num * F32
        left -= num * F32
        if in_patch:  # on to the next chunk, past the 16 bytes the patch held
            next_start = chunk_end
            chunk_end = min(next_start + STREAM_CHUNK, file_size)
            avail = chunk_end - next_start - SLOP + rem
        else:  # on to the patch over this chunk's end and the next one's start
            avail = SLOP + rem
        in_patch = not in_patch


def _buffer(n: int) -> np.ndarray:
    """``n`` uninitialised floats in one malloc of Rep's size (header + elements) as
    protobuf's ``RepeatedField::Reserve`` makes it; also keeps numpy's cache of small
    freed buffers (under 1 KiB) out of the way, which would pin the top of the heap that
    the message's frees let glibc trim."""
    raw = np.empty(REP_HEADER + F32 * n, np.uint8)
    return raw[REP_HEADER:].view(np.float32)


def _copy(values: np.ndarray) -> np.ndarray:
    """A RepeatedField's copy: reserved at exactly the source's size."""
    out = _buffer(values.size)
    out[:] = values.reshape(-1)
    return out


def parse_blob(f, blob: wire.BlobRecord, path: str) -> np.ndarray:
    """A blob's values as protobuf's parse holds them: grown buffer by buffer, each
    growth copying what was read and freeing the old buffer. Returns the final buffer's
    filled part (a view: the buffer's capacity stays allocated while it lives)."""
    if blob.unpacked or blob.dtype != "<f4":  # not what Caffe writes: no growth modelled
        return wire.read_blob(f, blob, path)
    n = blob.nbytes // F32
    steps = repeated_capacities(blob.offset, blob.nbytes, os.fstat(f.fileno()).st_size)
    buf = _buffer(0)
    for i, (filled, cap) in enumerate(steps):
        grown = _buffer(cap)
        grown[:filled] = buf[:filled]
        buf = grown
        end = steps[i + 1][0] if i + 1 < len(steps) else n
        wire.readinto_at(f, memoryview(buf[filled:end]).cast("B"),
                         blob.offset + F32 * filled, path)
    return buf[:n]


def _free_in_order(layers: list[list[np.ndarray]]) -> None:
    """Free every buffer, first layer first and each layer's blobs in order, as protobuf
    destroys a RepeatedPtrField (Python would free a dropped list from its end)."""
    for blobs in layers:
        while blobs:
            del blobs[0]
    layers.clear()


class Message:
    """A parsed caffemodel (``NetParameter``) as Caffe holds it while it copies the
    weights: the layers' blobs by name, and for a V1 file also the cleared V1 layers,
    which keep their buffers. ``release`` frees it in the order Caffe does."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        self.records = wire.scan(self.path)
        with open(self.path, "rb", buffering=0) as f:
            parsed = [[parse_blob(f, b, self.path) for b in rec.blobs] for rec in self.records]
        self.v1_retained: list[list[np.ndarray]] = []
        if any(rec.v1 for rec in self.records):
            # UpgradeNetAsNeeded: NetParameter original_param(*param), exact-size copies
            original = [[_copy(b) for b in blobs] for blobs in parsed]
            # UpgradeV1Net: CopyFrom(original) reuses the parsed buffers, clear_layers()
            # keeps them, and each V1 layer's blobs are copied into a new V2 layer
            self.v1_retained = parsed
            self.blobs = [[_copy(b) for b in blobs] for blobs in original]
            _free_in_order(original)  # when UpgradeNetAsNeeded returns
        else:
            self.blobs = parsed
        self.layers = {rec.name: blobs for rec, blobs in zip(self.records, self.blobs)}

    def release(self) -> None:
        """~NetParameter: its V2 layers (``layer_``, declared last) first, then the
        cleared V1 layers (``layers_``)."""
        self.layers.clear()
        _free_in_order(self.blobs)
        _free_in_order(self.v1_retained)




def message_peak_bytes(path: str | os.PathLike) -> int:
    """The most of ``Message(path)`` resident at once, from the file's layout alone (no
    allocation): during the parse, the blobs parsed so far plus, at each growth of the
    current blob's buffer, the old buffer and the copy of its contents (the rest of a new
    buffer is not touched yet); then, for a V1 file, the parsed blobs and the upgrade's
    two copies. What a Caffe-faithful LOAD holds besides the weights (``engine.model``'s
    memory replay)."""
    path = os.fspath(path)
    size = os.path.getsize(path)
    records = wire.scan(path)
    held = peak = 0
    for rec in records:
        for blob in rec.blobs:
            for filled, _ in repeated_capacities(blob.offset, blob.nbytes, size):
                peak = max(peak, held + 2 * F32 * filled)
            held += blob.nbytes
    peak = max(peak, held)
    if any(rec.v1 for rec in records):
        peak = max(peak, 3 * held)
    return peak

"""EdgeCaffe's ModelSplitter, plus the per-network description file.

Every layer of a caffemodel becomes ``<stem>_partials/<stem>NN.partial.caffemodel``: a
one-layer ``NetParameter`` named ``<stem>NN`` whose layer is a byte-for-byte copy of the
source layer (V1 models stay V1), NN being the layer's position in the caffemodel.
Unlike EdgeCaffe, deploy layers are matched to partials by name, not by position, so no
hand-set ``has-input-layer``/``excluded-partials`` is needed; the match is validated
(blob count and shapes, Caffe's legacy-dims rule) when splitting, not at run time.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import stat
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from engine import digests
from engine.caffe import graph, io, wire
from engine.errors import CorruptModelError, ModelError
from engine.files import normal_mode, parse_json, read_regular, sha256_file, write_text_atomic
from engine.procs import stamped_tempdir, sweep

DESCRIPTION_VERSION = 2  # 2: every partial's SHA-256, the caffemodel's required
MAX_FILE_BYTES = 16 * 2**20  # a description of a few thousand layers is a few MiB


@dataclass
class LayerInfo:
    """One runtime layer as the description file records it."""

    index: int
    name: str
    type: str
    kind: str  # conv | fc | other
    part: str  # conv | fc: DeepEye's split of the net
    model_index: int | None  # position in the caffemodel, None if it has no entry there
    partial: str | None  # partial file, relative to the description's folder
    param_count: int
    param_bytes: int
    file_bytes: int
    output_shapes: list[list[int]]
    macs: int
    flops: int
    partial_sha256: str | None = None  # the partial's bytes (check_partials); None: no partial


@dataclass
class Description:
    """What the engine needs to know about a split network, without opening its model."""

    network: str
    stem: str
    prototxt: str
    caffemodel: str
    format: str  # V1 | V2
    input_shape: list[int]
    param_count: int
    param_bytes: int
    num_conv_layers: int
    num_fc_layers: int
    layers: list[LayerInfo]
    unmatched_partials: list[str]
    # what the model files were at split time, so a run can refuse changed ones up front
    caffemodel_bytes: int | None = None
    prototxt_sha256: str | None = None
    caffemodel_sha256: str | None = None  # what bulk reads (check_caffemodel)
    version: int = DESCRIPTION_VERSION
    path: str = ""  # where it was loaded from; not stored

    def activation_bytes(self, batch: int | None) -> int:
        """Bytes of every layer's outputs at ``batch`` (None: the deploy batch the shapes
        are recorded at), all held at once as Caffe holds them."""
        total = 0
        for layer in self.layers:
            for shape in layer.output_shapes:
                total += math.prod(shape) // shape[0] * (batch or shape[0]) * 4
        return total

    def resolve(self, relative: str) -> Path:
        return Path(self.path).parent / relative

    def to_json(self) -> str:
        data = asdict(self)
        data.pop("path")
        return json.dumps(data, indent=1)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Description:
        path = os.fspath(path)
        try:
            data = parse_json(read_regular(path, "network description", MAX_FILE_BYTES))
        except (OSError, ValueError) as exc:
            raise ModelError(f"cannot read network description {path}: {exc}") from None
        if not isinstance(data, dict):
            raise ModelError(f"{path} is not a network description (a JSON object); re-run "
                             f"the split stage")
        if data.get("version") != DESCRIPTION_VERSION:
            raise ModelError(
                f"{path}: description version {data.get('version')} is not "
                f"{DESCRIPTION_VERSION}; re-run the split stage"
            )
        try:
            data["layers"] = [LayerInfo(**layer) for layer in data["layers"]]
            desc = cls(**data, path=path)
            _check_types(desc)
            return desc
        except (KeyError, TypeError, AttributeError) as exc:
            raise ModelError(f"{path} is not a network description ({exc}); re-run the "
                             f"split stage") from None

    @classmethod
    def load_checked(cls, path: str | os.PathLike, files: bool = True) -> Description:
        """``load``, then the description against its prototxt (``check_prototxt``) and,
        with ``files``, its model files (``check_files``): every verb that reads a
        description reads it through this, so a hand-edited one that contradicts its
        model is refused before anything runs or is written."""
        desc = cls.load(path)
        if files:  # first: its message names a model file changed since the split
            desc.check_files()
        desc.check_prototxt()
        return desc

    def check_prototxt(self) -> None:
        """Refuse a description whose layers are not its prototxt's at the deploy batch:
        their number, order, names, types, output shapes and parameter counts and bytes
        (one line naming the first difference and the fix)."""
        fix = "re-run the split stage"
        if self.path and Path(self.path).name != f"{self.stem}.description.json":
            raise ModelError(f"{self.path}: describes stem {self.stem!r}, not its own file's; "
                             f"{fix}")
        zoo_name_of_other_files(self.network, self.stem, str(self.path))
        prototxt = self.resolve(self.prototxt)
        if not prototxt.is_file():
            raise ModelError(f"{prototxt}, the deploy prototxt of {self.network}, is missing; "
                             f"{fix}")
        try:
            g = graph.build_graph(io.read_prototxt(prototxt), source=str(prototxt))
        except (ValueError, KeyError) as exc:
            raise ModelError(f"{prototxt}: {exc}") from None
        if len(g.layers) != len(self.layers):
            raise ModelError(f"{self.path}: describes {len(self.layers)} layers but "
                             f"{prototxt} has {len(g.layers)}; {fix}")
        start = self.num_conv_layers  # DeepEye's split, which the split may place by hand
        if start + self.num_fc_layers != len(g.layers):
            raise ModelError(f"{self.path}: num_conv_layers {start} + num_fc_layers "
                             f"{self.num_fc_layers} is not its {len(g.layers)} layers; {fix}")
        for info, layer in zip(self.layers, g.layers):
            part = "fc" if layer.index >= start else "conv"
            kind = "other"
            if layer.param_shapes:
                kind = "fc" if part == "fc" or layer.type == "InnerProduct" else "conv"
            theirs = (layer.index, layer.name, layer.type,
                      [list(s) for s in layer.top_shapes], layer.param_count,
                      layer.param_bytes, layer.macs, layer.flops, part, kind)
            ours = (info.index, info.name, info.type, info.output_shapes, info.param_count,
                    info.param_bytes, info.macs, info.flops, info.part, info.kind)
            if layer.param_shapes and not info.partial:  # its weights would never load
                raise ModelError(f"{self.path}: layer {info.index} '{info.name}' has "
                                 f"{len(layer.param_shapes)} parameter blob(s) in {prototxt} "
                                 f"but no partial file; {fix}")
            for what, a, b in zip(("index", "name", "type", "output shapes",
                                   "parameter count", "parameter bytes", "MACs", "FLOPs",
                                   "DeepEye part", "kind"), ours, theirs):
                if a != b:
                    raise ModelError(f"{self.path}: layer {info.index} '{info.name}' has "
                                     f"{what} {a!r} but {prototxt} says {b!r}; {fix}")
        inputs = [list(x.top_shapes[0]) for x in g.layers if x.type == "Input"][:1]
        if self.input_shape != (inputs[0] if inputs else []):
            raise ModelError(f"{self.path}: input_shape {self.input_shape!r} but {prototxt} "
                             f"says {inputs[0] if inputs else []!r}; {fix}")
        totals = (sum(x.param_count for x in self.layers), sum(x.param_bytes for x in self.layers))
        if (self.param_count, self.param_bytes) != totals:
            raise ModelError(f"{self.path}: totals {self.param_count} parameters, "
                             f"{self.param_bytes} bytes, but its layers add up to {totals[0]}, "
                             f"{totals[1]}; {fix}")

    def check_caffemodel(self) -> None:
        """The whole caffemodel, which bulk reads, is the one split (same bytes): a model
        file regenerated in its place (another seed, the same size) would give bulk
        other weights than the partials give every other policy."""
        whole = self.resolve(self.caffemodel)
        if not whole.is_file():
            raise ModelError(f"{whole}, the caffemodel bulk reads for {self.network}, is "
                             f"missing; restore it or re-run the split stage")
        if not digests.holds(whole, self.caffemodel_sha256):
            raise ModelError(f"{whole} does not match {self.path}'s caffemodel_sha256 (the "
                             f"file changed after {self.network} was split, or the description "
                             f"was edited): re-run the split stage")
        # the entry bulk reads for each layer (model_index) holds that layer
        names = {rec.index: rec.name for rec in wire.scan(whole)}
        for info in self.layers:
            if info.model_index is not None and names.get(info.model_index) != info.name:
                raise ModelError(f"{self.path}: layer {info.index} '{info.name}' has "
                                 f"model_index {info.model_index}, which is "
                                 f"'{names.get(info.model_index)}' in {whole}; re-run the "
                                 f"split stage")

    def check_reads(self, bulk: bool) -> None:
        """What a run or forward pass reads is what was split, byte for byte: bulk the
        whole caffemodel, every other policy the partials."""
        if bulk:
            self.check_caffemodel()
        else:
            self.check_partials()

    def check_partials(self) -> None:
        """Every partial is the one split (same bytes): a partial replaced by another
        model's of the same size would load other weights than bulk's, unseen."""
        for info in self.layers:
            if info.partial and not digests.holds(self.resolve(info.partial), info.partial_sha256):
                raise ModelError(f"{self.resolve(info.partial)} does not match {self.path}'s "
                                 f"partial_sha256 of layer {info.index} (the file changed after "
                                 f"{self.network} was split, or the description was edited): "
                                 f"re-run the split stage")
            try:
                held = [rec.name for rec in wire.scan(self.resolve(info.partial))] \
                    if info.partial else [info.name]
            except CorruptModelError:  # split so: its LOAD says where (a result)
                continue
            if held != [info.name]:  # a partial of another layer, its digest moved along
                raise ModelError(f"{self.path}: layer {info.index} '{info.name}' reads "
                                 f"{info.partial}, which holds {held}; re-run the split stage")

    def check_files(self) -> None:
        """Refuse model files that changed since the split (one line naming the file and
        the fix): each partial's size, the whole caffemodel's size (Bulk reads it) and the
        prototxt's hash. Contents are checked when the layers are read."""
        fix = "re-run the split stage"
        if self.path and Path(self.path).name != f"{self.stem}.description.json":
            raise ModelError(f"{self.path}: describes stem {self.stem!r}, not its own file's; "
                             f"{fix}")
        zoo_name_of_other_files(self.network, self.stem, str(self.path))
        prototxt = self.resolve(self.prototxt)
        if not prototxt.is_file():
            raise ModelError(f"{prototxt}, the deploy prototxt of {self.network}, is missing; "
                             f"{fix}")
        for key, what in (("prototxt_sha256", prototxt),
                          ("caffemodel_sha256", self.resolve(self.caffemodel))):
            if not isinstance(getattr(self, key), str):
                raise ModelError(f"{self.path} records no {key} to check {what} against; "
                                 f"{fix}")
        missing = next((x for x in self.layers if x.partial and
                        not isinstance(x.partial_sha256, str)), None)
        if missing is not None:
            raise ModelError(f"{self.path}: layer {missing.index} '{missing.name}' records no "
                             f"partial_sha256 to check {missing.partial} against; {fix}")
        if not digests.holds(prototxt, self.prototxt_sha256):
            raise ModelError(f"{prototxt} does not match {self.path}'s prototxt_sha256 (the "
                             f"file changed after {self.network} was split, or the description "
                             f"was edited); {fix}")
        home = Path(os.path.abspath(Path(self.path).parent))
        for info in self.layers:
            # a partial elsewhere (another network's) would load other weights unseen;
            # lexically, so a partials folder linked in from elsewhere still counts as here
            where = Path(os.path.abspath(self.resolve(info.partial))) if info.partial else None
            if where is not None and home not in where.parents:
                raise ModelError(f"{self.path}: layer {info.index} '{info.name}' reads "
                                 f"{info.partial}, outside {home}; {fix}")
            # bulk finds a layer's weights in the caffemodel by model_index, the others by
            # the partial named after it: the two must be one entry
            named = None if info.model_index is None else partial_name(self.stem,
                                                                       info.model_index)
            if (where.name if where else None) != named:
                raise ModelError(f"{self.path}: layer {info.index} '{info.name}' has "
                                 f"model_index {info.model_index!r} but partial "
                                 f"{info.partial!r}; {fix}")
        files = [(self.resolve(x.partial), x.file_bytes) for x in self.layers if x.partial]
        caffemodel = self.resolve(self.caffemodel)
        if caffemodel.exists():  # only Bulk reads it, and says so if it is gone
            files.append((caffemodel, self.caffemodel_bytes))
        for path, size in files:
            try:
                st = path.stat()
            except OSError as exc:
                raise ModelError(f"{path} of {self.network}: {exc.strerror}; {fix}") from None
            if not stat.S_ISREG(st.st_mode):  # a device or a FIFO would hang or never end
                raise ModelError(f"{path}, named by {self.path}, is not a regular file; {fix}")
            actual = st.st_size
            if size is not None and actual != size:
                raise ModelError(f"{path} is {actual} bytes, not the {size} it had when "
                                 f"{self.network} was split (truncated or replaced); {fix}")


_HIDDEN_PARTIALS = re.compile(r"(\..+_partials\.)\d+\.[^./]+")  # stamped_tempdir's

def check_batch_fits(chains: Iterable[Iterable[Description]], batch: int | None) -> None:
    """Refuse a batch at which the networks that can be in memory at once need more than
    the RAM and swap available now (a typo such as --batch 10000 would otherwise swap the
    host for minutes before failing; a sandbox's guest, sized to its limit, holds the rest
    in its swap): one line naming them, the bytes and the fix. ``chains``:
    the networks of each chain run one after another (engine.schedule.plan's
    one_after_another; a network alone is a chain), so its largest one counts."""
    import psutil

    def need(desc: Description) -> int:  # weights and every layer's outputs, all held
        return desc.param_bytes + desc.activation_bytes(batch)

    largest = [max(chain, key=need) for chain in map(list, chains) if chain]
    total = sum(map(need, largest))
    available = psutil.virtual_memory().available + psutil.swap_memory().free
    if total <= available:
        return
    at = f"--batch {batch}" if batch is not None else "at the deploy batch"
    if len(largest) == 1:
        who, fix = f"{largest[0].network} alone needs", "a smaller --batch"
    else:
        counts = Counter(d.network for d in largest)
        names = ", ".join(n if k == 1 else f"{n} x{k}" for n, k in sorted(counts.items()))
        who = f"the {len(largest)} networks that can be in memory at once ({names}) need"
        fix = ("a smaller --batch or a policy that runs networks one after another "
               "(bulk, linear, execprio-inter)")
    raise ModelError(f"{at}: {who} about {total / 2**30:.1f} GiB (weights and every "
                     f"layer's outputs), more than the {available / 2**30:.1f} GiB of RAM "
                     f"and swap available now; use {fix}")


_INT = int
_TYPES = {"index": _INT, "name": str, "type": str, "kind": str, "part": str,
          "param_count": _INT, "param_bytes": _INT, "file_bytes": _INT, "macs": _INT,
          "flops": _INT}


def _check_types(desc: Description) -> None:
    """TypeError naming the first field of a wrong type (JSON gives what it is given)."""
    def need(value: object, kind: type, where: str) -> None:
        if not isinstance(value, kind) or isinstance(value, bool) or (
                kind is _INT and value < 0):
            raise TypeError(f"{where} is {value!r}, not a{' non-negative' if kind is _INT else ''}"
                            f" {kind.__name__}")

    for key in ("network", "stem", "prototxt", "caffemodel", "format"):
        need(getattr(desc, key), str, key)
    for key in ("param_count", "param_bytes", "num_conv_layers", "num_fc_layers"):
        need(getattr(desc, key), _INT, key)
    for layer in desc.layers:
        where = f"layer {layer.index!r}"
        for key, kind in _TYPES.items():
            need(getattr(layer, key), kind, f"{where} {key}")
        for key in ("model_index",):
            if getattr(layer, key) is not None:
                need(getattr(layer, key), _INT, f"{where} {key}")
        if layer.partial is not None:
            need(layer.partial, str, f"{where} partial")
        if not isinstance(layer.output_shapes, list) or not all(
                isinstance(s, list) and all(isinstance(d, int) and not isinstance(d, bool)
                                            and d > 0 for d in s)
                for s in layer.output_shapes):
            raise TypeError(f"{where} output_shapes is {layer.output_shapes!r}")


def description_index(folder: str | os.PathLike) -> dict[str, Path]:
    """Network name -> description file, for every ``*.description.json`` in ``folder``."""
    if not Path(folder).is_dir():
        raise ModelError(f"--split {folder} is not a folder; point it at the split "
                         f"stage's output (the folder of *.description.json files)")
    found: dict[str, Path] = {}
    for path in sorted(Path(folder).glob("*.description.json")):
        network = Description.load(path).network
        if network in found:
            raise ModelError(f"{found[network]} and {path} both describe {network}; "
                             f"remove one, or split one under another --network name")
        found[network] = path
    return found


def partial_name(stem: str, index: int) -> str:
    """EdgeCaffe's name: two-digit index, three digits from 100 on (``GoogleNet_SOS151``)."""
    return f"{stem}{index:02d}.partial.caffemodel"


def fc_part_start(g: graph.NetGraph, fc_start: str | None = None) -> int:
    """Index of the first layer of DeepEye's "fc" part: ``fc_start`` if given, else the
    first InnerProduct layer; a net without one is all "conv" (EdgeCaffe's TinyYolo 40|0)."""
    if fc_start is not None:
        try:
            return g.layer(fc_start).index
        except KeyError:
            raise ModelError(f"fc part start '{fc_start}' is not a layer of the net") from None
    for layer in g.layers:
        if layer.type == "InnerProduct":
            return layer.index
    return len(g.layers)


def _shapes_match(stored: tuple[int, ...], expected: tuple[int, ...]) -> bool:
    """Caffe's ShapeEquals: legacy 4-D dims match when the shape right-aligns into them."""
    if stored == expected:
        return True
    if len(stored) == 4 and len(expected) <= 4:
        return stored == io.legacy_dims(expected)
    return False


def zoo_name_of_other_files(network: str, stem: str, where: str) -> None:
    """A network named as a zoo network must be that network's files (its stem): one
    labelled GenderNet that is AgeNet's files would be measured as GenderNet."""
    from engine.caffe.zoo import ZOO

    zoo = ZOO.get(network)
    if zoo is not None and zoo.stem != stem:
        raise ModelError(f"{where}: the network is named {network}, the zoo's network of "
                         f"{zoo.stem} files, but these are {stem}'s; give it a name of its "
                         f"own (split --network) or split {zoo.stem}'s files")


def split_model(caffemodel: str | os.PathLike, prototxt: str | os.PathLike,
                out_dir: str | os.PathLike, network: str | None = None,
                fc_start: str | None = None) -> Path:
    """Split ``caffemodel`` into partials under ``out_dir`` and write its description.

    The partials folder is built under a temporary name and renamed into place, and the
    description is written last, so an interrupted split leaves no usable half result."""
    caffemodel, prototxt, out_dir = Path(caffemodel), Path(prototxt), Path(out_dir)
    stem = caffemodel.name.removesuffix(".caffemodel")
    zoo_name_of_other_files(network or "", stem, str(caffemodel))
    g = graph.build_graph(io.read_prototxt(prototxt), source=str(prototxt))
    records = wire.scan(caffemodel)
    if not records:
        raise ModelError(f"{caffemodel}: caffemodel holds no layers")
    by_name = {}
    for rec in records:
        by_name.setdefault(rec.name, rec)
    created = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / f"{stem}_partials"
    # a split killed before it could clean up (SIGKILL) left its folder, of this network
    # or another split into the same --out: gone now (their owners gone)
    for prefix in sorted({m.group(1) for m in map(_HIDDEN_PARTIALS.fullmatch,
                                                   os.listdir(out_dir)) if m}):
        sweep(out_dir, prefix)
    tmp = stamped_tempdir(f".{stem}_partials.", out_dir)
    normal_mode(tmp, directory=True)
    try:
        sizes, digests = _write_partials(caffemodel, records, stem, tmp)
        start = fc_part_start(g, fc_start)
        layers = []
        for layer in g.layers:
            rec = by_name.get(layer.name)
            _check_params(layer, rec, caffemodel)
            has_file = rec is not None
            part = "fc" if layer.index >= start else "conv"
            kind = "other"
            if layer.param_shapes:
                kind = "fc" if part == "fc" or layer.type == "InnerProduct" else "conv"
            layers.append(LayerInfo(
                index=layer.index, name=layer.name, type=layer.type, kind=kind, part=part,
                model_index=rec.index if has_file else None,
                partial=f"{final.name}/{partial_name(stem, rec.index)}" if has_file else None,
                param_count=layer.param_count, param_bytes=layer.param_bytes,
                file_bytes=sizes[rec.index] if has_file else 0,
                partial_sha256=digests[rec.index] if has_file else None,
                output_shapes=[list(s) for s in layer.top_shapes],
                macs=layer.macs, flops=layer.flops,
            ))
        matched = {info.model_index for info in layers}
        input_layer = next((x for x in g.layers if x.type == "Input"), None)
        desc = Description(
            network=network or g.name or stem, stem=stem,
            prototxt=os.path.relpath(prototxt, out_dir),
            caffemodel=os.path.relpath(caffemodel, out_dir),
            format="V1" if records[0].v1 else "V2",
            input_shape=list(input_layer.top_shapes[0]) if input_layer else [],
            param_count=g.param_count, param_bytes=4 * g.param_count,
            num_conv_layers=start, num_fc_layers=len(g.layers) - start,
            layers=layers,
            unmatched_partials=[f"{final.name}/{partial_name(stem, r.index)}"
                                for r in records if r.index not in matched],
            caffemodel_bytes=caffemodel.stat().st_size,
            prototxt_sha256=sha256_file(prototxt),
            caffemodel_sha256=sha256_file(caffemodel),
        )
        # the old partials aside, the new ones in and the old ones gone, with signals
        # held back: an interrupted re-split leaves the old set or the new one, never half
        # of one (nor the old one hidden); a signal held back is delivered after it
        from engine.signals import committed, signals_deferred

        with signals_deferred():
            old = None
            if final.exists():
                old = stamped_tempdir(f".{stem}_partials.", out_dir)
                os.replace(final, old / "old")
            try:
                os.replace(tmp, final)
            except OSError:
                if old is not None:  # the old set back in its place
                    os.replace(old / "old", final)
                    old.rmdir()
                raise
            write_text_atomic(out_dir / f"{stem}.description.json", desc.to_json())
            committed()
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if created and not any(out_dir.iterdir()):  # a failed split leaves no empty --out
            out_dir.rmdir()
        raise
    return out_dir / f"{stem}.description.json"


def _write_partials(caffemodel: Path, records: list[wire.LayerRecord], stem: str,
                    folder: Path) -> tuple[dict[int, int], dict[int, str]]:
    """Each record's partial file written into ``folder``: (sizes, SHA-256s) by index."""
    sizes, digests = {}, {}
    with open(caffemodel, "rb") as f:
        for rec in records:
            f.seek(rec.body)
            body = f.read(rec.end - rec.body)
            if len(body) != rec.end - rec.body:
                raise ModelError(f"{caffemodel}: file changed while splitting")
            name = partial_name(stem, rec.index)
            sizes[rec.index] = io.write_partial(
                folder / name, name.removesuffix(".partial.caffemodel"), body, rec.v1)
            digests[rec.index] = sha256_file(folder / name)
    return sizes, digests


OWN_PROTOTXT = "give --prototxt the deploy prototxt this caffemodel was trained with"


def _check_params(layer: graph.Layer, rec: wire.LayerRecord | None, model: Path) -> None:
    if rec is None:
        if layer.param_shapes:
            raise ModelError(
                f"{model}: has no layer named '{layer.name}', whose {len(layer.param_shapes)} "
                "parameter blobs the prototxt needs (is this the right caffemodel?)"
            )
        return
    if len(rec.blobs) != len(layer.param_shapes):
        raise ModelError(
            f"{model}: layer '{layer.name}' has {len(rec.blobs)} blobs but the prototxt "
            f"needs {len(layer.param_shapes)} (shapes {list(layer.param_shapes)}); {OWN_PROTOTXT}"
        )
    for i, (blob, expected) in enumerate(zip(rec.blobs, layer.param_shapes)):
        if not _shapes_match(blob.shape, expected):
            raise ModelError(
                f"{model}: layer '{layer.name}' blob {i} has shape {blob.shape} but the "
                f"prototxt needs {expected} ({math.prod(expected)} values); {OWN_PROTOTXT}"
            )

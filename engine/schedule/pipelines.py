"""Seeded multi-network pipelines, stored as files that alone reproduce a run's workload.

A pipeline is a list of arrivals, each a time (seconds after the run starts) and the
networks that arrive then. ``batch`` puts every network in one arrival at t=0; ``poisson``
gives each network its own arrival after an exponential gap (rate per second);
``normal`` draws gaps from N(mean, sd) clipped at 0. Pipeline i of a set comes from
``numpy.random.default_rng([seed, i])`` (PCG64), so the same seed gives the same
pipelines on any machine, and adding pipelines never changes the earlier ones.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict, dataclass, field, fields

from engine.errors import EdgeprofError
from engine.files import parse_json, read_regular, write_text_atomic

ARRIVAL_MODES = ("batch", "poisson", "normal")
# each mode's parameters, and their defaults where a command line leaves them out
ARRIVAL_PARAMS = {"batch": (), "poisson": ("rate",), "normal": ("mean", "sd")}
ARRIVAL_DEFAULTS = {"rate": 1.0, "mean": 1.0, "sd": 0.5}
MAX_ARRIVAL_S = 1e6  # eleven days: far beyond any run, and still exact in nanoseconds
MAX_FILE_BYTES = 16 * 2**20  # a pipeline of 100,000 networks is about 2 MB
MAX_LENGTH = 10_000  # networks per generated pipeline (the paper's have up to 16)


class PipelineError(EdgeprofError):
    """A pipeline file or generator setting that cannot be used."""


@dataclass
class Arrival:
    time_s: float
    networks: list[str]


@dataclass
class Pipeline:
    name: str
    arrivals: list[Arrival]
    seed: int | None = None
    arrival_mode: str = "batch"
    param_bytes: int = 0  # total parameter bytes of its networks
    size_bin: str = ""
    generator: dict = field(default_factory=dict)

    def instances(self) -> list[tuple[int, str, int, float]]:
        """(instance id, network, arrival index, arrival time) in arrival order."""
        out = []
        for a_index, arrival in enumerate(self.arrivals):
            for net in arrival.networks:
                out.append((len(out), net, a_index, arrival.time_s))
        return out

    def networks(self) -> list[str]:
        return [net for a in self.arrivals for net in a.networks]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)


def _arrival(item: object) -> Arrival:
    if not isinstance(item, dict) or set(item) != {"time_s", "networks"}:
        raise TypeError(f"an arrival must be {{\"time_s\": ..., \"networks\": [...]}}, "
                        f"not {item!r:.80}")
    time_s, networks = item["time_s"], item["networks"]
    if isinstance(time_s, bool) or not isinstance(time_s, (int, float)):
        raise TypeError(f"arrival time {time_s!r:.40} is not a number")
    # an integer past a float's range is no time either (math.isfinite would overflow)
    if (isinstance(time_s, int) and not 0 <= time_s <= MAX_ARRIVAL_S) or not (
            math.isfinite(time_s) and 0 <= time_s <= MAX_ARRIVAL_S):
        raise ValueError(f"arrival time {str(time_s)[:20]}{'...' if len(str(time_s)) > 20 else ''}"
                         f" is not a number of seconds from 0 to {MAX_ARRIVAL_S:g}")
    if not isinstance(networks, list) or not all(isinstance(n, str) and n for n in networks):
        raise TypeError(f"an arrival's networks must be a list of network names, not "
                        f"{networks!r:.80}")
    return Arrival(float(time_s), list(networks))


def load_pipeline(path: str | os.PathLike) -> Pipeline:
    """A pipeline file, checked: one-line errors name the file and what is wrong."""
    path = os.fspath(path)
    try:
        data = parse_json(read_regular(path, "pipeline", MAX_FILE_BYTES), finite=True)
        if not isinstance(data, dict) or not isinstance(data.get("arrivals"), list):
            raise TypeError("not a pipeline: a JSON object with an \"arrivals\" list")
        unknown = sorted(set(data) - {f.name for f in fields(Pipeline)})
        if unknown:
            raise TypeError(f"unknown key(s) {', '.join(unknown)}")
        arrivals = [_arrival(a) for a in data.pop("arrivals")]
        if not isinstance(data.get("name"), str) or not data["name"]:
            raise TypeError("the pipeline has no name")
        if not re.fullmatch(r"[A-Za-z0-9_-]+", data["name"]):
            raise ValueError(f"pipeline name {data['name']!r}: letters, digits, _ and - only "
                             f"(it names folders)")
        _check_fields(data, arrivals)
        pipeline = Pipeline(arrivals=arrivals, **data)
    except (OSError, ValueError, KeyError, TypeError) as exc:  # UnicodeError is a ValueError
        raise PipelineError(f"cannot read pipeline {path}: {exc}") from None
    if not pipeline.networks():
        raise PipelineError(f"pipeline {path} has no networks")
    return pipeline


def _check_fields(data: dict, arrivals: list[Arrival]) -> None:
    """The generator's fields, which go into every run record and table: their types, an
    arrival mode the arrivals keep, and a size bin that holds the byte count."""
    seed = data.get("seed")
    if "arrival_mode" not in data:  # a hand-written file: say what its arrivals are
        data["arrival_mode"] = ("batch" if all(a.time_s == 0 for a in arrivals)
                                else "given")
    mode = data["arrival_mode"]
    nbytes, label = data.get("param_bytes", 0), data.get("size_bin", "")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise TypeError(f"seed {seed!r:.40} is not an integer >= 0")
    if mode not in (*ARRIVAL_MODES, "given"):
        raise ValueError(f"arrival_mode {mode!r:.40} is not one of {', '.join(ARRIVAL_MODES)}"
                         f" or given (times set by hand)")
    if mode == "batch" and any(a.time_s != 0 for a in arrivals):
        raise ValueError("arrival_mode batch, but not every network arrives at 0 s")
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        raise TypeError(f"param_bytes {nbytes!r:.40} is not a byte count")
    if not isinstance(label, str):
        raise TypeError(f"size_bin {label!r:.40} is not a bin label")
    if not isinstance(data.get("generator", {}), dict):
        raise TypeError("generator is not a JSON object")
    if label and nbytes and not bin_holds(label, nbytes):
        raise ValueError(f"size_bin {label!r:.40} does not hold its param_bytes {nbytes}")
    if label and not nbytes and bin_holds(label, 0) is None:
        raise ValueError(f"size_bin {label!r:.40} is no bin label (\"0-100 MiB\", "
                         f"\">=400 MB\")")
    times = [a.time_s for a in arrivals]
    if times != sorted(times):
        raise ValueError("arrivals out of time order: list them as they arrive")
    count = sum(len(a.networks) for a in arrivals)
    if count > MAX_LENGTH:
        raise ValueError(f"{count} networks: at most {MAX_LENGTH} per pipeline")


def bin_holds(label: str, param_bytes: int) -> bool | None:
    """Whether the bin ``size_bin`` names holds ``param_bytes`` (None for a label it
    cannot make)."""
    num = r"(\d+(?:\.\d+)?(?:e[+-]\d+)?)"  # as size_bin writes edges ({:g})
    m = re.fullmatch(rf"(?:{num}-{num}|>={num}) (MiB|MB)", label)
    if m is None:
        return None
    size = param_bytes / BIN_UNITS[m.group(4)]
    if m.group(3) is not None:
        return size >= float(m.group(3))
    return float(m.group(1)) <= size < float(m.group(2))



def save_pipeline(pipeline: Pipeline, path: str | os.PathLike) -> None:
    write_text_atomic(path, pipeline.to_json())


BIN_UNITS = {"MiB": 2**20, "MB": 10**6}


def size_bin(param_bytes: int, edges: list[float], unit: str = "MiB") -> str:
    """Label of the bin holding ``param_bytes``: bins end at ``edges`` (ascending, in
    ``unit``: MiB, or decimal MB as the paper's 400 MB bins)."""
    size = param_bytes / BIN_UNITS[unit]
    lo = 0.0
    for hi in edges:
        if size < hi:
            return f"{lo:g}-{hi:g} {unit}"
        lo = hi
    return f">={lo:g} {unit}"


def check_arrival(arrival: dict, longest: int) -> None:
    """Arrival settings that can make a pipeline ``run`` accepts: a known mode, its
    parameters, and gaps that keep the last of ``longest`` networks (with five times the
    mean gap each) within MAX_ARRIVAL_S."""
    mode = arrival.get("mode", "batch")
    if mode not in ARRIVAL_MODES:
        raise PipelineError(f"arrival mode '{mode}' is not one of {', '.join(ARRIVAL_MODES)}")
    # finite too: an infinite rate or gap writes Infinity, which no pipeline file may hold
    if mode == "poisson" and not 0 < arrival.get("rate", 0) < math.inf:
        raise PipelineError("poisson arrivals need a positive, finite 'rate' (networks per "
                            "second)")
    if mode == "normal" and not (0 <= arrival.get("mean", -1) < math.inf
                                 and 0 <= arrival.get("sd", -1) < math.inf):
        raise PipelineError("normal arrivals need finite 'mean' and 'sd' gaps in seconds, "
                            "both >= 0")
    gap = {"poisson": lambda: 5 / arrival["rate"],
           "normal": lambda: 5 * (arrival["mean"] + arrival["sd"])}.get(mode, lambda: 0.0)()
    if not gap * max(longest - 1, 0) <= MAX_ARRIVAL_S:
        raise PipelineError(f"{mode} arrivals of up to {longest} networks would arrive "
                            f"later than {MAX_ARRIVAL_S:g} s; raise the rate or shorten the "
                            f"gaps")


def generate_pipelines(seed: int, count: int, network_bytes: dict[str, int],
                       length: tuple[int, int], arrival: dict,
                       bins_mib: list[float] | None = None, prefix: str = "p",
                       bin_unit: str = "MiB") -> list[Pipeline]:
    """``count`` pipelines of ``length[0]..length[1]`` networks drawn with replacement
    from ``network_bytes`` (name -> parameter bytes, used for the size bins)."""
    mode = arrival.get("mode", "batch")
    check_arrival(arrival, length[1])
    if not re.fullmatch(r"[A-Za-z0-9_-]+", prefix):
        raise PipelineError(f"pipeline name prefix {prefix!r}: letters, digits, _ and - only")
    if bins_mib is not None and (not all(math.isfinite(b) and b > 0 for b in bins_mib)
                                 or list(bins_mib) != sorted(set(bins_mib))):
        raise PipelineError(f"size bins {list(bins_mib)}: upper edges in {bin_unit}, > 0 and "
                            f"strictly ascending")
    if not 0 <= seed:
        raise PipelineError(f"seed {seed}: must be >= 0")
    lo, hi = length
    if not 1 <= lo <= hi <= MAX_LENGTH:
        raise PipelineError(f"pipeline length range {list(length)} must satisfy 1 <= min <= "
                            f"max <= {MAX_LENGTH}")
    names = sorted(network_bytes)
    if not names:
        raise PipelineError("no networks to draw pipelines from")
    import numpy as np  # here: a run's supervisor loads pipelines, never draws them

    pipelines = []
    for i in range(count):
        rng = np.random.default_rng([seed, i])
        n = int(rng.integers(lo, hi + 1))
        nets = [names[j] for j in rng.integers(0, len(names), size=n)]
        if mode == "batch":
            arrivals = [Arrival(0.0, nets)]
        else:
            if mode == "poisson":
                gaps = rng.exponential(1.0 / arrival["rate"], size=n)
            else:
                gaps = np.clip(rng.normal(arrival["mean"], arrival["sd"], size=n), 0, None)
            gaps[0] = 0.0  # the first network arrives at the start, as in EdgeCaffe
            times = np.cumsum(gaps)
            arrivals = [Arrival(round(float(t), 6), [net]) for t, net in zip(times, nets)]
        total = sum(network_bytes[net] for net in nets)
        pipelines.append(Pipeline(
            name=f"{prefix}{i:03d}", arrivals=arrivals, seed=seed, arrival_mode=mode,
            param_bytes=total, size_bin=size_bin(total, bins_mib or [], bin_unit),
            generator={"index": i, "length": [lo, hi], "arrival": dict(arrival)},
        ))
    return pipelines

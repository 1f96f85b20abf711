"""What one ``python -m engine run`` asks for, built once from the command line.

A ``RunRequest`` is taken as it is by the host supervisor (``runner.supervise``) and by
the vm backend, which hands it to the guest as JSON (``to_json``/``from_json``), as the
supervisor hands the measured child its ``spec.json``. Adding a run option therefore
means adding a field here and a flag in ``engine.commands.run``, nowhere else.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from engine.errors import EdgeprofError
from engine.files import parse_json, read_regular


@dataclass
class RunOptions:
    """What the measured child needs to execute the pipeline."""

    blas_threads: int = 1
    seed: int = 0
    batch: int | None = None
    budget: int | None = None  # memory budget for masa admission (bytes)
    timeout_s: float | None = None
    stall_s: float | None = None  # end a run that has not moved for this long (runner.stall)
    estimates: dict[str, int] | None = None  # network -> peak bytes from a profiling run
    pin_cpu: bool = False  # the child alone on one CPU, supervisor and sampler on the rest
    runtime: str = "lean"  # engine.runtime: what each stage allocates and frees


@dataclass
class ProbeOptions:
    process: bool = True  # per-window VmHWM/rusage
    cgroup: bool = True  # per-window cgroup counters when the backend gives a cgroup
    gnu_time: bool = True
    heap_profile: bool = False
    cpu_profile: bool = False
    sample_hz: float = 100.0  # 0 disables the sampler
    sample_uss: bool = False


@dataclass
class LimitOptions:
    backend: str = "none"
    ram_bytes: int | None = None
    swap_bytes: int | None = None  # swap allowed on top of RAM; None: unlimited ("max")


@dataclass
class RunRequest:
    pipeline: str  # pipeline .json, absolute
    policy: str  # the policy's canonical name (parse_policy(...).name)
    split: str  # folder of the split networks' *.description.json, absolute
    out: str  # the run folder to write
    options: RunOptions = field(default_factory=RunOptions)
    limits: LimitOptions = field(default_factory=LimitOptions)
    probes: ProbeOptions = field(default_factory=ProbeOptions)
    force: bool = False  # replace an existing run folder

    def with_changes(self, **changes: object) -> RunRequest:
        """A copy with top-level fields or ``limits`` fields replaced (``backend=``...)."""
        limit_names = {f.name for f in fields(LimitOptions)}
        limits = {k: changes.pop(k) for k in list(changes) if k in limit_names}
        return replace(self, limits=replace(self.limits, **limits), **changes)

    def inputs(self) -> tuple[str, ...]:
        """What the run reads, which its --out must not contain."""
        return (self.pipeline, self.split)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> RunRequest:
        try:
            data = parse_json(text)
            return cls(**{**data, "options": RunOptions(**data["options"]),
                          "limits": LimitOptions(**data["limits"]),
                          "probes": ProbeOptions(**data["probes"])})
        except (ValueError, KeyError, TypeError) as exc:
            raise EdgeprofError(f"not a run request ({type(exc).__name__}: {exc})") from None

    @classmethod
    def read(cls, path: str | Path) -> RunRequest:
        try:
            text = read_regular(path, "run request", 2**20)
        except (OSError, ValueError) as exc:
            raise EdgeprofError(f"cannot read the run request: {exc}") from None
        return cls.from_json(text)

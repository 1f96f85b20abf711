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
from engine.limits.base import LimitRequest


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
class RunRequest:
    pipeline: str  # pipeline .json, absolute
    policy: str  # the policy's canonical name (parse_policy(...).name)
    split: str  # folder of the split networks' *.description.json, absolute
    out: str  # the run folder to write
    options: RunOptions = field(default_factory=RunOptions)
    limits: LimitRequest = field(default_factory=LimitRequest)
    probes: ProbeOptions = field(default_factory=ProbeOptions)
    force: bool = False  # replace an existing run folder

    def with_changes(self, **changes: object) -> RunRequest:
        """A copy with top-level fields or ``limits`` fields replaced (``backend=``...)."""
        limit_names = {f.name for f in fields(LimitRequest)}
        limits = {k: changes.pop(k) for k in list(changes) if k in limit_names}
        return replace(self, limits=replace(self.limits, **limits), **changes)

    def settings(self) -> dict[str, object]:
        """The runs table's columns (engine.analysis.tidy) that this request alone decides,
        as a run made from it records them: what the workflow's aggregate checks each of
        its runs against (engine.analysis.provenance.check_settings). Under ``auto`` the
        backend is the host's choice, so neither it nor the sandbox is given, except that
        ``auto`` boots no sandbox without a limit (engine.limits.select)."""
        from engine.limits import SANDBOXES

        options, probes, limits = self.options, self.probes, self.limits
        settings: dict[str, object] = {
            "batch": options.batch, "blas_threads": options.blas_threads,
            "seed": options.seed, "runtime": options.runtime,
            "cpu_pin_asked": options.pin_cpu, "timeout_s": options.timeout_s,
            "stall_s": options.stall_s, "budget_bytes": options.budget,
            "estimates": None if options.estimates is None else json.dumps(
                options.estimates, sort_keys=True),
            "sample_hz": float(probes.sample_hz), "heap_profile": probes.heap_profile,
            "cpu_profile": probes.cpu_profile, "sample_uss": probes.sample_uss,
            "swap_bytes": limits.swap_bytes}  # the limit: the run folder's name says it
        if limits.backend != "auto":
            settings |= {"backend": limits.backend,
                         "sandbox": limits.backend if limits.backend in SANDBOXES else "none"}
        elif limits.limit_bytes is None:
            settings["sandbox"] = "none"
        return settings

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
                          "limits": LimitRequest(**data["limits"]),
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

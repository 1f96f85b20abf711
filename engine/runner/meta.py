"""``meta.json``: the typed, versioned record of one run.

``RunMeta`` is written by ``RunMeta.write`` only (atomically) and read back by
``RunMeta.read`` (the analysis reads runs through it). Each field's ``doc`` is what
docs/engine.md's "What a run writes" says about it: ``python -m engine.runner.meta``
prints that list, and a test checks that the page carries it. A quantity that was not measured is
None, never 0. This module imports nothing else of the runner, so readers of run folders
can use it without the supervisor's dependencies.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import sys
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from engine.errors import EdgeprofError
from engine.files import atomic_path, parse_json, read_regular
from engine.units import PAGE_SIZE

SCHEMA_VERSION = 7  # 2: started_at, host_load, cpu_affinity; 3: runtime; 4: table_digests;
# 5: record_digest; 6: pipeline.sha256, timeout_s, stall_s, estimates,
# description_sha256; 7: the sandbox's facts under sandbox (was vm), its kernel as kernel
# (was sandbox)
FILE = "meta.json"
MAX_RECORD_BYTES = 16 * 2**20  # a record is a few kB; a vm run's console tail included


def _f(doc: str, default: object = None) -> object:
    if isinstance(default, (dict, list)):
        return field(default_factory=type(default), metadata={"doc": doc})
    return field(default=default, metadata={"doc": doc})


@dataclass
class PipelineInfo:
    path: str = _f("the pipeline file the run read")
    name: str = _f("pipeline name (p000, ...)")
    arrival_mode: str | None = _f("batch, poisson, normal, or given (times set by hand)")
    size_bin: str | None = _f("the pipeline-size bin of its total weights")
    param_bytes: int | None = _f("total weight bytes of its networks")
    networks: list[str] = _f("network of each instance, in instance order", [])
    sha256: str | None = _f("SHA-256 of the pipeline file (the workflow's aggregate "
                            "matches it to its own pipeline of that name)")


@dataclass
class RunMeta:
    schema_version: int = _f("version of this record's layout", SCHEMA_VERSION)
    pipeline: PipelineInfo = field(default_factory=PipelineInfo,
                                   metadata={"doc": "the pipeline: " + ", ".join(
                                       f.name for f in fields(PipelineInfo))})
    policy: str = _f("the policy's canonical name (partial:2, ...)")
    policy_family: str | None = _f("the policy without its worker count")
    workers: int | None = _f("loader/worker threads of the policy")
    blas_threads: int | None = _f("BLAS threads per operation")
    seed: int | None = _f("input image seed")
    batch: int | None = _f("batch size override (None: each network's deploy batch)")
    runtime: str = _f("what each stage allocates and frees: lean (the engine's own) or "
                      "caffe (as Caffe 1.0 under EdgeCaffe); records before it: lean", "lean")
    budget_bytes: int | None = _f("masa's admission budget")
    timeout_s: float | None = _f("--timeout: the run's time limit (None: none)")
    stall_s: float | None = _f("--stall-timeout: how long a run may not move (None: no "
                               "stall watch)")
    estimates: dict | None = _f("masa's --estimates: network -> peak bytes (None: none)")
    limit_bytes: int | None = _f("the requested RAM limit (None: unconstrained)")
    swap_bytes: int | None = _f("swap allowed on top of the limit (None: unlimited)")
    backend: str | None = _f("the limit backend that ran it (auto resolved)")
    limit_enforced: bool = _f("whether the limit really bound the run", False)
    limits: dict = _f("the backend's own facts: cgroup, applied limits, why unenforced, "
                      "auto's choice", {})
    emulated: bool = _f("run in a sandbox (TCG guest, or UML: its faults and system calls go "
                  "through the guest kernel): its times are not native", False)
    termination: str = _f("ok, memory (OOM-killed), timeout or error; ok also for a run "
                          "whose child finished every task and wrote its outputs (its "
                          "summary, written last, says so) and was killed only as it "
                          "exited: its termination_detail names the kill", "error")
    termination_detail: str = _f("why it ended so", "")
    exit_code: int | None = _f("the measured process's exit code")
    oom_kills: int | None = _f("processes the kernel OOM-killed in the run's cgroup "
                               "(None: no cgroup to count them)")
    wall_s: float | None = _f("wall time of the measured process, seconds")
    started_at: float | None = _f("when the measured process started, seconds since the "
                                  "epoch (the order runs ran in)")
    host_load: dict | None = _f("the host's 1-minute load average at the start and end, "
                                "its mean busy CPUs over the run (this run's included), "
                                "the run's own (own_cpus) and other work's (other_cpus)")
    cpu_affinity: dict | None = _f("CPUs the measured child and the probes (supervisor, "
                                   "sampler) could run on; asked: --pin-cpu; pinned: child "
                                   "alone on one")
    probes: dict = _f("which probes were on", {})
    sampler: dict | None = _f("the sampler's own statistics (rate achieved, cost)")
    host: dict = _f("kernel, machine, CPUs, Python, page size (bytes: the unit of its "
                    "swap and fault counters) and transparent hugepage mode of the host",
                    {})
    versions: dict = _f("edgeprof, numpy and protobuf versions", {})
    description_files: dict = _f("network -> the description file used", {})
    description_sha256: dict = _f("network -> SHA-256 of that description file (it holds the "
                                  "weights' digests): the workflow's aggregate matches it to "
                                  "its own split", {})
    running_at_end: list[str] = _f("tasks still running when it ended (an OOM's victim)",
                                   [])
    tasks_finished: int | None = _f("tasks that finished (the rows of tasks.csv)")
    t0_monotonic_ns: int | None = _f("the run's time origin on CLOCK_MONOTONIC")
    child: dict | None = _f("the measured child's summary (status, wall_s and cpu_s of the "
                            "pipeline, BLAS, task count, probes: process_windows_chained, "
                            "process_status; outputs_sha256: what the pipeline computed; "
                            "numpy_hugepage_advice: whether numpy asked "
                            "for transparent hugepages; glibc_tunables: the malloc "
                            "settings it ran with)")
    gnu_time: dict | None = _f("GNU time's report as gt_* columns")
    hwm_rss_bytes: int | None = _f("the run's resident high-water mark: max of GNU time "
                                   "and every window's VmHWM")
    table_digests: dict = _f("SHA-256 of each table the run wrote (tasks.csv, networks.csv, "
                             "samples.csv): the tables refuse one that differs", {})
    sandbox: dict | None = _f("the sandbox backends only (uml, vm): which kernel (`kernel`: "
                              "uml or vm, the qemu guest), accelerator, guest kernel and "
                         "RAM, swap device, boot time, guest-wide vmstat deltas, a boot "
                         "retried after an emulation fault (retried_boot: why, the first "
                         "console's tail); under uml also how its processes were trapped "
                         "(`uml_userspace`), the most host mappings a guest process held and "
                         "the host's cap (`host_maps_peak`, `host_max_map_count`), the "
                         "preload its processes ran with (`uml_preload`: path, SHA-256, "
                         "source) and where its host processes ran (`host_affinity`: asked, "
                         "pinned, the UML CPU, the supervisor's, why not) (docs/sandboxes.md)")

    record_digest: str | None = _f("SHA-256 of this record without this field, as canonical "
                                   "JSON: a record edited by hand is refused")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict, source: str = FILE) -> RunMeta:
        version = data.get("schema_version", 0)  # 0: written before the record had one
        if isinstance(version, bool) or not isinstance(version, int) or version > SCHEMA_VERSION:
            raise EdgeprofError(f"{source}: schema_version {version!r} is newer than this "
                                f"edgeprof reads ({SCHEMA_VERSION}); update edgeprof")
        # whatever schema it claims: a record without its digest (written before records
        # carried one, or stripped of it) cannot be told from one edited by hand
        if "record_digest" not in data:
            raise EdgeprofError(f"{source} carries no record_digest (written before records "
                                f"carried one, schema 5, or edited): re-run the run")
        if data.get("record_digest") != record_digest(data):
            raise EdgeprofError(f"{source} was edited after the run (its content no longer "
                                f"matches its record_digest); restore it or re-run the run")
        if version < 7 and "vm" in data:  # the sandbox's facts under their old names
            data = {k: v for k, v in data.items() if k != "vm"} | {"sandbox": _renamed(
                data["vm"], "sandbox", "kernel")}
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise EdgeprofError(f"{source}: unknown field(s) {', '.join(unknown)}; not a run "
                                f"record of this edgeprof")
        # the digest is the file's, checked above; write() renews it
        values = {k: v for k, v in data.items()
                  if k not in ("pipeline", "schema_version", "record_digest")}
        _check_types(cls, values, source)
        pipe = data.get("pipeline") or {}
        if not isinstance(pipe, dict):
            raise EdgeprofError(f"{source}: its pipeline is not a JSON object; not a run "
                                f"record of this edgeprof")
        pipe_names = {f.name for f in fields(PipelineInfo)}
        pipeline = PipelineInfo(**{k: v for k, v in pipe.items() if k in pipe_names})
        return cls(**values, pipeline=pipeline, schema_version=SCHEMA_VERSION)

    @classmethod
    def read(cls, folder: str | os.PathLike) -> RunMeta:
        path = Path(folder) / FILE
        try:  # a regular file of bounded size: a FIFO would block, a device never end
            data = parse_json(read_regular(path, "run record", MAX_RECORD_BYTES))
        except (OSError, ValueError) as exc:
            raise EdgeprofError(f"cannot read the run record {path}: {exc}") from None
        if not isinstance(data, dict):
            raise EdgeprofError(f"{path}: not a run record (a JSON object)")
        return cls.from_dict(data, str(path))

    def write(self, folder: str | os.PathLike) -> None:
        data = self.to_dict()
        data["record_digest"] = record_digest(data)
        with atomic_path(Path(folder) / FILE) as tmp:
            tmp.write_text(json.dumps(data, indent=1))


_SCALARS = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,),
            "dict": (dict,), "list": (list,)}


def _renamed(value: object, old: str, new: str) -> object:
    """A dict with its key ``old`` named ``new`` (anything else as it is)."""
    if not isinstance(value, dict) or old not in value:
        return value
    return {new if k == old else k: v for k, v in value.items()}


def _check_types(cls: type, values: dict, source: str) -> None:
    """Each value of a typed field its type (``wall_s: "fast"`` would break the tables far
    from the file at fault); fields of other types are left to their readers."""
    for f in fields(cls):
        if f.name not in values:
            continue
        value, kinds = values[f.name], [k.strip() for k in str(f.type).split("|")]
        if value is None and "None" in kinds:
            continue
        allowed = tuple(t for k in kinds for t in _SCALARS.get(k.split("[")[0], ()))
        if not allowed:
            continue
        if (isinstance(value, bool) and bool not in allowed) or not isinstance(value, allowed):
            raise EdgeprofError(f"{source}: {f.name} is {value!r:.40}, not {f.type}; not a "
                                f"run record this edgeprof wrote")


def record_digest(data: dict) -> str:
    """SHA-256 of a record's fields but ``record_digest``, as sorted compact JSON (what a
    parse and a dump give back unchanged)."""
    body = {k: v for k, v in data.items() if k != "record_digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"))
                          .encode()).hexdigest()


THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"


def host_facts() -> dict:
    """The machine a run's numbers come from."""
    return {"kernel": platform.release(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "python": sys.version.split()[0],
            "page_size": PAGE_SIZE, "transparent_hugepage": transparent_hugepage()}


def transparent_hugepage(path: str = THP_ENABLED) -> str | None:
    """The kernel's transparent hugepage mode (always, madvise, never; None: unknown)."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    found = re.search(r"\[(\w+)\]", text)
    return found.group(1) if found else None


# numpy advises transparent hugepages for its large arrays; Caffe's allocations (plain
# malloc) do not. On VMs whose host backs guest memory lazily, first touches of huge
# pages then cost up to 10x, intermittently, once a process holds a few hundred MiB
# (benchmarks/bench_first_touch.py): a LOAD's time would depend on the host's state.
# The measured child gets 4 KiB pages unless the variable is set explicitly.
HUGEPAGE_ENV = "NUMPY_MADVISE_HUGEPAGE"
# glibc raises its mmap threshold (up to 32 MiB) each time it frees a large mapped block,
# so whether a later buffer is mapped (and given back when freed) or carved from the heap
# (and kept resident when freed) depends on every earlier free: a few KiB decide whether
# 40-64 MiB of freed heap stays resident (seen with real Caffe loading FaceNet, and in the
# engine alike). Fixed at its default 128 KiB, every buffer of 128 KiB or more is mapped
# and given back at once, in both runtimes and in the real-Caffe reference
# (engine/realcaffe), so their resident sets compare stage by stage.
MALLOC_ENV = "GLIBC_TUNABLES"
MALLOC_TUNABLES = "glibc.malloc.mmap_threshold=131072"
MMAP_THRESHOLD = int(MALLOC_TUNABLES.split("=")[1])


def mmap_threshold(tunables: str | None) -> int | None:
    """glibc's mmap threshold in a ``GLIBC_TUNABLES`` value (None: not set there)."""
    for item in (tunables or "").split(":"):
        name, _, value = item.partition("=")
        if name == "glibc.malloc.mmap_threshold" and value.isdigit():
            return int(value)
    return None


def numpy_hugepage_advice() -> bool | None:
    """Whether this process's numpy advises transparent hugepages for its large arrays
    (None: this numpy does not say)."""
    try:
        from numpy._core.multiarray import _get_madvise_hugepage
    except ImportError:
        return None
    return bool(_get_madvise_hugepage())


def versions() -> dict[str, str]:
    from importlib.metadata import version

    import google.protobuf

    from engine import __version__
    # numpy's from its installed metadata: the supervisor never imports numpy itself
    return {"edgeprof": __version__, "numpy": version("numpy"),
            "protobuf": google.protobuf.__version__}


def describe() -> str:
    """The fields of meta.json as a Markdown list (docs/engine.md's "What a run writes")."""
    lines = []
    for f in fields(RunMeta):
        lines.append(f"- `{f.name}`: {f.metadata['doc']}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(describe())

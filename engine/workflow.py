"""What the Snakemake workflow (workflow/rules/common.smk) computes from its config.

Pure functions: validated config dicts in, command-line argument strings, job lists and
resource numbers out. Nothing here imports Snakemake, probes the host (no systemctl, no
qemu) or touches a file, so building the DAG stays cheap on a submit host and the rules
stay thin. Which runs go to the vm backend is a config choice (``vm.enabled``), never
decided by looking at the machine.
"""

from __future__ import annotations

import ast
import hashlib
import math
import os
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.schedule.policies import parse_policy
from engine.units import parse_size

Config = Mapping[str, Any]

UNLIMITED = "none"  # the limit label of the unconstrained runs


def _join(args: Iterable[object]) -> str:
    return shlex.join(str(a) for a in args)


# --- which code a job runs ------------------------------------------------------------------

# The CLI imports every stage's modules inside its command functions: follow only its
# top-level imports, and name each stage's own modules as entries instead. Likewise the
# engine.vm package, whose names are lazy re-exports of engine.vm.run (the run job names
# that module): importing engine.vm.uml to read its build record is not running a guest.
SHALLOW = frozenset({"engine.cli", "engine.vm"})
# What each kind of job runs, as engine modules; their imports are followed (function-level
# ones too: they run when the job does).
JOB_ENTRIES = {
    "models": ("engine.__main__", "engine.cli", "engine.caffe.generate"),
    "split": ("engine.__main__", "engine.cli", "engine.caffe.splitter"),
    "pipelines": ("engine.__main__", "engine.cli", "engine.schedule.pipelines",
                  "engine.caffe.splitter"),
    # the supervisor, the measured child, the sampler process, the vm path and its guest
    "run": ("engine.__main__", "engine.cli", "engine.runner.supervise",
            "engine.runner.child", "engine.probes.sampler", "engine.vm.run", "engine.vm.job"),
    "tables": ("engine.analysis.tables", "engine.analysis.reconcile"),
    "plots": ("engine.analysis.plots",),
    "model": ("engine.__main__", "engine.cli", "engine.model.train", "engine.model.evaluate"),
    "model_plots": ("engine.model.figures",),
}
POLICIES_MODULE = "engine.schedule.policies"


def _module_file(root: Path, name: str) -> Path | None:
    base = root.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _engine_imports(tree: ast.Module, package: str, nested: bool) -> set[str]:
    """engine modules (and their parent packages) that ``tree``, a module of ``package``,
    imports."""
    nodes = ast.walk(tree) if nested else tree.body
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: "from .conv import x" in engine.ops
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            # "from engine.x import y": y may be a module of package engine.x
            names = [base, *(f"{base}.{a.name}" for a in node.names)]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "engine":
                found.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return found


def job_modules(entries: Iterable[str], root: Path) -> dict[str, Path]:
    """Every engine module a job with these entry modules can run: the entries and,
    transitively, what they import (package ``__init__``s included)."""
    seen: dict[str, Path] = {}
    todo = list(entries)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = _module_file(root, name)
        if path is None:  # a name imported from a module, not a module
            continue
        seen[name] = path
        tree = ast.parse(path.read_text(), str(path))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        todo.extend(_engine_imports(tree, package, nested=name not in SHALLOW))
    return dict(sorted(seen.items()))


def _without_functions(source: str, names: set[str]) -> str:
    """``source`` minus its top-level functions called ``names``."""
    lines = source.splitlines(keepends=True)
    drop = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            drop.update(range(first - 1, node.end_lineno))
    return "".join(line for i, line in enumerate(lines) if i not in drop)


def code_fingerprint(job: str, root: Path) -> str:
    """A hash of the source of every module a ``job`` (a key of JOB_ENTRIES) runs, less the
    policies' graph builders: only a run calls those, and each run adds its own policy's
    fingerprint (policies.policy_fingerprint), so editing one policy reruns only its runs
    while any other shared line reruns every job that imports it."""
    from engine.schedule.policies import builder_function_names

    policy_builders = builder_function_names()
    modules = job_modules(JOB_ENTRIES[job], root)
    if not modules:  # a wrong root must not give every job the same, constant hash
        raise ValueError(f"no engine modules under {root}")
    h = hashlib.sha256()
    for name, path in modules.items():
        source = path.read_text()
        if name == POLICIES_MODULE:
            source = _without_functions(source, policy_builders)
        h.update(f"{name}\n{source}\n".encode())
    return h.hexdigest()[:16]


# --- what the schema cannot say ---------------------------------------------------------------


def check_config(config: Config) -> None:
    """Checks of the final, merged config that JSON schema cannot express; ValueError with
    one line naming the key and the fix."""
    if not str(config["results"]).strip():
        raise ValueError("config: results is empty; name the folder for all outputs")
    _check_results_folder(str(config["results"]))
    arrival = config["pipelines"]["arrival"]
    needs = {"poisson": ("rate",), "normal": ("mean", "sd")}.get(arrival["mode"], ())
    missing = [k for k in needs if k not in arrival]
    if missing:
        raise ValueError(f"config: pipelines.arrival mode {arrival['mode']} needs "
                         f"{' and '.join(missing)}; add {', '.join(f'{k}: ...' for k in missing)}")
    palette = config.get("plots", {}).get("palette")
    if palette is not None:
        from matplotlib import colormaps

        if palette not in colormaps:
            raise ValueError(f"config: plots.palette {palette!r} is not a matplotlib colormap "
                             f"(e.g. tab10, viridis)")
    run = config["run"]
    for key in ("timeout_s", "sample_hz"):
        if not math.isfinite(run[key]):
            raise ValueError(f"config: run.{key} {run[key]} must be a finite number")
    models = config["models"]
    if not models["zoo"] and not models["user"]:
        raise ValueError("config: models.zoo and models.user are both empty; name at least "
                         "one network for the pipelines to draw from")
    blocks = [("pipelines", config["pipelines"])]
    if vm_enabled(config) and not vm_runs_main(config):
        blocks.append(("vm.pipelines", config["vm"]["pipelines"]))
        unknown = sorted(set(config["vm"]["pipelines"]["networks"])
                         - set(models["zoo"]) - set(models["user"]))
        if unknown:
            raise ValueError(f"config: vm.pipelines.networks {', '.join(unknown)} not in "
                             f"models.zoo or models.user; add them there so they are "
                             f"generated and split")
    for key, block in blocks:
        lo, hi = block["length"]
        if lo > hi:
            raise ValueError(f"config: {key}.length [{lo}, {hi}] must be [fewest, most] "
                             f"networks per pipeline, fewest <= most")
    bins = config["pipelines"]["bins"]
    if not all(math.isfinite(b) for b in bins) or list(bins) != sorted(set(bins)):
        raise ValueError(f"config: pipelines.bins {list(bins)} must be strictly "
                         f"ascending upper edges")
    lists = [("run.limits", config["run"]["limits"])]
    if vm_enabled(config):
        lists.append(("vm.limits", config["vm"]["limits"]))
        lists += [(f"vm.also[{i}].limits", extra["limits"])
                  for i, extra in enumerate(config["vm"].get("also") or [])]
    for key, limits in lists:
        seen: dict[int, str] = {}
        for limit in map(str, limits):
            if limit == UNLIMITED:
                continue
            try:
                size = parse_size(limit)
            except Exception as exc:
                raise ValueError(f"config: memory limit {limit!r}: {exc}") from None
            if size in seen:  # one run under two labels
                raise ValueError(f"config: {key} {seen[size]!r} and {limit!r} are the same "
                                 f"size; list each limit once")
            seen[size] = limit
    _check_run_extras(config)
    reconcile = config["run"]["reconcile"]
    if reconcile_in_vm(config) and not vm_enabled(config):
        raise ValueError("config: run.reconcile.vm is true (config/config.yaml's default, "
                         "merged into yours) but vm.enabled is false: set run.reconcile to "
                         "{pipeline: p000, policy: linear, limit: none, vm: false}")
    names = (vm_pipeline_names(config) if reconcile_in_vm(config) and not vm_runs_main(config)
             else pipeline_names(config["pipelines"]["count"]))
    if reconcile["pipeline"] not in names:
        raise ValueError(f"config: run.reconcile.pipeline {reconcile['pipeline']!r} is not one "
                         f"of the {'vm ' if reconcile_in_vm(config) else ''}pipelines "
                         f"({', '.join(names[:3])}, ...)")


def _check_results_folder(results: str) -> None:
    """``results`` must be a folder this user can create or write into (not a file, not a
    read-only or pseudo filesystem such as /proc): said before any job starts."""
    path = Path(results)
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is not None and existing != path and not existing.is_dir():
        raise ValueError(f"config: results {results}: {existing} is not a folder")
    if path.exists() and not path.is_dir():
        raise ValueError(f"config: results {results} is a file; name a folder")
    real = (existing or Path(".")).resolve()
    if real == Path("/proc") or Path("/proc") in real.parents or Path("/sys") in (
            real, *real.parents):
        raise ValueError(f"config: results {results} is on a kernel pseudo filesystem; "
                         f"name a folder on disk")
    if existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"config: results {results}: {existing} is not writable; name a "
                         f"writable folder")


def _check_run_extras(config: Config) -> None:
    run = config["run"]
    total = run.get("swap_total")
    if total is not None:
        limits = {str(limit) for rs in run_sets(config) for limit in rs.limits} - {UNLIMITED}
        over = sorted(lim for lim in limits if parse_size(lim) > parse_size(str(total)))
        if over:
            raise ValueError(f"config: run.swap_total {total} is below the limit(s) "
                             f"{', '.join(over)}: it caps memory + swap together, so it "
                             f"must be at least every limit")
    policy = run.get("probe_overhead_policy")
    if policy is not None and parse_policy(policy).name not in {
            parse_policy(p).name for p in run["policies"]}:
        raise ValueError(f"config: run.probe_overhead_policy {policy!r} is not one of "
                         f"run.policies: its unprobed runs pair with that policy's runs")
    if policy is not None and not unprobed_runs(config):
        raise ValueError("config: run.probe_overhead_policy needs native unconstrained runs "
                         "of the main pipelines (none in run.limits, run.backend not vm); "
                         "set it to null")


# --- which runs exist, and where they run --------------------------------------------------


def pipeline_names(count: int, prefix: str = "p") -> list[str]:
    """``p000``, ``p001``, ... (the names ``python -m engine pipelines --prefix`` writes)."""
    return [f"{prefix}{i:03d}" for i in range(count)]


def policy_ids(policies: Iterable[str]) -> dict[str, str]:
    """Path-safe policy id -> canonical policy name (``partial:2`` -> ``partial_2``)."""
    names = [parse_policy(p).name for p in policies]
    return {name.replace(":", "_"): name for name in names}


def vm_enabled(config: Config) -> bool:
    """Whether the limited runs go to the vm backend, on the ``vm:`` block's pipelines and
    limits (``vm.enabled``; a config without a ``vm:`` block runs none in the VM)."""
    return bool((config.get("vm") or {}).get("enabled", False))


def vm_runs_main(config: Config) -> bool:
    """Whether the ``vm:`` block runs the main pipelines themselves (``vm.pipelines:
    main``) in the sandbox, beside their native runs, instead of pipelines of its own."""
    return vm_enabled(config) and config["vm"].get("pipelines") == "main"


def vm_pipeline_names(config: Config) -> list[str]:
    """The ``vNNN`` pipelines of the ``vm:`` block, when it is enabled with its own."""
    if not vm_enabled(config) or vm_runs_main(config):
        return []
    return pipeline_names(config["vm"]["pipelines"]["count"], "v")


# The kind of a run: its folder under results/ and its tidy tables' (runs/p000/...):
# "runs"; "sandbox" for a main pipeline's runs in the sandbox (vm.pipelines: main), and
# "sandbox_<runtime>" for those of a vm.also entry with a runtime of its own; "unprobed"
# for the probe-overhead twins.
RUNS, SANDBOX = "runs", "sandbox"


def kind_runtime(config: Config, kind: str) -> str:
    """The runtime of a run of ``kind``: its own for ``sandbox_<runtime>``, else
    ``run.runtime``."""
    prefix = f"{SANDBOX}_"
    return kind.removeprefix(prefix) if kind.startswith(prefix) else config["run"]["runtime"]


@dataclass(frozen=True)
class RunSet:
    """Runs whose product is every run of a config (times the repetitions): these
    pipelines under these policies and limits, all in the guest (``in_vm``) or none."""

    pipelines: list[str]
    policies: list[str]  # canonical names
    limits: list[str]
    in_vm: bool
    repetitions: int
    kind: str = RUNS


def vm_policies(config: Config) -> list[str]:
    """The policies of the runs in the guest: ``vm.policies``, else ``run.policies``."""
    return list((config.get("vm") or {}).get("policies") or config["run"]["policies"])


def run_sets(config: Config) -> list[RunSet]:
    """Every run, as run sets.

    With ``vm.enabled`` the main pipelines run only unconstrained (natively) and the vm
    pipelines run in the guest under ``vm.limits`` and, as their like-for-like baseline,
    unconstrained in the same guest (emulated runs are 15-60x slower: their slowdowns are
    taken over emulated baselines, never native ones). Otherwise the main pipelines run
    under every limit of ``run.limits`` with ``run.backend``."""
    main = pipeline_names(config["pipelines"]["count"])
    policies = [parse_policy(p).name for p in config["run"]["policies"]]
    reps = config["run"]["repetitions"]
    if vm_enabled(config):
        vm = config["vm"]
        vm_limits = [UNLIMITED, *(str(lim) for lim in vm["limits"] if str(lim) != UNLIMITED)]
        vm_reps = vm.get("repetitions") or reps
        on_main = vm_runs_main(config)
        pipelines, kind = (main, SANDBOX) if on_main else (vm_pipeline_names(config), RUNS)
        sets = [RunSet(main, policies, [UNLIMITED], False, reps),
                RunSet(pipelines, [parse_policy(p).name for p in vm_policies(config)],
                       vm_limits, True, vm_reps, kind)]
        # further policies under some limits only (the workers experiment), or another
        # runtime on the first few pipelines
        for extra in vm.get("also") or []:
            runtime = extra.get("runtime", config["run"]["runtime"])
            own = runtime != config["run"]["runtime"]
            if own and not on_main:
                raise ValueError("config: vm.also[].runtime needs vm.pipelines: main")
            sets.append(RunSet(pipelines[:extra.get("pipelines", len(pipelines))],
                               [parse_policy(p).name for p in extra["policies"]],
                               [str(lim) for lim in extra["limits"]], True, vm_reps,
                               f"{SANDBOX}_{runtime}" if own else kind))
        return sets
    limits = [str(limit) for limit in config["run"]["limits"]]
    # run.backend vm: every run in the guest, the unconstrained baseline too
    return [RunSet(main, policies, limits, config["run"]["backend"] in SANDBOXES, reps)]


SANDBOXES = ("uml", "vm")


def vm_sandbox(config: Config) -> str:
    """The sandbox of the ``vm:`` block's runs: ``vm.sandbox``, where ``auto`` is uml if
    a user-mode Linux kernel was built and works on this host (its build record says so:
    nothing is booted while the DAG is built), else the qemu guest."""
    choice = (config.get("vm") or {}).get("sandbox", "auto")
    if choice != "auto":
        return choice
    from engine.limits.vm import uml_status

    return "uml" if uml_status()[0] else "vm"


def run_backend(config: Config, limit: str, in_vm: bool) -> str:
    """The ``--backend`` of a run under ``limit``: the sandbox (``vm_sandbox``) for every
    run of a vm pipeline (``in_vm``: its baseline too); for the main pipelines,
    ``run.backend``, with ``none`` for the unconstrained runs where that is a sandbox."""
    backend = config["run"]["backend"]
    if in_vm:  # a vm pipeline, or every run where run.backend names a sandbox
        return vm_sandbox(config) if vm_enabled(config) else backend
    if limit == UNLIMITED and backend in SANDBOXES:
        return "none"
    return backend


def runs_in_vm(config: Config, limit: str, in_vm: bool) -> bool:
    """Whether a run under ``limit`` runs in a sandbox (so needs the built sandboxes)."""
    return run_backend(config, limit, in_vm) in SANDBOXES


# Runs that measure the probes' own cost: the same pipeline and repetition as a probed
# run of ``run.probe_overhead_policy``, unconstrained and natively, with --no-probes.
UNPROBED = "unprobed"


def unprobed_runs(config: Config) -> list[tuple[str, str]]:
    """(pipeline, policy) of the unprobed twins: every main pipeline under
    ``run.probe_overhead_policy`` (none when it is null or the main pipelines do not run
    unconstrained natively)."""
    policy = config["run"].get("probe_overhead_policy")
    if policy is None:
        return []
    main = run_sets(config)[0]
    if UNLIMITED not in main.limits or main.in_vm:
        return []
    return [(pipeline, parse_policy(policy).name) for pipeline in main.pipelines]


def run_order(config: Config) -> list[tuple[str, str, str, str, int]]:
    """The order the runs should start in, as (kind, pipeline, policy, limit, rep).

    Repetition by repetition; within one, the blocks (one pipeline under one limit) in a
    seeded random order, and within a block every policy (and the unprobed twin) in a
    seeded random order of its own: the runs a comparison pairs are close in time, so a
    drift or a neighbour's load hits every policy alike, and no policy always goes first.
    """
    twins = set(unprobed_runs(config))
    sets = run_sets(config)
    order = []
    for rep in range(max(rs.repetitions for rs in sets)):
        # a block: one pipeline under one limit, in one place; run sets that share a
        # block (the workers experiment's policies) interleave in it
        blocks: dict[tuple, list[tuple[str, str]]] = {}
        for rs in sets:
            if rep < rs.repetitions:
                for pipeline in rs.pipelines:
                    for limit in rs.limits:
                        blocks.setdefault((rs.kind, rs.in_vm, pipeline, limit), []).extend(
                            (rs.kind, policy) for policy in rs.policies)
        keys = list(blocks)
        rng = np.random.default_rng([config["seed"], rep])
        for b in rng.permutation(len(keys)):
            _, in_vm, pipeline, limit = keys[b]
            members = blocks[keys[b]]
            if limit == UNLIMITED and not in_vm:
                members += [(UNPROBED, pol) for pipe, pol in twins if pipe == pipeline]
            for m in np.random.default_rng([config["seed"], rep, int(b)]).permutation(
                    len(members)):
                kind, policy = members[m]
                order.append((kind, pipeline, policy, limit, rep))
    return order


def run_priorities(config: Config) -> dict[tuple[str, str, str, str, int], int]:
    """(kind, pipeline, policy id, limit, rep) -> Snakemake priority (higher starts
    first) that makes the scheduler start the runs in ``run_order``."""
    order = run_order(config)
    return {(kind, pipeline, policy.replace(":", "_"), limit, rep): len(order) - i
            for i, (kind, pipeline, policy, limit, rep) in enumerate(order)}


# --- command-line arguments ------------------------------------------------------------------


def reconcile_in_vm(config: Config) -> bool:
    """Whether the reconciliation run goes to the guest (``run.reconcile.vm``)."""
    return bool(config["run"]["reconcile"].get("vm", False))


def reconcile_limit_args(config: Config) -> str:
    """The reconciliation run's limit flags: as any run's, or the guest's (``--backend vm``,
    with or without a limit: the guest's cgroup is measured either way)."""
    return limit_args(config, config["run"]["reconcile"]["limit"], reconcile_in_vm(config))


def swap_arg(config: Config, limit: str) -> str:
    """The run's ``--swap``: ``run.swap``, or with ``run.swap_total`` (memory + swap
    capped together, as EdgeCaffe's memsw.limit_in_bytes) what the total leaves above
    the limit."""
    total = config["run"].get("swap_total")
    if total is None:
        return str(config["run"]["swap"])
    return str(parse_size(str(total)) - parse_size(limit))


def limit_args(config: Config, limit: str, in_vm: bool) -> str:
    """``python -m engine run``'s limit, swap and backend flags for a run under ``limit``
    (``in_vm``: a run of a vm pipeline)."""
    backend = run_backend(config, limit, in_vm)
    if limit == UNLIMITED:
        return _join(["--backend", backend])
    return _join(["--limit", limit, "--swap", swap_arg(config, limit), "--backend", backend])


def batch_args(run: Config) -> str:
    """``--batch N``, or nothing to keep each network's deploy batch (``batch: null``)."""
    return "" if run["batch"] is None else _join(["--batch", run["batch"]])


def run_options(run: Config) -> str:
    """The settings every run shares (only these, so editing e.g. the limit list reruns
    only the new runs)."""
    pin = ["--pin-cpu"] if run.get("pin_cpu") else []
    return _join(["--blas-threads", run["blas_threads"], "--timeout", run["timeout_s"],
                  "--sample-hz", run["sample_hz"], *pin])


def arrival_args(arrival: Config) -> str:
    """``{mode: poisson, rate: 2}`` -> ``--arrival poisson --rate 2``."""
    args: list[object] = []
    for key, value in arrival.items():
        args += [f"--{'arrival' if key == 'mode' else key}", value]
    return _join(args)


def bins_args(config: Config) -> list[object]:
    """``--bins`` (MiB) or ``--bins-mb`` (decimal MB) with the size bins' edges."""
    cfg = config["pipelines"]
    return ["--bins-mb" if cfg.get("bin_unit") == "MB" else "--bins", *cfg["bins"]]


def pipelines_args(config: Config, networks: Iterable[str]) -> str:
    """``python -m engine pipelines``'s arguments for the main pipelines (``pNNN``), drawn
    from ``networks`` (display names)."""
    cfg = config["pipelines"]
    return " ".join(filter(None, [
        _join(["--count", cfg["count"], "--seed", config["seed"], "--length", *cfg["length"]]),
        arrival_args(cfg["arrival"]),
        _join([*bins_args(config), "--networks", *networks]),
    ]))


def vm_pipelines_args(config: Config) -> str:
    """The same for the vm block's smaller pipelines (``vNNN``, batch arrival, its own
    networks); empty when the vm block is not enabled or runs the main pipelines."""
    if not vm_enabled(config) or vm_runs_main(config):
        return ""
    cfg = config["vm"]["pipelines"]
    return _join(["--count", cfg["count"], "--seed", config["seed"], "--prefix", "v",
                  "--length", *cfg["length"], *bins_args(config),
                  "--networks", *cfg["networks"]])


# --- cluster resources -----------------------------------------------------------------------

UNLIMITED_MEM_MB = 8192  # what an unconstrained run may use (its step's --mem under inherit)
# MiB a SLURM run job needs besides its run's own step: the batch script, the executor
# plugin's two Snakemake interpreters (the jobstep executor in the batch step and the job
# itself in step 0, ~170 MiB each), two srun clients and a shell. Measured per job with
# sacct's MaxRSS of the batch step and step 0 (README, "Running the paper sweep on
# SLURM"), rounded up.
SLURM_JOB_OVERHEAD_MB = 512


def run_step_mem_mb(config: Config, limit: str, in_vm: bool) -> int | None:
    """MiB of the run's own SLURM job step (``srun --mem``) under ``inherit``: exactly its
    limit (``UNLIMITED_MEM_MB`` for an unconstrained run), so the step's cgroup, where a
    SLURM with task/cgroup enforces memory, holds the engine's processes alone under
    exactly that limit, and the workflow's own processes stay outside it. None for the
    other backends, which set (or emulate) the limit themselves."""
    if run_backend(config, limit, in_vm) != "inherit":
        return None
    return UNLIMITED_MEM_MB if limit == UNLIMITED else parse_size(limit) // 2**20


def run_mem_mb(config: Config, limit: str, in_vm: bool) -> int:
    """Memory (MiB) a run job asks for. Under ``inherit`` the run gets a job step of exactly
    its limit (``run_step_mem_mb``) and the job asks for that plus the workflow's own
    processes (``SLURM_JOB_OVERHEAD_MB``); a backend that sets its own cgroup needs room
    above the limit for the supervisor and sampler; a VM needs its guest RAM (limit + 768
    MiB, at least 1 GiB) and qemu's own ~300 MiB."""
    step = run_step_mem_mb(config, limit, in_vm)
    if step is not None:
        return step + SLURM_JOB_OVERHEAD_MB
    mib = None if limit == UNLIMITED else parse_size(limit) // 2**20
    if run_backend(config, limit, in_vm) in SANDBOXES:
        guest = 4096 if mib is None else max(1024, mib + 768)  # engine.vm.run.plan's RAM
        return guest + 512
    return UNLIMITED_MEM_MB if mib is None else mib + 1024


def slurm_step_prefix(mem_mb: int | None) -> str:
    """Shell words that run the command after them (``python -m engine run ... --out D``)
    in a SLURM job step of its own with ``--mem=<mem_mb>M``, when inside a SLURM job;
    outside one (a local run) the command runs as it is. ``--overlap`` lets the step start
    beside step 0, which holds the job's resources while it waits for it. A run folder
    that was written is the run's result even when srun reports the step's OOM kill with
    a failing exit code. Empty for ``None`` (no step)."""
    if mem_mb is None:
        return ""
    srun = _join(["srun", "--quiet", "--ntasks=1", "--nodes=1", "--cpus-per-task=1",
                  "--overlap", f"--mem={mem_mb}M"])
    return (
        'edgeprof_step() { if [ -z "${SLURM_JOB_ID:-}" ] || ! command -v srun >/dev/null;'
        ' then "$@"; return; fi; rc=0; ' + srun + ' "$@" || rc=$?; out=; prev=;'
        ' for a; do [ "$prev" = --out ] && out=$a; prev=$a; done;'
        ' if [ "$rc" -ne 0 ] && [ -f "$out/meta.json" ]; then rc=0; fi; return "$rc"; };'
        " edgeprof_step ")


def run_runtime_min(run: Config) -> int:
    """Minutes a run job asks for: the engine's own timeout and five minutes' margin."""
    return int(run["timeout_s"] // 60) + 5


# --- the jobs' environment -------------------------------------------------------------------


def job_environ(environ: Mapping[str, str], interpreter: str, project: str,
                under_conda: bool) -> dict[str, str]:
    """PATH and PYTHONPATH for the jobs, so a rule's ``python -m engine`` means the right
    interpreter and this checkout's engine without putting either into params.

    Without conda, the directory of ``interpreter`` (the Python running Snakemake, e.g.
    .venv/bin) goes first on PATH, so ``python`` is that venv's even when it is not
    activated; under ``--software-deployment-method conda`` the rule's activated
    environment comes first anyway, so PATH is left alone. ``project`` (the checkout the
    workflow runs from) goes first on PYTHONPATH in both cases, so every job, shell rules
    and scripts alike, imports the engine whose code fingerprints its params carry."""
    def prepend(entry: str, current: str | None) -> str:
        parts = [p for p in (current or "").split(os.pathsep) if p and p != entry]
        return os.pathsep.join([entry, *parts])

    env = {"PYTHONPATH": prepend(project, environ.get("PYTHONPATH"))}
    if not under_conda:
        env["PATH"] = prepend(os.path.dirname(interpreter), environ.get("PATH"))
    return env

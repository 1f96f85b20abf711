"""Which runs a config asks for, where each runs (natively or in a sandbox), and the order
they should start in."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from engine.limits import SANDBOXES
from engine.schedule.names import policy_id
from engine.schedule.policies import parse_policy

Config = Mapping[str, Any]

UNLIMITED = "none"  # the limit label of the unconstrained runs


def pipeline_names(count: int, prefix: str = "p") -> list[str]:
    """``p000``, ``p001``, ... (the names ``python -m engine pipelines --prefix`` writes)."""
    return [f"{prefix}{i:03d}" for i in range(count)]


def policy_ids(policies: Iterable[str]) -> dict[str, str]:
    """Path-safe policy id -> canonical policy name (``partial:2`` -> ``partial_2``)."""
    names = [parse_policy(p).name for p in policies]
    return {policy_id(name): name for name in names}


def sandbox_enabled(config: Config) -> bool:
    """Whether the limited runs go to the vm backend, on the ``sandbox:`` block's pipelines and
    limits (``sandbox.enabled``; a config without a ``sandbox:`` block runs none in the VM)."""
    return bool((config.get("sandbox") or {}).get("enabled", False))


def sandbox_runs_main(config: Config) -> bool:
    """Whether the ``sandbox:`` block runs the main pipelines themselves (``sandbox.pipelines:
    main``) in the sandbox, beside their native runs, instead of pipelines of its own."""
    return sandbox_enabled(config) and config["sandbox"].get("pipelines") == "main"


def sandbox_pipeline_names(config: Config, holdout: bool = False) -> list[str]:
    """The ``vNNN`` pipelines of the ``sandbox:`` block, when it is enabled with its own
    (``holdout``: the model's held-out ``hvNNN`` ones)."""
    if not sandbox_enabled(config) or sandbox_runs_main(config):
        return []
    if holdout:
        return pipeline_names(holdout_config(config).get("sandbox_pipelines", 0),
                              HOLDOUT_SANDBOX_PREFIX)
    return pipeline_names(config["sandbox"]["pipelines"]["count"], "v")


# The kind of a run: its folder under results/ (runs/p000/...):
# "runs"; "sandbox" for a main pipeline's runs in the sandbox (sandbox.pipelines: main), and
# "sandbox_<runtime>" for those of a sandbox.also entry with a runtime of its own; "native"
# for a sandbox pipeline's native unconstrained twins (sandbox.native_baseline: the same pipeline,
# policy and limit as its guest baseline); "unprobed" for the probe-overhead twins.
RUNS, SANDBOX, NATIVE = "runs", "sandbox", "native"


@dataclass(frozen=True)
class RunSet:
    """Runs whose product is every run of a config (times the repetitions): these
    pipelines under these policies and limits with this runtime, all in the guest
    (``in_sandbox``) or none; ``kind`` names their folder and says nothing else.
    ``holdout``: the model's held-out pipelines (``model.holdout``), never fitted on;
    ``probed``: False for the probe-overhead twins (``--no-probes``)."""

    pipelines: list[str]
    policies: list[str]  # canonical names
    limits: list[str]
    in_sandbox: bool
    repetitions: int
    runtime: str
    kind: str = RUNS
    holdout: bool = False
    probed: bool = True
    batch: int | None = None  # every network's (None: each its deploy batch)


def sandbox_policies(config: Config) -> list[str]:
    """The policies of the runs in the guest: ``sandbox.policies``, else ``run.policies``."""
    return list((config.get("sandbox") or {}).get("policies") or config["run"]["policies"])


def batches(config: Config) -> list[int | None]:
    """``run.batch`` as a list: a run of every run set at each (a single value, or null
    for each network's deploy batch, is one)."""
    batch = config["run"].get("batch")
    return list(batch) if isinstance(batch, list) else [batch]


def batch_kind(kind: str, batch: int | None, config: Config) -> str:
    """The folder of a kind's runs at ``batch``: ``runs_b4`` where ``run.batch`` is a list
    of several, else the kind's own (a single value keeps its folders)."""
    return f"{kind}_b{batch}" if len(batches(config)) > 1 else kind


def run_sets(config: Config) -> list[RunSet]:
    """Every run, as run sets; the first is the main pipelines'.

    With ``sandbox.enabled`` the main pipelines run only unconstrained (natively) and the vm
    pipelines run in the guest under ``sandbox.limits`` and, as their like-for-like baseline,
    unconstrained in the same guest (emulated runs are 15-60x slower: their slowdowns are
    taken over emulated baselines, never native ones); with ``sandbox.native_baseline`` the
    sandbox pipelines also run unconstrained natively (kind ``native``: the model's
    native-speed reconstruction pairs them with the guest's page traffic). Otherwise the
    main pipelines run under every limit of ``run.limits`` with ``run.backend``. The
    model's held-out pipelines (``model.holdout``) run the same sets under their own
    names, ``model.holdout.repetitions`` times where it is set. With ``run.sequential`` the
    other sets have up to its ``max_repetitions`` (``sequential_config``)."""
    holdout = holdout_config(config)
    sets = _run_sets(config, pipeline_names(config["pipelines"]["count"]),
                     sandbox_pipeline_names(config), False)
    most = sequential_config(config).get("max_repetitions")
    if most:
        sets = [replace(rs, repetitions=most) for rs in sets]
    if holdout:
        held = _run_sets(config, pipeline_names(holdout["pipelines"], HOLDOUT_PREFIX),
                         sandbox_pipeline_names(config, holdout=True), True)
        reps = holdout.get("repetitions")
        sets += [replace(rs, repetitions=reps) if reps else rs for rs in held]
    # every set at each batch, the first batch's first (its main set is the first)
    return [replace(rs, batch=batch, kind=batch_kind(rs.kind, batch, config))
            for batch in batches(config) for rs in sets if rs.pipelines]


def _run_sets(config: Config, main: list[str], box_pipes: list[str],
              holdout: bool) -> list[RunSet]:
    policies = [parse_policy(p).name for p in config["run"]["policies"]]
    reps, runtime = config["run"]["repetitions"], config["run"]["runtime"]
    if sandbox_enabled(config):
        box = config["sandbox"]
        box_limits = [UNLIMITED, *(str(lim) for lim in box["limits"] if str(lim) != UNLIMITED)]
        box_reps = box.get("repetitions") or reps
        box_pols = [parse_policy(p).name for p in sandbox_policies(config)]
        on_main = sandbox_runs_main(config)
        pipelines, kind = (main, SANDBOX) if on_main else (box_pipes, RUNS)
        sets = [RunSet(main, policies, [UNLIMITED], False, reps, runtime, holdout=holdout),
                RunSet(pipelines, box_pols, box_limits, True, box_reps, runtime, kind, holdout)]
        # further policies under some limits only (the workers experiment), or another
        # runtime on the first few pipelines
        for extra in box.get("also") or []:
            own_runtime = extra.get("runtime", runtime)
            own = own_runtime != runtime
            if own and not on_main:
                raise ValueError("config: sandbox.also[].runtime needs sandbox.pipelines: main")
            # another runtime's runs go to a folder of their own (its name is only a name)
            sets.append(RunSet(pipelines[:extra.get("pipelines", len(pipelines))],
                               [parse_policy(p).name for p in extra["policies"]],
                               [str(lim) for lim in extra["limits"]], True, box_reps,
                               own_runtime, f"{SANDBOX}_{own_runtime}" if own else kind,
                               holdout))
        # a main pipeline's native runs are its own baseline already
        if box.get("native_baseline") and not on_main:
            sets.append(RunSet(box_pipes, box_pols, [UNLIMITED], False, box_reps, runtime,
                               NATIVE, holdout))
        return sets
    limits = [str(limit) for limit in config["run"]["limits"]]
    # run.backend vm: every run in the guest, the unconstrained baseline too
    return [RunSet(main, policies, limits, config["run"]["backend"] in SANDBOXES, reps,
                   runtime, holdout=holdout)]


# The model's held-out pipelines: hp000, ... drawn as the main pipelines are, hv000, ...
# as the sandbox pipelines, both with model.holdout.seed instead of the campaign's seed.
HOLDOUT_PREFIX, HOLDOUT_SANDBOX_PREFIX = "hp", "hv"


def sequential_config(config: Config) -> dict:
    """``run.sequential`` (``{}`` when the config has none): each main and sandbox
    pipeline runs its first ``run.repetitions``, then as many more as its speed-ups' CIs
    ask for to be ``width`` wide, to at most ``max_repetitions``
    (``engine.analysis.sequential``); the held-out pipelines run theirs."""
    return dict(config["run"].get("sequential") or {})


def holdout_config(config: Config) -> dict:
    """``model.holdout`` (``{}`` when the config has none)."""
    return dict((config.get("model") or {}).get("holdout") or {})


def sandbox_kernel(config: Config) -> str:
    """The kernel of the ``sandbox:`` block's runs: ``sandbox.kernel``, where ``auto`` is uml if
    a user-mode Linux kernel was built and works on this host (its build record says so:
    nothing is booted while the DAG is built), else the qemu guest."""
    choice = (config.get("sandbox") or {}).get("kernel", "auto")
    if choice != "auto":
        return choice
    from engine.limits.sandbox import uml_status

    return "uml" if uml_status()[0] else "vm"


def run_backend(config: Config, limit: str, in_sandbox: bool) -> str:
    """The ``--backend`` of a run under ``limit``: the sandbox (``sandbox_kernel``) for every
    run of a sandbox pipeline (``in_sandbox``: its baseline too); for the main pipelines,
    ``run.backend``, with ``none`` for the unconstrained runs where that is a sandbox."""
    backend = config["run"]["backend"]
    if in_sandbox:  # a sandbox pipeline, or every run where run.backend names a sandbox
        return sandbox_kernel(config) if sandbox_enabled(config) else backend
    if limit == UNLIMITED and backend in SANDBOXES:
        return "none"
    return backend


def needs_vm_guest(config: Config, limit: str, in_sandbox: bool) -> bool:
    """Whether a run under ``limit`` boots the qemu guest, so needs the guest the workflow
    builds (a user-mode Linux run uses the kernel ``python -m engine.sandbox build`` cached)."""
    return run_backend(config, limit, in_sandbox) == "vm"


# Runs that measure the probes' own cost: the same pipeline and repetition as a probed
# run of ``run.probe_overhead_policy``, unconstrained and natively, with --no-probes.
UNPROBED = "unprobed"


def unprobed_runs(config: Config) -> list[tuple[str, str, int | None]]:
    """(pipeline, policy, batch) of the unprobed twins: every main pipeline under
    ``run.probe_overhead_policy`` at each batch (none when it is null or the main
    pipelines do not run unconstrained natively)."""
    policy = config["run"].get("probe_overhead_policy")
    if policy is None:
        return []
    sets = run_sets(config)
    main = sets[0]
    if UNLIMITED not in main.limits or main.in_sandbox:
        return []
    return [(pipeline, parse_policy(policy).name, rs.batch)
            for rs in sets if rs.kind == batch_kind(RUNS, rs.batch, config) and not rs.holdout
            and rs.pipelines == main.pipelines for pipeline in rs.pipelines]


# A run set's runs by what names their folders: (kind, pipeline, policy id, limit)
SetKey = tuple[str, str, str, str]


def run_set_index(config: Config) -> dict[SetKey, RunSet]:
    """(kind, pipeline, policy id, limit) of every run set's runs, the unprobed twins' too
    -> their run set: where a job finds its runtime and place from its folder's names."""
    sets = run_sets(config)
    twins = unprobed_runs(config)
    if twins:
        main = sets[0]
        sets = [*sets, *(RunSet([pipeline], [policy], [UNLIMITED], False, main.repetitions,
                                main.runtime, batch_kind(UNPROBED, batch, config),
                                probed=False, batch=batch)
                         for pipeline, policy, batch in twins)]
    return {(rs.kind, pipeline, policy_id(policy), limit): rs
            for rs in sets for pipeline in rs.pipelines for policy in rs.policies
            for limit in rs.limits}


# A block of runs: (kind, in_sandbox, pipeline, limits, rep); its kind is its first run
# set's (the unprobed twins join their pipeline's "runs" block). Its limits: its runs'
# limit, or in one sandbox boot each (sandbox.per_boot "block") its run set's limits
# joined by "+" (e.g. "none+48M")
BlockKey = tuple[str, bool, str, str, int]
BlockRun = tuple[str, str, str]  # (kind, policy, limit)


def run_blocks(config: Config) -> dict[BlockKey, list[BlockRun]]:
    """Every block of runs, in the order they should start, -> its runs as (kind, policy,
    limit) in their order.

    Repetition by repetition; within one, the blocks (one pipeline under one limit, in
    one place; in the sandbox, with a boot per block, under every limit of its run set:
    a limited run and its baseline in one boot) in a seeded random order, and within a
    block every policy, limit and the unprobed twin in a seeded random order of its own:
    the runs a comparison pairs are close in time, so a drift or a neighbour's load hits
    every policy alike, and no policy always goes first. With ``run.per_job: block`` a
    block is one workflow job.
    """
    twins = unprobed_runs(config)
    sets = run_sets(config)
    batch_of = {rs.kind: rs.batch for rs in sets}
    # a sandbox boot's block: every limit the sandbox's run sets of its kind give its pipeline
    boot_limits: dict[tuple[str, str], list[str]] = {}
    if per_boot(config) == "block":
        for rs in sets:
            for pipeline in rs.pipelines if rs.in_sandbox else ():
                held = boot_limits.setdefault((rs.kind, pipeline), [])
                held += [limit for limit in rs.limits if limit not in held]
    blocks: dict[BlockKey, list[BlockRun]] = {}
    for rep in range(max(rs.repetitions for rs in sets)):
        # run sets that share a block (the workers experiment's policies) interleave in it
        members: dict[tuple, list[BlockRun]] = {}
        for rs in sets:
            if rep < rs.repetitions:
                for pipeline in rs.pipelines:
                    for limit in rs.limits:
                        one_boot = rs.in_sandbox and (rs.kind, pipeline) in boot_limits
                        members.setdefault((rs.kind, rs.in_sandbox, pipeline,
                                            None if one_boot else limit), []).extend(
                            (rs.kind, policy, limit) for policy in rs.policies)
        keys = list(members)
        rng = np.random.default_rng([config["seed"], rep])
        for b in rng.permutation(len(keys)):
            kind, in_sandbox, pipeline, block = keys[b]
            runs = members[keys[b]]
            if block is None:  # one boot's: the limits this repetition's runs have
                block = "+".join(limit for limit in boot_limits[(kind, pipeline)]
                                 if any(run[2] == limit for run in runs))
            batch = batch_of[kind]
            if block == UNLIMITED and not in_sandbox and kind == batch_kind(RUNS, batch, config):
                runs += [(batch_kind(UNPROBED, batch, config), pol, UNLIMITED)
                         for pipe, pol, at in twins if pipe == pipeline and at == batch]
            order = np.random.default_rng([config["seed"], rep, int(b)]).permutation(len(runs))
            blocks[(kind, in_sandbox, pipeline, block, rep)] = [runs[m] for m in order]
    return blocks


def run_order(config: Config) -> list[tuple[str, str, str, str, int]]:
    """The order the runs should start in, as (kind, pipeline, policy, limit, rep): the
    blocks' (``run_blocks``), one after the other."""
    return [(kind, pipeline, policy, limit, rep)
            for (_, _, pipeline, _, rep), runs in run_blocks(config).items()
            for kind, policy, limit in runs]


@dataclass(frozen=True)
class BlockShape:
    """Blocks that one workflow rule runs, a job each (``run.per_job: block``): the same
    place, limit and runs (their outputs), on exactly these pipelines times these
    repetitions."""

    in_sandbox: bool
    limit: str  # its blocks' limits (``BlockKey``)
    runs: tuple[BlockRun, ...]  # sorted
    pipelines: tuple[str, ...]
    reps: tuple[int, ...]

    @property
    def limits(self) -> list[str]:
        """Its runs' limits."""
        return sorted({limit for _, _, limit in self.runs})


def per_boot(config: Config) -> str:
    """What one sandbox boot runs (``sandbox.per_boot``, default "block"): "run" or
    "block"; "run" where no sandbox is on."""
    sandbox = config["sandbox"]
    return sandbox.get("per_boot", "block") if sandbox["enabled"] else "run"


def job_blocks(config: Config) -> dict[BlockKey, list[BlockRun]]:
    """The blocks of ``run_blocks`` that are a workflow job each: every block with
    ``run.per_job: block``; else, with ``sandbox.per_boot: block``, the sandbox's (one
    boot each, ``python -m engine run-block``)."""
    blocks = run_blocks(config)
    if config["run"].get("per_job", "run") == "block":
        return blocks
    if per_boot(config) == "block":
        return {key: runs for key, runs in blocks.items() if key[1]}
    return {}


# the run folders' kinds (results/<kind>/...): the workflow's kind wildcard
KIND_RE = r"(runs|unprobed|native|sandbox(_[a-z]+)?)(_b\d+)?"


def run_rule_kind(config: Config) -> str:
    """The kind wildcard of rule run (``run.per_job: run``): every kind, but none of the
    ``kind/pipeline`` folders the job blocks make (``sandbox.per_boot: block``). Such a
    pair holds no run of a job of its own."""
    if config["run"].get("per_job", "run") == "block" or not job_blocks(config):
        return KIND_RE
    blocked = {(kind, key[2]) for key, runs in job_blocks(config).items() for kind, *_ in runs}
    alone = {(kind, key[2]) for key, runs in run_blocks(config).items() if not key[1]
             for kind, *_ in runs}
    assert not blocked & alone, f"sandbox blocks share kind and pipeline with other runs: " \
                                f"{sorted(blocked & alone)}"
    folders = "|".join(re.escape(f"{kind}/{pipeline}") for kind, pipeline in sorted(blocked))
    # a lookahead: the kind group starts where the folder's path does
    return f"(?!({folders})/){KIND_RE}"


def block_shapes(config: Config) -> list[BlockShape]:
    """The blocks of ``job_blocks`` as rules: blocks alike in place, limit and runs, split
    until each shape's blocks are its pipelines times its repetitions, so a rule's
    wildcards (pipeline, rep) match its own blocks' folders and no other rule's."""
    alike: dict[tuple, dict[int, list[str]]] = {}
    for (_, in_sandbox, pipeline, limit, rep), runs in job_blocks(config).items():
        alike.setdefault((in_sandbox, limit, tuple(sorted(runs))), {}).setdefault(
            rep, []).append(pipeline)
    shapes = []
    for (in_sandbox, limit, runs), by_rep in alike.items():
        reps_of: dict[tuple[str, ...], list[int]] = {}
        for rep, pipelines in by_rep.items():
            reps_of.setdefault(tuple(sorted(pipelines)), []).append(rep)
        shapes += [BlockShape(in_sandbox, limit, runs, pipelines, tuple(sorted(reps)))
                   for pipelines, reps in reps_of.items()]
    return shapes


def run_priorities(config: Config) -> dict[tuple[str, str, str, str, int], int]:
    """(kind, pipeline, policy id, limit, rep) -> Snakemake priority (higher starts
    first) that makes the scheduler start the runs in ``run_order``."""
    order = run_order(config)
    return {(kind, pipeline, policy_id(policy), limit, rep): len(order) - i
            for i, (kind, pipeline, policy, limit, rep) in enumerate(order)}


def reconcile_in_sandbox(config: Config) -> bool:
    """Whether the reconciliation run goes to the guest (``run.reconcile.sandbox``)."""
    return bool(config["run"]["reconcile"].get("sandbox", False))

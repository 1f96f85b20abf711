# Config (validated against its JSON schema before any job runs), the paths and lists
# every stage expands over, the jobs' environment, and the code fingerprints that decide
# which jobs a code change reruns. Argument strings, job lists and resources come from
# engine.workflow (pure functions of the config, unit-tested in tests/unit/test_workflow_args.py);
# nothing here probes the host (only this process's own size, for the jobs' reserve), so
# building the DAG on a submit host is cheap.
import os
import re
import shlex
import sys
from pathlib import Path

import psutil
from snakemake.exceptions import IncompleteCheckpointException
from snakemake.utils import validate

from engine.analysis.sequential import read_look
from engine.bytecode import compile_package
from engine.caffe.zoo import ZOO
from engine.errors import EdgeprofError
from engine.schedule.names import policy_id
from engine.schedule.policies import parse_policy
from engine.workflow.args import (
    batch_args,
    block_command,
    canonical,
    limit_args,
    pipelines_args,
    reconcile_limit_args,
    run_command,
    run_options,
    run_settings,
    run_words,
    sandbox_block_command,
    sandbox_pipelines_args,
)
from engine.workflow.checks import (
    check_config,
    check_config_batch,
    check_config_files,
    check_run_memory,
    check_renamed_keys,
)
from engine.workflow.environ import job_environ, sandbox_settings
from engine.workflow.fingerprint import code_fingerprint, content_digest, policy_fingerprint
from engine.workflow.interrupt import forward_interrupts
from engine.workflow.plan import (
    KIND_RE,
    UNLIMITED,
    batches,
    block_shapes,
    holdout_config,
    job_blocks,
    needs_vm_guest,
    per_boot,
    pipeline_names,
    policy_ids,
    reconcile_in_sandbox,
    run_priorities,
    run_rule_kind,
    run_set_index,
    run_sets,
    sandbox_pipeline_names,
    sandbox_kernel,
    sequential_config,
)
from engine.workflow.resources import (
    UNLIMITED_MEM_MB,
    block_runtime_min,
    job_reserve_mb,
    pipelines_networks,
    run_mem_mb,
    run_runtime_min,
    run_step_mem_mb,
    slurm_step_prefix,
    unconstrained_mem_mb,
)
from engine.workflow.snakemake_api import (
    coalesce_reevaluations,
    declare_signatures,
    exit_without_lock,
)

# Snakemake's scheduler otherwise adds a never-ending chain of passes per finished job
# (its own CPU grew to most of a CPU in the default run), and its SIGTERM handler can
# wait on a lock the interrupted main thread holds (engine.workflow.snakemake_api)
coalesce_reevaluations()
exit_without_lock()
if workflow.is_main_process:  # a SIGINT or SIGTERM to Snakemake alone reaches its jobs too
    forward_interrupts()


# before Snakemake reads it: it says a file that is not UTF-8 only in a traceback (a
# --configfile it reads before this workflow's code runs, so that one stays its own)
check_config_files(["config/config.yaml"])


configfile: "config/config.yaml"


check_config_files(workflow.configfiles)  # a key given twice, which YAML drops unseen
check_renamed_keys(config)  # an old key's new name, before the schema calls it unknown
validate(config, "../schemas/config.schema.yaml")
check_config(config)  # what the schema cannot say: ordered ranges, limits > 0, ...
if workflow.is_main_process:  # builds the zoo's graphs: once, not in every job
    check_config_batch(config)


# Jobs run `python -m engine ...`: `python` is the venv running Snakemake (or, under
# --software-deployment-method conda, the rule's pinned environment) and `engine` is this
# checkout's. Set here rather than in params, so neither conda nor moving the venv changes
# any job's params.
def _uses_conda():
    settings = getattr(workflow, "deployment_settings", None)
    return settings is not None and any(
        method.name == "CONDA" for method in settings.deployment_method
    )


os.environ.update(
    job_environ(
        os.environ,
        sys.executable,
        os.path.abspath(workflow.basedir),
        under_conda=_uses_conda(),
    )
)

# every job and sandbox guest reads the engine's bytecode instead of compiling it anew
# (engine.bytecode: a few ms once it is current)
if workflow.is_main_process:
    compile_package(Path(workflow.basedir) / "engine")

RESULTS = os.path.normpath(config["results"])  # "results/" names the same folder
RUN = config["run"]
REC = RUN["reconcile"]
MODELS_DIR = f"{RESULTS}/models"
SPLIT_DIR = f"{RESULTS}/split"
PIPELINES_DIR = f"{RESULTS}/pipelines"
USER_MODELS = config["models"]["user_dir"]
# The vm backend's guest, built by rule vm_guest for the runs that go to the VM.
VM_CACHE = f"{RESULTS}/vm-guest"
VM_GUEST = f"{VM_CACHE}/guest.json"

# stem -> display name; zoo networks are generated, user models come from USER_MODELS.
ZOO_STEMS = {ZOO[name].stem: name for name in config["models"]["zoo"]}
USER_STEMS = {stem: stem for stem in config["models"]["user"]}
NETWORKS = {**ZOO_STEMS, **USER_STEMS}
DESCRIPTIONS = expand(f"{SPLIT_DIR}/{{stem}}.description.json", stem=NETWORKS)

PIPELINES = pipeline_names(config["pipelines"]["count"])
# With sandbox.enabled the limited runs go to the VM on the sandbox block's smaller pipelines (vNNN)
# and limits, beside their unconstrained baseline in the same guest (and, with
# sandbox.native_baseline, natively unconstrained: kind "native"); the main pipelines run
# unconstrained, natively (engine.workflow.plan.run_sets).
VM_PIPELINES = sandbox_pipeline_names(config)
# The model's held-out pipelines (model.holdout): drawn with a seed of their own, run as
# the main (hpNNN) and vm (hvNNN) pipelines are, aggregated apart, never fitted on.
HOLDOUT = holdout_config(config)
HOLDOUT_PIPELINES = pipeline_names(HOLDOUT.get("pipelines", 0), "hp") if HOLDOUT else []
HOLDOUT_VM_PIPELINES = sandbox_pipeline_names(config, holdout=True) if HOLDOUT else []
RUN_SETS = run_sets(config)
# path-safe id ("partial_2") -> name ("partial:2"), of every run set's policies
POLICIES = policy_ids([p for rs in RUN_SETS for p in rs.policies])
# kind: "runs"; "sandbox" for the main pipelines' runs in the sandbox (sandbox.pipelines:
# main); "unprobed" for the probe-overhead twins (--no-probes); each suffixed _b<N> at a
# batch where run.batch is a list of several
RUN_PATTERN = "{pipeline}/{policy}/{limit}/rep{rep}"
KIND_PATTERN = f"{{kind}}/{RUN_PATTERN}"
RUN_DIR = f"{RESULTS}/{KIND_PATTERN}"
RUN_LOG = f"{RESULTS}/logs/{KIND_PATTERN}.log"
# (kind, pipeline, policy id, limit) -> its run set: a job's runtime and place come from
# there, never from its folder's names (engine.workflow.plan.run_set_index)
RUN_SET_OF = run_set_index(config)
# (limit, in the sandbox, runtime, batch, probed) -> what its runs record of their flags,
# which each aggregate checks (engine.workflow.args.run_settings: a run redone by hand is
# refused)
_SETTINGS = {
    key: run_settings(config, *key)
    for key in {
        (limit, rs.in_sandbox, rs.runtime, rs.batch, rs.probed)
        for (*_, limit), rs in RUN_SET_OF.items()
    }
}
# run.sequential: every pipeline but the held-out ones runs its first run.repetitions, then
# as many as its look (checkpoint look) decides, to at most max_repetitions (its run sets'
# repetitions, so its rules and priorities reach them)
SEQUENTIAL = sequential_config(config)
FIRST_REPS = RUN["repetitions"]


def _planned_reps(rs):
    """The repetitions of a run set every run of the workflow has: a sequential pipeline's
    first ones (the aggregate asks for the rest its look decides)."""
    return FIRST_REPS if SEQUENTIAL and not rs.holdout else rs.repetitions


# every run folder planned from the start: the aggregates' inputs, and targets of their own
RUN_FOLDERS = [
    f"{RESULTS}/{kind}/{pipeline}/{policy}/{limit}/rep{rep}"
    for (kind, pipeline, policy, limit), rs in RUN_SET_OF.items()
    for rep in range(_planned_reps(rs))
]
# What each aggregate reads, by run set folder: its repetitions, whether probed (the
# unprobed twins are the probe overhead's) and its settings (engine.analysis.provenance:
# the runs as planned, made as the config says); the held-out seed's probed runs apart
_HELD_OUT = set(HOLDOUT_PIPELINES) | set(HOLDOUT_VM_PIPELINES)


def _run_sets(held_out):
    return {
        f"{RESULTS}/{kind}/{pipeline}/{policy}/{limit}": [
            rs.repetitions,
            rs.probed,
            _SETTINGS[limit, rs.in_sandbox, rs.runtime, rs.batch, rs.probed],
        ]
        for (kind, pipeline, policy, limit), rs in RUN_SET_OF.items()
        if (rs.probed and pipeline in _HELD_OUT) == held_out
    }


def _folders(sets):
    return [f"{d}/rep{i}" for d, (reps, *_) in sets.items() for i in range(reps)]


AGGREGATE_SETS = _run_sets(held_out=False)
HOLDOUT_SETS = _run_sets(held_out=True)
AGGREGATE_RUNS = _folders(AGGREGATE_SETS)
HOLDOUT_RUNS = _folders(HOLDOUT_SETS)
# run.sequential: pipeline -> its run sets (the campaign's, all sequential), and its look
LOOK = f"{RESULTS}/looks/{{pipeline}}.json"
SEQUENTIAL_SETS = {}
if SEQUENTIAL:
    for _folder, _set in AGGREGATE_SETS.items():
        SEQUENTIAL_SETS.setdefault(Path(_folder).parts[-3], {})[_folder] = _set


def aggregate_runs(wildcards):
    """The aggregate's runs; with run.sequential each pipeline's as its look decided, and
    the looks (one not yet taken is the checkpoint's target: Snakemake takes every
    pipeline's look, then asks again; one edited by hand asks for the first repetitions,
    and the aggregate refuses it: engine.analysis.sequential.read_look)."""
    if not SEQUENTIAL:
        return {"runs": AGGREGATE_RUNS}
    runs, looks = [], []
    for pipeline, sets in SEQUENTIAL_SETS.items():
        try:
            look = checkpoints.look.get(pipeline=pipeline).output[0]
            reps = read_look(look, FIRST_REPS, SEQUENTIAL)
        except IncompleteCheckpointException as taken_later:
            look, reps = taken_later.targetfile, FIRST_REPS
        except EdgeprofError:
            reps = FIRST_REPS
        looks.append(look)
        runs += [f"{folder}/rep{i}" for folder in sets for i in range(reps)]
    return {"runs": runs, "looks": looks}


def sequential_targets(wildcards):
    """The default target's inputs besides TARGETS (whose runs are the first repetitions'):
    with run.sequential the looks and the runs they added, so one removed is made again."""
    if not SEQUENTIAL:
        return []
    inputs = aggregate_runs(wildcards)
    return inputs["looks"] + inputs["runs"]


def look_sets(wildcards):
    """A look's run sets: its pipeline's probed ones (the speed-ups' runs)."""
    sets = SEQUENTIAL_SETS[wildcards.pipeline]
    return canonical({d: s for d, s in sets.items() if s[1]})


def look_runs(wildcards):
    """A look's runs: those sets' runs of the first repetitions."""
    return [f"{d}/rep{i}" for d in look_sets(wildcards) for i in range(FIRST_REPS)]


# Snakemake priorities that start the runs interleaved across policies, block by block
# (engine.workflow.plan.run_order); the order they really ran in is in the runs table.
RUN_PRIORITY = run_priorities(config)
# a look starts as soon as its runs are done: the repetitions it adds interleave with the rest
LOOK_PRIORITY = max(RUN_PRIORITY.values(), default=0) + 1
# One job per block of runs (engine.workflow.plan.job_blocks): every block with run.per_job
# "block"; else, with sandbox.per_boot "block", the sandbox's, each in one boot. One rule
# per BlockShape (workflow/rules/run.smk); (shape index, pipeline, rep) -> the block's runs
# in their order, and its priority: its first run's (the blocks start in run order)
PER_JOB = RUN.get("per_job", "run")
PER_BOOT = per_boot(config)
BLOCK_SHAPES = block_shapes(config)
BLOCK_RUNS = {}
if BLOCK_SHAPES:
    _SHAPE_INDEX = {
        (s.in_sandbox, s.limit, s.runs, p, r): i
        for i, s in enumerate(BLOCK_SHAPES)
        for p in s.pipelines
        for r in s.reps
    }
    for (_, _in_vm, _pipe, _limits, _rep), _runs in job_blocks(config).items():
        _i = _SHAPE_INDEX[(_in_vm, _limits, tuple(sorted(_runs)), _pipe, _rep)]
        _kind, _policy, _limit = _runs[0]
        BLOCK_RUNS[(_i, _pipe, _rep)] = (
            _runs,
            RUN_PRIORITY[(_kind, _pipe, policy_id(_policy), _limit, _rep)],
        )
# the rule run's kind wildcard, which with sandbox blocks refuses their kind/pipeline folders
RUN_KIND = run_rule_kind(config)
REC_ID = policy_id(REC["policy"])
REC_BATCH = batches(config)[0]  # the reconciliation run's: the first of run.batch's
REC_DIR = f"{RESULTS}/reconcile/{REC['pipeline']}/{REC_ID}/{REC['limit']}"
# what the aggregate checks the reconciliation run was made with (as a run set's runs)
REC_SETTINGS = {
    "pipeline": REC["pipeline"],
    "policy": parse_policy(REC["policy"]).name,
    "limit": str(REC["limit"]),
    **run_settings(
        config,
        str(REC["limit"]),
        reconcile_in_sandbox(config),
        RUN["runtime"],
        REC_BATCH,
        extra=["--heap-profile"],
    ),
}

# What `rule all` (in the Snakefile) builds.
FIGURES = [
    "speedup",
    "memory",
    "partial_workers",
    "layer_times",
    "reconciliation",
    "memory_over_time",
    "attribution",
]
if len(batches(config)) > 1:  # memory and time against the batch
    FIGURES.append("batch")
TABLES = [
    "runs",
    "tasks",
    "networks",
    "samples",
    "reconcile",
    "speedup",
    "summary",
    "speedup_summary",
    "noise_floor",
    "probe_overhead",
]
# The slowdown model (workflow/rules/model.smk): its file, the cross-validation and
# per-layer residual tables, the scores advise states, and two figures.
MODEL_FILE = f"{RESULTS}/model/model.json"
# model.campaigns: other campaigns' results folders whose tables the model also learns
# from (a network's description from the first campaign that has it)
MODEL_CONFIG = config["model"]
MODEL_CAMPAIGNS = [str(c) for c in MODEL_CONFIG.get("campaigns", [])]
MODEL_TABLES = [
    f"{folder}/tables/{table}.parquet"
    for folder in [RESULTS, *MODEL_CAMPAIGNS]
    for table in ("runs", "tasks", "networks")
]
MODEL_OUTPUTS = expand(
    f"{RESULTS}/model/{{table}}.{{ext}}",
    table=["cv_predictions", "cv_scores", "cv_folds", "cv_targets", "layer_residuals"],
    ext=["csv", "parquet"],
) + [f"{RESULTS}/model/cv.json"]
RECONSTRUCTION_OUTPUTS = expand(
    f"{RESULTS}/model/{{table}}.{{ext}}",
    table=[
        "reconstruction",
        "reconstruction_validation",
        "reconstruction_scores",
        "swap_cost_curves",
        "swap_cost_crossovers",
    ],
    ext=["csv", "parquet"],
)
HOLDOUT_TABLES = expand(
    f"{RESULTS}/holdout/tables/{{table}}.{{ext}}",
    table=["runs", "tasks", "networks"],
    ext=["csv", "parquet"],
)
HOLDOUT_OUTPUTS = expand(
    f"{RESULTS}/model/{{table}}.{{ext}}",
    table=["holdout_predictions", "holdout_scores", "holdout_targets"],
    ext=["csv", "parquet"],
)
# figure -> the model tables it is drawn from
MODEL_FIGURE_TABLES = {
    "model_predictions": ["cv_predictions"],
    "model_residuals": ["layer_residuals"],
    "swap_cost": ["swap_cost_curves", "swap_cost_crossovers"],
}
MODEL_FIGURES = list(MODEL_FIGURE_TABLES)
TARGETS = (
    expand(f"{RESULTS}/plots/{{fig}}.{{ext}}", fig=FIGURES, ext=["png", "pdf"])
    + expand(f"{RESULTS}/tables/{{table}}.{{ext}}", table=TABLES, ext=["csv", "parquet"])
    + [MODEL_FILE]
    + MODEL_OUTPUTS
    + RECONSTRUCTION_OUTPUTS
    # the held-out tables too: a failed aggregate_holdout deletes them, and only a missing
    # target (not a missing input of scores still on disk) makes Snakemake redo them
    + (HOLDOUT_TABLES + HOLDOUT_OUTPUTS if HOLDOUT_PIPELINES or HOLDOUT_VM_PIPELINES else [])
    + expand(f"{RESULTS}/model/{{fig}}.{{ext}}", fig=MODEL_FIGURES, ext=["png", "pdf"])
    + RUN_FOLDERS
    + [REC_DIR]
)


wildcard_constraints:
    stem="|".join(map(re.escape, NETWORKS)) or "(?!)",
    pipeline=r"(hp|hv|p|v)\d\d\d+",
    kind=KIND_RE,
    policy="|".join(POLICIES),
    limit=r"none|\d+(\.\d+)?[KMGT]?",
    rep=r"\d+",
    run=r"[^/]+/[^/]+/[^/]+/rep\d+",
    fig="|".join(FIGURES),
    model_fig="|".join(MODEL_FIGURES),


# Argument strings the rules pass to `python -m engine` (engine.workflow builds them).
PIPELINES_ARGS = pipelines_args(config, NETWORKS.values())
SANDBOX_PIPELINES_ARGS = sandbox_pipelines_args(config)
HOLDOUT_PIPELINES_ARGS = pipelines_args(config, NETWORKS.values(), holdout=True)
HOLDOUT_SANDBOX_PIPELINES_ARGS = sandbox_pipelines_args(config, holdout=True)
REC_BATCH_ARGS = batch_args(REC_BATCH)
# Only the settings a run depends on, so editing e.g. the limit list reruns only new runs.
RUN_OPTIONS = run_options(RUN)
REC_LIMIT_ARGS = reconcile_limit_args(config)
RUN_RUNTIME = run_runtime_min(RUN)
# What depends only on a run's limit, computed once per workflow rather than once per job
# (planning the paper sweep repeats every per-job call 40,000 times): its flags, the memory
# its job asks for and what goes before its `python -m engine run` (under inherit, a
# SLURM job step of its own: engine.workflow.resources.slurm_step_prefix).
_LIMITS = sorted(
    {(rs.in_sandbox, limit) for rs in RUN_SETS for limit in rs.limits}
    | {(reconcile_in_sandbox(config), str(REC["limit"]))}
)
LIMIT_ARGS = {key: limit_args(config, key[1], key[0]) for key in _LIMITS}
# An unconstrained run asks for what its pipeline's networks may hold (drawn here as the
# pipelines stage draws them; engine.workflow.resources.unconstrained_mem_mb), so its
# memory and step are keyed by the pipeline too; a limited run's by its limit alone.
_DRAWN = {
    name: nets
    for args in (
        PIPELINES_ARGS,
        HOLDOUT_PIPELINES_ARGS,
        SANDBOX_PIPELINES_ARGS,
        HOLDOUT_SANDBOX_PIPELINES_ARGS,
    )
    for name, nets in pipelines_networks(args, list(NETWORKS.values())).items()
}
_WORKERS = max(parse_policy(p).workers for p in POLICIES.values())
# (pipeline, batch) -> MiB an unconstrained run of it may use
_UNCONSTRAINED_MB = {
    (name, b): unconstrained_mem_mb(nets, b, RUN["runtime"], _WORKERS)
    for name, nets in _DRAWN.items()
    for b in batches(config)
}
if workflow.is_main_process:
    check_run_memory(config, _UNCONSTRAINED_MB, _DRAWN, UNLIMITED_MEM_MB)
# (in the sandbox, limit, pipeline, batch): a limited run's memory is its limit's
_MEM_KEYS = [
    (in_sandbox, limit, name, b)
    for in_sandbox, limit in _LIMITS
    for name in ([None] if limit != UNLIMITED else [*_DRAWN, None])
    for b in (batches(config) if name else [None])
]
# what a run job's own Snakemake interpreters need: measured on this one, which has
# loaded the same workflow and config by now (engine.workflow.resources.job_reserve_mb)
RESERVE_MB = job_reserve_mb(psutil.Process().memory_info().rss)
RUN_MEM_MB = {
    key: run_mem_mb(
        config, key[1], key[0], RESERVE_MB, _UNCONSTRAINED_MB.get(key[2:], UNLIMITED_MEM_MB)
    )
    for key in _MEM_KEYS
}
STEP_PREFIX = {
    key: slurm_step_prefix(
        run_step_mem_mb(config, key[1], key[0], _UNCONSTRAINED_MB.get(key[2:], UNLIMITED_MEM_MB))
    )
    for key in _MEM_KEYS
}


_BATCH_OF_KIND = {rs.kind: rs.batch for rs in RUN_SET_OF.values()}


def mem_key(in_sandbox, limit, pipeline, batch):
    """RUN_MEM_MB's and STEP_PREFIX's key of a run."""
    if limit == UNLIMITED and pipeline in _DRAWN:
        return (in_sandbox, limit, pipeline, batch)
    return (in_sandbox, limit, None, None)


# Run jobs take the built qemu guest as input only where some run boots it (a uml run's
# kernel is setup.sh's: python -m engine.sandbox build).
ANY_RUN_IN_QEMU = any(needs_vm_guest(config, limit, in_sandbox) for in_sandbox, limit in _LIMITS)


# Code fingerprints (params, so a change reruns exactly the jobs that run that code): each
# job kind hashes the engine modules it really imports, less the policies' graph builders
# (engine.workflow.fingerprint.code_fingerprint); run jobs add their own policy's, so editing one
# policy reruns only that policy's runs, and any other shared line reruns them all.
_ROOT = Path(workflow.basedir)
CODE_MODELS = code_fingerprint("models", _ROOT)
CODE_SPLIT = code_fingerprint("split", _ROOT)
CODE_PIPELINES = code_fingerprint("pipelines", _ROOT)
CODE_RUN_SHARED = code_fingerprint("run", _ROOT)
CODE_ANALYSIS = code_fingerprint("tables", _ROOT)
CODE_LOOK = code_fingerprint("look", _ROOT)
CODE_PLOTS = code_fingerprint("plots", _ROOT)
CODE_FIT_MODEL = code_fingerprint("fit_model", _ROOT)
CODE_EVALUATE_MODEL = code_fingerprint("evaluate_model", _ROOT)
CODE_RECONSTRUCT_MODEL = code_fingerprint("reconstruct_model", _ROOT)
CODE_SCORE_HOLDOUT = code_fingerprint("score_holdout", _ROOT)
CODE_MODEL_PLOTS = code_fingerprint("model_plots", _ROOT)
# policy id -> the code its runs depend on, computed once (not once per job)
RUN_CODE = {
    pid: f"{CODE_RUN_SHARED}-{policy_fingerprint(parse_policy(name).family, _ROOT)}"
    for pid, name in POLICIES.items()
}
REC_CODE = f"{CODE_RUN_SHARED}-{policy_fingerprint(parse_policy(REC['policy']).family, _ROOT)}"


# Input, params and resources functions of the rules. Folders are taken from a job's own
# files (not hardcoded), so they hold without a shared filesystem too.
def output_dir(wildcards, output):
    return os.path.dirname(output[0])


def tables_dir(wildcards, input):
    """The folder(s) of the aggregate tables a model job reads, one per campaign."""
    return list(dict.fromkeys(os.path.dirname(t) for t in input.tables))


def model_splits(wildcards, input):
    """The description folders of a model job's campaigns: this workflow's split stage
    output, then each other campaign's ``split`` beside its ``tables``."""
    tables = list(dict.fromkeys(os.path.dirname(t) for t in input.tables))
    others = [os.path.join(os.path.dirname(t), "split") for t in tables[1:]]
    return [os.path.dirname(input.descriptions[0]), *others]


def split_dir(wildcards, input):
    """The folder of the description files, where `python -m engine` finds the models."""
    return os.path.dirname(input.descriptions[0])


def model_files(wildcards):
    folder = MODELS_DIR if wildcards.stem in ZOO_STEMS else USER_MODELS
    return {
        "caffemodel": f"{folder}/{wildcards.stem}.caffemodel",
        "prototxt": f"{folder}/{wildcards.stem}.prototxt",
    }


def user_model_digest(wildcards):
    """A user model's content (the zoo's are made here, their times are the workflow's)."""
    if wildcards.stem in ZOO_STEMS:
        return ""
    return content_digest(model_files(wildcards).values())


def _limit_key(wildcards):
    """(in_sandbox, limit) of a run job, or of the reconciliation run (no limit wildcard)."""
    if not hasattr(wildcards, "limit"):
        return (reconcile_in_sandbox(config), str(REC["limit"]))
    return (_run_set(wildcards).in_sandbox, wildcards.limit)


def _run_set(wildcards):
    return RUN_SET_OF[(wildcards.kind, wildcards.pipeline, wildcards.policy, wildcards.limit)]


def run_vm_guest(wildcards):
    """The built qemu guest, for a run that boots it."""
    in_sandbox, limit = _limit_key(wildcards)
    return VM_GUEST if needs_vm_guest(config, limit, in_sandbox) else []


# no input function at all (one call per job) when no run boots the qemu guest
RUN_VM_GUEST = run_vm_guest if ANY_RUN_IN_QEMU else []


def reconcile_vm_guest(wildcards):
    in_sandbox, limit = _limit_key(wildcards)
    return VM_GUEST if needs_vm_guest(config, limit, in_sandbox) else []


def vm_env(wildcards, input):
    """What goes before `python -m engine run`: for a run that goes to the VM, the guest
    this workflow built; under `inherit`, a SLURM job step of its own of exactly the run's
    limit (engine.workflow.resources.slurm_step_prefix; outside a SLURM job the run starts as it
    is)."""
    if input.vm_guest:
        return f"EDGEPROF_VM_CACHE={shlex.quote(os.path.dirname(input.vm_guest))} "
    if hasattr(wildcards, "kind"):  # a run rule's; else the reconciliation run's
        pipeline, batch = wildcards.pipeline, _run_set(wildcards).batch
    else:
        pipeline, batch = REC["pipeline"], REC_BATCH
    return STEP_PREFIX[mem_key(*_limit_key(wildcards), pipeline, batch)]


def _run_words(kind, pipeline, policy, limit, rep, in_sandbox):
    """One run's `python -m engine run` arguments and its log (policy: its canonical name)."""
    names = dict(kind=kind, pipeline=pipeline, policy=policy_id(policy), limit=limit, rep=rep)
    rs = RUN_SET_OF[(kind, pipeline, policy_id(policy), limit)]
    words = run_words(
        f"{PIPELINES_DIR}/{pipeline}.json",
        policy,
        SPLIT_DIR,
        RUN_DIR.format(**names),
        _limit_flags(rs, (in_sandbox, limit)),
        batch_args(rs.batch),
        rs.runtime,
        config["seed"] + rep,
        RUN_OPTIONS,
    )
    return words, RUN_LOG.format(**names)


def _run_line(kind, pipeline, policy, limit, rep, in_sandbox, prefix):
    """The shell line of one run (policy: its canonical name)."""
    return run_command(prefix, *_run_words(kind, pipeline, policy, limit, rep, in_sandbox))


def run_line(wildcards, input):
    """Rule run's shell line. It reads `input`, so Snakemake counts it as derived from
    the input files and never compares it to decide a rerun: the params beside it that
    the results depend on (policy, limit, ...) are compared instead."""
    return _run_line(
        wildcards.kind,
        wildcards.pipeline,
        POLICIES[wildcards.policy],
        wildcards.limit,
        int(wildcards.rep),
        _limit_key(wildcards)[0],
        vm_env(wildcards, input),
    )


# the environment's settings of a sandbox's measurement, compared for a rerun of its runs
# (checked here: a bad one would fail each sandbox job after Snakemake removed its run)
SANDBOX_SETTINGS = (
    sandbox_settings(os.environ, sandbox_kernel(config)) if config["sandbox"]["enabled"] else {}
)


def run_sandbox_settings(wildcards):
    return SANDBOX_SETTINGS if _limit_key(wildcards)[0] else {}


def run_policy(wildcards):
    return POLICIES[wildcards.policy]


def _limit_flags(rs, key):
    """A run's limit flags, and --no-probes for an unprobed twin (its run set says so)."""
    args = LIMIT_ARGS[key]
    return args if rs.probed else f"{args} --no-probes"


def run_limit_args(wildcards):
    return _limit_flags(_run_set(wildcards), _limit_key(wildcards))


def run_runtime(wildcards):
    return f"--runtime {_run_set(wildcards).runtime}"


def run_batch(wildcards):
    return batch_args(_run_set(wildcards).batch)


def run_seed(wildcards):
    return config["seed"] + int(wildcards.rep)


def run_code(wildcards):
    return RUN_CODE[wildcards.policy]


def run_mem(wildcards):
    return RUN_MEM_MB[
        mem_key(*_limit_key(wildcards), wildcards.pipeline, _run_set(wildcards).batch)
    ]


def run_priority(wildcards):
    return RUN_PRIORITY[
        (wildcards.kind, wildcards.pipeline, wildcards.policy, wildcards.limit, int(wildcards.rep))
    ]


def caption_facts(wildcards, input):
    """What a figure's caption says that only the results know (n, significant cells):
    read from the plot's input tables, so Snakemake never compares it for a rerun."""
    from engine.analysis.captions import caption_facts as facts

    return facts(os.path.dirname(input[0]))


def model_figure_tables(wildcards):
    return [
        f"{RESULTS}/model/{table}.parquet" for table in MODEL_FIGURE_TABLES[wildcards.model_fig]
    ]


def model_caption_facts(wildcards, input):
    """The model figures' caption facts (n, the cross-validated scores), from the tables
    they are drawn from."""
    from engine.model.figures import caption_facts as facts

    return facts(os.path.dirname(input[0]))


def vm_recipe(wildcards):
    """The guest's recipe hash (reads two files; probes nothing): imported only when a
    vm_guest job is planned."""
    from engine.sandbox.guest import recipe_hash

    return recipe_hash()


# Rule factories of run.per_job "block" (workflow/rules/run.smk): shape i's outputs and
# logs (every run's folder and log, with the pipeline and rep wildcards) and its shell.
def block_paths(i, pattern):
    shape = BLOCK_SHAPES[i]
    return [
        pattern.format(
            kind=kind,
            pipeline="{pipeline}",
            policy=policy_id(policy),
            limit=limit,
            rep="{rep}",
        )
        for kind, policy, limit in shape.runs
    ]


def _shape_batch(shape):
    """The batch of a shape's blocks: a block's runs are at one (its kinds name it)."""
    return _BATCH_OF_KIND[shape.runs[0][0]]


def _shape_mem_key(shape, pipeline):
    """The mem_key of a block's most demanding limit: one boot holds them all."""
    keys = [
        mem_key(shape.in_sandbox, limit, pipeline, _shape_batch(shape)) for limit in shape.limits
    ]
    return max(keys, key=RUN_MEM_MB.get)


def _shape_in_qemu(shape):
    return any(needs_vm_guest(config, limit, shape.in_sandbox) for limit in shape.limits)


def block_shell(i):
    """Params function of shape i: its block's runs one after the other in their order,
    in one sandbox boot (sandbox.per_boot "block"), else each in a SLURM job step of its
    own (or booting the workflow's guest)."""
    shape = BLOCK_SHAPES[i]
    in_qemu = _shape_in_qemu(shape)
    one_boot = shape.in_sandbox and PER_BOOT == "block"

    def runs(wildcards):
        prefix = (
            f"EDGEPROF_VM_CACHE={shlex.quote(VM_CACHE)} "
            if in_qemu
            else STEP_PREFIX[_shape_mem_key(shape, wildcards.pipeline)]
        )
        order, _ = BLOCK_RUNS[(i, wildcards.pipeline, int(wildcards.rep))]
        lines = [
            _run_words(
                kind,
                wildcards.pipeline,
                policy,
                limit,
                int(wildcards.rep),
                shape.in_sandbox,
            )
            for kind, policy, limit in order
        ]
        if one_boot:
            return sandbox_block_command(prefix, lines)
        return block_command(run_command(prefix, *line) for line in lines)

    declare_signatures([runs])
    return runs


def block_priority(i):
    def priority(wildcards):
        return BLOCK_RUNS[(i, wildcards.pipeline, int(wildcards.rep))][1]

    declare_signatures([priority])
    return priority


def block_resources(i):
    shape = BLOCK_SHAPES[i]

    def mem_mb(wildcards):
        return RUN_MEM_MB[_shape_mem_key(shape, wildcards.pipeline)]

    declare_signatures([mem_mb])
    return {"mem_mb": mem_mb, "runtime": block_runtime_min(RUN, len(shape.runs))}


# Snakemake inspects the signature of an input, params or resources function every time
# it calls one (twice per call; 12 calls per run job): fix each function's parameters
# once per workflow (engine.workflow.snakemake_api: public where Snakemake is not one it
# was checked on).
declare_signatures(
    (
        output_dir,
        split_dir,
        model_files,
        run_vm_guest,
        reconcile_vm_guest,
        vm_env,
        run_line,
        run_policy,
        run_limit_args,
        run_runtime,
        run_batch,
        run_seed,
        run_code,
        run_mem,
        run_priority,
        vm_recipe,
        caption_facts,
        tables_dir,
        model_caption_facts,
        model_figure_tables,
        model_splits,
        aggregate_runs,
        sequential_targets,
        look_runs,
        look_sets,
    )
)

"""The command-line arguments the rules pass to ``python -m engine``, as shell-quoted
strings."""

from __future__ import annotations

import shlex
from collections.abc import Iterable

from engine.units import parse_size
from engine.workflow.plan import (
    HOLDOUT_PREFIX,
    HOLDOUT_SANDBOX_PREFIX,
    SANDBOXES,
    UNLIMITED,
    Config,
    holdout_config,
    reconcile_in_sandbox,
    run_backend,
    sandbox_enabled,
    sandbox_runs_main,
)


def _whole(value: object) -> object:
    """A whole-number float as the int it equals: ``timeout_s: 600.0`` is ``600``, in a
    job's arguments and params alike, so writing it either way reruns nothing."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def join_words(args: Iterable[object]) -> str:
    """``args`` as one shell-quoted string (numbers as ``canonical`` writes them)."""
    return shlex.join(str(_whole(a)) for a in args)


def canonical(value: object) -> object:
    """``value`` with every mapping's keys sorted, at any depth, and whole-number floats
    as ints: a rule's params mapping whose text (Snakemake compares a param's ``repr`` to
    decide a rerun) does not depend on how the config file wrote it."""
    if isinstance(value, dict):
        return {key: canonical(value[key]) for key in sorted(value, key=str)}
    if type(value) in (list, tuple):  # their order is the config's meaning: kept
        return type(value)(canonical(item) for item in value)
    return _whole(value)


def reconcile_limit_args(config: Config) -> str:
    """The reconciliation run's limit flags: as any run's, or the guest's (``--backend vm``,
    with or without a limit: the guest's cgroup is measured either way)."""
    return limit_args(config, config["run"]["reconcile"]["limit"], reconcile_in_sandbox(config))


def swap_arg(config: Config, limit: str) -> str:
    """The run's ``--swap``: ``run.swap``, or with ``run.swap_total`` (memory + swap
    capped together, as EdgeCaffe's memsw.limit_in_bytes) what the total leaves above
    the limit."""
    total = config["run"].get("swap_total")
    if total is None:
        return str(config["run"]["swap"])
    return str(parse_size(str(total)) - parse_size(limit))


def limit_args(config: Config, limit: str, in_sandbox: bool) -> str:
    """``python -m engine run``'s limit, swap and backend flags for a run under ``limit``
    (``in_sandbox``: a run of a sandbox pipeline)."""
    backend = run_backend(config, limit, in_sandbox)
    # a sandbox's crash (user-mode Linux under heavy swap, docs/sandboxes.md) is a result
    # the tables count and name, never a hole that stops the campaign; natively, a crash
    # is a bug and fails the workflow
    crash = ["--error-is-result"] if backend in SANDBOXES else []
    if limit == UNLIMITED:
        return join_words(["--backend", backend, *crash])
    return join_words(["--limit", limit, "--swap", swap_arg(config, limit), "--backend", backend,
                       *crash])


def batch_args(batch: int | None) -> str:
    """``--batch N``, or nothing to keep each network's deploy batch (``batch: null``)."""
    return "" if batch is None else join_words(["--batch", batch])


def run_options(run: Config) -> str:
    """The settings every run shares (only these, so editing e.g. the limit list reruns
    only the new runs)."""
    pin = ["--pin-cpu"] if run.get("pin_cpu") else []
    stall = ["--stall-timeout", run["stall_s"]] if run.get("stall_s") else []
    return join_words(["--blas-threads", run["blas_threads"], "--timeout", run["timeout_s"],
                       *stall, "--sample-hz", run["sample_hz"], *pin])


def run_settings(config: Config, limit: str, in_sandbox: bool, runtime: str,
                 batch: int | None, probed: bool = True,
                 extra: Iterable[str] = ()) -> dict[str, object]:
    """What each run of a run set records of the settings its flags set (the runs table's
    columns: ``engine.analysis.provenance.check_settings`` compares them): the request
    ``python -m engine run`` makes of the flags its rule passes (``limit_args``,
    ``batch_args``, ``run_options``, ``--runtime``, ``extra``: the reconciliation run's
    ``--heap-profile``), so a run redone by hand with other flags is told from the
    config's. ``seed`` is the first repetition's (each adds its number)."""
    from engine.commands.run import parse_request
    from engine.runner.meta import MMAP_THRESHOLD

    words = [*shlex.split(limit_args(config, limit, in_sandbox)),
             *shlex.split(batch_args(batch)), *shlex.split(run_options(config["run"])),
             "--runtime", runtime, "--seed", str(config["seed"]),
             *([] if probed else ["--no-probes"]), *extra]
    # the four paths are the job's own; the settings do not depend on them
    request = parse_request(["--pipeline", "p.json", "--policy", "bulk", "--split", "split",
                             "--out", "/run", *words])
    return request.settings() | {
        # what the engine sets for the measured child (engine.runner.supervise.child_env)
        "numpy_hugepages": False, "mmap_threshold": MMAP_THRESHOLD}


def arrival_args(arrival: Config) -> str:
    """``{mode: poisson, rate: 2}`` -> ``--arrival poisson --rate 2``: the mode, then its
    parameters in name order (whatever order the config wrote them in)."""
    args: list[object] = ["--arrival", arrival["mode"]]
    for key in sorted(set(arrival) - {"mode"}):
        args += [f"--{key}", arrival[key]]
    return join_words(args)


def bins_args(config: Config) -> list[object]:
    """``--bins`` (MiB) or ``--bins-mb`` (decimal MB) with the size bins' edges."""
    cfg = config["pipelines"]
    return ["--bins-mb" if cfg.get("bin_unit") == "MB" else "--bins", *cfg["bins"]]


def pipelines_args(config: Config, networks: Iterable[str], holdout: bool = False) -> str:
    """``python -m engine pipelines``'s arguments for the main pipelines (``pNNN``), drawn
    from ``networks`` (display names); ``holdout``: the model's held-out ones (``hpNNN``,
    ``model.holdout``'s count and seed; empty without ``model.holdout``)."""
    cfg = config["pipelines"]
    count, seed, prefix = cfg["count"], config["seed"], []
    if holdout:
        hold = holdout_config(config)
        if not hold:
            return ""
        count, seed, prefix = hold.get("pipelines", 0), hold["seed"], ["--prefix",
                                                                        HOLDOUT_PREFIX]
    return " ".join(filter(None, [
        join_words(["--count", count, "--seed", seed, *prefix, "--length", *cfg["length"]]),
        arrival_args(cfg["arrival"]),
        # sorted: the draw sorts them (generate_pipelines), so a reordered list is the
        # same pipelines and must rerun nothing
        join_words([*bins_args(config), "--networks", *sorted(set(networks))]),
    ]))


def sandbox_pipelines_args(config: Config, holdout: bool = False) -> str:
    """The same for the sandbox block's smaller pipelines (``vNNN``, batch arrival, its own
    networks; ``holdout``: ``hvNNN``); empty when the sandbox block is not enabled or runs the
    main pipelines."""
    if (not sandbox_enabled(config) or sandbox_runs_main(config)
            or (holdout and not holdout_config(config))):
        return ""
    cfg = config["sandbox"]["pipelines"]
    count, seed, prefix = cfg["count"], config["seed"], "v"
    if holdout:
        hold = holdout_config(config)
        count, seed, prefix = hold.get("sandbox_pipelines", 0), hold["seed"], HOLDOUT_SANDBOX_PREFIX
    return join_words(["--count", count, "--seed", seed, "--prefix", prefix,
                       "--length", *cfg["length"], *bins_args(config),
                       "--networks", *sorted(set(cfg["networks"]))])


def run_words(pipeline: str, policy: str, split: str, out: str, limit: str, batch: str,
              runtime: str, seed: int, options: str) -> str:
    """``python -m engine run``'s arguments for one run, quoted for a shell."""
    q = shlex.quote
    return (f"--pipeline {q(pipeline)} --policy {q(policy)} --split {q(split)} --out {q(out)}"
            f" {limit} {batch} --runtime {q(runtime)} --seed {int(seed)} {options}")


def run_command(prefix: str, words: str, log: str) -> str:
    """The shell line of one run, ``python -m engine run WORDS`` after ``prefix`` (its SLURM
    job step, or the qemu guest's cache: ``common.smk``'s ``vm_env``), its stderr into
    ``log``."""
    return f"{prefix}python -m engine run {words} 2> {shlex.quote(log)}"


def sandbox_block_command(prefix: str, runs: Iterable[tuple[str, str]]) -> str:
    """The shell line of one job's runs in one sandbox boot (``sandbox.per_boot: block``):
    ``python -m engine run-block`` with each run's arguments (``run_words``) and log, in
    order. Its own messages are errors only: each run's go to its log."""
    q = shlex.quote
    return (f"{prefix}python -m engine run-block -q "
            + " ".join(f"--run {q(words)} --log {q(log)}" for words, log in runs))


def block_command(commands: Iterable[str]) -> str:
    """One job's runs (``run.per_job: block``), one after the other in the given order:
    each runs whatever the others did, and the job fails at its end if any failed (a
    crash; an OOM kill or a timeout is a result), so a rerun repeats the block. A run
    ended by a signal (exit status 128 or more: Ctrl-C, the job cancelled) ends the job
    at once with that status: the rest of the block does not start."""
    stop = '{ s=$?; if [ "$s" -ge 128 ]; then exit "$s"; fi; rc=1; }'
    return "rc=0; " + " ".join(f"{c} || {stop};" for c in commands) + ' exit "$rc"'

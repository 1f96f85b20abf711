"""Command line of the engine: one subcommand per workflow stage.

Every subcommand reports bad input as one line naming the problem and exits 2; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from engine.errors import EdgeprofError
from engine.files import write_text_atomic
from engine.limits import BACKENDS
from engine.runtime import DEFAULT_RUNTIME, RUNTIMES
from engine.units import format_size

# Upper bounds of counts a user gives (each is documented in --help): far above any sweep
# this project runs, low enough that a typo (1e12) is refused at once, not after an hour
MAX_PIPELINES = 100_000
MAX_GRAPH_INSTANCES = 1_000

if TYPE_CHECKING:
    from engine.runner.request import RunRequest


def _cmd_models(args: argparse.Namespace) -> None:
    from engine.caffe import generate, zoo

    _positive(args.seed, "--seed", allow_zero=True)
    _output_dir(args.out, "--out")
    names = args.networks or list(zoo.ZOO)
    for name in names:
        if name not in zoo.ZOO:
            raise EdgeprofError(f"unknown zoo network '{name}' (known: {', '.join(zoo.ZOO)})")
    for name in names:
        t0 = time.perf_counter()
        prototxt, caffemodel = generate.write_zoo_model(name, args.out, args.seed)
        size = caffemodel.stat().st_size
        print(f"{name}: wrote {caffemodel} ({size / 2**20:.1f} MiB) and {prototxt.name} "
              f"in {time.perf_counter() - t0:.2f} s", file=sys.stderr)


def _cmd_split(args: argparse.Namespace) -> None:
    from engine.caffe import splitter, zoo

    model = Path(args.model)
    prototxt = Path(args.prototxt) if args.prototxt else model.with_suffix(".prototxt")
    from engine.files import file_kind

    for path in (model, prototxt):
        kind = file_kind(path)
        if kind != "a regular file":
            what = "does not exist" if kind == "missing" else f"is {kind}, not a file"
            raise EdgeprofError(f"{path} {what} (a split needs a .caffemodel and its "
                                "deploy .prototxt side by side, or --prototxt)")
    stem = model.name.removesuffix(".caffemodel")
    # A zoo file keeps its zoo name and conv|fc split even when --network is not given.
    entry = zoo.ZOO.get(args.network or "") or next(
        (e for e in zoo.ZOO.values() if e.stem == stem and not args.network), None)
    fc_start = args.fc_start or (entry.fc_start if entry else None)
    network = args.network or (entry.name if entry else None)
    t0 = time.perf_counter()
    path = splitter.split_model(model, prototxt, args.out, network=network, fc_start=fc_start)
    desc = splitter.Description.load(path)
    print(f"{desc.network}: {len(desc.layers)} layers, {desc.num_conv_layers}|"
          f"{desc.num_fc_layers} conv|fc, {desc.param_count:,} parameters -> {path} "
          f"in {time.perf_counter() - t0:.2f} s", file=sys.stderr)


def _cmd_forward(args: argparse.Namespace) -> None:
    import numpy as np

    from engine.caffe.splitter import Description
    from engine.network import run_standalone

    if args.out is not None:
        _output_file(args.out, "--out")  # before the forward pass, not after it
    desc = Description.load_checked(args.description)
    t0 = time.perf_counter()
    outputs = run_standalone(desc, seed=args.seed, batch=args.batch, bulk=args.bulk,
                             runtime_name=args.runtime)
    elapsed = time.perf_counter() - t0
    for name, value in outputs.items():
        flat = value.reshape(value.shape[0], -1)[0]
        top = np.argsort(flat)[::-1][:5]
        print(f"{name} {tuple(value.shape)}: top-5 of image 0 "
              + ", ".join(f"{i}={flat[i]:.4f}" for i in top))
    print(f"load+forward took {elapsed:.3f} s", file=sys.stderr)
    if args.out:
        from engine.files import atomic_path

        with atomic_path(args.out) as tmp, open(tmp, "wb") as f:
            np.savez(f, **outputs)


def _cmd_pipelines(args: argparse.Namespace) -> None:
    from engine.caffe.splitter import Description, description_index
    from engine.schedule import pipelines

    models = description_index(args.models)
    names = args.networks or sorted(models)
    unknown = sorted(set(names) - set(models))
    if unknown:
        raise EdgeprofError(f"no split model for {', '.join(unknown)} in {args.models} "
                            f"(available: {', '.join(sorted(models)) or 'none'})")
    sizes = {n: Description.load(models[n]).param_bytes for n in names}
    arrival = {"mode": args.arrival}
    if args.arrival == "poisson":
        arrival["rate"] = args.rate
    elif args.arrival == "normal":
        arrival.update(mean=args.mean, sd=args.sd)
    _positive(args.count, "--count", most=MAX_PIPELINES)
    made = pipelines.generate_pipelines(args.seed, args.count, sizes, tuple(args.length),
                                        arrival, args.bins_mb or args.bins, prefix=args.prefix,
                                        bin_unit="MB" if args.bins_mb else "MiB")
    out = Path(args.out)
    for p in made:
        pipelines.save_pipeline(p, out / f"{p.name}.json")
        print(f"{p.name}: {len(p.networks())} networks, {p.param_bytes / 2**20:.0f} MiB "
              f"({p.size_bin}), {args.arrival}", file=sys.stderr)


def _positive(value: float | None, flag: str, allow_zero: bool = False,
              most: float = float("inf")) -> None:
    """A number option within its range (NaN and infinity never are)."""
    if value is None:
        return
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise EdgeprofError(f"{flag} {value}: must be a number {'>= 0' if allow_zero else '> 0'}")
    if value > most:
        raise EdgeprofError(f"{flag} {value}: must be at most {most:g}")


def _estimates(path: str) -> dict[str, int]:
    """masa's --estimates file: {network: peak bytes}."""
    from engine.files import parse_json, read_regular

    try:
        data = parse_json(read_regular(path, "estimates file", 2**20))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        estimates = {str(k): int(v) for k, v in data.items()}
    except (OSError, ValueError, TypeError) as exc:
        raise EdgeprofError(f"--estimates {path}: {exc}; it must hold {{network: peak "
                            f"bytes}}") from None
    if any(v <= 0 for v in estimates.values()):
        raise EdgeprofError(f"--estimates {path}: every peak must be > 0 bytes")
    return estimates


def _size(text: str, flag: str) -> int:
    """A size option, its errors naming the option."""
    from engine.units import parse_size

    try:
        return parse_size(text)
    except EdgeprofError as exc:
        raise EdgeprofError(f"{flag}: {exc}") from None


def _swap(text: str | None) -> int | None:
    """--swap: a size, 0 (in any unit), or max / not given (None: unlimited)."""
    import re

    if text in (None, "max"):
        return None
    if re.fullmatch(r"\s*0+(\.0*)?\s*([KMGT]?(i?B)?)?\s*", text, re.IGNORECASE):
        return 0
    return _size(text, "--swap")


def _output_file(path: str, option: str) -> Path:
    """An output file checked before the work (engine.files.check_output_file)."""
    from engine.files import check_output_file

    try:
        return check_output_file(path, option)
    except ValueError as exc:
        raise EdgeprofError(str(exc)) from None


def _output_dir(path: str, option: str) -> Path:
    """An output folder, checked before the work: not empty, not a file."""
    from engine.files import file_kind

    if not path.strip():
        raise EdgeprofError(f"{option} is empty; name the folder to write into")
    kind = file_kind(path)
    if kind not in ("missing", "a folder"):
        raise EdgeprofError(f"{option} {path} is {kind}; name a folder")
    return Path(path)


def _runtime_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runtime", choices=RUNTIMES, default=DEFAULT_RUNTIME,
                   help="what each stage allocates and frees: lean (the engine's own: "
                        "weights from their LOAD to their EXEC) or caffe (as Caffe 1.0 "
                        "under EdgeCaffe: every parameter at INIT, a parsed message per "
                        "LOAD, activations kept to the network's end); default lean")


def run_request(args: argparse.Namespace) -> RunRequest:
    """The RunRequest of ``run``'s arguments, checked (sizes, ranges, the policy)."""
    from engine.runner.request import LimitOptions, ProbeOptions, RunOptions, RunRequest
    from engine.schedule.policies import parse_policy

    policy = parse_policy(args.policy)  # fail fast, before any process starts
    limit = None if args.limit is None else _size(args.limit, "--limit")
    swap = _swap(args.swap)
    _positive(args.batch, "--batch", most=10_000)
    _positive(args.blas_threads, "--blas-threads", most=1024)
    _positive(args.timeout, "--timeout")
    _positive(args.seed, "--seed", allow_zero=True)
    _positive(args.sample_hz, "--sample-hz", allow_zero=True, most=10_000)
    if args.swap is not None and args.limit is None:
        raise EdgeprofError("--swap is the swap allowed on top of --limit; give a --limit too")
    if (args.budget or args.estimates) and not policy.admission:
        raise EdgeprofError(f"--budget and --estimates set masa's admission; {policy.name} "
                            f"admits every network: drop them or use masa")
    estimates = None
    if args.estimates:
        estimates = _estimates(args.estimates)
    options = RunOptions(blas_threads=args.blas_threads, seed=args.seed, batch=args.batch,
                         budget=_size(args.budget, "--budget") if args.budget else limit,
                         timeout_s=args.timeout, estimates=estimates, pin_cpu=args.pin_cpu,
                         runtime=args.runtime)
    on = not args.no_probes
    probes = ProbeOptions(process=on, cgroup=on, gnu_time=on, heap_profile=args.heap_profile,
                          cpu_profile=args.cpu_profile, sample_hz=args.sample_hz if on else 0,
                          sample_uss=args.sample_uss)
    return RunRequest(pipeline=args.pipeline, policy=policy.name, models=args.models,
                      out=args.out, options=options,
                      limits=LimitOptions(args.backend, limit, swap), probes=probes,
                      force=args.force)


def _cmd_run(args: argparse.Namespace) -> int:
    return _run(run_request(args))


def _cmd_supervise(args: argparse.Namespace) -> int:
    from engine.runner.request import RunRequest

    return _run(RunRequest.read(args.request))


def _run(request: RunRequest) -> int:
    """One run on this host, or in the vm backend's guest when the session says so."""
    from engine.runner.interrupt import Interrupted
    from engine.runner.supervise import open_run_session, run_supervised

    t0 = time.perf_counter()
    try:
        session = open_run_session(request)
        if session.runs_elsewhere:
            from engine.vm import run_in_vm

            session.close()  # nothing to close here: the guest opens its own
            meta = run_in_vm(request, auto=session.notes.get("auto"), sandbox=session.backend)
        else:
            meta = run_supervised(request, session)  # closes the session
    except Interrupted as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 130
    enforced = f"enforced by {meta.backend}" if meta.limit_enforced else "NOT enforced"
    limit = request.limits.ram_bytes
    limit_text = "unlimited" if limit is None else f"{format_size(limit)} {enforced}"
    print(f"{meta.pipeline.name} under {meta.policy} ({limit_text}): "
          f"{meta.termination} in {time.perf_counter() - t0:.2f} s -> {request.out}",
          file=sys.stderr)
    if meta.termination == "memory":
        print(f"  OOM while running: {', '.join(meta.running_at_end) or 'unknown'}",
              file=sys.stderr)
    if meta.termination == "error":
        print(f"error: {meta.termination_detail}", file=sys.stderr)
        return 1
    return 0


def _cmd_child(args: argparse.Namespace) -> int:
    import os

    from engine.procs import SUPERVISOR_ENV, die_with_parent

    # before the heavy imports: GNU time (the parent) may die with the supervisor any time
    supervisor = int(os.environ.get(SUPERVISOR_ENV) or 0) or None
    if supervisor is not None and os.getppid() == supervisor:
        die_with_parent(parent=supervisor)  # run without GNU time
    else:
        die_with_parent(grandparent=supervisor)
    from engine.runner.child import child_main

    return child_main(args.spec)


def _cmd_doctor(args: argparse.Namespace) -> int:
    from engine.analysis.noise import host_checks, table_warnings

    worst = 0
    for what, fine, meaning in host_checks():
        print(f"{'ok  ' if fine else 'WARN'} {what}" + ("" if fine else f": {meaning}"))
        worst = worst or (0 if fine else 1)
    if args.tables:
        for warning in table_warnings(args.tables):
            print(f"WARN {warning}")
            worst = 1
    print("quiet enough to measure" if not worst else
          "not quiet: timing results would say more about this machine than the policies")
    return worst


def _cmd_graph(args: argparse.Namespace) -> None:
    import shutil
    import subprocess

    from engine.caffe.splitter import Description
    from engine.schedule.dot import to_dot
    from engine.schedule.policies import parse_policy
    from engine.schedule.tasks import Instance

    policy = parse_policy(args.policy)
    _positive(args.count, "--count", most=MAX_GRAPH_INSTANCES)
    out = _output_file(args.out, "--out")
    if out.suffix not in (".dot", ".gv", ".svg"):
        raise EdgeprofError(f"--out {out}: graph writes DOT (.dot, .gv) or SVG (.svg); "
                            f"name the file so")
    desc = Description.load_checked(args.description, files=False)
    instances = [Instance(i, desc.network, 0, len(desc.layers), desc.num_conv_layers)
                 for i in range(args.count)]
    graph = policy.build(instances)
    names = {(i.id, layer.index): layer.name for i in instances for layer in desc.layers}
    dot = to_dot(graph, f"{policy.name}: {args.count} x {desc.network}",
                 {i.id: i.network for i in instances}, names)
    if out.suffix == ".svg":
        if shutil.which("dot") is None:
            raise EdgeprofError("writing SVG needs Graphviz's 'dot' (apt-get install graphviz); "
                                "or write .dot instead")
        svg = subprocess.run(["dot", "-Tsvg"], input=dot, capture_output=True, text=True,
                             check=True).stdout
        write_text_atomic(out, svg)
    else:
        write_text_atomic(out, dot)
    print(f"{len(graph.tasks)} tasks, {len(graph.edges())} edges -> {out}", file=sys.stderr)


def _cmd_advise(args: argparse.Namespace) -> None:
    from engine.model.advise import run_advise

    if args.find_limit and args.limit is not None:
        raise EdgeprofError("--find-limit finds the limit itself; drop --limit")
    limit = None if args.limit in (None, "none") else _size(args.limit, "--limit")
    if args.swap is not None and limit is None:
        raise EdgeprofError("--swap is the swap allowed on top of --limit; give a --limit too")
    print(run_advise(args.pipeline, args.model, args.models, limit, _swap(args.swap),
                     args.policies, args.mode, args.find_limit, args.json))


def _cmd_fit_model(args: argparse.Namespace) -> None:
    from engine.model.train import fit_model_files
    from engine.schedule.policies import parse_policy

    for policy in args.policies or ():
        parse_policy(policy)  # before the fit, not after it
    _output_file(args.out, "--out")

    t0 = time.perf_counter()
    model = fit_model_files(args.tables, args.models, args.out, args.policies)
    for name, mode in model.modes.items():
        print(f"{name}: {mode.runs} runs of {len(mode.pipelines)} pipelines; baseline "
              f"{mode.baseline_bytes / 2**20:.1f} MiB, parallel CPUs {mode.parallel_cpus:.2f} "
              f"of {mode.cpus:g}, swap cost "
              f"{'fitted' if mode.swap else 'none (no limited runs)'}", file=sys.stderr)
    print(f"-> {args.out} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)


def _cmd_evaluate_model(args: argparse.Namespace) -> None:
    from engine.model.evaluate import evaluate_files

    t0 = time.perf_counter()
    summary = evaluate_files(args.tables, args.models, args.model, args.out)
    for mode, scores in summary.items():
        print(f"{mode}: {scores}", file=sys.stderr)
    print(f"-> {args.out} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)


class _Parser(argparse.ArgumentParser):
    """Bad arguments are one line, as every other bad input (``--help`` shows usage)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m engine", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("models", help="write the zoo networks as prototxt + caffemodel")
    p.add_argument("--out", required=True, help="folder for <stem>.prototxt/.caffemodel")
    p.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    p.add_argument("networks", nargs="*", help="zoo networks (default: all of them)")
    p.set_defaults(func=_cmd_models)

    p = sub.add_parser("split", help="split a caffemodel into per-layer partial files")
    p.add_argument("model", help="the whole .caffemodel")
    p.add_argument("--prototxt", help="deploy prototxt (default: beside the model)")
    p.add_argument("--out", required=True, help="folder for <stem>_partials/ and the description")
    p.add_argument("--network", help="display name (zoo names also set the conv|fc split)")
    p.add_argument("--fc-start", help="first layer of DeepEye's fc part "
                   "(default: the first InnerProduct layer)")
    p.set_defaults(func=_cmd_split)

    p = sub.add_parser("forward", help="load and run one split network on its own")
    p.add_argument("description", help="<stem>.description.json written by split")
    p.add_argument("--bulk", action="store_true", help="load the whole caffemodel at once")
    p.add_argument("--batch", type=int, help="override the deploy batch size")
    p.add_argument("--seed", type=int, default=0, help="input image seed")
    _runtime_option(p)
    p.add_argument("--out", help="write the output blobs to this .npz")
    p.set_defaults(func=_cmd_forward)

    p = sub.add_parser("pipelines", help="generate seeded multi-network pipelines")
    p.add_argument("--models", required=True, help="folder of *.description.json (split stage)")
    p.add_argument("--out", required=True, help="folder for <prefix>NNN.json pipeline files")
    p.add_argument("--count", type=int, default=5,
                   help=f"pipelines to write, 1 to {MAX_PIPELINES:,} (default 5)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--length", type=int, nargs=2, default=[2, 5], metavar=("MIN", "MAX"),
                   help="networks per pipeline (default 2 5)")
    p.add_argument("--arrival", choices=["batch", "poisson", "normal"], default="batch")
    p.add_argument("--rate", type=float, default=1.0, help="poisson: networks per second")
    p.add_argument("--mean", type=float, default=1.0, help="normal: mean gap in seconds")
    p.add_argument("--sd", type=float, default=0.5, help="normal: gap sd in seconds")
    bins = p.add_mutually_exclusive_group()
    bins.add_argument("--bins", type=float, nargs="*", default=[100, 300],
                      help="upper edges (MiB) of the pipeline-size bins (default 100 300)")
    bins.add_argument("--bins-mb", type=float, nargs="+",
                      help="the same in decimal MB (10**6 bytes), e.g. 400 800 1200")
    p.add_argument("--networks", nargs="*", help="draw from these (default: all split models)")
    p.add_argument("--prefix", default="p", help="pipeline names: <prefix>NNN (default p)")
    p.set_defaults(func=_cmd_pipelines)

    p = sub.add_parser("run", help="run one pipeline under one policy; writes a run folder")
    p.add_argument("--pipeline", required=True, help="pipeline .json file")
    p.add_argument("--policy", required=True,
                   help="bulk, linear, partial[:k], deepeye, deepeye-frugal, execprio[:k], "
                        "execprio-inter[:k], masa[:k]")
    p.add_argument("--models", required=True, help="folder of *.description.json")
    p.add_argument("--out", required=True, help="run folder to write")
    p.add_argument("--limit", help="RAM limit, e.g. 512M (default: none)")
    p.add_argument("--swap", help="swap allowed on top of the limit: a size, 0, or max "
                   "(default: max, as EdgeCaffe's memsw of several GB)")
    p.add_argument("--backend", default="auto", choices=BACKENDS,
                   help="how the limit is enforced (vm: in a qemu guest with its own cgroup v2 "
                        "and swap; auto: first that works, the vm when a limit is asked for "
                        "and nothing else can enforce it; a run whose "
                        "limit is not enforced is marked limit_enforced=false)")
    p.add_argument("--budget", help="masa admission budget (default: the limit)")
    p.add_argument("--estimates", help="JSON of network -> peak bytes for masa (profiling run)")
    p.add_argument("--blas-threads", type=int, default=1,
                   help="BLAS threads per operation (default 1; keep it equal across "
                        "policies: the thread count changes float rounding)")
    p.add_argument("--seed", type=int, default=0, help="input image seed")
    p.add_argument("--batch", type=int, help="override every network's batch size")
    _runtime_option(p)
    p.add_argument("--timeout", type=float, help="wall-clock limit in seconds (termination "
                   "'timeout')")
    p.add_argument("--heap-profile", action="store_true",
                   help="preload tcmalloc and dump a heap profile at every task boundary")
    p.add_argument("--cpu-profile", action="store_true", help="gperftools CPU profile (yep)")
    p.add_argument("--sample-hz", type=float, default=100.0,
                   help="sampler rate (default 100; 0 disables)")
    p.add_argument("--sample-uss", action="store_true",
                   help="sampler also reads USS (smaps_rollup: costly, disturbs the run)")
    p.add_argument("--pin-cpu", action="store_true",
                   help="run the measured child alone on one CPU and the supervisor and "
                        "sampler on the others (recorded as cpu_affinity)")
    p.add_argument("--no-probes", action="store_true",
                   help="no per-window probes, GNU time or sampler (overhead baseline)")
    p.add_argument("--force", action="store_true", help="replace an existing run folder")
    p.set_defaults(func=_cmd_run)

    # the vm backend's guest runs the host's RunRequest through this
    p = sub.add_parser("supervise", help=argparse.SUPPRESS)
    p.add_argument("request", help="RunRequest JSON")
    p.set_defaults(func=_cmd_supervise)

    p = sub.add_parser("child", help=argparse.SUPPRESS)
    p.add_argument("spec")
    p.set_defaults(func=_cmd_child)

    p = sub.add_parser("advise", help="rank the policies for a pipeline under a limit "
                       "(predicted time, peak RAM and swap), or find the smallest limit "
                       "without swap")
    p.add_argument("--pipeline", required=True, help="pipeline .json")
    p.add_argument("--limit", help="RAM limit, e.g. 512M (default: unconstrained)")
    p.add_argument("--swap", help="swap allowed on top of the limit: a size, 0, or max "
                   "(default max)")
    p.add_argument("--model", default="results/model/model.json",
                   help="model file (default results/model/model.json)")
    p.add_argument("--models", default="results/split",
                   help="folder of the networks' *.description.json (default results/split)")
    p.add_argument("--policies", nargs="+", help="policies to rank (default: the ones the "
                   "model was fitted on)")
    p.add_argument("--mode", choices=["native", "emulated"],
                   help="execution mode whose fit to use (default native)")
    p.add_argument("--find-limit", action="store_true",
                   help="the smallest limit at which each policy runs without swapping")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=_cmd_advise)

    p = sub.add_parser("fit-model", help="fit the slowdown model on the aggregate tables")
    p.add_argument("--tables", default="results/tables",
                   help="folder of runs/tasks/networks.parquet (default results/tables)")
    p.add_argument("--models", default="results/split",
                   help="folder of the networks' *.description.json (default results/split)")
    p.add_argument("--out", default="results/model/model.json", help="model file to write")
    p.add_argument("--policies", nargs="+", help="what advise ranks by default (default: "
                   "the policies of the runs)")
    p.set_defaults(func=_cmd_fit_model)

    p = sub.add_parser("evaluate-model", help="cross-validate the model (leave pipelines "
                       "out) and tabulate its per-layer residuals")
    p.add_argument("--tables", default="results/tables")
    p.add_argument("--models", default="results/split")
    p.add_argument("--model", default="results/model/model.json")
    p.add_argument("--out", default="results/model", help="folder for the cv_* tables, "
                   "layer_residuals and cv.json")
    p.set_defaults(func=_cmd_evaluate_model)

    p = sub.add_parser("doctor", help="is this machine quiet enough to measure? (load, CPU "
                       "frequency, hugepages, swap; with --tables, a finished campaign's "
                       "noise floor and load)")
    p.add_argument("--tables", help="a campaign's aggregate tables (results/tables)")
    p.set_defaults(func=_cmd_doctor)

    p = sub.add_parser("graph", help="draw a policy's task graph (DOT, or SVG with Graphviz)")
    p.add_argument("--policy", required=True)
    p.add_argument("--description", required=True, help="<stem>.description.json")
    p.add_argument("--count", type=int, default=1,
                   help=f"instances of the network, 1 to {MAX_GRAPH_INSTANCES:,} (default 1)")
    p.add_argument("--out", required=True, help="output .dot or .svg")
    p.set_defaults(func=_cmd_graph)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except EdgeprofError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before a run's own handlers are installed, or outside one
        print("error: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:  # a path the command cannot read or write
        where = f" {exc.filename}" if exc.filename else ""
        print(f"error: cannot use{where}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except MemoryError:
        print("error: out of memory; use a smaller --batch or fewer networks", file=sys.stderr)
        return 2

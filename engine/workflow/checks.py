"""Checks of the merged config that its JSON schema (workflow/schemas/config.schema.yaml)
cannot express."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path

from engine.errors import EdgeprofError
from engine.files import file_kind
from engine.schedule.policies import parse_policy
from engine.units import format_size, parse_size
from engine.workflow.plan import (
    SANDBOXES,
    UNLIMITED,
    Config,
    batches,
    holdout_config,
    pipeline_names,
    reconcile_in_sandbox,
    run_backend,
    run_sets,
    sandbox_enabled,
    sandbox_kernel,
    sandbox_pipeline_names,
    sandbox_policies,
    sandbox_runs_main,
    unprobed_runs,
)

# the workflow's JSON schema (common.smk validates the config against it)
SCHEMA = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"


def check_config_files(paths: Iterable[str | os.PathLike]) -> None:
    """A key given twice in one mapping of a config file (YAML keeps the last, dropping
    the first block unseen), or a file that is not UTF-8: ValueError with one line naming
    the file, the key and its line."""
    import yaml

    class Unique(yaml.SafeLoader):
        pass

    def mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict:
        seen = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node)
            if key in seen:
                raise ValueError(f"config: {os.fspath(path)} gives {key!r} twice (line "
                                 f"{key_node.start_mark.line + 1}); YAML would keep only the "
                                 f"last: merge the two into one")
            seen.add(key)
        return loader.construct_mapping(node)

    Unique.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    for path in paths:
        try:
            data = Path(path).read_bytes()
        except OSError:
            continue  # Snakemake itself says what is wrong with a file it cannot read
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:  # Snakemake's own reading says it in a traceback
            line = data.count(b"\n", 0, exc.start) + 1
            raise ValueError(f"config: {os.fspath(path)} is not UTF-8 text (byte "
                             f"{data[exc.start]:#04x} on line {line}); save it as UTF-8"
                             ) from None
        try:
            yaml.load(text, Loader=Unique)  # noqa: S506 (a SafeLoader)
        except yaml.YAMLError:
            continue  # Snakemake itself says what is wrong with a file it cannot read


def check_config_integers(config: Config, schema: Config | None = None) -> None:
    """A whole-number float (``2.0``) where the schema says integer: JSON Schema counts it
    as one, but the jobs' arguments (``--count 2.0``), the plan's ranges and the runs'
    seeds need an int. Every integer key of the schema, found by walking it."""
    if schema is None:
        import yaml

        schema = yaml.safe_load(SCHEMA.read_text(encoding="utf-8"))
    definitions = schema.get("definitions", {})

    def resolve(node: Config) -> Config:
        ref = node.get("$ref", "")
        return definitions[ref.rsplit("/", 1)[1]] if ref.startswith("#/definitions/") else node

    def types(node: Config) -> set[str]:
        node = resolve(node)
        kind = node.get("type", [])
        own = {kind} if isinstance(kind, str) else set(kind)
        return own.union(*(types(alt) for alt in node.get("anyOf", []) + node.get(
            "oneOf", [])))

    def walk(value: object, node: Config, key: str) -> None:
        node = resolve(node)
        if isinstance(value, float):
            if "integer" in types(node) and "number" not in types(node):
                whole = f" ({int(value)})" if value.is_integer() else ""
                raise ValueError(f"config: {key} {value!r} must be an integer, written "
                                 f"without a decimal point{whole}")
            return
        alternatives = [resolve(alt) for alt in node.get("anyOf", []) + node.get("oneOf", [])]
        for sub in [node, *alternatives]:
            if isinstance(value, dict):
                for name, child in sub.get("properties", {}).items():
                    if name in value:
                        walk(value[name], child, f"{key}.{name}" if key else name)
            elif isinstance(value, list) and isinstance(sub.get("items"), dict):
                for i, item in enumerate(value):
                    walk(item, sub["items"], f"{key}[{i}]")

    walk(config, schema, "")


def check_config_batch(config: Config) -> None:
    """``run.batch`` (the largest of a list) where its largest zoo network's weights and
    outputs alone exceed this machine's RAM (what every run job would refuse:
    engine.caffe.splitter's check_batch_fits). Not under ``inherit``: a cluster's nodes are
    not the submit host."""
    batch = max((b for b in batches(config) if b is not None), default=None)
    if batch is None or config["run"]["backend"] == "inherit":
        return
    import psutil

    from engine.caffe import graph, zoo

    ram = psutil.virtual_memory().total
    for name in config["models"]["zoo"]:
        g = graph.build_graph(zoo.deploy_net(name), source=name)
        outputs = sum(math.prod(s) // s[0] for layer in g.layers for s in layer.top_shapes)
        need = 4 * (g.param_count + outputs * batch)
        if need > ram:
            raise ValueError(f"config: run.batch {batch}: {name} alone needs about "
                             f"{need / 2**30:.1f} GiB (weights and every layer's outputs), "
                             f"more than this machine's {ram / 2**30:.1f} GiB; use a smaller "
                             f"batch")


def check_run_memory(config: Config, needs_mb: dict[tuple[str, int | None], int],
                     networks: dict[str, list[str]], unknown_mb: int) -> None:
    """An unconstrained run the workflow itself sizes above this machine's RAM: ``needs_mb``,
    (pipeline, batch) -> the MiB its run jobs ask for (engine.workflow.resources.
    unconstrained_mem_mb: every network of the pipeline held at once under the most
    concurrent policy, at its batch); ``unknown_mb``: a pipeline of user models, not
    bounded. ``check_config_batch`` holds one network to the machine: a pipeline of
    several passed it and asked for 60 GB of a 24 GB host (held-out pass 29, M3). Not under
    ``inherit``: a cluster's nodes are not the submit host."""
    if config["run"]["backend"] == "inherit":
        return
    import psutil

    ram = psutil.virtual_memory().total
    known = {key: mb for key, mb in needs_mb.items() if mb != unknown_mb}
    if not known:
        return
    (pipeline, batch), mb = max(known.items(), key=lambda kv: kv[1])
    if mb * 2**20 > ram:
        at = "its deploy batch" if batch is None else f"batch {batch}"
        raise ValueError(f"config: run.batch: pipeline {pipeline} ({' '.join(networks[pipeline])}) "
                         f"at {at} needs up to about {mb / 1024:.1f} GiB unconstrained (its "
                         f"networks held at once under the most concurrent policy: what its "
                         f"run jobs ask for), more than this machine's {ram / 2**30:.1f} GiB; "
                         f"use a smaller batch")


# keys renamed (issue 37: "vm" meant either sandbox, where --backend vm means qemu):
# (where, old key, new key), refused with the new name before the schema says "unknown"
RENAMED_KEYS = (((), "vm", "sandbox"), (("sandbox",), "sandbox", "kernel"),
                (("run", "reconcile"), "vm", "sandbox"),
                (("model", "holdout"), "vm_pipelines", "sandbox_pipelines"))


def check_renamed_keys(config: Config) -> None:
    """A key under its old name: ValueError with one line giving the new one."""
    for where, old, new in RENAMED_KEYS:
        block: object = config
        for key in where:
            block = block.get(key) if isinstance(block, dict) else None
        if isinstance(block, dict) and old in block:
            path = ".".join(where)
            where_new = f"{path}.{new}" if path else new
            raise ValueError(f"config: the key {'.'.join([*where, old])} is now {where_new}; "
                             "rename it in your config file")


def check_config(config: Config) -> None:
    """Checks of the final, merged config that JSON schema cannot express; ValueError with
    one line naming the key and the fix."""
    check_config_integers(config)  # first: the checks below compute with them
    if not str(config["results"]).strip():
        raise ValueError("config: results is empty; name the folder for all outputs")
    _check_results_folder(str(config["results"]))
    _check_results_sandboxes(config)
    _check_campaign_names(config)
    from engine.schedule.pipelines import ARRIVAL_PARAMS, PipelineError, check_arrival

    arrival = config["pipelines"]["arrival"]
    needs = ARRIVAL_PARAMS.get(arrival["mode"], ())
    missing = [k for k in needs if k not in arrival]
    if missing:
        raise ValueError(f"config: pipelines.arrival mode {arrival['mode']} needs "
                         f"{' and '.join(missing)}; add {', '.join(f'{k}: ...' for k in missing)}")
    extra = sorted(set(arrival) - {"mode", *needs})
    if extra:
        raise ValueError(f"config: pipelines.arrival {extra[0]} is not a parameter of "
                         f"{arrival['mode']} arrivals; drop it")

    longest = config["pipelines"]["length"][1]
    try:
        check_arrival(arrival, longest)
    except PipelineError as exc:
        raise ValueError(f"config: pipelines.arrival: {exc}") from None
    # the last network's mean arrival time: a run still waiting for it at run.timeout_s
    # ends as a timeout, so every run of such pipelines would
    gap = {"poisson": lambda: 1 / arrival["rate"],
           "normal": lambda: arrival["mean"]}.get(arrival["mode"], lambda: 0.0)()
    timeout = config["run"].get("timeout_s")
    if timeout is not None and gap * (longest - 1) > timeout:
        raise ValueError(f"config: pipelines.arrival: the last of up to {longest} networks "
                         f"arrives after about {gap * (longest - 1):g} s, past "
                         f"run.timeout_s {timeout:g}; raise run.timeout_s or shorten the "
                         f"gaps")
    palette = config.get("plots", {}).get("palette")
    if palette is not None:
        from matplotlib import colormaps

        if palette not in colormaps:
            raise ValueError(f"config: plots.palette {palette!r} is not a matplotlib colormap "
                             f"(e.g. tab10, viridis)")
        policies = {*config["run"]["policies"], *config.get("sandbox", {}).get("policies", [])}
        if colormaps[palette].N < len(policies):  # two policies would share a colour
            raise ValueError(f"config: plots.palette {palette} has {colormaps[palette].N} "
                             f"colours for {len(policies)} policies; choose one with more "
                             f"(tab10, tab20, viridis)")
    run = config["run"]
    for key in ("timeout_s", "sample_hz", "stall_s"):
        if run.get(key) is not None and not math.isfinite(run[key]):
            raise ValueError(f"config: run.{key} {run[key]} must be a finite number")
    from engine.commands.options import MAX_SAMPLE_HZ, MIN_SAMPLE_HZ, swap

    try:  # what every limited run's --swap will say of it
        swap(str(run["swap"]))
    except EdgeprofError as exc:
        raise ValueError(f"config: run.swap {run['swap']!r}: {exc}") from None

    from engine.commands.options import MAX_LIMIT, MAX_SEED, MIN_LIMIT, MIN_LIMIT_WHY

    box = config.get("sandbox") or {}
    named = [*config["run"]["limits"], *box.get("limits", []),
             *(lim for extra in box.get("also") or [] for lim in extra.get("limits", []))]
    huge = [lim for lim in named if lim != UNLIMITED and _size_or_zero(lim) > MAX_LIMIT]
    if huge:
        raise ValueError(f"config: limit {huge[0]}: at most {MAX_LIMIT >> 50} PiB")
    reps = run["repetitions"]
    sequential = run.get("sequential")
    if sequential:
        from engine.analysis.stats import MIN_N_SIGNIFICANT

        most = sequential["max_repetitions"]
        if reps < MIN_N_SIGNIFICANT:
            raise ValueError(f"config: run.sequential needs run.repetitions "
                             f"{MIN_N_SIGNIFICANT} or more (it is {reps}): fewer pairs carry "
                             f"no claim to size the rest on")
        if most <= reps:
            raise ValueError(f"config: run.sequential.max_repetitions {most} must exceed "
                             f"run.repetitions {reps}")
        on = sandbox_enabled(config)
        if on and box.get("repetitions") not in (None, reps):
            raise ValueError(f"config: run.sequential needs sandbox.repetitions equal to "
                             f"run.repetitions ({reps}, it is {box['repetitions']}): a "
                             f"pipeline's runs start at one number")
        lists = [("run.policies", run["policies"])]
        if on:
            lists.append(("sandbox.policies", sandbox_policies(config)))
        for key, policies in lists:
            if "bulk" not in {parse_policy(p).name for p in policies}:
                raise ValueError(f"config: run.sequential sizes the speed-ups over Bulk: "
                                 f"{key} needs bulk")
        reps = most
    if config["seed"] + reps > MAX_SEED:
        raise ValueError(f"config: seed {config['seed']}: the runs' seeds (seed + "
                         f"repetition) must stay at most {MAX_SEED}")
    if 0 < run["sample_hz"] < MIN_SAMPLE_HZ:
        raise ValueError(f"config: run.sample_hz {run['sample_hz']:g}: 0 (no sampler) or from "
                         f"{MIN_SAMPLE_HZ:g} to {MAX_SAMPLE_HZ:g}")
    models = config["models"]
    if not models["zoo"] and not models["user"]:
        raise ValueError("config: models.zoo and models.user are both empty; name at least "
                         "one network for the pipelines to draw from")
    from engine.caffe.zoo import ZOO

    zoo_stems = {ZOO[name].stem: name for name in models["zoo"]}
    clash = [stem for stem in models["user"] if stem in zoo_stems]
    if clash:  # the rules would split the zoo's files under that stem, never the user's
        raise ValueError(f"config: models.user {clash[0]} is the file stem of the zoo's "
                         f"{zoo_stems[clash[0]]} (in models.zoo); rename your model's "
                         f"files and stem, or drop {zoo_stems[clash[0]]} from models.zoo")
    for stem in models["user"]:
        # a missing user model must stop the workflow: with a campaign on disk Snakemake
        # would otherwise keep its pipelines and answer "nothing to be done"
        for ext in ("caffemodel", "prototxt"):
            path = Path(models["user_dir"]) / f"{stem}.{ext}"
            kind = file_kind(path)
            if kind != "a regular file":
                raise ValueError(f"config: models.user {stem}: {path} is {kind}; put the "
                                 f"model's {stem}.caffemodel and {stem}.prototxt in "
                                 f"models.user_dir or drop the stem")
    blocks = [("pipelines", config["pipelines"])]
    if sandbox_enabled(config) and not sandbox_runs_main(config):
        blocks.append(("sandbox.pipelines", config["sandbox"]["pipelines"]))
        unknown = sorted(set(config["sandbox"]["pipelines"]["networks"])
                         - set(models["zoo"]) - set(models["user"]))
        if unknown:
            raise ValueError(f"config: sandbox.pipelines.networks {', '.join(unknown)} not in "
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
    lists = [("run.limits", config["run"]["limits"]),
             ("run.reconcile.limit", [config["run"]["reconcile"]["limit"]])]
    if sandbox_enabled(config):
        lists.append(("sandbox.limits", config["sandbox"]["limits"]))
        lists += [(f"sandbox.also[{i}].limits", extra["limits"])
                  for i, extra in enumerate(config["sandbox"].get("also") or [])]
    for key, limits in lists:
        seen: dict[int, str] = {}
        for limit in map(str, limits):
            if limit == UNLIMITED:
                continue
            try:
                size = parse_size(limit)
            except Exception as exc:
                raise ValueError(f"config: memory limit {limit!r}: {exc}") from None
            if size < MIN_LIMIT:
                raise ValueError(f"config: {key} {limit!r}: {MIN_LIMIT_WHY}")
            if size in seen:  # one run under two labels
                raise ValueError(f"config: {key} {seen[size]!r} and {limit!r} are the same "
                                 f"size; list each limit once")
            seen[size] = limit
            if format_size(size) != limit:  # the runs' folders and tables name it so
                raise ValueError(f"config: {key} {limit!r} is {format_size(size)!r}: write it "
                                 f"so (run folders and tables name a limit by its shortest "
                                 f"spelling)")
    _check_run_extras(config)
    _check_fittable(config)
    holdout = holdout_config(config)
    if holdout and holdout["seed"] == config["seed"]:
        raise ValueError(f"config: model.holdout.seed {holdout['seed']} is the campaign's "
                         f"seed: the held-out pipelines must be drawn with a seed never "
                         f"used in fitting; choose another")
    reconcile = config["run"]["reconcile"]
    if reconcile_in_sandbox(config) and not sandbox_enabled(config):
        raise ValueError("config: run.reconcile.sandbox is true (config/config.yaml's default, "
                         "merged into yours) but sandbox.enabled is false: set run.reconcile to "
                         "{pipeline: p000, policy: linear, limit: none, sandbox: false}")
    from engine.schedule.policies import PolicyError

    try:
        policy = parse_policy(str(reconcile["policy"])).name
        policies = {parse_policy(str(p)).name for p in config["run"]["policies"]}
    except PolicyError as exc:
        raise ValueError(f"config: run.reconcile.policy: {exc}") from None
    if policy not in policies:
        raise ValueError(f"config: run.reconcile.policy {reconcile['policy']!r} is not one of "
                         f"run.policies ({', '.join(sorted(policies))}); choose one of them")
    in_own = reconcile_in_sandbox(config) and not sandbox_runs_main(config)
    names = (sandbox_pipeline_names(config) if in_own
             else pipeline_names(config["pipelines"]["count"]))
    if reconcile["pipeline"] not in names:
        raise ValueError(f"config: run.reconcile.pipeline {reconcile['pipeline']!r} is not one "
                         f"of the {'sandbox ' if reconcile_in_sandbox(config) else ''}pipelines "
                         f"({', '.join(names[:3])}, ...)")


def _size_or_zero(limit: object) -> int:
    """A limit's bytes; 0 for one the limit checks below refuse with their own words."""
    try:
        return parse_size(str(limit))
    except (ValueError, EdgeprofError):
        return 0


def _check_campaign_names(config: Config) -> None:
    """The model names each campaign by its folder's name (``<campaign>:pNNN``): two of the
    same name could not be told apart, which fit-model would say only after every run."""
    folders = [str(config["results"]), *map(str, (config.get("model") or {}).get(
        "campaigns", []))]
    names = [Path(f).resolve().name for f in folders]  # as fit-model names them
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"config: results and model.campaigns name two campaigns "
                         f"{twice[0]!r} (the model tells campaigns apart by their folder's "
                         f"name); rename one")


def _check_results_folder(results: str) -> None:
    """``results`` must be a folder this user can create or write into (not a file, not a
    read-only or pseudo filesystem such as /proc): said before any job starts."""
    if any(c in results for c in "{}") or any(not c.isprintable() for c in results):
        raise ValueError(f"config: results {results!r}: braces (Snakemake's wildcards) and "
                         f"control characters are not allowed in it; name a plain folder")
    if results.startswith("~"):  # Snakemake and the shell rules would not expand it
        raise ValueError(f"config: results {results}: write the path out; '~' is not "
                         f"expanded in a config")
    path = Path(results)
    too_long = next((part for part in path.parts if len(part.encode()) > 255), None)
    if too_long is not None:  # more than a filesystem takes (NAME_MAX)
        raise ValueError(f"config: results {results}: the folder name {too_long[:40]}... is "
                         f"{len(too_long.encode())} bytes, more than the 255 a file system "
                         f"takes; name a shorter folder")
    if path.resolve() == Path("/"):
        raise ValueError("config: results is /; name a folder of its own")
    from engine.commands.options import is_run

    if any(is_run(p) for p in (path.resolve(), *path.resolve().parents)):
        raise ValueError(f"config: results {results} lies in a run folder; name a folder of "
                         f"its own")
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
    resolved = path.resolve()
    repo = Path.cwd().resolve()  # snakemake runs from the repository
    source = ("config", "workflow", "engine", "tests", "docs", "envs", "profiles",
              "resources", "benchmarks", ".venv", ".snakemake", ".git", ".ci")
    if resolved == repo or any(resolved == repo / d or repo / d in resolved.parents
                               for d in source):
        raise ValueError(f"config: results {results} would spread outputs over the "
                         f"repository's own files; name a folder of their own (results/...)")
    if existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"config: results {results}: {existing} is not writable; name a "
                         f"writable folder")


# room for a run folder's path below results (kind/pipeline/policy/limit/repN) and its share
RUN_FOLDER_ROOM = "/" + "x" * 120


def _check_results_sandboxes(config: Config) -> None:
    """A sandbox run's share lies beside its run folder, under ``results``, and its path
    goes where the sandbox cannot carry every character (engine.sandbox.paths): said in the
    dry run, not at the first sandbox job."""
    from engine.sandbox.paths import (
        UML_COMMAND_LINE,
        hidden_in_guest,
        share_path,
        uml_command_line,
        unsafe_character,
    )

    # each sandbox a run may land in -> how it comes to (said in the refusal)
    sandboxes = {b: "" for b in {config["run"]["backend"]} & set(SANDBOXES)}
    if sandbox_enabled(config):
        sandboxes.setdefault(sandbox_kernel(config), "")
    auto_limited = sorted({lim for rs in run_sets(config) for lim in rs.limits
                           if lim != UNLIMITED
                           and run_backend(config, lim, rs.in_sandbox) == "auto"},
                          key=parse_size)
    if auto_limited:
        for sandbox in _auto_sandboxes():
            sandboxes.setdefault(sandbox, f"run.backend auto may choose {sandbox} here for "
                                          f"a limited run ({', '.join(auto_limited)}): ")
    results = str(config["results"])
    path = share_path(results)
    fix = "; or set run.backend to the backend the limited runs should use" \
        if auto_limited else ""
    for sandbox, how in sorted(sandboxes.items()):
        top = hidden_in_guest(results)  # its split and pipelines are the runs' inputs
        if top is not None:
            raise ValueError(f"config: results {results}: {how}the {sandbox} sandbox's guest "
                             f"mounts its own {top}, so it cannot read the split and "
                             f"pipelines there; name a results folder outside {top}"
                             f"{fix if how else ''}")
        bad = unsafe_character(path, sandbox)
        if bad is not None:
            raise ValueError(f"config: results {results}: {how}the {sandbox} sandbox cannot "
                             f"share a run folder whose path has {bad[0]} ({path}: "
                             f"{bad[1]}); name a results folder without it"
                             f"{fix if how else ''}")
        if sandbox == "uml" and uml_command_line(path + RUN_FOLDER_ROOM) > UML_COMMAND_LINE:
            raise ValueError(f"config: results {results}: {how}its path is too long for the "
                             f"uml sandbox (a run's share and swap image go on the guest "
                             f"kernel's command line, at most {UML_COMMAND_LINE} bytes); "
                             f"name a shorter results folder{fix if how else ''}")


def _auto_sandboxes() -> list[str]:
    """The sandbox ``run.backend auto`` turns to for a limited run on this host when no
    cgroup or systemd session is found (engine.limits.select): uml if a user-mode Linux
    kernel is built and works (its build record, nothing booted), else vm if qemu is
    installed. Said even where a cgroup or systemd comes first now: a job's environment
    may lack them."""
    from engine.limits.sandbox import qemu_installed, uml_status

    if uml_status()[0]:
        return ["uml"]
    return ["vm"] if qemu_installed() else []


def _check_fittable(config: Config) -> None:
    """The model's fit of each mode (natively, in the sandbox) reads each layer's INIT,
    LOAD and EXEC times from that mode's unconstrained tasks that ran alone, which only a
    single-worker layer-by-layer policy's runs give (engine.model.fit: bulk loads whole
    models, several workers overlap): without one the whole campaign ran before
    fit_model failed (twentieth held-out pass D1), or the sandbox's mode went unfitted
    with nothing said (twenty-first D1)."""
    modes: dict[tuple[bool, str], set[str]] = {}
    for rs in run_sets(config):
        if UNLIMITED in rs.limits:  # the runs a mode's fit reads its task times from
            modes.setdefault((rs.in_sandbox, rs.runtime), set()).update(rs.policies)
    for (in_sandbox, _), policies in sorted(modes.items()):
        if not any(parse_policy(p).workers == 1 and parse_policy(p).family != "bulk"
                   for p in policies):
            where = "the sandbox's" if in_sandbox else "the native"
            key = ("sandbox.policies" if in_sandbox and sandbox_enabled(config)
                   else "run.policies")
            raise ValueError(f"config: no policy of {where} unconstrained runs "
                             f"({', '.join(sorted(policies))}) runs layer by layer on one "
                             f"worker, which the model's fit of that mode needs; add linear "
                             f"(or partial:1) to {key}")


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
        # what keeps them from running natively (twenty-eighth held-out pass L2: it named
        # the qemu backend alone where every run went to uml)
        why = ("every run goes to the sandbox: run.backend is "
               f"{config['run']['backend']}" if config["run"]["backend"] in SANDBOXES
               else "no limit none in run.limits")
        raise ValueError(f"config: run.probe_overhead_policy needs native unconstrained runs "
                         f"of the main pipelines ({why}); set it to null")

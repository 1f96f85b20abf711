# Config (validated against its JSON schema before any job runs), the lists every stage
# expands over, and code fingerprints that decide which jobs a code change reruns.
import hashlib
import sys
from pathlib import Path

from snakemake.utils import validate

from engine.caffe.zoo import ZOO
from engine.schedule.policies import parse_policy, policy_fingerprint
from engine.units import parse_size


configfile: "config/config.yaml"


validate(config, "../schemas/config.schema.yaml")

PY = sys.executable
RESULTS = config["results"]
USER_MODELS = config["models"]["user_dir"]
# stem -> display name; zoo networks are generated, user models come from USER_MODELS.
ZOO_STEMS = {ZOO[name].stem: name for name in config["models"]["zoo"]}
USER_STEMS = {stem: stem for stem in config["models"]["user"]}
NETWORKS = {**ZOO_STEMS, **USER_STEMS}
DESCRIPTIONS = expand(f"{RESULTS}/split/{{stem}}.description.json", stem=NETWORKS)

RUN = config["run"]
PIPELINES = [f"p{i:03d}" for i in range(config["pipelines"]["count"])]
# Policy ids are path-safe: "partial:2" -> "partial_2".
POLICIES = {parse_policy(p).name.replace(":", "_"): parse_policy(p).name for p in RUN["policies"]}
LIMITS = [str(limit) for limit in RUN["limits"]]
REPS = list(range(RUN["repetitions"]))


def _limited_runs_in_vm():
    """Whether runs under a limit go to the vm backend: asked for, or `auto` on a host
    where nothing else can enforce a limit and qemu is installed (engine.vm decides the
    same way for each run; deciding it here writes nothing)."""
    if RUN["backend"] == "vm":
        return True
    limited = [parse_size(limit) for limit in LIMITS if limit != "none"]
    if RUN["backend"] != "auto" or not limited:
        return False
    from engine.vm import auto_chooses_vm

    return auto_chooses_vm(limited[0], None)[0]


# Emulated runs are 15-60x slower than native ones: when the limited runs go to the VM,
# they run config["vm"]'s smaller pipelines (vNNN) and limits; unconstrained runs stay
# native.
USE_VM = _limited_runs_in_vm()
VM = config.get("vm") if USE_VM else None
VM_PIPELINES = [f"v{i:03d}" for i in range(VM["pipelines"]["count"])] if VM else []
RUN_DIRS = expand(
    f"{RESULTS}/runs/{{pipeline}}/{{policy}}/{{limit}}/rep{{rep}}",
    pipeline=PIPELINES, policy=POLICIES, limit=["none"] if VM else LIMITS, rep=REPS,
) + expand(
    f"{RESULTS}/runs/{{pipeline}}/{{policy}}/{{limit}}/rep{{rep}}",
    pipeline=VM_PIPELINES, policy=POLICIES, limit=VM["limits"] if VM else [], rep=REPS,
)
# Only the settings a run depends on, so editing e.g. the limit list reruns only new runs.
RUN_OPTIONS = (f"--blas-threads {RUN['blas_threads']} --timeout {RUN['timeout_s']}"
               f" --sample-hz {RUN['sample_hz']}")
REC = RUN["reconcile"]
REC_DIR = f"{RESULTS}/reconcile/{REC['pipeline']}/{REC['policy'].replace(':', '_')}/{REC['limit']}"


def _hash_files(*roots):
    h = hashlib.sha256()
    for root in roots:
        for path in sorted(Path(root).rglob("*.py")) if Path(root).is_dir() else [Path(root)]:
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


# Code every run shares (engine, probes, limits, dispatch); each policy adds its own
# graph builder's fingerprint, so editing one policy reruns only that policy's runs.
CODE_CAFFE = _hash_files("engine/caffe")
CODE_RUN_SHARED = _hash_files("engine/caffe", "engine/ops", "engine/network.py",
                              "engine/runner", "engine/probes", "engine/limits",
                              "engine/schedule/dispatch.py", "engine/schedule/tasks.py")
CODE_ANALYSIS = _hash_files("engine/analysis/tables.py", "engine/analysis/reconcile.py")
CODE_PLOTS = _hash_files("engine/analysis/plots.py")


def run_code(wildcards):
    family = parse_policy(POLICIES[wildcards.policy]).family
    return f"{CODE_RUN_SHARED}-{policy_fingerprint(family)}"


def limit_args(limit):
    if limit == "none":  # the unconstrained baseline runs natively, also with backend vm
        return f"--backend {'none' if RUN['backend'] == 'vm' else RUN['backend']}"
    return f"--limit {limit} --swap {RUN['swap']} --backend {RUN['backend']}"


def run_mem_mb(limit):
    """Memory a cluster job asks for. Under `inherit` the job's own limit is the run's limit,
    so it asks for exactly that (the supervisor and sampler, ~100 MB, share it); a backend
    that sets its own cgroup needs room above the limit for them; a VM needs its guest RAM
    (limit + 768 MiB, at least 1 GiB) and qemu's own ~300 MiB."""
    if limit == "none":
        return 8192
    mib = parse_size(limit) // 2**20
    if USE_VM:
        return max(1024, mib + 768) + 512
    return mib if RUN["backend"] == "inherit" else mib + 1024


def model_files(wildcards):
    folder = f"{RESULTS}/models" if wildcards.stem in ZOO_STEMS else USER_MODELS
    return {
        "caffemodel": f"{folder}/{wildcards.stem}.caffemodel",
        "prototxt": f"{folder}/{wildcards.stem}.prototxt",
    }


# What `rule all` (in the Snakefile) builds.
FIGURES = ["speedup", "memory", "partial_workers", "layer_times", "reconciliation",
           "memory_over_time"]
TABLES = ["runs", "tasks", "networks", "samples", "reconcile", "speedup"]
TARGETS = (
    expand(f"{RESULTS}/plots/{{fig}}.{{ext}}", fig=FIGURES, ext=["png", "pdf"])
    + expand(f"{RESULTS}/tables/{{table}}.{{ext}}", table=TABLES, ext=["csv", "parquet"])
)

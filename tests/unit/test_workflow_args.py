"""engine.workflow's modules (what the Snakemake workflow computes from its config) and the config's
schema: argument strings, which runs exist and where they run, resources, the jobs'
environment, one list of backends, and config/README.md covering every key."""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path

import pytest
import yaml

from engine.limits import BACKENDS
from engine.workflow.args import (
    arrival_args,
    batch_args,
    bins_args,
    block_command,
    canonical,
    limit_args,
    pipelines_args,
    reconcile_limit_args,
    run_options,
    run_settings,
    sandbox_pipelines_args,
)
from engine.workflow.checks import check_config, check_renamed_keys
from engine.workflow.environ import job_environ
from engine.workflow.fingerprint import JOB_ENTRIES, code_fingerprint, job_modules
from engine.workflow.plan import (
    block_shapes,
    job_blocks,
    needs_vm_guest,
    policy_ids,
    reconcile_in_sandbox,
    run_blocks,
    run_order,
    run_rule_kind,
    run_set_index,
    run_sets,
    sandbox_enabled,
    sandbox_kernel,
    sandbox_pipeline_names,
)
from engine.workflow.resources import (
    ENGINE_BASELINE_MB,
    UNLIMITED_MEM_MB,
    job_reserve_mb,
    network_bound_bytes,
    pipelines_networks,
    run_mem_mb,
    run_runtime_min,
    run_step_mem_mb,
    slurm_step_prefix,
    unconstrained_mem_mb,
)

REPO = Path(__file__).resolve().parents[2]
SCHEMA = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())


def load_config(name: str = "config.yaml") -> dict:
    """A config file as the workflow sees it: merged into config/config.yaml key by key
    (Snakemake's update_config), then validated with the schema's defaults filled in."""
    from snakemake.utils import update_config, validate

    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    if name != "config.yaml":
        update_config(config, yaml.safe_load((REPO / "config" / name).read_text()))
    validate(config, str(REPO / "workflow" / "schemas" / "config.schema.yaml"))
    return config


@pytest.fixture
def cfg() -> dict:
    return load_config()


def with_(config: dict, **changes) -> dict:
    """A copy of ``config`` with ``section__key=value`` changes."""
    config = copy.deepcopy(config)
    for path, value in changes.items():
        *parents, key = path.split("__")
        node = config
        for part in parents:
            node = node.setdefault(part, {})
        node[key] = value
    return config


# --- argument strings ------------------------------------------------------------------------


def test_arrival_args():
    assert arrival_args({"mode": "batch"}) == "--arrival batch"
    assert arrival_args({"mode": "poisson", "rate": 2.5}) == "--arrival poisson --rate 2.5"
    assert (arrival_args({"mode": "normal", "mean": 1, "sd": 0.5})
            == "--arrival normal --mean 1 --sd 0.5")
    # twenty-second pass L4: the order the config wrote them in changes no pipeline
    assert (arrival_args({"sd": 0.5, "mean": 1, "mode": "normal"})
            == "--arrival normal --mean 1 --sd 0.5")


def test_canonical_params_do_not_depend_on_the_configs_key_order():
    """Snakemake compares a param's repr for a rerun (twenty-second pass L4)."""
    one = {"run": {"timeout_s": 600, "limits": ["none", "1G"]}, "dpi": 120}
    other = {"dpi": 120, "run": {"limits": ["none", "1G"], "timeout_s": 600}}
    assert repr(one) != repr(other)
    for value in (one, other):
        assert (repr(canonical(value))
                == "{'dpi': 120, 'run': {'limits': ['none', '1G'], 'timeout_s': 600}}")
    assert canonical({"b": [{"y": 1, "x": (2, {"q": 0, "p": 1})}], "a": None}) == {
        "a": None, "b": [{"x": (2, {"p": 1, "q": 0}), "y": 1}]}
    assert list(canonical({"b": 1, "a": 2})) == ["a", "b"]


def test_batch_and_run_options(cfg):
    assert batch_args(cfg["run"]["batch"]) == "--batch 1"
    assert batch_args(with_(cfg, run__batch=None)["run"]["batch"]) == ""
    assert run_options(cfg["run"]) == (
        "--blas-threads 1 --timeout 600 --sample-hz 100 --pin-cpu")
    assert run_options(with_(cfg, run__pin_cpu=False)["run"]) == (
        "--blas-threads 1 --timeout 600 --sample-hz 100")
    # fifth held-out pass M1: a number key written as 600.0 is the same value: the same
    # arguments and params, so nothing reruns; a fraction stays one
    floats = with_(cfg, run__timeout_s=600.0, run__sample_hz=100.0)["run"]
    assert run_options(floats) == run_options(cfg["run"])
    assert repr(canonical(floats)) == repr(canonical(cfg["run"]))
    assert "--timeout 0.5 " in run_options(with_(cfg, run__timeout_s=0.5)["run"])
    assert run_runtime_min(cfg["run"]) == 15
    assert run_runtime_min({"timeout_s": 1800}) == 35


def test_pipelines_args_are_todays_command_lines(cfg):
    networks = ["AgeNet", "GenderNet", "FaceNet", "AlexNet", "GoogLeNet"]
    assert pipelines_args(cfg, networks) == (
        "--count 3 --seed 0 --length 2 4 --arrival batch --bins 150 400"
        " --networks AgeNet AlexNet FaceNet GenderNet GoogLeNet")
    assert sandbox_pipelines_args(cfg) == (
        "--count 2 --seed 0 --prefix v --length 1 3 --bins 150 400 --networks AgeNet GenderNet")
    # the draw sorts the networks: another order of the list is the same pipelines, and
    # the same arguments, so it reruns nothing (thirteenth held-out pass M1)
    assert pipelines_args(cfg, networks[::-1]) == pipelines_args(cfg, networks)
    swapped = with_(cfg, sandbox__pipelines__networks=["GenderNet", "AgeNet"])
    assert sandbox_pipelines_args(swapped) == sandbox_pipelines_args(cfg)
    assert sandbox_pipelines_args(with_(cfg, sandbox__enabled=False)) == ""


def test_policy_ids_are_path_safe():
    assert policy_ids(["bulk", "partial", "partial:3", "execprio-inter:2"]) == {
        "bulk": "bulk", "partial_2": "partial:2", "partial_3": "partial:3",
        "execprio-inter_2": "execprio-inter:2"}


# --- which runs exist and where they run -----------------------------------------------------


def test_vm_enabled_runs_limited_runs_in_the_vm_on_its_pipelines(cfg):
    cfg = with_(cfg, sandbox__kernel="vm")
    assert sandbox_enabled(cfg)
    main, sandboxed, *_ = run_sets(cfg)
    assert (main.pipelines, main.limits, main.in_sandbox) == (["p000", "p001", "p002"], ["none"],
                                                         False)
    assert len(main.policies) == 10
    # the sandbox pipelines run under the vm limits and, as their baseline, in the guest unlimited
    assert (sandboxed.pipelines, sandboxed.policies, sandboxed.limits, sandboxed.in_sandbox) == (
        ["v000", "v001"], ["bulk", "linear", "partial:2", "deepeye"], ["none", "48M"], True)
    # the main pipelines' unconstrained runs stay native; every sandbox pipeline run goes to the
    # vm whatever run.backend says, its baseline too
    assert limit_args(cfg, "none", False) == "--backend auto"
    assert limit_args(cfg, "none", True) == "--backend vm --error-is-result"
    assert limit_args(cfg, "48M", True) == "--limit 48M --swap max --backend vm --error-is-result"
    assert needs_vm_guest(cfg, "48M", True) and needs_vm_guest(cfg, "none", True)
    assert not needs_vm_guest(cfg, "none", False)
    explicit = with_(cfg, run__backend="vm")
    assert limit_args(explicit, "none", False) == "--backend none"
    # without sandbox.policies the guest runs every policy
    assert run_sets(with_(cfg, sandbox__policies=None))[1].policies == main.policies


def test_the_vm_blocks_sandbox_is_uml_where_it_was_built_else_the_qemu_guest(cfg,
                                                                             monkeypatch):
    from engine.limits import sandbox as sandbox_limits

    assert limit_args(with_(cfg, sandbox__kernel="uml"), "48M", True) == (
        "--limit 48M --swap max --backend uml --error-is-result")
    auto = with_(cfg, sandbox__kernel="auto")
    monkeypatch.setattr(sandbox_limits, "uml_status", lambda: (True, "Linux 7.2.7 (sid)"))
    assert limit_args(auto, "none", True) == "--backend uml --error-is-result"
    # a uml run boots setup.sh's kernel: the workflow builds no qemu guest for it
    assert not needs_vm_guest(auto, "48M", True)
    assert not needs_vm_guest(auto, "none", False)
    monkeypatch.setattr(sandbox_limits, "uml_status", lambda: (False, "not built"))
    assert limit_args(auto, "48M", True) == "--limit 48M --swap max --backend vm --error-is-result"
    assert needs_vm_guest(auto, "48M", True)


def test_vm_disabled_runs_every_limit_with_run_backend(cfg):
    cfg = with_(cfg, sandbox__enabled=False, model={})
    assert not sandbox_enabled(cfg) and sandbox_pipeline_names(cfg) == []
    [main] = run_sets(cfg)
    assert (main.pipelines, main.limits, main.in_sandbox) == (
        ["p000", "p001", "p002"], ["none", "1G", "512M", "256M"], False)
    assert limit_args(cfg, "1G", False) == "--limit 1G --swap max --backend auto"
    assert not needs_vm_guest(cfg, "1G", False)
    inherit = with_(cfg, run__backend="inherit", run__swap=0)
    assert limit_args(inherit, "512M", False) == "--limit 512M --swap 0 --backend inherit"
    assert limit_args(inherit, "none", False) == "--backend inherit"
    # backend vm without the sandbox block: every main run goes to the guest, the
    # unconstrained baseline too (an emulated limit never compares with a native run)
    in_sandbox = with_(cfg, run__backend="vm")
    [main] = run_sets(in_sandbox)
    assert main.in_sandbox
    assert limit_args(in_sandbox, "none", main.in_sandbox) == "--backend vm --error-is-result"
    with pytest.raises(ValueError, match=r"probe_overhead_policy needs native .*\(every run "
                                         r"goes to the sandbox: run.backend is vm\)"):
        check_config(with_(in_sandbox, run__reconcile__sandbox=False,
                              run__reconcile__pipeline="p000"))
    # twenty-eighth held-out pass L2: under uml it named the qemu backend's rule alone
    with pytest.raises(ValueError, match=r"\(every run goes to the sandbox: run.backend is "
                                         r"uml\); set it to null"):
        check_config(with_(in_sandbox, run__backend="uml", run__reconcile__sandbox=False,
                              run__reconcile__pipeline="p000"))
    with pytest.raises(ValueError, match=r"\(no limit none in run.limits\)"):
        check_config(with_(cfg, run__limits=["1G"], run__reconcile__limit="1G"))
    # memory + swap capped together: the swap is what the total leaves above the limit
    capped = with_(cfg, run__swap_total="8G")
    assert limit_args(capped, "1G", False) == (
        f"--limit 1G --swap {7 * 2**30} --backend auto")
    assert limit_args(capped, "none", False) == "--backend auto"


def test_a_runs_runtime_and_place_come_from_its_run_set_not_its_folder_name(cfg):
    """Issue 37: the workflow parsed a run's runtime back out of its folder's name
    ("sandbox_<runtime>") and guessed its place from that name and the pipeline's, which
    under run.backend uml without the sandbox block sent the main pipelines' runs
    nowhere (a KeyError while planning, tests/integration/workflow/test_cli_workflow.py).
    A job finds both in its run set (run_set_index)."""
    caffe = with_(cfg, run__runtime="caffe", sandbox__pipelines="main", model={},
                  sandbox__also=[{"policies": ["bulk"], "limits": ["48M"], "runtime": "lean"}])
    index = run_set_index(caffe)
    assert {kind: rs.runtime for (kind, *_), rs in index.items()} == {
        "runs": "caffe", "sandbox": "caffe", "sandbox_lean": "lean", "unprobed": "caffe"}
    assert index["sandbox_lean", "p000", "bulk", "48M"].in_sandbox
    assert not index["runs", "p000", "linear", "none"].in_sandbox
    twin = index["unprobed", "p000", "linear", "none"]
    assert not twin.probed and not twin.in_sandbox
    settings = run_settings(caffe, "none", False, twin.runtime, twin.batch, twin.probed)
    assert settings["sample_hz"] == 0
    # every main run of run.backend uml goes to the sandbox, the unconstrained one too
    uml = run_set_index(with_(cfg, sandbox__enabled=False, run__backend="uml",
                              run__probe_overhead_policy=None, model={}))
    assert {rs.in_sandbox for rs in uml.values()} == {True}
    assert {(k[3], rs.runtime) for k, rs in uml.items()} == {
        (limit, "lean") for limit in cfg["run"]["limits"]}


def test_a_batch_list_is_an_axis_of_the_run_grid_and_a_single_value_keeps_the_folders(cfg):
    """Issue 38: run.batch [1, 4] runs every run set at each batch, in folders of its own
    (runs_b4/...), each run with its own --batch and settings, the unprobed twins at each
    batch beside their batch's runs; run.batch 1 or [1] plans today's folders."""
    one, listed = run_set_index(cfg), run_set_index(with_(cfg, run__batch=[1]))
    assert one.keys() == listed.keys()
    assert {rs.batch for rs in one.values()} == {1}
    grid = with_(cfg, run__batch=[1, 4])
    check_config(grid)
    index = run_set_index(grid)
    kinds = {(kind, rs.batch) for (kind, *_), rs in index.items()}
    assert kinds == {(f"{kind}_b{b}", b) for kind in ("runs", "native", "unprobed")
                     for b in (1, 4)}
    # every run of the single-batch plan at each batch, under the batch's folder
    assert len(index) == 2 * len(one)
    for (kind, pipeline, policy, limit), rs in one.items():
        for b in (1, 4):
            other = index[f"{kind}_b{b}", pipeline, policy, limit]
            assert (other.in_sandbox, other.runtime, other.probed, other.batch) == (
                rs.in_sandbox, rs.runtime, rs.probed, b)
    assert run_settings(grid, "48M", True, "lean", 4)["batch"] == 4
    assert batch_args(4) == "--batch 4"
    # the twins start in their own batch's blocks, beside the runs they pair with
    for (kind, _, _, limit, _), runs in run_blocks(grid).items():
        batch = kind.rsplit("_b", 1)[1]
        assert {k.rsplit("_b", 1)[1] for k, *_ in runs} == {batch}
        if any(k.startswith("unprobed") for k, *_ in runs):
            assert kind == f"runs_b{batch}" and limit == "none"
    with pytest.raises(ValueError, match="run.batch"):
        check_config(with_(cfg, run__batch=[1, 1.5]))


def test_a_batch_axiss_unprobed_twins_run_without_probes(tmp_path):
    """Held-out pass 29, M2: the workflow told a twin by its folder's name ("unprobed"),
    and at a batch of a list it is unprobed_b4: the twins ran with their probes and were
    tidied with the probed runs, and the aggregate refused them. A dry run: every twin's
    command has --no-probes, no other run's has."""
    import subprocess
    import sys

    cfg = with_(load_config("config.yaml"), results=str(tmp_path / "r"), run__batch=[1, 2],
                run__probe_overhead_policy="linear", run__repetitions=2, model={},
                sandbox={"enabled": False}, pipelines__count=1)
    cfg["run"].update(limits=["none"], backend="none",
                      reconcile={"pipeline": "p000", "policy": "linear", "limit": "none",
                                 "sandbox": False})
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-p", "--configfile",
                        str(path)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [x for x in (r.stdout + r.stderr).splitlines() if "-m engine run " in x]
    twins = [x for x in lines if "/unprobed_b" in x]
    assert len(twins) == 2 * 2  # a pipeline's linear twin at each batch, each repetition
    assert all("--no-probes" in x for x in twins)
    assert not any("--no-probes" in x for x in lines if x not in twins)


def test_a_pipeline_whose_runs_need_more_than_this_machine_is_refused(cfg):
    """Held-out pass 29, M3: the batch check held one network to the machine, and a
    pipeline of two at batch 3000 passed it with every run job asking for 60 GB of a 24 GB
    host. The check holds the workflow's own per-run estimate (pipeline and batch) to it."""
    import psutil

    from engine.workflow.checks import check_run_memory
    from engine.workflow.resources import UNLIMITED_MEM_MB

    ram_mb = psutil.virtual_memory().total // 2**20
    nets = {"p000": ["GenderNet", "GenderNet"], "p001": ["AgeNet"]}
    fits = {("p000", 1): 900, ("p001", 1): 800, ("p001", 4): ram_mb // 2}
    check_run_memory(cfg, fits, nets, UNLIMITED_MEM_MB)
    over = {**fits, ("p000", 3000): ram_mb + 1024}
    with pytest.raises(ValueError, match=r"pipeline p000 \(GenderNet GenderNet\) at batch "
                                         r"3000 needs up to about"):
        check_run_memory(cfg, over, nets, UNLIMITED_MEM_MB)
    # a cluster's nodes are not this machine; a user model's pipeline is not bounded
    check_run_memory(with_(cfg, run__backend="inherit"), over, nets, UNLIMITED_MEM_MB)
    check_run_memory(cfg, {**fits, ("p000", 2): UNLIMITED_MEM_MB}, nets, UNLIMITED_MEM_MB)


def test_vm_native_baseline_runs_the_vm_pipelines_natively_too(cfg):
    """The model's native-speed reconstruction needs the sandbox pipelines' native task times:
    sandbox.native_baseline adds them as their own kind (same pipeline, policy and limit as
    the guest's baseline, another folder), started in the same blocks."""
    twin = with_(cfg, sandbox__native_baseline=True, model={})
    main, sandboxed, native = run_sets(twin)
    assert (native.pipelines, native.policies, native.limits, native.in_sandbox, native.kind) == (
        sandboxed.pipelines, sandboxed.policies, ["none"], False, "native")
    assert limit_args(twin, "none", native.in_sandbox) == "--backend auto"
    kinds = {(kind, pipeline) for kind, pipeline, *_ in run_order(twin)}
    assert ("native", "v000") in kinds and ("runs", "v000") in kinds
    assert ("native", "p000") not in kinds
    assert len(run_sets(with_(twin, sandbox__native_baseline=False))) == 2


def test_the_model_holdout_runs_like_the_campaign_under_names_and_a_seed_of_its_own(cfg):
    held = with_(cfg, sandbox__native_baseline=True,
                 model__holdout={"seed": 1000, "pipelines": 2, "sandbox_pipelines": 1})
    sets = run_sets(held)
    assert [(rs.pipelines, rs.kind, rs.holdout) for rs in sets] == [
        (["p000", "p001", "p002"], "runs", False), (["v000", "v001"], "runs", False),
        (["v000", "v001"], "native", False), (["hp000", "hp001"], "runs", True),
        (["hv000"], "runs", True), (["hv000"], "native", True)]
    assert "--seed 1000 --prefix hp" in pipelines_args(held, ["AgeNet"], holdout=True)
    assert "--seed 1000 --prefix hv" in sandbox_pipelines_args(held, holdout=True)
    assert "--seed 0 " in pipelines_args(held, ["AgeNet"])
    with pytest.raises(ValueError, match="seed never used in fitting"):
        check_config(with_(held, model__holdout={"seed": 0, "pipelines": 1}))
    off = with_(held, sandbox__enabled=False, run__reconcile__sandbox=False,
                run__reconcile__pipeline="p000")
    check_config(off)  # without the sandbox block no held-out sandbox pipeline runs
    assert [rs.pipelines for rs in run_sets(off) if rs.holdout] == [["hp000", "hp001"]]


def test_the_held_out_runs_repeat_as_often_as_model_holdout_repetitions_says(cfg):
    """Issue 39: the held-out seed is scored over pipelines, and its runs were a third of
    the default run's; model.holdout.repetitions runs them fewer times (the campaign's own
    runs keep theirs), and no block of a later repetition holds one."""
    held = with_(cfg, sandbox__native_baseline=True, model__holdout={
        "seed": 1000, "pipelines": 2, "sandbox_pipelines": 1, "repetitions": 2})
    check_config(held)
    reps = {(rs.pipelines[0], rs.kind): rs.repetitions for rs in run_sets(held)}
    assert reps == {("p000", "runs"): 6, ("v000", "runs"): 6, ("v000", "native"): 6,
                    ("hp000", "runs"): 2, ("hv000", "runs"): 2, ("hv000", "native"): 2}
    blocks = run_blocks(held)
    assert {rep for (_, _, pipe, _, rep) in blocks if pipe.startswith("h")} == {0, 1}
    assert {rep for (_, _, pipe, _, rep) in blocks if pipe == "p000"} == set(range(6))
    # unset: as the campaign's
    same = with_(held, model__holdout={"seed": 1000, "pipelines": 2, "sandbox_pipelines": 1})
    assert {rs.repetitions for rs in run_sets(same)} == {6}


def test_sequential_without_the_sandbox_ignores_its_repetitions(cfg):
    """config/config.yaml sets sandbox.repetitions, which a --configfile cannot unset: with
    the sandbox off it runs nothing and says nothing against run.sequential."""
    check_config(with_(cfg, sandbox__enabled=False, run__reconcile__sandbox=False,
                       run__reconcile__pipeline="p000", run__repetitions=8,
                       run__sequential={"width": 0.1, "max_repetitions": 12}))


def test_sequential_pipelines_plan_up_to_the_most_and_the_held_out_their_own(cfg):
    """Issue 39: with run.sequential every campaign pipeline's run sets (the sandbox's and
    the probe-overhead twins' too) reach max_repetitions, so their rules and priorities
    exist for the repetitions a look adds, after every run of the first ones; the held-out
    pipelines keep their fixed repetitions."""
    seq = with_(cfg, run__sequential={"width": 0.1, "max_repetitions": 9},
                model__holdout={"seed": 1000, "pipelines": 1, "sandbox_pipelines": 0})
    check_config(seq)
    reps = {(key[0], key[1]): rs.repetitions for key, rs in run_set_index(seq).items()}
    assert reps == {("runs", "p000"): 9, ("runs", "p001"): 9, ("runs", "p002"): 9,
                    ("runs", "v000"): 9, ("runs", "v001"): 9, ("native", "v000"): 9,
                    ("native", "v001"): 9, ("unprobed", "p000"): 9, ("unprobed", "p001"): 9,
                    ("unprobed", "p002"): 9, ("runs", "hp000"): 6}
    order = [run[-1] for run in run_order(seq) if not run[1].startswith("h")]
    assert order == sorted(order) and set(order) == set(range(9))


def test_a_config_without_a_vm_block_runs_nothing_in_the_vm(cfg):
    del cfg["sandbox"]
    cfg["model"] = {}
    assert not sandbox_enabled(cfg)
    assert run_sets(cfg)[0].limits == ["none", "1G", "512M", "256M"]


RESERVE = 300  # any reserve the planning process measured (job_reserve_mb)


def test_run_mem_mb(cfg, monkeypatch):
    # every job holds the workflow's own processes (RESERVE) beside its run
    assert run_mem_mb(cfg, "none", False, RESERVE) == 8192 + RESERVE
    assert run_mem_mb(cfg, "none", False, RESERVE, 700) == 700 + RESERVE
    assert run_mem_mb(cfg, "256M", True, RESERVE) == 1024 + 512 + RESERVE  # guest >= 1 GiB, qemu
    assert run_mem_mb(cfg, "1G", True, RESERVE) == 1024 + 768 + 512 + RESERVE
    # a baseline guest: its run's bound and the guest's own (engine.sandbox.run.plan)
    assert run_mem_mb(cfg, "none", True, RESERVE, 448) == 1216 + 512 + RESERVE
    from engine.sandbox import run as vmrun
    from engine.sandbox.config import SandboxConfig
    from engine.sandbox.run import plan
    from engine.units import parse_size

    monkeypatch.setattr(vmrun, "_host_ram", lambda: 0)  # any host: the sizes alone
    # a sandbox pipeline the plan cannot bound (a user's model): the guest of before
    assert run_mem_mb(cfg, "none", True, RESERVE) == 4096 + 512 + RESERVE
    for mib, limit in ((100, "none"), (1000, "none"), (3000, "none"), (0, "48M"), (0, "3G")):
        guest = plan(SandboxConfig(accel="tcg"), None if limit == "none" else parse_size(limit),
                     None, None, mib * 2**20).ram_bytes
        assert run_mem_mb(cfg, limit, True, 0, mib) == guest // 2**20 + 512, (mib, limit)
    native = with_(cfg, sandbox__enabled=False)
    # auto: the limit, the supervisor and sampler outside it
    assert run_mem_mb(native, "512M", False, RESERVE) == 512 + ENGINE_BASELINE_MB + RESERVE
    assert run_step_mem_mb(native, "512M", False) is None  # auto sets its own cgroup
    # inherit: the run's own job step gets exactly the limit, the job that plus the
    # workflow's own processes (two Snakemake interpreters, srun: measured on SLURM)
    inherit = with_(native, run__backend="inherit")
    assert run_step_mem_mb(inherit, "512M", False) == 512
    assert run_mem_mb(inherit, "512M", False, RESERVE) == 512 + RESERVE
    assert run_step_mem_mb(inherit, "1.5G", False) == 1536
    assert run_step_mem_mb(inherit, "none", False) == UNLIMITED_MEM_MB
    assert run_mem_mb(inherit, "none", False, RESERVE) == (UNLIMITED_MEM_MB
                                                     + RESERVE)
    # an unconstrained run of networks the plan can bound asks for that bound
    assert run_step_mem_mb(inherit, "none", False, 700) == 700
    assert run_mem_mb(inherit, "none", False, RESERVE, 700) == 700 + RESERVE
    assert run_step_mem_mb(inherit, "512M", False, 700) == 512
    assert slurm_step_prefix(None) == ""


@pytest.mark.parametrize("arrival", [[], ["--arrival", "poisson", "--rate", "2"]])
def test_the_plan_draws_the_networks_the_pipelines_command_writes(zoo_split, tmp_path,
                                                                  cfg, arrival):
    """What the plan asks memory for is what the pipelines stage really writes."""
    import shlex

    from engine.cli import main
    from engine.schedule.pipelines import load_pipeline

    names = sorted(zoo_split)
    args = pipelines_args(with_(cfg, pipelines__count=12), names) + " " + " ".join(arrival)
    models = Path(next(iter(zoo_split.values())).path).parent
    assert main(["pipelines", "--split", str(models), "--out", str(tmp_path),
                 *shlex.split(args)]) == 0
    written = {f.stem: load_pipeline(f).networks() for f in tmp_path.glob("p*.json")}
    assert len(written) == 12
    assert pipelines_networks(args, names) == written
    assert pipelines_networks("", names) == {}


def test_a_networks_bound_is_its_split_weights_and_outputs(zoo_split):
    """Held bytes against the split (weights as read from the caffemodel, each layer's
    output shapes as recorded); the caffe transient covers a V1 message: three times the
    weights."""
    import math

    for name in ("AgeNet", "FaceNet"):  # deploy batch 1
        desc = zoo_split[name]
        outputs = 4 * sum(math.prod(s) for layer in desc.layers for s in layer.output_shapes)
        held, transient = network_bound_bytes(name, None, "lean")
        assert held == desc.param_bytes + outputs
        assert 0 < transient < desc.param_bytes
        held_c, transient_c = network_bound_bytes(name, None, "caffe")
        assert held_c > held and transient_c == 3 * desc.param_bytes
    # a batch of 4 holds four times the outputs, the same weights
    held4, _ = network_bound_bytes("AgeNet", 4, "lean")
    desc = zoo_split["AgeNet"]
    assert held4 - desc.param_bytes == 4 * (network_bound_bytes("AgeNet", 1, "lean")[0]
                                            - desc.param_bytes)
    one = unconstrained_mem_mb(["AgeNet"], 1, "lean", 1)
    assert unconstrained_mem_mb(["AgeNet", "AgeNet"], 1, "lean", 1) > one
    assert unconstrained_mem_mb(["AgeNet", "mine"], 1, "lean", 1) == UNLIMITED_MEM_MB


@pytest.mark.parametrize("runtime", ["lean", "caffe"])
def test_an_unconstrained_runs_ask_covers_what_the_kernel_measured(tiny, tmp_path, runtime):
    """Real runs (backend none) of every worker count: the child's peak RSS (the kernel's
    VmHWM) never exceeds the networks' bound plus the engine's baseline, with no margin."""
    from engine.cli import main
    from engine.runner.meta import RunMeta
    from engine.schedule.pipelines import load_pipeline
    from engine.workflow.resources import ENGINE_BASELINE_MB

    nets = load_pipeline(tiny["pipeline"]).networks()
    for policy, workers in (("bulk", 1), ("linear", 1), ("partial:2", 2)):
        out = tmp_path / policy.replace(":", "_")
        assert main(["run", "--pipeline", str(tiny["pipeline"]), "--policy", policy,
                     "--split", str(tiny["models"]), "--out", str(out), "--backend", "none",
                     "--runtime", runtime]) == 0
        bounds = [network_bound_bytes(n, None, runtime) for n in nets]
        need = (sum(h for h, _ in bounds)
                + sum(sorted((t for _, t in bounds), reverse=True)[:workers]))
        hwm = RunMeta.read(out).hwm_rss_bytes
        assert hwm <= need + ENGINE_BASELINE_MB * 2**20, (policy, hwm / 2**20, need / 2**20)
        assert unconstrained_mem_mb(nets, None, runtime, workers) * 2**20 >= hwm


def _step(tmp_path: Path, prefix: str, *, slurm: bool, srun_rc: int = 0,
          write_meta: bool = False) -> tuple[int, str]:
    """Runs `<prefix> true --out D` in bash as a rule's shell does, with a fake srun on
    PATH that records its arguments; returns the exit code and what srun got."""
    import shutil
    import subprocess

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    calls = tmp_path / "srun.args"
    calls.unlink(missing_ok=True)
    out = tmp_path / "run"
    shutil.rmtree(out, ignore_errors=True)
    meta = 'mkdir -p "$3" && echo {} > "$3/meta.json"; ' if write_meta else ""
    srun = bin_dir / "srun"
    srun.write_text("#!/bin/bash\n"
                    f"echo \"$@\" > {calls}\n"
                    'while [ "${1#--}" != "$1" ]; do shift; done\n'  # drop srun's options
                    f'"$@"; {meta}exit {srun_rc}\n')
    srun.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    if slurm:
        env["SLURM_JOB_ID"] = "42"
    r = subprocess.run(["bash", "-c", f"set -euo pipefail; {prefix}true --out {out}"],
                       env=env, capture_output=True, text=True)
    return r.returncode, calls.read_text().strip() if calls.exists() else ""


def test_the_slurm_step_prefix_runs_the_engine_in_a_step_of_its_limit(tmp_path):
    prefix = slurm_step_prefix(512)
    # outside a SLURM job (a local run, same config) the command runs as it is
    assert _step(tmp_path, prefix, slurm=False) == (0, "")
    # inside one: its own step of exactly the limit, beside step 0 (which waits for it)
    rc, args = _step(tmp_path, prefix, slurm=True)
    assert rc == 0 and args.startswith("--quiet --ntasks=1 --nodes=1 --cpus-per-task=1 "
                                       "--overlap --mem=512M true --out ")
    # srun failing (e.g. reporting the step's OOM kill) with the run folder written: the
    # run's result stands; without it, the job fails with srun's code
    assert _step(tmp_path, prefix, slurm=True, srun_rc=1, write_meta=True)[0] == 0
    assert _step(tmp_path, prefix, slurm=True, srun_rc=3)[0] == 3


def test_paper_config_runs_nothing_in_the_vm():
    paper = load_config("paper.yaml")
    assert not sandbox_enabled(paper) and paper["run"]["backend"] == "inherit"
    main, held = run_sets(paper)
    assert len(main.pipelines) == 100 and main.limits == ["none", "1G", "512M", "256M"]
    # config.yaml's held-out seed: two more pipelines, run as the main ones, never fitted
    assert held.holdout and held.pipelines == ["hp000", "hp001"] and held.limits == main.limits
    # seed 004's setup: memory + swap capped at 8 GB, deploy batches, one pinned CPU
    assert limit_args(paper, "256M", False) == (
        f"--limit 256M --swap {8 * 2**30 - 256 * 2**20} --backend inherit")
    assert batch_args(paper["run"]["batch"]) == "" and "--pin-cpu" in run_options(paper["run"])
    assert bins_args(paper) == ["--bins-mb", 400, 800, 1200, 1600]
    assert run_step_mem_mb(paper, "256M", False) == 256  # the step: exactly the limit
    assert run_mem_mb(paper, "256M", False, RESERVE) == 256 + RESERVE


# --- the jobs' environment -------------------------------------------------------------------


def test_job_environ_puts_the_interpreter_and_checkout_first():
    environ = {"PATH": "/usr/bin:/bin", "PYTHONPATH": "/elsewhere:/repo"}
    env = job_environ(environ, "/venv/bin/python", "/repo", under_conda=False)
    assert env == {"PATH": "/venv/bin:/usr/bin:/bin", "PYTHONPATH": "/repo:/elsewhere"}
    # under conda the rule's activated environment comes first: PATH is left alone
    assert job_environ({}, "/venv/bin/python", "/repo", under_conda=True) == {
        "PYTHONPATH": "/repo"}
    # idempotent: a remote job that parses the workflow again changes nothing
    again = job_environ(env, "/venv/bin/python", "/repo", under_conda=False)
    assert again == env


# --- the schema ------------------------------------------------------------------------------


def test_schema_backends_are_engine_limits_backends():
    assert SCHEMA["properties"]["run"]["properties"]["backend"]["enum"] == list(BACKENDS)


def test_schema_runtimes_are_engine_runtimes_and_the_cli_choices():
    """One list of runtimes: the schema's enum and `run`/`forward --runtime`."""
    from engine.cli import build_parser
    from engine.runtime import RUNTIMES

    assert SCHEMA["properties"]["run"]["properties"]["runtime"]["enum"] == list(RUNTIMES)
    sub = next(a for a in build_parser()._actions if a.choices and "run" in a.choices)
    for verb in ("run", "forward"):
        option = next(a for a in sub.choices[verb]._actions if a.dest == "runtime")
        assert list(option.choices) == list(RUNTIMES)


def test_cli_backend_choices_are_engine_limits_backends():
    """One list of backends: the CLI's `run --backend` choices are engine.limits.BACKENDS."""
    from engine.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.choices and "run" in a.choices)
    backend = next(a for a in sub.choices["run"]._actions if a.dest == "backend")
    assert list(backend.choices) == list(BACKENDS)


def test_both_configs_validate_and_vm_needs_its_pipelines_when_enabled(cfg):
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    assert cfg["sandbox"]["enabled"] is True
    schema = str(REPO / "workflow" / "schemas" / "config.schema.yaml")
    enabled_without_pipelines = with_(cfg, sandbox={"enabled": True, "limits": ["256M"]})
    with pytest.raises(WorkflowError, match="pipelines"):
        validate(enabled_without_pipelines, schema)
    no_vm = copy.deepcopy(cfg)
    del no_vm["sandbox"]
    validate(no_vm, schema)  # fills in the default
    assert no_vm["sandbox"] == {"enabled": False, "kernel": "auto", "native_baseline": False,
                                "per_boot": "block"}


def _resolved(node: dict) -> dict:
    """``node`` with a ``$ref`` to the schema's definitions, or a ``oneOf`` holding one
    object schema, followed (the documented keys are that object's)."""
    for option in node.get("oneOf", []):
        if "$ref" in option or "properties" in option:
            node = option
    if "$ref" in node:
        node = SCHEMA["definitions"][node["$ref"].rsplit("/", 1)[1]]
    return node


def _schema_keys(node: dict, prefix: str = "") -> list[str]:
    keys = []
    for name, sub in _resolved(node).get("properties", {}).items():
        key = f"{prefix}{name}"
        keys.append(key)
        keys += _schema_keys(sub, f"{key}.")
    return keys


def test_config_readme_documents_every_schema_key_and_no_other():
    text = (REPO / "config" / "README.md").read_text()
    keys = _schema_keys(SCHEMA)
    assert "sandbox.enabled" in keys and "run.reconcile.limit" in keys
    documented = set(re.findall(r"^\| `([a-z_.]+)` \|", text, re.M))
    assert documented == set(keys)


def test_schema_describes_every_key():
    def walk(node, key=""):
        for name, sub in _resolved(node).get("properties", {}).items():
            assert sub.get("description"), f"{key}{name}"
            walk(sub, f"{key}{name}.")

    walk(SCHEMA)


def test_envs_are_pinned_and_satisfy_the_package_requirements():
    """Exact pins (set from .venv's versions), the same in both envs, and within
    pyproject.toml's ranges (a fresh setup.sh may install newer versions: no equality)."""
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    ranges = {Requirement(r).name.lower(): Requirement(r).specifier
              for r in project["dependencies"]}
    pins = {}
    for name in ("run", "analysis"):
        env = yaml.safe_load((REPO / "envs" / f"{name}.yaml").read_text())
        deps = env["dependencies"]
        conda = [d for d in deps if isinstance(d, str)]
        assert all(re.fullmatch(r"[\w-]+=\d[\w.]*", d) for d in conda), conda
        assert any(d.startswith("python=3.11.") for d in conda)
        pip = next(d["pip"] for d in deps if isinstance(d, dict))
        assert all(re.fullmatch(r"[\w-]+==\d[\w.]*", spec) for spec in pip), pip
        pins[name] = dict(spec.split("==") for spec in pip)
    run = {"numpy", "protobuf", "pyyaml", "threadpoolctl", "psutil", "yep"}
    assert set(pins["run"]) == run
    assert set(pins["analysis"]) == run | {"pandas", "pyarrow", "matplotlib", "scipy"}
    assert pins["analysis"].items() >= pins["run"].items()
    assert set(ranges) == set(pins["analysis"])  # every runtime dependency, nothing else
    for package, version in pins["analysis"].items():
        assert version in ranges[package], (package, version, ranges[package])


def test_every_rule_uses_one_of_the_envs():
    rules = (REPO / "workflow" / "rules").glob("*.smk")
    envs = {m for path in rules
            for m in re.findall(r'conda:\n\s+"\.\./\.\./envs/(\w+)\.yaml"', path.read_text())}
    assert envs == {"run", "analysis"}
    assert sorted(p.stem for p in (REPO / "envs").glob("*.yaml")) == ["analysis", "run"]


# --- the final, merged config ----------------------------------------------------------------


def test_the_shipped_configs_pass_the_checks_the_schema_cannot_make():
    for name in ("config.yaml", "paper.yaml", "emulated.yaml", "model-dev.yaml",
                 "breadth.yaml"):
        check_config(load_config(name))


@pytest.mark.parametrize("changes, message", [
    ({"models__zoo": [], "models__user": []}, "models.zoo and models.user are both empty"),
    ({"pipelines__length": [4, 2]}, "pipelines.length [4, 2] must be [fewest, most]"),
    ({"sandbox__pipelines__length": [3, 2]}, "sandbox.pipelines.length [3, 2]"),
    ({"pipelines__bins": [400, 150]}, "strictly ascending"),
    ({"run__limits": ["none", "0"]}, "memory limit '0': memory size '0' must be at least"),
    ({"run__limits": ["none", "512K"]}, "run.limits '512K': at least 1M"),
    ({"sandbox__limits": ["0M"]}, "memory limit '0M'"),
    ({"run__reconcile__pipeline": "p099"}, "run.reconcile.pipeline 'p099' is not one"),
    ({"results": ""}, "results is empty"),
    ({"run__timeout_s": float("nan")}, "run.timeout_s nan must be a finite number"),
    ({"run__sample_hz": float("inf")}, "run.sample_hz inf must be a finite number"),
    ({"pipelines__bins": [float("nan")]}, "strictly ascending"),
    ({"run__limits": ["512M", "524288K"]}, "run.limits '512M' and '524288K' are the same size"),
    ({"sandbox__enabled": False, "run__swap_total": "512M", "run__reconcile__vm": False,
      "run__reconcile__pipeline": "p000"}, "run.swap_total 512M is below the limit(s) 1G"),
    ({"run__probe_overhead_policy": "masa:3"}, "run.probe_overhead_policy 'masa:3' is not"),
    # issue 39: the sequential rule sizes the rest on six pairs, from one starting number
    ({"run__repetitions": 5, "sandbox__repetitions": None,
      "run__sequential": {"width": 0.1, "max_repetitions": 10}},
     "run.sequential needs run.repetitions 6 or more (it is 5)"),
    ({"run__sequential": {"width": 0.1, "max_repetitions": 6}},
     "run.sequential.max_repetitions 6 must exceed run.repetitions 6"),
    ({"sandbox__repetitions": 8, "run__sequential": {"width": 0.1, "max_repetitions": 10}},
     "needs sandbox.repetitions equal to run.repetitions (6, it is 8)"),
    ({"sandbox__policies": ["linear", "deepeye"],
      "run__sequential": {"width": 0.1, "max_repetitions": 10}},
     "run.sequential sizes the speed-ups over Bulk: sandbox.policies needs bulk"),
    ({"run__policies": ["linear"], "run__probe_overhead_policy": None,
      "sandbox__enabled": False, "run__reconcile__sandbox": False,
      "run__reconcile__pipeline": "p000",
      "run__sequential": {"width": 0.1, "max_repetitions": 10}},
     "run.sequential sizes the speed-ups over Bulk: run.policies needs bulk"),
    ({"seed": 2**32 - 8, "run__sequential": {"width": 0.1, "max_repetitions": 10}},
     "the runs' seeds (seed + repetition) must stay at most"),
    ({"sandbox__pipelines__networks": ["SoS-AlexNet"]},
     "sandbox.pipelines.networks SoS-AlexNet not in"),
    # twentieth pass H1: the zoo's AgeNet files would be split under the user's stem
    ({"models__user": ["age_net"]}, "models.user age_net is the file stem of the zoo's "
                                    "AgeNet (in models.zoo)"),
    # nineteenth pass L3: ten policies, eight colours
    ({"plots__palette": "Pastel2"}, "plots.palette Pastel2 has 8 colours for 10 policies"),
    # seventeenth pass L4: a parameter of another arrival mode
    ({"pipelines__arrival": {"mode": "batch", "rate": 5}},
     "pipelines.arrival rate is not a parameter of batch arrivals"),
    # seventeenth pass M3: every run would end waiting for its last network
    ({"pipelines__arrival": {"mode": "normal", "mean": 100, "sd": 0}, "run__timeout_s": 5,
      "pipelines__length": [2, 3]},
     "the last of up to 3 networks arrives after about 200 s, past run.timeout_s 5"),
    ({"pipelines__arrival": {"mode": "poisson", "rate": 0.01}, "run__timeout_s": 600,
      "pipelines__length": [2, 8]}, "arrives after about 700 s, past run.timeout_s 600"),
])
def test_a_merged_config_the_schema_passes_can_still_be_refused(cfg, changes, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        check_config(with_(cfg, **changes))


# every integer of the schema (the length definition serves two keys), with the key the
# refusal names; the schema's count of "integer" says when one is added
INTEGER_KEYS = [
    ({"seed": 0.0}, "seed 0.0"),
    ({"pipelines__count": 2.0}, "pipelines.count 2.0"),
    ({"pipelines__length": [1.0, 2]}, "pipelines.length[0] 1.0"),
    ({"run__repetitions": 2.0}, "run.repetitions 2.0"),
    ({"run__sequential": {"width": 0.1, "max_repetitions": 10.0}},
     "run.sequential.max_repetitions 10.0"),
    ({"run__batch": 1.0}, "run.batch 1.0"),
    ({"run__batch": [1, 4.0]}, "run.batch[1] 4.0"),
    ({"run__blas_threads": 1.0}, "run.blas_threads 1.0"),
    ({"sandbox__pipelines__count": 2.0}, "sandbox.pipelines.count 2.0"),
    ({"sandbox__pipelines__length": [1, 3.0]}, "sandbox.pipelines.length[1] 3.0"),
    ({"sandbox__also": [{"policies": ["linear"], "limits": ["48M"], "pipelines": 1.0}]},
     "sandbox.also[0].pipelines 1.0"),
    ({"sandbox__repetitions": 6.0}, "sandbox.repetitions 6.0"),
    ({"model__resamples": 200.0}, "model.resamples 200.0"),
    ({"model__holdout__seed": 1000.0}, "model.holdout.seed 1000.0"),
    ({"model__holdout__pipelines": 2.0}, "model.holdout.pipelines 2.0"),
    ({"model__holdout__sandbox_pipelines": 1.0}, "model.holdout.sandbox_pipelines 1.0"),
    ({"model__holdout__repetitions": 3.0}, "model.holdout.repetitions 3.0"),
    ({"plots__dpi": 120.0}, "plots.dpi 120.0"),
]


def test_every_integer_of_the_schema_is_listed_here():
    text = (REPO / "workflow" / "schemas" / "config.schema.yaml").read_text()
    assert text.count("integer") == len(INTEGER_KEYS) - 1


@pytest.mark.parametrize("changes, key", INTEGER_KEYS, ids=[k for _, k in INTEGER_KEYS])
def test_a_whole_number_float_is_refused_where_the_schema_says_integer(cfg, changes, key):
    """Twenty-second pass M1: JSON Schema counts 2.0 as an integer, so the schema passes
    it; the jobs then got ``--count 2.0`` (argparse's usage text inside Snakemake), the plan
    a float range (a traceback), or every run job failed after a dry run passed."""
    from snakemake.utils import validate

    config = with_(cfg, **changes)
    validate(config, str(REPO / "workflow" / "schemas" / "config.schema.yaml"))
    with pytest.raises(ValueError, match=re.escape(
            f"config: {key} must be an integer, written without a decimal point")):
        check_config(config)


def test_a_user_model_whose_files_are_missing_is_refused(cfg, tmp_path):
    """Seventeenth pass H1: with a campaign on disk, a user model that is not there made
    Snakemake keep the old pipelines and say 'nothing to be done'."""
    (tmp_path / "mine.caffemodel").write_bytes(b"x")
    (tmp_path / "mine.prototxt").mkdir()
    for stem, message in (("nosuch", "nosuch.caffemodel is missing"),
                          ("mine", "mine.prototxt is a folder")):
        with pytest.raises(ValueError, match=f"models.user {stem}: .*{re.escape(message)}"):
            check_config(with_(cfg, models__user=[stem], models__user_dir=str(tmp_path)))
    (tmp_path / "mine.prototxt").rmdir()
    (tmp_path / "mine.prototxt").write_text("name: 'mine'")
    check_config(with_(cfg, models__user=["mine"], models__user_dir=str(tmp_path)))


# --- code fingerprints -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine_copy(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("code")
    import shutil

    shutil.copytree(REPO / "engine", root / "engine",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _fingerprints(root: Path) -> dict[str, str]:
    return {job: code_fingerprint(job, root) for job in JOB_ENTRIES}


# the model's verbs, each with its own fingerprint (seventh held-out pass M1)
MODEL = {"fit_model", "evaluate_model", "reconstruct_model", "score_holdout"}


@pytest.mark.parametrize("path, old, new, changed", [
    # shared code: every job kind that imports it
    ("engine/units.py", '"G": 2**30', '"G": 10**9',
     {"models", "split", "pipelines", "run", "tables", "look", "plots", *MODEL,
      "model_plots"}),
    # a verb's module is code of the jobs that run that verb alone (the CLI imports the
    # verb it runs; sixth held-out pass M1: an edit inside score-holdout's main reran the
    # whole campaign): the tidy verb runs in no job ...
    ("engine/commands/tidy.py", "def main(", "EDITED = 1\n\n\ndef main(", set()),
    # ... its parser and its work alike
    ("engine/commands/score_holdout.py", 'p = add_model_tables_parser(sub, "score-holdout",',
     'assert sub\n    p = add_model_tables_parser(sub, "score-holdout",', {"score_holdout"}),
    ("engine/commands/score_holdout.py", "    t0 = time.perf_counter()\n",
     "    t0 = time.perf_counter() + 0.0\n", {"score_holdout"}),
    # what every command runs: the CLI itself
    ("engine/cli.py", "def _hold_signals(", "EDITED = 1\n\n\ndef _hold_signals(",
     {"models", "split", "pipelines", "run", *MODEL}),
    # ... and what a verb imports to do its work only of the jobs that run that verb
    ("engine/schedule/dot.py", "def to_dot(", "EDITED = 1\n\n\ndef to_dot(", set()),
    # the runtimes run in the run jobs (and the model replays them), never where a verb
    # only names them as an option's choices (models, split, pipelines)
    ("engine/runtime/lean.py", "class LeanRuntime", "EDITED = 1\n\n\nclass LeanRuntime",
     {"run", *MODEL, "model_plots"}),
    # comments, docstrings and layout are not code: no job reruns for them
    ("engine/runtime/lean.py", "class LeanRuntime", "# a comment\nclass LeanRuntime", set()),
    ("engine/units.py", '"G": 2**30', '"G":   2 ** 30', set()),
    ("engine/network.py", '"""One network instance', '"""One edited network instance', set()),
    ("engine/schedule/policies.py", "def _build_linear(", "# edited\ndef _build_linear(",
     set()),
    # policies.py outside the graph builders (masa's pool split) is every run's code, and
    # the model's (it replays the policies); generating pipelines never imports it
    ("engine/schedule/policies.py", 'pools = (0, 1) if family == "masa" else (0,)',
     'pools = (0,)', {"run", "plots", *MODEL, "model_plots"}),
    # one policy's builder: no shared fingerprint changes (its own does, tested by dry run)
    ("engine/schedule/policies.py", "def _build_linear(", "EDITED = 1\n\n\ndef _build_linear(",
     {"run", "plots", *MODEL, "model_plots"}),
    ("engine/sandbox/run.py", "GUEST_RESERVE = 256 * MIB", "GUEST_RESERVE = 255 * MIB", {"run"}),
    # what the runs run that is not Python: the guests' init scripts and the preload's
    # source (seventh held-out pass H1: an edit to either reran nothing)
    ("engine/sandbox/uml_init.sh", "#!/bin/sh\n", "#!/bin/sh\necho edited\n", {"run"}),
    ("engine/sandbox/init.sh", "#!/bin/busybox sh\n", "#!/bin/busybox sh\necho edited\n", {"run"}),
    ("engine/sandbox/ascend.c", "#include", "static int edited;\n#include", {"run"}),
    # ... but not their comments (eleventh held-out pass M4: one reran every run)
    ("engine/sandbox/uml_init.sh", "#!/bin/sh\n", "#!/bin/sh\n  # a comment\n\n", set()),
    ("engine/sandbox/ascend.c", "#include", "/* a\n comment */ // and one more\n#include", set()),
    ("engine/schedule/pipelines.py", "def size_bin(", "EDITED = 1\n\n\ndef size_bin(",
     {"pipelines", "run", *MODEL}),
    # the reconciliation runs in the aggregate alone: neither tidying a run nor the model
    # (which reads its measured cells through tidy and the summaries) imports it
    ("engine/analysis/reconcile.py", "KEYS = [", "EDITED = 1\nKEYS = [", {"tables"}),
    ("engine/analysis/tidy.py", "def tidy_run(", "EDITED = 1\n\n\ndef tidy_run(",
     # (fitting reads the aggregate's tables: it never tidies)
     {"tables", "look", *MODEL - {"fit_model"}}),
    ("engine/analysis/summaries.py", "def speedup_table(", "EDITED = 1\n\n\ndef speedup_table(",
     {"tables", "look", *MODEL}),
    # run.sequential's rule is the look's, and the aggregate reads the looks with it
    ("engine/analysis/sequential.py", "def needed(", "EDITED = 1\n\n\ndef needed(",
     {"look", "tables"}),
    # the model's figures share the campaign figures' helpers, not the figures themselves
    ("engine/analysis/figures/common.py", "def grid(", "EDITED = 1\n\n\ndef grid(",
     {"plots", "model_plots"}),
    ("engine/analysis/figures/speedup.py", "def draw(", "EDITED = 1\n\n\ndef draw(",
     {"plots"}),
    # the workflow's own logic runs where Snakemake plans, never inside a job: its modules
    # (and the package's __init__, which imports none of them) are no job's code
    ("engine/workflow/resources.py", "SLURM_JOB_SHELLS_MB = 64",
     "SLURM_JOB_SHELLS_MB = 65", set()),
    ("engine/workflow/__init__.py", '"""What the Snakemake', 'EDITED = 1\n"""What the Snakemake',
     set()),
])
def test_a_code_change_changes_the_fingerprints_of_the_jobs_that_run_it(
        engine_copy, path, old, new, changed):
    before = _fingerprints(engine_copy)
    target = engine_copy / path
    source = target.read_text()
    assert old in source
    target.write_text(source.replace(old, new, 1))
    try:
        after = _fingerprints(engine_copy)
    finally:
        target.write_text(source)
    assert {job for job in before if before[job] != after[job]} == changed


def test_the_code_of_a_c_file_or_a_script_is_what_is_left_without_comments(tmp_path):
    from engine.workflow.fingerprint import data_code

    c = tmp_path / "a.c"
    c.write_text('int a; /* x\n y */ // z\nchar *s = "// not a comment /* */";\n'
                 "char q = '\"'; // quote\n")
    assert data_code(c) == b'int a;\nchar *s = "// not a comment /* */";\nchar q = \'"\';'
    sh = tmp_path / "a.sh"
    sh.write_text("#!/bin/sh\n# set up\n  echo a  \n\n   # indented\necho '#b'\n")
    assert data_code(sh) == b"#!/bin/sh\n  echo a\necho '#b'"
    other = tmp_path / "a.json"
    other.write_text("# kept\n")
    assert data_code(other) == b"# kept\n"


def test_run_jobs_import_the_whole_measured_path():
    modules = job_modules(JOB_ENTRIES["run"], REPO)
    for name in ("engine.units", "engine.cli", "engine.schedule.pipelines",
                 "engine.schedule.policies", "engine.sandbox.run", "engine.sandbox.job",
                 "engine.probes.sampler", "engine.ops.conv", "engine.caffe.wire"):
        assert name in modules
    assert "engine.analysis.plots" not in modules and "engine.workflow" not in modules


def test_the_default_reconciliation_runs_in_the_guest_and_the_paper_one_natively(cfg):
    assert reconcile_in_sandbox(cfg) and cfg["run"]["reconcile"]["pipeline"] == "v000"
    assert reconcile_limit_args(cfg) == f"--backend {sandbox_kernel(cfg)} --error-is-result"
    qemu = with_(cfg, sandbox__kernel="vm")
    assert reconcile_limit_args(qemu) == "--backend vm --error-is-result"
    limited = with_(cfg, run__reconcile__limit="256M", sandbox__kernel="vm")
    assert reconcile_limit_args(limited) == "--limit 256M --swap max --backend vm --error-is-result"
    paper = load_config("paper.yaml")
    assert not reconcile_in_sandbox(paper)
    assert reconcile_limit_args(paper) == "--backend inherit"
    with pytest.raises(ValueError,
                       match="run.reconcile.sandbox is true .* sandbox.enabled is false"):
        check_config(with_(cfg, sandbox__enabled=False))


# --- profiles ----------------------------------------------------------------------------------


def _profile(name: str) -> dict:
    return yaml.safe_load((REPO / "profiles" / name / "config.yaml").read_text())


def test_the_default_profile_overrides_nothing_the_slurm_profile_sets():
    """Snakemake 9 loads profiles/default as the workflow profile under `--profile
    profiles/slurm` too, and its keys win: it must not undo any (keep-going was)."""
    default, slurm = _profile("default"), _profile("slurm")
    assert "keep-going" not in default and slurm["keep-going"] is True
    assert all(slurm[key] == value for key, value in default.items() if key in slurm)


def test_the_slurm_profile_groups_nothing_and_notices_cancelled_jobs():
    slurm = _profile("slurm")
    # a group asks SLURM for the sum of its members (50 tidy jobs: 50 CPUs)
    assert not {"groups", "group-components"} & set(slurm)
    # sacct reports "CANCELLED by <uid>", which the plugin never takes for an end
    assert slurm["slurm-status-command"] == "squeue"
    assert slurm["executor"] == "slurm" and slurm["jobs"] >= 1


def test_the_slurm_profile_plans_one_core_and_sized_memory_per_job(tmp_path):
    """A dry run through profiles/slurm (needs the executor plugin, not SLURM): every job
    asks for one core, and no job is a group; paper.yaml's run jobs are blocks (one
    pipeline under one limit in one repetition) that ask for their limit plus the
    workflow's own processes and the sum of their runs' runtimes."""
    import subprocess
    import sys

    pytest.importorskip("snakemake_executor_plugin_slurm")
    cfg = load_config("paper.yaml")
    cfg = with_(cfg, results=str(tmp_path / "r"), pipelines__count=1, run__repetitions=2,
                run__policies=["bulk", "linear"], run__reconcile__policy="bulk",
                model__holdout__repetitions=2)
    path = tmp_path / "paper-small.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = subprocess.run([sys.executable, "-m", "snakemake", "--profile", "profiles/slurm",
                        "--configfile", str(path), "--dry-run"], cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    text = r.stdout + r.stderr
    assert "group" not in text.lower().replace("groups", "")
    jobs = re.findall(r"^rule (\w+):\n((?:    .*\n)+(?:Shell command: .*\n)?)", text, re.M)
    assert jobs
    runs, reserves = [], set()
    for rule, body in jobs:
        assert "threads:" not in body, rule  # printed only when more than one
        resources = dict(re.findall(r"(\w+)=([^,\n]+)",
                                    body.split("resources: ")[1].split("\n")[0]))
        assert rule != "run"
        if rule.startswith("run_block_"):
            outputs = re.search(r"output: (.*)", body).group(1).split(", ")
            parts = {tuple(o.split("/")[-4:]) for o in outputs}  # pipeline/policy/limit/rep
            assert len({(p[0], p[2], p[3]) for p in parts}) == 1, outputs  # one block
            limit = outputs[0].split("/")[-2]
            mem = int(resources["mem_mb"])
            # every run of the block runs in a step of one size: its limit, or unconstrained
            # its networks' bound, below the catch-all
            steps = {int(m) for m in re.findall(r"--mem=(\d+)M", body)}
            assert len(steps) == 1, steps
            step = steps.pop()
            if limit == "none":
                assert ENGINE_BASELINE_MB < step < UNLIMITED_MEM_MB
            else:
                assert step == run_step_mem_mb(cfg, limit, False)
            reserves.add(mem - step)
            assert int(resources["runtime"]) == len(outputs) * 30 + 5  # timeout_s 1800
            runs += outputs
    # every run, once: 3 pipelines (1 + the 2 held out) x 2 policies x 4 limits x 2 reps,
    # and the 1 main pipeline's unprobed linear twins
    assert len(runs) == len(set(runs)) == 3 * 2 * 4 * 2 + 2
    # one reserve for the workflow's own processes, measured by the planning process: two
    # interpreters of this workflow (each 100 MiB at least: Python, Snakemake, pandas)
    reserve, = reserves
    assert job_reserve_mb(100 * 2**20) < reserve < job_reserve_mb(2**30)


# --- run.per_job "block": a job per block of runs ------------------------------------------


@pytest.mark.parametrize("name", ["config.yaml", "paper.yaml", "fidelity.yaml"])
def test_blocks_hold_every_run_once_in_run_order(name):
    """A block is one pipeline under one limit in one repetition, in one place (in the
    sandbox with a boot per block, under every limit of its run set); the blocks one
    after the other are the run order, and every planned run is in one block."""
    cfg = load_config(name)
    blocks = run_blocks(cfg)
    flat = [(kind, pipeline, policy, limit, rep)
            for (_, _, pipeline, _, rep), runs in blocks.items()
            for kind, policy, limit in runs]
    assert flat == run_order(cfg) and len(set(flat)) == len(flat)
    planned = {(rs.kind, p, pol, lim, rep) for rs in run_sets(cfg) for p in rs.pipelines
               for pol in rs.policies for lim in rs.limits for rep in range(rs.repetitions)}
    twins = {r for r in flat if r[0] == "unprobed"}
    assert set(flat) - twins == planned
    for (kind, in_sandbox, _, limits, _), runs in blocks.items():
        assert {k for k, *_ in runs} <= {kind, "unprobed"}
        assert len(set(runs)) == len(runs)
        # a limit's runs, or a sandbox boot's: every limit of its run set
        assert {lim for *_, lim in runs} == set(limits.split("+"))
        # the config's own: the sandbox's none and 48M; fidelity's sandbox kind four
        # limits (its workers experiment's 512M among them), its lean runtime's three
        assert limits.split("+") == (
            {"config.yaml": {"runs": ["none", "48M"], "native": None},
             "fidelity.yaml": {"sandbox": ["none", "1G", "512M", "256M"],
                               "sandbox_lean": ["none", "512M", "256M"]}}.get(name, {})
            .get(kind) if in_sandbox else None) or [runs[0][2]]


@pytest.mark.parametrize("name", ["config.yaml", "paper.yaml", "fidelity.yaml"])
@pytest.mark.parametrize("per_job", ["run", "block"])
def test_block_shapes_are_exact_products_that_never_overlap(name, per_job):
    """Each shape's rule matches exactly its own blocks: its pipelines times its
    repetitions are blocks of its place, limit and runs, and no run folder is the
    output of two shapes. With run.per_job "run" the shapes are the sandbox's blocks
    alone (sandbox.per_boot "block"), and rule run's kind wildcard refuses their
    folders and no other run's."""
    cfg = with_(load_config(name), run__per_job=per_job)
    if cfg["sandbox"]["enabled"]:
        cfg = with_(cfg, sandbox__per_boot="block")
    blocks = job_blocks(cfg)
    if per_job == "run":
        # paper.yaml has no sandbox: no blocks
        assert bool(blocks) == cfg["sandbox"]["enabled"]
        assert all(in_sandbox for _, in_sandbox, *_ in blocks)
        kind_re = re.compile(run_rule_kind(cfg))
        for kind, pipeline, policy, limit, rep in run_order(cfg):
            in_block = any((kind, policy, limit) in runs and key[2] == pipeline
                           and key[4] == rep for key, runs in blocks.items())
            taken = kind_re.match(f"{kind}/{pipeline}/{policy}/{limit}/rep{rep}") is not None
            assert taken != in_block, (kind, pipeline, policy, limit, rep)
    by_place: dict[tuple, set] = {}  # blocks of another kind may share a place (fidelity)
    for (_, in_sandbox, pipeline, limit, rep), runs in blocks.items():
        by_place.setdefault((in_sandbox, pipeline, limit, rep), set()).add(tuple(sorted(runs)))
    outputs = []
    for shape in block_shapes(cfg):
        for pipeline in shape.pipelines:
            for rep in shape.reps:
                assert shape.runs in by_place[(shape.in_sandbox, pipeline, shape.limit, rep)]
                outputs += [(kind, pipeline, policy, limit, rep)
                            for kind, policy, limit in shape.runs]
    assert sorted(outputs) == sorted((kind, pipeline, policy, limit, rep)
                                     for (_, _, pipeline, _, rep), runs in blocks.items()
                                     for kind, policy, limit in runs)


def test_a_block_runs_every_command_and_fails_at_its_end_if_one_failed(tmp_path):
    """bash, not the code's formula: every line runs, in order, whatever the others did."""
    import subprocess

    log = tmp_path / "order"
    lines = [f"echo {i} >> {log}" for i in range(3)]
    ok = subprocess.run(["bash", "-euo", "pipefail", "-c", block_command(lines)])
    assert ok.returncode == 0 and log.read_text().split() == ["0", "1", "2"]
    log.unlink()
    failing = [lines[0], f"echo x >> {log} && false", lines[2]]
    bad = subprocess.run(["bash", "-euo", "pipefail", "-c", block_command(failing)])
    assert bad.returncode == 1 and log.read_text().split() == ["0", "x", "2"]
    log.unlink()
    interrupted = [lines[0], f"echo x >> {log} && sh -c 'exit 130'", lines[2]]  # Ctrl-C's
    stopped = subprocess.run(["bash", "-euo", "pipefail", "-c", block_command(interrupted)])
    assert stopped.returncode == 130 and log.read_text().split() == ["0", "x"]


def test_blocks_plan_the_same_run_folders_as_one_job_per_run(tmp_path):
    """A dry run of the default config both ways: the run folders planned are the same,
    and each block job's runs are one pipeline under one limit in one repetition (the
    sandbox's: under both its limits, none and 48M)."""
    import subprocess
    import sys

    planned = {}
    for per_job in ("run", "block"):
        cfg = with_(load_config("config.yaml"), results=str(tmp_path / per_job),
                    run__per_job=per_job)
        path = tmp_path / f"{per_job}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        r = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--configfile", str(path)],
                           cwd=REPO, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        jobs = re.findall(r"^rule (run\w*):\n(?:    .*\n)*?    output: (.*)\n",
                          r.stdout + r.stderr, re.M)
        folders = [os.path.relpath(o, tmp_path / per_job) for _, out in jobs
                   for o in out.split(", ")]
        planned[per_job] = (jobs, folders)
        in_sandbox = {(rs.kind, p) for rs in run_sets(cfg) if rs.in_sandbox
                      for p in rs.pipelines}
        for _, out in jobs if per_job == "block" else ():
            kinds, pipes, _, limits, reps = zip(*(o.split("/")[-5:] for o in out.split(", ")))
            assert len(set(pipes)) == len(set(reps)) == 1, out
            # a sandbox boot's block holds a limited run's baseline too
            assert len(set(limits)) == (2 if (kinds[0], pipes[0]) in in_sandbox else 1), out
    runs, blocks = planned["run"], planned["block"]
    assert len(runs[1]) == len(set(runs[1])) > 400
    assert sorted(blocks[1]) == sorted(runs[1]) and len(blocks[0]) < len(runs[0]) / 3


def test_the_model_stages_get_every_campaign_as_its_own_argument(tmp_path):
    """model.campaigns: each campaign's tables and split folder is one shell word, even
    with a space in its path (the rules quote each)."""
    import shlex
    import subprocess
    import sys

    other = tmp_path / "other campaign"
    for table in ("runs", "tasks", "networks"):
        (other / "tables").mkdir(parents=True, exist_ok=True)
        (other / "tables" / f"{table}.parquet").write_bytes(b"")
    cfg = with_(load_config(), results=str(tmp_path / "r"), model__campaigns=[str(other)])
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = subprocess.run([sys.executable, "-m", "snakemake", str(tmp_path / "r" / "model" /
                        "model.json"), "-n", "-p", "--cores", "1", "--configfile", str(path)],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    line = next(x for x in (r.stdout + r.stderr).splitlines() if "engine fit-model" in x)
    words = shlex.split(line.split("Shell command: ", 1)[-1])
    tables = words[words.index("--tables") + 1:words.index("--split")]
    models = words[words.index("--split") + 1:words.index("--out")]
    assert tables == [str(tmp_path / "r" / "tables"), str(other / "tables")]
    assert models == [str(tmp_path / "r" / "split"), str(other / "split")]


@pytest.mark.parametrize("sandbox, backend, name, says", [
    ("uml", "auto", "res ults", "has a space"), ("uml", "auto", "a:b", "has a ':'"),
    ("vm", "auto", "a,b", "has a ','"), ("vm", "uml", "a b", "has a space"),
    ("vm", "auto", "a b", None),  # qemu carries a space: fine
    ("uml", "auto", None, "too long for the uml sandbox"),
])
def test_results_a_sandbox_cannot_carry_is_refused_in_the_config_check(
        tmp_path, sandbox, backend, name, says):
    """M2 (new-user pass): results with a space passed the dry run, then the first uml
    job failed; the config check names the path and the character."""
    results = tmp_path / name if name else tmp_path.joinpath(*["d" * 200] * 10)
    config = with_(load_config(), results=str(results), sandbox__enabled=True,
                   sandbox__kernel=sandbox, run__backend=backend)
    if says is None:
        check_config(config)
        return
    with pytest.raises(ValueError, match=re.escape(says)) as raised:
        check_config(config)
    assert str(results) in str(raised.value)


def test_a_results_folder_name_longer_than_a_file_system_takes_is_one_line(tmp_path):
    """Tenth held-out pass L1: a 256-byte folder name ended in an OSError traceback."""
    results = tmp_path / ("d" * 256) / "r"
    with pytest.raises(ValueError, match="is 256 bytes, more than the 255 a file system"):
        check_config(with_(load_config(), results=str(results)))
    check_config(with_(load_config(), results=str(tmp_path / ("d" * 255) / "r")))


def test_a_guest_ram_too_small_for_the_limit_names_a_ram_that_is_enough():
    """Tenth held-out pass L3: the hint named more than was needed (816M at 48M, where
    the check asks for the limit plus the guest's reserve)."""
    from engine.errors import EdgeprofError
    from engine.sandbox.config import SandboxConfig
    from engine.sandbox.run import plan

    with pytest.raises(EdgeprofError, match=r"to at least (\d+)M") as said:
        plan(SandboxConfig(ram=200 * 2**20), 48 * 2**20, None, None)
    enough = int(re.search(r"to at least (\d+)M", str(said.value))[1]) * 2**20
    assert plan(SandboxConfig(ram=enough, accel="tcg"), 48 * 2**20, None, None).ram_bytes >= enough
    with pytest.raises(EdgeprofError, match="to at least"):
        plan(SandboxConfig(ram=enough - 2**20, accel="tcg"), 48 * 2**20, None, None)


@pytest.mark.parametrize("uml_works, qemu, name, limits, says", [
    (True, True, "res ults", ["none", "64M"], "auto may choose uml here for a limited run "
                                               "(64M): the uml sandbox cannot share a run "
                                               "folder whose path has a space"),
    (True, True, 'a"b', ["none", "64M", "128M"], "(64M, 128M): the uml sandbox cannot "
                                                  "share a run folder whose path has a '\"'"),
    (False, True, "a,b", ["64M"], "auto may choose vm here for a limited run (64M): the vm "
                                  "sandbox cannot share a run folder whose path has a ','"),
    (False, True, "a b", ["none", "64M"], None),  # qemu carries a space
    (True, True, "res ults", ["none"], None),  # auto never sandboxes an unlimited run
    (False, False, "res ults", ["none", "64M"], None),  # no sandbox here for auto to choose
])
def test_results_a_sandbox_cannot_carry_is_refused_under_backend_auto(
        tmp_path, monkeypatch, uml_works, qemu, name, limits, says):
    """F5 (report 36): with sandbox.enabled false and run.backend auto, results with a space
    passed the dry run, then every limited run failed (exit 2): auto chose uml."""
    from engine.limits import sandbox as limits_vm

    monkeypatch.setattr(limits_vm, "uml_status", lambda: (uml_works, "faked"))
    monkeypatch.setattr(limits_vm, "qemu_installed", lambda: qemu)
    results = tmp_path / name
    config = with_(load_config(), results=str(results), sandbox__enabled=False,
                   run__backend="auto", run__limits=limits, run__reconcile__sandbox=False,
                   run__reconcile__pipeline="p000")
    if says is None:
        check_config(config)
        return
    with pytest.raises(ValueError, match=re.escape(says)) as raised:
        check_config(config)
    assert str(results) in str(raised.value) and "set run.backend" in str(raised.value)


def test_a_policys_fingerprint_follows_its_builders_code_not_its_comments(engine_copy):
    from engine.workflow.fingerprint import policy_fingerprint

    families = ("bulk", "linear", "partial", "deepeye", "execprio-inter")
    before = {f: policy_fingerprint(f, engine_copy) for f in families}
    target = engine_copy / "engine" / "schedule" / "policies.py"
    source = target.read_text()
    linear = "def _build_linear(instances: list[Instance]) -> TaskGraph:\n"
    try:
        target.write_text(source.replace(linear, linear + "    # why\n", 1))
        assert {f: policy_fingerprint(f, engine_copy) for f in families} == before
        target.write_text(source.replace(linear, linear + "    assert instances\n", 1))
        after = {f: policy_fingerprint(f, engine_copy) for f in families}
    finally:
        target.write_text(source)
    assert {f for f in families if after[f] != before[f]} == {"linear"}


def test_a_sandbox_runs_params_carry_the_environments_settings_of_its_measurement():
    """Seventh held-out pass L4: EDGEPROF_UML_ASCEND=0 in the user's shell changed every
    UML run and reran none; ninth H2: a bad value failed each sandbox job after Snakemake
    had removed its finished run. Every guest setting but the timeouts, and UML's
    userspace mode, are in a sandbox run's params when not the default; a bad one is
    refused when the workflow plans."""
    import dataclasses

    from engine.errors import EdgeprofError
    from engine.sandbox.config import SandboxConfig
    from engine.workflow.environ import GUEST_SETTINGS, sandbox_settings

    fields = {f.name for f in dataclasses.fields(SandboxConfig)}
    assert set().union(*GUEST_SETTINGS.values()) == fields - {"boot_timeout_s", "timeout_s"}
    assert sandbox_settings({"EDGEPROF_UML_ASCEND": "0", "EDGEPROF_VM_CACHE": "/c",
                             "EDGEPROF_SANDBOX_RAM": "", "EDGEPROF_SANDBOX_TIMEOUT": "9"},
                            "uml") == {"ascend": False}
    # the default written out, or another spelling of the same value: nothing to rerun
    assert sandbox_settings({"EDGEPROF_UML_ASCEND": "1", "EDGEPROF_VM_SD_CARD": "no"},
                            "uml") == {}
    assert sandbox_settings({"EDGEPROF_SANDBOX_RAM": "2G", "EDGEPROF_UML_USERSPACE": "ptrace"},
                            "uml") == {"ram": 2**31, "uml_userspace": "ptrace"}
    # what a sandbox ignores reruns none of its runs: qemu's CPUs and accelerator under
    # uml, UML's ascending faults and userspace mode under qemu
    tuning = {"EDGEPROF_VM_SMP": "1", "EDGEPROF_VM_ACCEL": "tcg", "EDGEPROF_UML_ASCEND": "0",
              "EDGEPROF_UML_USERSPACE": "ptrace"}
    assert sandbox_settings(tuning, "uml") == {"ascend": False, "uml_userspace": "ptrace"}
    assert sandbox_settings(tuning, "vm") == {"smp": 1, "accel": "tcg"}
    assert sandbox_settings({"EDGEPROF_VM_SD_CARD": "1"}, "vm") == {"sd_card": True}
    # what a sandbox cannot honour is refused when planning, as its run would refuse it
    with pytest.raises(EdgeprofError, match="EDGEPROF_VM_SD_CARD: the uml backend cannot"):
        sandbox_settings({"EDGEPROF_VM_SD_CARD": "1"}, "uml")
    with pytest.raises(EdgeprofError, match="EDGEPROF_UML_ASCEND='bogus'"):
        sandbox_settings({"EDGEPROF_UML_ASCEND": "bogus"}, "vm")
    # eleventh pass M2: any word but ptrace once meant seccomp, silently, and reran
    assert sandbox_settings({"EDGEPROF_UML_USERSPACE": "seccomp"}, "uml") == {}
    with pytest.raises(EdgeprofError, match="EDGEPROF_UML_USERSPACE='junk' is not valid"):
        sandbox_settings({"EDGEPROF_UML_USERSPACE": "junk"}, "uml")
    rules = (REPO / "workflow" / "rules" / "run.smk").read_text()
    assert rules.count("sandbox=") == 3  # the run rule, the block rules, the reconciliation


def test_the_pipelines_drawn_do_not_depend_on_the_order_of_the_networks_given():
    """What sorting pipelines_args' networks rests on."""
    from engine.schedule.pipelines import generate_pipelines

    sizes = {"AgeNet": 45 * 2**20, "GenderNet": 44 * 2**20, "AlexNet": 233 * 2**20}
    arrival = {"mode": "batch"}
    made = generate_pipelines(0, 4, sizes, (2, 4), arrival, [150, 400])
    again = generate_pipelines(0, 4, dict(reversed(sizes.items())), (2, 4), arrival,
                               [150, 400])
    assert [p.networks() for p in made] == [p.networks() for p in again]


@pytest.mark.parametrize("old, message", [
    ({"vm": {"enabled": True}}, "the key vm is now sandbox;"),
    ({"sandbox__sandbox": "uml"}, "the key sandbox.sandbox is now sandbox.kernel;"),
    ({"run__reconcile__vm": True}, "the key run.reconcile.vm is now run.reconcile.sandbox;"),
    ({"model__holdout__vm_pipelines": 1},
     "the key model.holdout.vm_pipelines is now model.holdout.sandbox_pipelines;"),
])
def test_a_renamed_key_is_refused_with_its_new_name(cfg, old, message):
    """Issue 37: the sandbox block was vm: (either sandbox, where --backend vm is qemu)."""
    with pytest.raises(ValueError, match=re.escape(message)):
        check_renamed_keys(with_(cfg, **old))
    check_renamed_keys(cfg)  # the shipped config uses the new names only

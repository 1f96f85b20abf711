"""The CLI and the Snakemake workflow, run for real as a user would."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from engine.limits.sandbox import uml_status
from engine.schedule.names import policy_id
from engine.workflow.plan import run_blocks
from tests.integration.snakemake_output import job_counts
from tests.unit.test_workflow_args import load_config, with_

REPO = Path(__file__).resolve().parents[3]


def _engine(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def test_cli_models_split_forward(tmp_path):
    r = _engine("models", "--out", str(tmp_path / "m"), "--seed", "2", "GenderNet")
    assert r.returncode == 0, r.stderr
    assert "GenderNet: wrote" in r.stderr
    r = _engine("split", str(tmp_path / "m" / "gender_net.caffemodel"), "--out",
                str(tmp_path / "s"), "--network", "GenderNet")
    assert r.returncode == 0, r.stderr
    assert "20 layers, 12|8 conv|fc, 11,411,970 parameters" in r.stderr
    out = tmp_path / "out.npz"
    r = _engine("forward", str(tmp_path / "s" / "gender_net.description.json"), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("0:GenderNet/prob (10, 2): top-5 of image 0")  # run's keys
    import numpy as np
    assert np.load(out)["0:GenderNet/prob"].shape == (10, 2)


def test_cli_bad_input_is_one_clear_line(tmp_path):
    r = _engine("models", "--out", str(tmp_path), "ResNet")
    assert r.returncode == 2
    assert r.stderr.strip() == ("error: unknown zoo network 'ResNet' (known: AgeNet, GenderNet, "
                                "FaceNet, AlexNet, GoogLeNet, SoS-AlexNet, SoS-GoogleNet)")
    (tmp_path / "x.caffemodel").write_bytes(b"\x0a\x05ab")  # truncated
    (tmp_path / "x.prototxt").write_text(
        'layer { name: "d" type: "Input" top: "d" input_param { shape { dim: 1 } } }')
    r = _engine("split", str(tmp_path / "x.caffemodel"), "--out", str(tmp_path / "s"))
    assert r.returncode == 2
    assert "corrupt or truncated caffemodel at byte 0" in r.stderr
    assert "Traceback" not in r.stderr
    r = _engine("split", str(tmp_path / "missing.caffemodel"), "--out", str(tmp_path / "s"))
    assert r.returncode == 2 and "does not exist" in r.stderr


def _snakemake(*args: str, python_args: tuple[str, ...] = (),
               env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *python_args, "-m", "snakemake", "--cores", "1",
                           *args], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env=env)


def test_workflow_rejects_a_bad_config_before_any_job(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(yaml.safe_dump({"results": str(tmp_path / "r"),
                                   "models": {"zoo": ["AgeNet", "ResNet"], "user": [],
                                              "user_dir": "resources/models"}}))
    r = _snakemake("--configfile", str(cfg))
    assert r.returncode != 0
    assert "'ResNet' is not one of" in r.stderr
    assert not (tmp_path / "r").exists()


def test_a_whole_number_float_stops_the_workflow_before_any_job(tmp_path):
    """Twenty-second pass M1: the schema passes ``run.batch: 1.0``; the dry run passed
    and every run job then failed on ``--batch 1.0``."""
    cfg = tmp_path / "float.yaml"
    cfg.write_text(f"results: {tmp_path / 'r'}\nrun: {{batch: 1.0}}\n")
    r = _snakemake("--dry-run", "--configfile", str(cfg))
    assert r.returncode != 0
    assert ("config: run.batch 1.0 must be an integer, written without a decimal point (1)"
            in r.stdout + r.stderr), r.stdout[-2000:]
    assert "usage:" not in r.stdout + r.stderr
    assert not (tmp_path / "r").exists()


def test_a_default_config_that_is_not_utf8_is_one_line_naming_it(tmp_path):
    """Twenty-second pass L7: a config/config.yaml saved as Latin-1 stopped the workflow
    with Snakemake's UnicodeDecodeError traceback, naming no file."""
    import shutil

    root = tmp_path / "repo"
    for part in ("engine", "workflow", "config", "profiles"):
        shutil.copytree(REPO / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "Snakefile", root / "Snakefile")
    default = root / "config" / "config.yaml"
    default.write_bytes(default.read_bytes() + "# température\n".encode("latin-1"))
    lines = default.read_bytes().count(b"\n")
    r = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "--dry-run"],
                       cwd=root, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, PYTHONPATH=str(root)))
    assert r.returncode != 0
    assert (f"config: config/config.yaml is not UTF-8 text (byte 0xe9 on line {lines}); "
            f"save it as UTF-8") in r.stdout + r.stderr, r.stdout[-2000:]
    assert "UnicodeDecodeError" not in r.stdout + r.stderr


def test_workflow_is_lint_clean():
    r = subprocess.run([sys.executable, "-m", "snakemake", "--lint"], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Congratulations" in r.stdout + r.stderr


def test_run_backend_uml_without_the_sandbox_block_runs_every_run_in_uml(tmp_path):
    """Issue 37: a job guessed its place from its folder's name and its pipeline's, not
    from its run set, so with run.backend uml (every run in the sandbox, docs/
    sandboxes.md) and no sandbox block the plan failed with a KeyError."""
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cfg["results"] = str(tmp_path / "r")
    cfg["sandbox"]["enabled"] = False
    cfg["model"] = {}
    cfg["pipelines"]["count"] = 1
    cfg["run"].update(backend="uml", limits=["none", "16M"], probe_overhead_policy=None,
                      reconcile={"pipeline": "p000", "policy": "linear", "limit": "none",
                                 "sandbox": False})
    path = tmp_path / "uml.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = _snakemake("--configfile", str(path), "--dry-run", "--printshellcmds")
    assert r.returncode == 0, r.stderr[-3000:]
    runs = [line for line in r.stdout.splitlines()
            if " -m engine run " in line and "/pipelines/p000.json" in line]
    # the reconciliation run (run.reconcile.sandbox false) stays native
    [rec] = [line for line in runs if "--heap-profile" in line]
    assert "--backend none" in rec
    runs.remove(rec)
    assert len(runs) == 2 * len(cfg["run"]["policies"]) * cfg["run"]["repetitions"]
    assert all("--backend uml --error-is-result" in line for line in runs)


def test_limited_runs_go_to_the_vm_with_its_smaller_pipelines(tmp_path):
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cfg["results"] = str(tmp_path / "r")
    cfg["run"]["backend"] = "vm"
    # the model's runs (the sandbox pipelines' native twins, the held-out pipelines) are
    # counted in tests/unit/test_workflow_args.py
    cfg["sandbox"]["native_baseline"] = False
    cfg["model"]["holdout"].update(pipelines=0, sandbox_pipelines=0)
    cfg["sandbox"]["kernel"] = "vm"  # the qemu guest, wherever user-mode Linux works
    cfg["sandbox"]["per_boot"] = "run"  # a job and a boot per run (blocks: the test below)
    path = tmp_path / "vm.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = _snakemake("--configfile", str(path), "--dry-run", "--printshellcmds")
    assert r.returncode == 0, r.stderr[-3000:]
    jobs = job_counts(r.stdout)
    policies, vm = len(cfg["run"]["policies"]), cfg["sandbox"]
    reps, vm_reps = cfg["run"]["repetitions"], vm["repetitions"]
    assert jobs["vm_guest"] == jobs["sandbox_pipelines"] == 1
    # native: every main pipeline x policy x repetition unconstrained, and the unprobed
    # twins; in the guest: every sandbox pipeline x vm policy under each vm limit and, as the
    # baseline, unconstrained, with the sandbox block's repetitions
    in_guest = vm["pipelines"]["count"] * len(vm["policies"]) * (len(vm["limits"]) + 1)
    assert jobs["run"] == (reps * (policies + 1) * cfg["pipelines"]["count"]
                           + vm_reps * in_guest)
    runs = [line.removeprefix("Shell command: ") for line in r.stdout.splitlines()
            if " -m engine run " in line]
    in_sandbox = [line for line in runs if "/pipelines/v0" in line]
    # and the heap-profiled reconciliation run
    assert len(in_sandbox) == vm_reps * in_guest + 1
    assert sum("--no-probes" in line for line in runs) == reps * cfg["pipelines"]["count"]
    assert sum("--heap-profile" in line for line in in_sandbox) == 1
    assert all("--backend vm" in line and line.startswith("EDGEPROF_VM_CACHE=")
               for line in in_sandbox)
    # the unconstrained baseline stays native
    native = [line for line in runs if "/pipelines/p0" in line]
    assert native and all("--backend none" in line and "--limit" not in line
                          for line in native)


@pytest.mark.parametrize("kernel", ["uml", "vm"])
def test_the_sandboxs_runs_are_a_job_and_a_boot_per_block_in_the_planned_order(tmp_path,
                                                                             kernel):
    """sandbox.per_boot block: each block of the sandbox's runs (a pipeline under every
    limit of its run set in one repetition) is one job, python -m engine run-block, its
    runs in the planned interleaved order, each with its own log and limit; every other
    run stays a job of its own."""
    cfg = with_(load_config("config.yaml"), results=str(tmp_path / "r"), sandbox__kernel=kernel,
                sandbox__per_boot="block")
    path = tmp_path / "blocks.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = _snakemake("--configfile", str(path), "--dry-run", "--printshellcmds")
    assert r.returncode == 0, r.stderr[-3000:]
    commands = _shell_commands(r.stdout)
    blocks = [c for c in commands if " -m engine run-block " in c]
    alone = [c for c in commands if " -m engine run " in c and "--heap-profile" not in c]
    planned = run_blocks(cfg)
    sandbox_blocks = {key: runs for key, runs in planned.items() if key[1]}
    assert len(blocks) == len(sandbox_blocks)
    seen = []
    for command in blocks:
        words = shlex.split(command)
        runs = [shlex.split(words[i + 1]) for i, w in enumerate(words) if w == "--run"]
        logs = [words[i + 1] for i, w in enumerate(words) if w == "--log"]
        assert len(logs) == len(runs) and len(set(logs)) == len(logs)
        outs = [Path(run[run.index("--out") + 1]).parts[-5:] for run in runs]
        kinds, pipes, policies, limits, reps = zip(*outs)
        assert len(set(pipes)) == len(set(reps)) == 1 and len(set(limits)) > 1
        key = next(k for k in sandbox_blocks if (k[2], f"rep{k[4]}") == (pipes[0], reps[0]))
        assert [(kind, policy_id(p), lim) for kind, p, lim in sandbox_blocks[key]] == list(
            zip(kinds, policies, limits))  # the planned order
        for run, lim in zip(runs, limits):  # each run under its own limit
            assert ("--limit" in run) == (lim != "none")
            assert lim == "none" or run[run.index("--limit") + 1] == lim
        assert all(run[run.index("--backend") + 1] == kernel for run in runs)
        assert command.startswith("EDGEPROF_VM_CACHE=") == (kernel == "vm")
        seen += outs
    assert len(seen) == len(set(seen)) == sum(len(runs) for runs in sandbox_blocks.values())
    # the sandbox pipelines' native twins and the main pipelines: a job each, natively
    assert alone and not [c for c in alone if f"--backend {kernel}" in c]
    assert not {Path(shlex.split(c)[shlex.split(c).index("--out") + 1]).parts[-5:]
                for c in alone} & set(seen)


def _shell_commands(text: str) -> list[str]:
    return [line.removeprefix("Shell command: ") for line in text.splitlines()
            if line.startswith("Shell command: ")]


def test_with_the_vm_disabled_every_limit_runs_natively_with_run_backend(tmp_path):
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cfg["results"] = str(tmp_path / "r")
    cfg["sandbox"]["enabled"] = False
    cfg["run"]["reconcile"] = {"pipeline": "p000", "policy": "linear", "limit": "none",
                               "sandbox": False}
    cfg["model"]["holdout"].update(pipelines=0)  # the model's: tests/unit/test_workflow_args.py
    path = tmp_path / "native.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = _snakemake("--configfile", str(path), "--dry-run", "--printshellcmds")
    assert r.returncode == 0, r.stderr[-3000:]
    jobs = job_counts(r.stdout)
    assert "vm_guest" not in jobs and "sandbox_pipelines" not in jobs
    run = cfg["run"]
    assert jobs["run"] == (len(run["policies"]) * cfg["pipelines"]["count"]
                           * len(run["limits"]) + cfg["pipelines"]["count"]
                           ) * run["repetitions"]  # and linear's unprobed twins
    runs = [c for c in _shell_commands(r.stdout) if " -m engine run " in c]
    assert runs and all(c.startswith("python -m engine run ") for c in runs)
    assert all("--backend auto" in c and "/pipelines/p0" in c for c in runs)
    assert sum("--limit 256M --swap max --backend auto" in c for c in runs) == len(
        run["policies"]) * cfg["pipelines"]["count"] * run["repetitions"]


def test_building_the_dag_probes_nothing_on_the_host(tmp_path):
    """Where the limited runs go is config (sandbox.enabled): planning the default workflow,
    whose limited runs go to the VM, runs no systemctl or qemu and does not import the
    vm backend's host side (engine.sandbox.run, which probes both)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    marker = tmp_path / "probed"
    for tool in ("systemctl", "systemd-run", "qemu-system-x86_64", "qemu-img"):
        (fake / tool).write_text(f"#!/bin/sh\necho {tool} >> {marker}\nexit 1\n")
        (fake / tool).chmod(0o755)
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cfg["results"] = str(tmp_path / "r")
    path = tmp_path / "default.yaml"
    path.write_text(yaml.safe_dump(cfg))
    env = dict(os.environ, PATH=f"{fake}{os.pathsep}{os.environ.get('PATH', '')}")
    r = _snakemake("--configfile", str(path), "--dry-run", "--printshellcmds",
                   python_args=("-X", "importtime"), env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    # sandbox.kernel auto: uml where its build record (read, not booted) says it works here,
    # and the workflow builds the qemu guest only for the qemu guest's runs
    in_uml = uml_status()[0]
    assert job_counts(r.stdout).get("vm_guest", 0) == (0 if in_uml else 1)
    # (the sandbox pipelines' native twins, sandbox.native_baseline, run natively)
    runs = [c for c in _shell_commands(r.stdout) if "/pipelines/v0" in c and "/native/" not in c]
    assert runs and all(f"--backend {'uml' if in_uml else 'vm'}" in c for c in runs)
    assert not marker.exists(), marker.read_text()
    imported = {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines()
                if line.startswith("import time:")}
    assert "engine.workflow" in imported
    assert not {"engine.sandbox.run", "engine.sandbox.boot", "engine.limits.select"} & imported


def test_a_user_model_replaced_by_an_older_file_is_split_again(tmp_path):
    """Eighteenth pass H1: Snakemake compares times, and a user model copied in with its
    older time kept (cp -p, rsync -a) kept the old split: runs measured the old weights."""
    import shutil

    from engine.caffe import generate

    models = tmp_path / "user"
    for seed, folder in ((1, tmp_path / "a"), (0, tmp_path / "b")):
        generate.write_zoo_model("AgeNet", folder, seed)
    models.mkdir()
    for ext in ("caffemodel", "prototxt"):
        shutil.copy2(tmp_path / "a" / f"age_net.{ext}", models / f"mynet.{ext}")
    cfg = tmp_path / "user.yaml"
    cfg.write_text(yaml.safe_dump({"results": str(tmp_path / "r"),
                                   "sandbox": {"enabled": False}, "run": {"reconcile": {
                                       "pipeline": "p000", "policy": "linear", "limit": "none",
                                       "sandbox": False}},
                                   "models": {"zoo": ["GenderNet"], "user": ["mynet"],
                                              "user_dir": str(models)}}))
    target = str(tmp_path / "r" / "split" / "mynet.description.json")
    r = _snakemake(target, "--configfile", str(cfg))  # --configfile takes several
    assert r.returncode == 0, r.stderr[-2000:]
    old = (models / "mynet.caffemodel").stat().st_mtime_ns
    shutil.copy2(tmp_path / "b" / "age_net.caffemodel", models / "mynet.caffemodel")
    os.utime(models / "mynet.caffemodel", ns=(old - 10**12, old - 10**12))  # an older time
    r = _snakemake(target, "--dry-run", "--quiet", "rules", "--configfile", str(cfg))
    assert r.returncode == 0, r.stderr[-2000:]
    assert job_counts(r.stdout + r.stderr).get("split") == 1, r.stdout + r.stderr

"""The cluster path on a real SLURM: a throwaway single-node SLURM 22.05 (munge, MariaDB,
slurmdbd, slurmctld, slurmd; no cgroup plugin, so it enforces no memory limit) runs a tiny
sweep through profiles/slurm with the snakemake-executor-plugin-slurm.

Checked: every job went through sbatch (sacct lists one allocation per job, by rule, the
runs one job per block), each
run ran in a job step of its own of exactly its limit and its job's other steps (the
workflow's own processes) fit in what the job asked for beyond it, the tables and plots
exist, runs whose limit SLURM did not enforce are labelled so (and read no cgroup
counters), a cancelled job is noticed within a status check and the rest of the workflow
keeps going (profiles/slurm: keep-going), and every daemon stops by its PID. Skipped, with
the reason, only where the daemons cannot be started (not root, no apt-get, a SLURM already
configured in /etc/slurm, ...). The sweep runs its runs as config/paper.yaml does, a job
per block of runs (run.per_job: block). About 5 minutes on 2 cores, plus the apt-get on a
fresh machine; `pytest -m slurm` runs it alone."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest
import yaml

from engine.workflow.resources import ENGINE_BASELINE_MB, UNLIMITED_MEM_MB
from tests.integration.slurm.slurm_cluster import ClusterUnavailable, SlurmCluster, _alive
from tests.integration.workflow.test_workflow import tiny_config as workflow_config

REPO = Path(__file__).resolve().parents[3]
FIGURES = ["speedup", "memory", "partial_workers", "layer_times", "reconciliation",
           "memory_over_time", "attribution"]
TABLES = ["runs", "tasks", "networks", "samples", "reconcile", "speedup"]
# The plugin's first status check comes this many seconds after a submission (and the
# pause between checks while jobs finish): short, so the tiny sweep takes minutes, not
# the ~40 s per round of the plugin's default.
POLL_S = 2
# where to write the measurements docs/cluster.md gives (benchmarks/slurm_numbers.py)
NUMBERS_ENV = "EDGEPROF_SLURM_NUMBERS"

# slow too: `pytest -m "not slow and not vm"` stays the quick unit tests
pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def tiny_config(results: Path) -> dict:
    """test_workflow's tiny config, its limited run under `inherit` at 512M, a job per
    block of runs (as config/paper.yaml)."""
    cfg = workflow_config(results)
    cfg["run"].update(limits=["none", "512M"], backend="inherit", per_job="block")
    cfg["plots"]["dpi"] = 60
    return cfg


@pytest.fixture(scope="module")
def cluster():
    try:
        import snakemake_executor_plugin_slurm  # noqa: F401
    except ImportError:  # a broken setup, not a machine that cannot run SLURM: fail
        pytest.fail("snakemake-executor-plugin-slurm is missing: bash setup.sh (or pip "
                    "install -e '.[slurm]')")
    # munge and mysql must reach their folders: not under pytest's 0700 tmp folders
    root = Path(tempfile.mkdtemp(prefix="edgeprof-slurm-"))
    c = SlurmCluster(root)
    try:
        c.start()
    except ClusterUnavailable as exc:
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"cannot start a SLURM cluster here: {exc}")
    yield c
    c.stop()  # a no-op when test_every_daemon_stops_by_its_pid has stopped them
    shutil.rmtree(root, ignore_errors=True)


class Checkout:
    """A private copy of the workflow (the jobs run it; nothing in the repo changes)."""

    def __init__(self, root: Path, cluster: SlurmCluster) -> None:
        self.root = root / "repo"
        for part in ("engine", "workflow", "config", "profiles", "envs"):
            shutil.copytree(REPO / part, self.root / part,
                            ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(REPO / "Snakefile", self.root / "Snakefile")
        self.cluster = cluster
        self.results = root / "results"
        self.config = root / "tiny.yaml"
        self.config.write_text(yaml.safe_dump(tiny_config(self.results)))

    def snakemake_argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "snakemake", "--profile", "profiles/slurm",
                "--configfile", str(self.config),
                "--slurm-init-seconds-before-status-checks", str(POLL_S),
                "--slurm-keep-successful-logs", *args]

    def env(self) -> dict[str, str]:
        return self.cluster.env | {"PYTHONPATH": str(self.root)}


@pytest.fixture(scope="module")
def sweep(cluster, tmp_path_factory):
    """The tiny sweep, run once through profiles/slurm: (checkout, its log, wall s)."""
    wf = Checkout(tmp_path_factory.mktemp("slurm-wf"), cluster)
    t0 = time.monotonic()
    r = subprocess.run(wf.snakemake_argv(), cwd=wf.root, env=wf.env(), capture_output=True,
                       text=True, timeout=1500)
    wall = time.monotonic() - t0
    log = r.stdout + r.stderr
    (wf.root / "sweep.log").write_text(log)
    assert r.returncode == 0, log[-6000:]
    print(f"\ntiny sweep through profiles/slurm: {wall:.0f} s wall")
    return wf, log, wall


def _planned(log: str) -> Counter:
    """Rule -> jobs of the 'Job stats' table Snakemake prints before it starts."""
    table = log[log.index("Job stats:"):]
    counts = Counter()
    for line in table.splitlines()[3:]:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        if parts[0] != "total":
            counts[parts[0]] = int(parts[1])
    return counts


def _sacct(cluster: SlurmCluster, *args: str) -> list[list[str]]:
    r = subprocess.run(["sacct", "--parsable2", "--noheader", "--allusers",
                        "--starttime", "now-1days", *args], env=cluster.env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [line.split("|") for line in r.stdout.splitlines() if line]


def _size_mib(text: str) -> float:
    """sacct's MaxRSS / ReqMem ('123456K', '512M', '') in MiB."""
    m = re.fullmatch(r"([\d.]+)([KMGT]?)n?", text.strip())
    if not m:
        return 0.0
    factor = {"": 1 / 2**20, "K": 1 / 1024, "M": 1, "G": 1024, "T": 2**20}[m.group(2)]
    return float(m.group(1)) * factor


def test_every_job_went_through_sbatch(sweep, cluster):
    """One allocation per job, rule by rule; the runs went in one job per block (one
    pipeline under one limit in one repetition: run.per_job block)."""
    wf, log, _ = sweep
    planned = _planned(log)
    del planned["all"]  # the target rule has no action: Snakemake runs no job for it
    uuid = re.search(r"SLURM run ID: (\S+)", log).group(1)
    rows = _sacct(cluster, "-X", "--format=JobIDRaw,JobName,State,Comment")
    ours = [r for r in rows if r[1] == uuid]
    by_rule = Counter(re.match(r"rule_([a-z_0-9]+?)(_wildcards_.*)?$", r[3]).group(1)
                      for r in ours)
    assert by_rule == planned, (by_rule, planned)
    blocks = sum(n for rule, n in by_rule.items() if rule.startswith("run_block_"))
    assert blocks == 2 * 3  # a job per limit and repetition
    assert {r[2] for r in ours} == {"COMPLETED"}


def test_tables_and_plots_exist(sweep):
    wf, _, _ = sweep
    for name in TABLES:
        assert len(pd.read_parquet(wf.results / "tables" / f"{name}.parquet")) > 0, name
        assert (wf.results / "tables" / f"{name}.csv").stat().st_size > 0, name
    for fig in FIGURES:
        for ext in ("png", "pdf"):
            assert (wf.results / "plots" / f"{fig}.{ext}").stat().st_size > 1000, fig


def test_unenforced_runs_are_labelled_and_read_no_cgroup_counters(sweep):
    """SLURM without cgroup plugins enforces nothing: every 512M run says so, with the
    reason, and no run reads the node-wide cgroup it is in."""
    wf, _, _ = sweep
    runs = pd.read_parquet(wf.results / "tables" / "runs.parquet")
    # 1 pipeline x 2 policies x 2 limits x 3 repetitions
    assert len(runs) == 12 and (runs.termination == "ok").all()
    assert set(runs.backend) == {"inherit"} and not runs.limit_enforced.any()
    for meta_path in sorted((wf.results / "runs").glob("p000/*/*/rep0/meta.json")):
        meta = json.loads(meta_path.read_text())
        limits = meta["limits"]
        assert meta["limit_enforced"] is False and limits["cgroup_dir"] is None
        assert "cgroup_counters_not_measured" in limits, meta_path
        if meta["limit_bytes"] is not None:
            assert "no finite memory limit" in limits["unenforced_reason"]
    samples = pd.read_parquet(wf.results / "tables" / "samples.parquet")
    assert samples.cg_current_bytes.isna().all()  # "not measured", never the node's


def _seconds(elapsed: str) -> int:
    """sacct's Elapsed ('[D-]HH:MM:SS') in seconds."""
    days, _, clock = elapsed.rpartition("-")
    h, m, s = (int(x) for x in clock.split(":"))
    return int(days or 0) * 86400 + h * 3600 + m * 60 + s


def test_each_run_had_a_step_of_its_limit_and_the_rest_fits_the_job(sweep, cluster):
    """A block job: the batch step (the plugin's jobstep Snakemake, srun), step 0 (the
    job's Snakemake, its shell, srun) and one step per run, the engine alone with
    --mem=<limit> (unconstrained: its networks' bound, which its MaxRSS must respect).
    What the job asks beyond the limit (the reserve the planning process measured) must hold
    the first two. Prints the wall time a job spends beside its engine steps, per run: a
    block's against the single-run reconciliation job's."""
    wf, log, _ = sweep
    rows = _sacct(cluster, "--format=JobID,Comment,ReqMem,AllocTRES,MaxRSS,State,Elapsed")
    jobs = {r[0]: r for r in rows if "." not in r[0]}
    run_jobs = {j: r for j, r in jobs.items()
                if r[1].startswith(("rule_run_block_", "rule_reconcile"))}
    assert len(run_jobs) == 6 + 1  # blocks, reconciliation
    # a block rule's limit, from the outputs Snakemake printed for its jobs
    limits = dict(re.findall(r"^ *rule (run_block_\d+):\n(?: .*\n)*? +output: \S+/(none|512M)/rep",
                             log, re.M))
    overheads, engine_steps, per_run, reserves = [], 0, {"block": [], "single": []}, set()
    by_size, beside_block, engine_rss = {}, [], []
    for job, row in run_jobs.items():
        steps = {r[0].split(".", 1)[1]: r for r in rows if r[0].startswith(f"{job}.")}
        rule = re.match(r"rule_([a-z_0-9]+?)(_wildcards_.*)?$", row[1]).group(1)
        limit = limits.get(rule, "none")  # the reconciliation run: unconstrained
        mem = {name: _size_mib(re.search(r"mem=([^,]+)", r[3]).group(1))
               for name, r in steps.items() if name != "batch"}
        engine = [name for name in mem if name != "0"]  # the engine's own steps
        limit_mib = mem[engine[0]] if engine else None
        if limit == "512M":
            assert limit_mib == 512, (row, steps)
        else:  # the bound of its pipeline's networks, which SLURM's MaxRSS must respect
            assert ENGINE_BASELINE_MB < limit_mib < UNLIMITED_MEM_MB, row
        assert {mem[name] for name in engine} == {limit_mib}, (row, steps)
        reserve = _size_mib(row[2]) - limit_mib  # what the planning process measured
        reserves.add(reserve)
        expected = 1 if rule == "reconcile_run" else (3 if limit == "none" else 2)
        assert len(engine) == expected and set(mem) - set(engine) == {"0"}, (row, steps)
        engine_steps += len(engine)
        for name in engine:  # what the engine's processes used, as SLURM measured it
            engine_rss.append(_size_mib(steps[name][4]))
            assert engine_rss[-1] <= limit_mib, (row, steps[name])
        overhead = _size_mib(steps["batch"][4]) + _size_mib(steps["0"][4])
        overheads.append(overhead)
        assert overhead < reserve, (row, overhead, reserve)  # as SLURM measured them
        beside = _seconds(row[6]) - sum(_seconds(steps[n][6]) for n in engine)
        per_run["single" if expected == 1 else "block"].append(beside / expected)
        if expected > 1:
            by_size.setdefault(str(expected), []).append(round(beside / expected, 2))
            beside_block.append(beside)
        print(f"{row[1]}: job --mem {row[2]}, {len(engine)} engine step(s) of --mem "
              f"{limit_mib} MiB, workflow's own processes (batch + step 0 MaxRSS) "
              f"{overhead:.0f} MiB, wall s beside the engine {beside} "
              f"({beside / expected:.1f} per run)")
    assert engine_steps == 15 + 1
    print("wall s per run beside the engine: block jobs "
          f"{sorted(per_run['block'])}, a single-run job {per_run['single']}")
    assert len(reserves) == 1, reserves  # one per workflow
    reserve = reserves.pop()
    print(f"reserve {reserve} MiB per job; the workflow's own processes used "
          f"{min(overheads):.0f}-{max(overheads):.0f} MiB")
    if os.environ.get(NUMBERS_ENV):  # docs/cluster.md's numbers: benchmarks/slurm_numbers.py
        runs = pd.read_parquet(wf.results / "tables" / "runs.parquet")
        load = pd.concat([runs.host_load1_start, runs.host_load1_end]).dropna()
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                                capture_output=True, text=True).stdout.strip()
        numbers = Path(os.environ[NUMBERS_ENV])
        numbers.parent.mkdir(parents=True, exist_ok=True)
        numbers.write_text(json.dumps({
            "commit": commit or "unknown", "cpus": os.cpu_count(),
            "load_median": round(float(load.median()), 2),
            "load_max": round(float(load.max()), 2),
            "block_jobs": len(beside_block), "block_runs": engine_steps - len(per_run["single"]),
            "beside_block_s": beside_block, "per_run_block": by_size,
            "per_run_single": [round(v, 2) for v in per_run["single"]],
            "overhead_mib": [round(v) for v in overheads], "reserve_mib": reserve,
            "engine_max_rss_mib": [round(v) for v in engine_rss]}, indent=1) + "\n")


@pytest.mark.timing
def test_status_polling_latency(sweep, cluster):
    """How long after SLURM ends a job Snakemake notices (docs/cluster.md's polling latency)."""
    wf, log, _ = sweep
    submitted = dict(re.findall(r"Job (\d+) has been submitted with SLURM jobid (\d+)", log))
    finished = {}
    stamp = None
    for line in log.splitlines():
        m = re.match(r"\[(\w{3} \w{3} +\d+ [\d:]+ \d{4})\]", line)
        if m:
            stamp = datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y")
        m = re.match(r"Finished jobid: (\d+)", line)
        if m and stamp is not None:
            finished[m.group(1)] = stamp
    ends = {r[0]: datetime.strptime(r[1], "%Y-%m-%dT%H:%M:%S")
            for r in _sacct(cluster, "-X", "--format=JobIDRaw,End") if r[1][:1].isdigit()}
    lags = [(finished[j] - ends[s]).total_seconds() for j, s in submitted.items()
            if j in finished and s in ends]
    assert len(lags) == len(submitted)
    print(f"polling latency (SLURM end -> Snakemake notices), first check after {POLL_S} s: "
          f"median {sorted(lags)[len(lags) // 2]:.0f} s, max {max(lags):.0f} s")
    assert max(lags) < 60


@pytest.mark.timing
def test_a_cancelled_job_is_noticed_and_the_rest_keeps_going(sweep, cluster,
                                                             tmp_path_factory):
    """A job cancelled while PENDING (what an impossible request leaves behind) fails at
    the next status check; keep-going runs the other one to the end."""
    wf = Checkout(tmp_path_factory.mktemp("slurm-cancel"), cluster)
    targets = [str(wf.results / "models" / f"{stem}.caffemodel")
               for stem in ("age_net", "gender_net")]
    node = cluster.node
    env = wf.env()
    scontrol = ["scontrol", "update", f"NodeName={node}"]
    subprocess.run([*scontrol, "State=DRAIN", "Reason=edgeprof-test"], env=env, check=True)
    proc = subprocess.Popen(wf.snakemake_argv(*targets), cwd=wf.root, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        pending: list[str] = []
        while len(pending) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
            out = subprocess.run(["squeue", "-h", "-t", "PENDING", "-o", "%i %k"], env=env,
                                 capture_output=True, text=True).stdout
            pending = [line.split()[0] for line in out.splitlines() if "age_net" in line
                       or "gender_net" in line]
        assert len(pending) == 2, "the two jobs were not submitted"
        victim = next(line.split()[0] for line in out.splitlines() if "age_net" in line)
        subprocess.run(["scancel", victim], env=env, check=True)
        cancelled = time.monotonic()
        subprocess.run([*scontrol, "State=RESUME"], env=env, check=True)
        log, _ = proc.communicate(timeout=300)
        noticed = time.monotonic() - cancelled
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
        subprocess.run([*scontrol, "State=RESUME"], env=env, capture_output=True)
    assert proc.returncode != 0, log[-3000:]
    assert f"SLURM-job '{victim}' failed" in log and "CANCELLED" in log, log[-3000:]
    assert Path(targets[1]).stat().st_size > 0 and not Path(targets[0]).exists()
    print(f"cancelled job noticed, workflow done {noticed:.0f} s after scancel")
    assert noticed < 120


def test_every_daemon_stops_by_its_pid(cluster):
    pids = dict(cluster.pids)
    assert set(pids) == {"munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd"}
    killed = cluster.stop()
    assert killed == [], f"needed SIGKILL: {killed}"
    assert not any(_alive(pid) for pid in pids.values())
    assert cluster.pids == {}
    # nothing of this cluster is left running (slurmstepd of a job, say)
    left = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline_mentions(
        int(p), str(cluster.root))]
    assert left == []


def _cmdline_mentions(pid: int, text: str) -> bool:
    try:
        return text in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False

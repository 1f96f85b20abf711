"""A second kernel as referee: the same Caffe-faithful runs in user-mode Linux and in the
qemu guest (a stock Debian kernel, TCG here), compared per cell (issue 35 point 4).

Draws 2 pipelines of 5 SoS-AlexNet/FaceNet networks (1,085 MiB of weights each, seed 35)
from the zoo, runs each under bulk, linear, partial:2 and deepeye at 256M and 512M with
``--swap max``, ``--reps`` times in each sandbox, one run at a time, and prints the
cross-check table (``engine/analysis/crosscheck.py``: peak RAM, peak swap, pages swapped
in and out, uml against vm). Resumable: a run whose folder has its meta.json is not run
again, so rerunning the same command finishes what a stopped one left, and
``--minutes`` stops starting runs after that long (the table covers what is there).

Usage: python benchmarks/crosscheck.py [--out results-crosscheck] [--reps 2]
           [--sandboxes uml vm] [--minutes M] [--table-only] [--markdown]
       python benchmarks/crosscheck.py --guest-facts   (each guest's reclaim settings)
       python benchmarks/crosscheck.py --knobs   (one cell's swap traffic, each difference
                                                  of UML's set in turn in the referee)
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from engine.analysis import crosscheck  # noqa: E402
from engine.schedule.names import policy_id  # noqa: E402
from engine.units import parse_size  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NETWORKS = {"FaceNet": "face_full_conv", "SoS-AlexNet": "alexnet_sos"}
POLICIES = ["bulk", "linear", "partial:2", "deepeye"]
LIMITS = ["256M", "512M"]
SEED, COUNT, LENGTH = 35, 2, 5
# a UML run of these pipelines takes 1-2 min here, a TCG one about 6 (docs/sandboxes.md);
# a run standing still ends sooner, as the fidelity sweep's (TCG: 2 min, it is slower)
TIMEOUT_S = {"uml": 600, "vm": 1500}
STALL_S = {"uml": 60, "vm": 120}


def engine(*argv: str, check: bool = True) -> int:
    return subprocess.run([sys.executable, "-m", "engine", *argv], cwd=REPO, check=check,
                          stdout=subprocess.DEVNULL).returncode


def inputs(out: Path) -> list[Path]:
    """The zoo models, their split and the pipelines under ``out`` (made once)."""
    split = out / "split"
    for net, stem in NETWORKS.items():
        if not (split / f"{stem}.description.json").exists():
            engine("models", "--out", str(out / "models"), net)
            engine("split", str(out / "models" / f"{stem}.caffemodel"), "--out", str(split),
                   "--network", net)
    pipes = out / "pipelines"
    if not pipes.is_dir():
        engine("pipelines", "--split", str(split), "--out", str(pipes), "--count",
               str(COUNT), "--seed", str(SEED), "--length", str(LENGTH), str(LENGTH),
               "--arrival", "batch", "--networks", *NETWORKS, "--prefix", "x")
    return sorted(pipes.glob("x*.json"))


def run_folder(out: Path, sandbox: str, pipeline: Path, policy: str, limit: str,
               rep: int) -> Path:
    return (out / "runs" / sandbox / pipeline.stem / policy_id(policy) / limit
            / f"rep{rep}")


def run_all(out: Path, sandboxes: list[str], reps: int, minutes: float | None) -> None:
    """Every missing run, a repetition of everything before the next (so a stopped
    campaign has whole repetitions), one at a time; each run's time to stderr."""
    pipelines = inputs(out)
    start = time.monotonic()
    order = itertools.product(range(reps), pipelines, POLICIES, LIMITS, sandboxes)
    for rep, pipeline, policy, limit, sandbox in order:
        folder = run_folder(out, sandbox, pipeline, policy, limit, rep)
        if (folder / "meta.json").exists():
            continue
        if minutes is not None and time.monotonic() - start > minutes * 60:
            print(f"stopped after {minutes} min: rerun to resume", file=sys.stderr)
            return
        t = time.monotonic()
        # a run that ends OOM-killed, timed out or crashed is a result too (its folder
        # is counted in the table); one that left no record is said here
        rc = engine("run", "--pipeline", str(pipeline), "--split", str(out / "split"),
                    "--policy", policy, "--out", str(folder), "--limit", limit,
                    "--swap", "max", "--backend", sandbox, "--runtime", "caffe",
                    "--batch", "1", "--sample-hz", "20",
                    "--timeout", str(TIMEOUT_S[sandbox]),
                    "--stall-timeout", str(STALL_S[sandbox]), "--error-is-result",
                    "--force", check=False)
        print(f"{sandbox} {pipeline.stem} {policy} {limit} rep{rep}: "
              f"{time.monotonic() - t:.0f} s"
              + ("" if (folder / "meta.json").exists() else f", no record (exit {rc})"),
              file=sys.stderr)


# what each guest kernel reclaims and swaps by (read in a booted guest, --guest-facts)
GUEST_FACTS = ["/proc/sys/vm/page-cluster", "/proc/sys/vm/swappiness",
               "/proc/sys/vm/min_free_kbytes", "/proc/sys/vm/watermark_scale_factor",
               "/sys/kernel/mm/lru_gen/enabled", "/sys/kernel/mm/swap/vma_ra_enabled",
               "/sys/kernel/mm/transparent_hugepage/enabled"]
FACTS_SH = ("for f in " + " ".join(GUEST_FACTS) + "; do echo \"$f=$(cat $f 2>/dev/null"
            " || echo absent)\"; done; echo cpus=$(nproc);"
            # a rotational swap device turns VMA swap readahead off for the whole kernel
            " for q in /sys/block/*/queue/rotational; do echo \"$q=$(cat $q)\"; done;"
            " tail -n +2 /proc/swaps | awk '{print \"swap_\" $1 \"=\" $2 \" \" $3}';"
            " grep -E '^(MemTotal|MemFree):' /proc/meminfo | tr -s ' ' | sed 's/: /=/';"
            " awk '/^Node/{z=$4} $1==\"high\"{h[z]=$2}"
            " END{for(z in h) print \"zone_high_pages_\" z \"=\" h[z]}' /proc/zoneinfo")


def guest_facts(sandboxes: list[str]) -> None:
    """Boot each sandbox once (no limit) and print its memory-management settings: what
    the table's differences are explained by."""
    from engine.sandbox import run_command_in_sandbox

    facts = {}
    for sb in sandboxes:
        # under the smaller limit: the guest is sized as the cross-check runs' were
        res = run_command_in_sandbox(["sh", "-c", FACTS_SH], parse_size(LIMITS[0]), None,
                                     sandbox=sb, timeout_s=600)
        facts[sb] = dict(line.split("=", 1) for line in res["job_log"].splitlines()
                         if "=" in line)
        facts[sb]["kernel"] = res["sandbox"].get("guest_kernel", "?")
    keys = sorted({k for f in facts.values() for k in f})
    print("| setting | " + " | ".join(sandboxes) + " |\n|---|" + "---|" * len(sandboxes))
    for k in keys:
        print(f"| {k} | " + " | ".join(facts[sb].get(k, "absent") for sb in sandboxes) + " |")


# The referee's swap traffic against UML's on one cell (--knobs), with one of UML's
# differences at a time set in the referee: UML 7.2's build has no multi-generational LRU,
# its ubd swap disk is not rotational (so the kernel reads swap ahead along the faulting
# address range), it has one CPU, and the uml backend reads a blob's bytes through a small
# buffer copied in from user space (engine/caffe/wire.py)
KNOBS = {"as built": ":",
         "MGLRU off": "echo 0 > /sys/kernel/mm/lru_gen/enabled",
         "swap disk not rotational": "echo 0 > /sys/block/vda/queue/rotational",
         "one CPU": "echo 0 > /sys/devices/system/cpu/cpu1/online",
         "UML's copy-reads": "export EDGEPROF_UML_COPY_READS=1"}
# of the counters the guest's job records (engine/sandbox/job.py, JOB_KEYS)
KNOB_COUNTERS = ["pswpin", "pswpout", "swpin_zero", "swpout_zero", "workingset_refault_anon"]
KNOB_CELL = ("bulk", "256M")


def knobs(out: Path) -> None:
    """x000 under bulk at 256M: once in UML (the uml backend), then natively inside the
    referee's 256M cgroup once per KNOBS setting; each guest's counters over the run."""
    from engine.runner.meta import RunMeta
    from engine.sandbox import run_command_in_sandbox

    pipeline, (policy, limit) = inputs(out)[0], KNOB_CELL
    argv = ["run", "--pipeline", str(pipeline), "--split", str(out / "split"), "--policy",
            policy, "--runtime", "caffe", "--batch", "1", "--sample-hz", "20",
            "--error-is-result", "--force"]
    folder = out / "knobs" / "uml"
    engine(*argv, "--out", str(folder), "--limit", limit, "--swap", "max", "--backend", "uml")
    rows = {"uml, as built": (RunMeta.read(folder).sandbox or {}).get("vmstat_delta") or {}}
    for name, setting in KNOBS.items():
        # the guest's job records its exit code and its vmstat counters over the command
        sh = (f"{setting}; cd {REPO} && exec {sys.executable} -m engine {' '.join(argv)} "
              "--out /run/scratch/r --backend none > /dev/null 2>&1")
        res = run_command_in_sandbox(["sh", "-c", sh], parse_size(limit), None, sandbox="vm",
                                     timeout_s=TIMEOUT_S["vm"])
        facts = res["guest"] or {}
        if facts.get("exit_code") != 0:
            raise SystemExit(f"--knobs: the run under '{name}' failed in the guest (exit "
                             f"{facts.get('exit_code')}):\n" + res["console"][-2000:])
        rows[f"vm, {name}"] = facts["vmstat_delta"]
    print("| kernel, setting | " + " | ".join(KNOB_COUNTERS) + " |\n|---|"
          + "---|" * len(KNOB_COUNTERS))
    for name, counts in rows.items():
        print(f"| {name} | " + " | ".join(f"{counts.get(k, math.nan):,}"
                                           for k in KNOB_COUNTERS) + " |")


def records(out: Path) -> pd.DataFrame:
    folders = sorted(p.parent for p in (out / "runs").glob("*/*/*/*/rep*/meta.json"))
    return pd.DataFrame([crosscheck.run_record(f) for f in folders],
                        columns=crosscheck.RECORD_COLUMNS)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="results-crosscheck")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--sandboxes", nargs="+", default=list(crosscheck.SANDBOXES),
                        choices=crosscheck.SANDBOXES)
    parser.add_argument("--minutes", type=float, default=None,
                        help="start no run after this long (rerun to resume)")
    parser.add_argument("--table-only", action="store_true", help="run nothing")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--knobs", action="store_true",
                        help="only the referee's swap traffic on one cell, under each of "
                             "UML's differences in turn (about 30 min)")
    parser.add_argument("--guest-facts", action="store_true",
                        help="only boot each sandbox and print its memory settings")
    args = parser.parse_args()
    if args.guest_facts:
        guest_facts(args.sandboxes)
        return
    if args.knobs:
        knobs((REPO / args.out).resolve())
        return
    if args.reps < 1 or (args.minutes is not None and args.minutes <= 0):
        raise SystemExit("bad --reps or --minutes: give a repetition count >= 1 and a "
                         "positive number of minutes")
    out = (REPO / args.out).resolve()
    load_before = os.getloadavg()[0]
    if not args.table_only:
        run_all(out, args.sandboxes, args.reps, args.minutes)
    recs = records(out)
    if recs.empty:
        raise SystemExit(f"no runs under {out / 'runs'}: run without --table-only first")
    table = crosscheck.compare(recs)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()
    reps = {sb: sorted(recs.loc[recs["sandbox"] == sb, "rep"].dropna().unique().tolist())
            for sb in crosscheck.SANDBOXES}
    walls = {sb: recs.loc[recs["sandbox"] == sb, "wall_s"].median()
             for sb in crosscheck.SANDBOXES}
    per_sandbox = ", ".join(
        f"{sb}: {(recs['sandbox'] == sb).sum()} runs, reps {reps[sb]}, median wall "
        f"{walls[sb]:.0f} s" for sb in crosscheck.SANDBOXES)
    head = (f"{len(recs)} runs ({per_sandbox}); host load average at the runs' starts "
            f"{recs['host_load1'].min():.1f}-{recs['host_load1'].max():.1f}, "
            f"{load_before:.2f} at this command's; table at commit {commit}")
    agree = crosscheck.agreement(table)
    summary = "; ".join(f"{crosscheck.METRICS[m][0].split(' (')[0]} within "
                        f"{crosscheck.METRICS[m][2]:.0%}: {k} of {n} cells"
                        for m, (k, n) in agree.items())
    if args.markdown:
        print(f"<!-- generated by: python benchmarks/crosscheck.py --markdown ({head}) -->\n")
        print(crosscheck.markdown(table))
        print(f"\n{summary}.")
    else:
        print(head)
        print(table.to_string())
        print(summary)


if __name__ == "__main__":
    main()

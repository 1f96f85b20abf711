"""``python -m engine calibrate``: a device's per-page swap costs, measured.

For a user who can limit native runs (a delegated cgroup v2 subtree, a systemd user
manager, or a sandbox): one network run layer by layer (``linear``), unconstrained
(``--backend none``) and under a limit that makes it swap, a few repetitions each; then
the same fit the model makes of a sandbox's limited runs (``engine.model.fit.fit_swap_cost``):
each task's time beyond the same task unconstrained against the pages it swapped in and
out and its other major faults, least squares through the origin. The result is a device
file ``advise --swap-cost`` takes (``engine.model.devices``).
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd

from engine.errors import EdgeprofError
from engine.files import write_text_atomic
from engine.model.devices import Device
from engine.model.fit import fit_swap_cost

log = logging.getLogger(__name__)

FREE, LIMITED = "free", "limited"


def fit_device(folders: list[Path], name: str) -> Device:
    """The per-page costs of the run folders ``<work>/free/repN`` and
    ``<work>/limited/repN`` (one pipeline, one policy); EdgeprofError naming what is
    missing (an unenforced limit, no swap counters, no swapping)."""
    from engine.analysis.tidy import tidy_run

    tidy = [tidy_run(f) for f in folders]
    runs = pd.concat([t["runs"] for t in tidy], ignore_index=True)
    tasks = pd.concat([t["tasks"] for t in tidy], ignore_index=True)
    limited = runs[runs["limit"] != "none"]
    if limited.empty:
        raise EdgeprofError("calibrate: no limited run to fit the costs from")
    unenforced = limited[~limited["limit_enforced"].astype(bool)]
    if len(unenforced):
        raise EdgeprofError(f"calibrate: the {unenforced['backend'].iloc[0]} backend did not "
                            f"enforce the limit; give a --backend that can (cgroup2 with "
                            f"EDGEPROF_CGROUP_ROOT, systemd, vm)")
    if (limited["termination"] != "ok").all():
        raise EdgeprofError("calibrate: every limited run was killed "
                            f"({limited['termination'].iloc[0]}); raise --limit")
    cost = fit_swap_cost(runs, tasks.assign(duration_s=tasks["duration_ns"] / 1e9))
    if cost is None:
        raise EdgeprofError("calibrate: the runs' windows measured no pages swapped in and "
                            "out (the guest's /proc/vmstat or the cgroup's memory.stat "
                            "pswpin/pswpout); use a backend or kernel that reports them")
    if cost.per_page_in_s is None or cost.per_page_out_s is None:  # no pages moved so
        raise EdgeprofError(f"calibrate: the cost per page is unknown ({cost.unknown_why}); "
                            f"lower --limit, with swap allowed")
    if cost.per_page_in_s == 0 and cost.per_page_out_s == 0:
        raise EdgeprofError("calibrate: no task's time grew with its pages swapped (did the "
                            "limit make it swap?); lower --limit")
    facts = limited.iloc[0]
    source = (f"python -m engine calibrate, {datetime.date.today().isoformat()}: "
              f"{facts['networks']} under {facts['limit']} ({facts['backend']} backend"
              f"{', emulated' if bool(facts['emulated']) else ''}), {len(limited)} limited "
              f"run(s), {cost.n} task windows, counters {cost.source}")
    return Device(name, cost.per_page_in_s, cost.per_page_out_s, source, cost.page_bytes)


def _run(args: list[str]) -> None:
    """One ``engine run``, which dies with this process; interrupted here (a signal
    unwinding, Ctrl-C), it is ended with SIGTERM first, so it removes what it wrote."""
    from engine.procs import preexec

    proc = subprocess.Popen([sys.executable, "-m", "engine", "run", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=preexec())
    try:
        _, stderr = proc.communicate()
    except BaseException:
        proc.send_signal(signal.SIGTERM)
        proc.communicate()
        raise
    if proc.returncode != 0:
        last = (stderr.strip().splitlines() or ["failed"])[-1]
        raise EdgeprofError(f"calibrate: a run failed: {last}")


def calibrate(models_dir: str, network: str, limit: str, backend: str, repetitions: int,
              work: Path, out: Path, name: str, policy: str = "linear") -> Device:
    """Run ``network`` unconstrained and under ``limit`` ``repetitions`` times each in
    ``work``, fit its per-page costs and write the device file ``out``."""
    from engine.caffe.splitter import Description, description_index

    if backend in ("none", "inherit"):
        raise EdgeprofError(f"calibrate: --backend {backend} sets no limit of its own; give "
                            f"cgroup2, cgroup1, systemd, vm or auto")
    index = description_index(models_dir)
    if network not in index:
        raise EdgeprofError(f"calibrate: no split model of {network} in {models_dir} "
                            f"(available: {', '.join(sorted(index)) or 'none'})")
    desc = Description.load_checked(index[network])
    created = not work.exists()
    work.mkdir(parents=True, exist_ok=True)
    try:
        device = _measure(models_dir, desc, limit, backend, repetitions, work, name, policy)
    except BaseException:
        if created:  # a refused backend or limit leaves no folder behind
            shutil.rmtree(work, ignore_errors=True)
        raise
    write_text_atomic(out, json.dumps({**device.__dict__}, indent=1) + "\n")
    return device


def _measure(models_dir: str, desc, limit: str, backend: str, repetitions: int, work: Path,
             name: str, policy: str) -> Device:
    from engine.schedule.pipelines import Arrival, Pipeline, save_pipeline

    pipeline = work / "calibrate.json"
    save_pipeline(Pipeline("calibrate", [Arrival(0.0, [desc.network])],
                           param_bytes=desc.param_bytes), pipeline)
    folders = []
    for rep in range(repetitions):
        # the limited run first: a backend that cannot set the limit is refused before
        # anything is measured
        for kind, flags in ((LIMITED, ["--backend", backend, "--limit", limit,
                                       "--swap", "max"]),
                            (FREE, ["--backend", "none"])):
            folder = work / kind / f"rep{rep}"
            log.info(f"calibrate: {kind} run {rep + 1}/{repetitions}")
            _run(["--pipeline", os.fspath(pipeline), "--policy", policy, "--split",
                  models_dir, "--out", os.fspath(folder), "--batch", "1", "--seed", str(rep),
                  "--force", *flags])
            folders.append(folder)
    return fit_device(folders, name)

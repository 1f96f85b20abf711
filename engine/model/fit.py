"""The model's fit from the tidy tables (its parameters and file: ``engine.model.params``).

Per execution mode (native, or the sandbox that ran the runs: never mixed) and runtime
(lean, caffe: ``engine.runtime``), from the runs that finished:

- **time**, SyNERGY-style: per layer type, EXEC seconds = a + a non-negative linear
  combination of the layer's features (``EXEC_FEATURES``): MACs, and for the layers
  whose batch-1 cost is moving bytes rather than multiplying (a GEMV reads every weight
  once; im2col copies its input into the scratch matrix) their weight and scratch bytes;
  FLOPs for the element-wise layers; the elements copied for Concat. LOAD seconds = a +
  b x weight bytes, for a layer's partial file and for a whole caffemodel (bulk) apart;
  INIT seconds = a + b x input bytes; a whole forward pass (bulk EXEC) = a + b x the sum
  of its layers' predictions. A whole-network fit with too few networks for a slope
  borrows it (``borrow_slope``: the layer LOADs' per byte, slope 1 on the layers' sum).
  Least squares on the median duration of each (network, layer, task) over the
  unconstrained runs, from tasks that ran alone (``overlap == 0``: a task that shared
  the CPU with another took longer than its work); coefficients kept non-negative by an
  exact non-negative least squares (``fit_linear``).
- **dispatch gap**: the mean time between a task's end and the next one's start on a
  single worker (recording the task, releasing its dependants).
- **start RSS**: the runtime's resident memory (interpreter, numpy, the engine, the
  probes) at the first task's start, before any network exists: reported beside the
  baseline the simulator uses, which ``engine.model.train`` measures from the runs'
  peaks (it is also what the allocator keeps of freed blocks).
- **CPUs** the measured child had (pinned: one).
- **swap cost** under a limit: the seconds a task takes beyond the same task in the
  same pipeline's unconstrained run (same policy, repetition and mode), against the
  pages it swapped in and out (the guest's pswpin/pswpout, or the cgroup's) and its
  other major faults (file pages read again), least squares through the origin; only
  from limited runs, so a mode without any has none.
- **duration spread**: how much a task's duration varies between repetitions of the
  multi-worker runs (a robust sd of log(duration / its median)), from which the
  evaluation draws orderings of concurrent workers.
- **domain**: the networks, layer types, policies, batches and limits it saw, and which
  parts were fitted with an intercept alone (``params.Domain``).

The batch is an input: a mode's runs may have run at several (``run.batch`` a list), and
each task's features are taken at its run's batch (``with_batches``), so one fit
predicts any batch.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from engine.caffe.splitter import Description
from engine.errors import EdgeprofError
from engine.model.params import (
    DEFAULT_FEATURES,
    Domain,
    Linear,
    Model,
    ModeModel,
    SwapCost,
    batch_order,
    batch_value,
    exec_features,
    exec_layer_s,
    mode_key,
    network_features,
)
from engine.runtime import DEFAULT_RUNTIME

# Swap counters per task window, best first: (pages in, pages out); major faults.
SWAP_COLUMNS = [("guest_pswpin_delta", "guest_pswpout_delta"),
                ("cg_pswpin_delta", "cg_pswpout_delta")]
MAJOR_FAULT_COLUMNS = ["guest_pgmajfault_delta", "cg_pgmajfault_delta"]


def fit_linear(x: pd.DataFrame, y: pd.Series | np.ndarray, intercept: bool = True
               ) -> Linear | None:
    """Least squares of y on the columns of x (and an intercept), every coefficient kept
    non-negative: an exact NNLS (``scipy.optimize.nnls``, Lawson-Hanson) on the columns
    scaled to a largest value of 1, the intercept a column of ones under the same
    constraint (a negative one comes out 0). A feature whose coefficient comes out 0 is
    left out of ``coef``. A fit keeps at least two more points than parameters, taking
    the columns in their order; with no feature left, the median of y (without an
    intercept: no cost). None without points."""
    y = np.asarray(y, dtype=float)
    keep = np.isfinite(y) & np.isfinite(x.to_numpy(dtype=float)).all(axis=1)
    x, y = x[keep], y[keep]
    if len(y) == 0:
        return None
    cols = [c for c in x.columns if x[c].nunique() >= 2]
    cols = cols[:max(len(y) - 2 - int(intercept), 0)]
    if cols:
        a = x[cols].to_numpy(dtype=float)
        if intercept:
            a = np.column_stack([np.ones(len(y)), a])
        # scaled so that bytes (1e8) and an intercept (1) weigh alike in the solver's tolerance
        scale = np.abs(a).max(axis=0)
        scale[scale == 0] = 1.0
        scaled, _ = nnls(a / scale, y)
        sol = scaled / scale
        coefs = sol[1:] if intercept else sol
        if (coefs > 0).any():  # nnls leaves an unused feature at exactly 0
            resid = y - a @ sol
            ss = float(((y - y.mean()) ** 2).sum())
            r2 = 1 - float((resid ** 2).sum()) / ss if ss > 0 else None
            return Linear(float(sol[0]) if intercept else 0.0,
                          {c: float(v) for c, v in zip(cols, coefs) if v > 0}, len(y), r2)
    return Linear(float(np.median(y)) if intercept else 0.0, {}, len(y), None)


def execution_modes(runs: pd.DataFrame) -> pd.Series:
    """Each run's execution mode: ``native``, or the sandbox that ran it (its ``sandbox``
    column where the tables have one, else its backend: ``vm``)."""
    sandbox = pd.Series("emulated", index=runs.index)
    for column in ("backend", "sandbox"):  # the sandbox column where a run has one
        if column in runs:
            sandbox = runs[column].where(runs[column].notna(), sandbox)
    emulated = runs["emulated"].astype(bool).to_numpy()
    return pd.Series(np.where(emulated, sandbox.astype(str), "native"), index=runs.index)


def runtimes(runs: pd.DataFrame) -> pd.Series:
    """Each run's runtime (tables written before runs had one ran the lean runtime)."""
    if "runtime" not in runs:
        return pd.Series(DEFAULT_RUNTIME, index=runs.index)
    return runs["runtime"].fillna(DEFAULT_RUNTIME).astype(str)


def mode_keys(runs: pd.DataFrame) -> pd.Series:
    """Each run's model key (``params.mode_key``): its execution mode and runtime."""
    return execution_modes(runs) + "/" + runtimes(runs)


def run_batches(runs: pd.DataFrame) -> pd.Series:
    """Each run's batch, a nullable integer: NA where every network ran at its deploy
    batch (``run.batch: null``, or tables written before runs recorded it)."""
    if "batch" not in runs:
        return pd.Series(pd.NA, index=runs.index, dtype="Int64")
    return runs["batch"].astype("Int64")


def at_batch(runs: pd.DataFrame, batch: object) -> pd.Series:
    """Which of ``runs`` ran at ``batch`` (None, NaN or NA: the deploy batch)."""
    b, want = run_batches(runs), batch_value(batch)
    return b.isna() if want is None else (b == want).fillna(False).astype(bool)


def fitted_batches(runs: pd.DataFrame) -> list[int | None]:
    """The batches ``runs`` ran at, ascending, the deploy batch (None) first."""
    values = {batch_value(b) for b in run_batches(runs).unique()}
    return sorted(values, key=batch_order)


def with_batches(tasks: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """``tasks`` with each one's run's batch (``run_batches``) as its ``batch``."""
    of_run = pd.Series(run_batches(runs).to_numpy(), index=runs["run_id"].to_numpy())
    return tasks.assign(batch=pd.array(tasks["run_id"].map(of_run), dtype="Int64"))


FEATURE_COLUMNS = ("macs", "flops", "weight_bytes", "scratch_bytes", "elements", "bytes",
                   "input_bytes")


def task_features(tasks: pd.DataFrame, descriptions: dict[str, Description]
                  ) -> pd.DataFrame:
    """Each task row (with its run's ``batch``: ``with_batches``) with its layer type
    (``ltype``) and features at that batch: an EXEC its layer's (``layer_features``), a
    LOAD the weight ``bytes`` it reads (the whole network's for bulk), an INIT its
    ``input_bytes``."""
    batches = [batch_value(b) for b in tasks["batch"]]
    feats = {(net, b): network_features(descriptions[net], b)
             for net, b in set(zip(tasks["network"], batches))}
    cols = {c: np.zeros(len(tasks)) for c in FEATURE_COLUMNS}
    types = np.empty(len(tasks), dtype=object)
    rows = zip(tasks["network"].to_numpy(), batches, tasks["layer"].astype(int).to_numpy(),
               tasks["task_type"].to_numpy())
    for i, (net, b, li, kind) in enumerate(rows):
        f = feats[net, b]
        types[i] = f.types[li] if li >= 0 else ""
        if kind == "INIT":
            cols["input_bytes"][i] = f.input_bytes
        elif kind == "LOAD":
            cols["bytes"][i] = f.weight_bytes[li] if li >= 0 else f.total_weight_bytes
        elif li >= 0:
            for c, v in f.layers[li].items():
                cols[c][i] = v
    return tasks.assign(ltype=types, **cols)


def solo_medians(tasks: pd.DataFrame) -> pd.DataFrame:
    """Median duration (s) per (network, batch, layer, task type) over the tasks that ran
    alone, with the task's features."""
    alone = tasks[tasks["overlap"].fillna(0) == 0]
    agg = {"duration_s": ("duration_s", "median"), "n": ("duration_s", "size"),
           **{c: (c, "first") for c in FEATURE_COLUMNS}}
    return (alone.groupby(["network", "batch", "layer", "task_type", "ltype"], dropna=False)
            .agg(**agg).reset_index())


def dispatch_gap(runs: pd.DataFrame, tasks: pd.DataFrame) -> float:
    """The mean time a single worker takes from one task's end to its next task's start
    (INITs left out: they may wait for their network's arrival). The mean, not the
    median: a makespan adds the gaps up, and on a busy host their tail (a dispatcher
    thread woken late) is what it pays (three runs under a load of 10 on 2 CPUs: median
    25 us, mean 0.8 ms)."""
    single = runs.loc[runs["workers"] == 1, "run_id"]
    t = tasks[tasks["run_id"].isin(single)].sort_values(["run_id", "start_ns"])
    if t.empty:
        return 0.0
    gap = t["start_ns"] - t.groupby("run_id")["end_ns"].shift()
    gap = gap[(t["task_type"] != "INIT") & gap.notna()]
    return float(max(gap.mean() / 1e9, 0.0)) if len(gap) else 0.0


def _start_rss(tasks: pd.DataFrame) -> tuple[float, float]:
    """Median over runs of the RSS at the first task's start, and of its file-backed
    part (libraries: reclaimable, so a limit squeezes them before it swaps)."""
    if "proc_rss_bytes" not in tasks or tasks["proc_rss_bytes"].isna().all():
        return 0.0, 0.0
    t = tasks.dropna(subset=["proc_rss_bytes", "proc_rss_delta_bytes"])
    first = t.loc[t.groupby("run_id")["start_ns"].idxmin()]
    rss = float(np.median(first["proc_rss_bytes"] - first["proc_rss_delta_bytes"]))
    files = first["proc_rss_file_bytes"].dropna() if "proc_rss_file_bytes" in first else []
    return rss, float(min(np.median(files), rss)) if len(files) else 0.0


def fit_swap_cost(runs: pd.DataFrame, tasks: pd.DataFrame) -> SwapCost | None:
    """The per-page costs (module docstring: swap cost) from the finished limited runs
    of ``runs`` and the same pipelines' unconstrained runs, ``tasks`` carrying their
    ``duration_s``; None without limited runs or counters."""
    limited = runs[(runs["limit"] != "none") & (runs["termination"] == "ok")]
    free = runs[(runs["limit"] == "none") & (runs["termination"] == "ok")]
    if limited.empty:
        return None
    base_tasks = tasks[tasks["run_id"].isin(free["run_id"])]
    cols = next((c for c in SWAP_COLUMNS if c[0] in tasks and tasks[c[0]].notna().any()),
                None)
    if cols is None:
        return None
    tasks = with_batches(tasks, runs)  # a limited task pairs with its own batch's
    key = ["pipeline", "policy", "batch", "rep", "task_id"]
    lim = tasks[tasks["run_id"].isin(limited["run_id"]) & (tasks["overlap"].fillna(0) == 0)]
    base = base_tasks[base_tasks["overlap"].fillna(0) == 0][key + ["duration_s"]]
    pairs = lim.merge(base.rename(columns={"duration_s": "base_s"}), on=key)
    pairs = pairs.dropna(subset=[*cols, "base_s"])
    if pairs.empty:
        return None
    excess = pairs["duration_s"] - pairs["base_s"]
    faults = next((c for c in MAJOR_FAULT_COLUMNS if c in pairs and pairs[c].notna().all()),
                  None)
    x = pairs[list(cols)].set_axis(["in", "out"], axis=1)
    if faults is not None:  # beyond the pages swapped in: file pages read again
        x["faults"] = (pairs[faults] - pairs[cols[0]]).clip(lower=0)
    line = fit_linear(x, excess, intercept=False)
    # a least-squares slope over a column of zeros is 0 by default, not a measurement:
    # no page moved that way, so its cost is unknown (a run with swap 0 swaps nothing)
    unmoved = [c for c in x.columns if not (x[c] > 0).any()]
    names = {"in": "in", "out": "out", "faults": "major faults"}
    why = (f"the {len(pairs)} limited task windows it was fitted on moved no page "
           f"{' or '.join(names[c] for c in unmoved)} (runs without swap traffic, e.g. "
           f"run.swap 0)" if unmoved else "")
    return SwapCost(*(None if c in unmoved else line.coef.get(c, 0.0)
                      for c in ("in", "out", "faults")), len(pairs),
                    "/".join([*cols, *([faults] if faults else [])]),
                    _page_bytes(limited[limited["run_id"].isin(pairs["run_id"])]), why)


def _page_bytes(runs: pd.DataFrame) -> int:
    """The one page size the runs' counters count in (the runs table's ``page_bytes``)."""
    sizes = runs["page_bytes"]
    if sizes.isna().any():
        raise EdgeprofError("runs without a recorded page size cannot give a swap cost per "
                            "byte; rerun them with this edgeprof")
    if sizes.nunique() != 1:
        raise EdgeprofError(f"the limited runs counted pages of "
                            f"{', '.join(map(str, sorted(sizes.astype(int).unique())))} bytes; "
                            f"fit the machines' runs apart")
    return int(sizes.iloc[0])


def duration_sigma(runs: pd.DataFrame, tasks: pd.DataFrame) -> float:
    """The spread of log(duration / its median) of the tasks of the finished
    unconstrained multi-worker runs, each task against the same task of the other
    repetitions (same pipeline, policy, instance, layer and task type), as a robust sd
    (1.4826 x the median absolute deviation): a task the host delayed tenfold once is
    an outlier, not the typical jitter that reorders concurrent workers (under a load of
    10 on 2 CPUs the plain sd was 0.87, this 0.12); 0 without such runs."""
    multi = runs[(runs["workers"] > 1) & (runs["limit"] == "none")
                 & (runs["termination"] == "ok")]
    t = tasks[tasks["run_id"].isin(multi["run_id"]) & (tasks["duration_ns"] > 0)]
    if t.empty:
        return 0.0
    t = with_batches(t, multi)
    key = ["pipeline", "policy", "batch", "instance", "layer", "task_type"]
    logd = np.log(t["duration_ns"].astype(float))
    groups = logd.groupby([t[k] for k in key], dropna=False)  # NA: the deploy batch
    dev = (logd - groups.transform("median"))[groups.transform("size") >= 2]
    return round(float(1.4826 * dev.abs().median()), 4) if len(dev) >= 2 else 0.0


def borrow_slope(line: Linear | None, rows: pd.DataFrame, feature: str,
                 slope: float | None) -> Linear | None:
    """A fit too short of points for a slope of its own (an intercept alone: bulk's LOAD
    of a whole caffemodel when two networks ran bulk, the same seconds for 87 and 262 MB)
    takes ``slope`` from where the same work was fitted (a layer's LOAD: the same bytes
    read; a forward pass: the sum of its layers, slope 1) and keeps its own intercept, the
    median of what the slope leaves. Marked ``r2 = None``, ``n`` its own points."""
    if line is None or line.coef or not slope:
        return line
    rest = rows["duration_s"] - slope * rows[feature]
    return Linear(max(float(rest.median()), 0.0), {feature: slope}, line.n, None)


def intercept_only(model: ModeModel) -> list[str]:
    """The parts of the time model fitted with an intercept alone."""
    parts = {"init": model.init, "load_layer": model.load_layer,
             "load_whole": model.load_whole, "exec_whole": model.exec_whole,
             **{f"exec_types.{t}": line for t, line in model.exec_types.items()}}
    return sorted(name for name, line in parts.items() if line is not None and not line.coef)


def fit_mode(runs: pd.DataFrame, tasks: pd.DataFrame,
             descriptions: dict[str, Description], mode: str,
             runtime: str = DEFAULT_RUNTIME) -> ModeModel:
    """The model of one execution mode and runtime from its runs and their tasks."""
    ok = runs[runs["termination"] == "ok"]
    free = ok[ok["limit"] == "none"]
    if free.empty:
        raise EdgeprofError(f"no finished unconstrained {mode} run to fit a model on")
    tasks = tasks[tasks["run_id"].isin(ok["run_id"])]
    tasks = task_features(with_batches(tasks, ok).assign(
        duration_s=tasks["duration_ns"] / 1e9), descriptions)
    base_tasks = tasks[tasks["run_id"].isin(free["run_id"])]
    med = solo_medians(base_tasks)

    def linear(rows: pd.DataFrame, features: tuple[str, ...]) -> Linear | None:
        return fit_linear(rows[list(features)], rows["duration_s"])

    layer = med["layer"] >= 0
    init = linear(med[med["task_type"] == "INIT"], ("input_bytes",))
    load_layer = linear(med[(med["task_type"] == "LOAD") & layer], ("bytes",))
    wholes = med[(med["task_type"] == "LOAD") & ~layer]
    load_whole = borrow_slope(linear(wholes, ("bytes",)), wholes, "bytes",
                              (load_layer.coef.get("bytes") if load_layer else None))
    execs = med[(med["task_type"] == "EXEC") & layer]
    exec_types = {t: linear(rows, exec_features(t)) for t, rows in execs.groupby("ltype")}
    if init is None or load_layer is None or not exec_types:
        raise EdgeprofError(f"the {mode} runs have no layer-by-layer tasks that ran alone "
                            f"(INIT, LOAD, EXEC): add a single-worker policy such as linear")
    start_rss, start_file = _start_rss(base_tasks)
    cpus = float(ok["child_cpus"].median()) if ok["child_cpus"].notna().any() else 1.0
    model = ModeModel(
        mode=mode, start_rss_bytes=start_rss, baseline_bytes=start_rss,
        cpus=cpus, parallel_cpus=cpus, baseline_file_bytes=start_file,
        gap_s=dispatch_gap(free, base_tasks), init=init, load_layer=load_layer,
        load_whole=load_whole, exec_types=exec_types,
        exec_any=linear(execs, DEFAULT_FEATURES),
        exec_whole=None, swap=None, runs=len(ok),
        pipelines=sorted(ok["pipeline"].astype(str).unique()), batches=fitted_batches(ok),
        runtime=runtime, duration_sigma=duration_sigma(ok, tasks))
    whole = med[(med["task_type"] == "EXEC") & ~layer]
    if not whole.empty:
        summed = []  # each forward pass's layers' predictions, at its batch
        for net, batch in zip(whole["network"], whole["batch"]):
            f = network_features(descriptions[net], batch_value(batch))
            summed.append(sum(exec_layer_s(model, f, i) for i in range(len(f.types))))
        x = pd.DataFrame({"layers_s": summed, "duration_s": whole["duration_s"].to_numpy()})
        model.exec_whole = borrow_slope(fit_linear(x[["layers_s"]], x["duration_s"]), x,
                                        "layers_s", 1.0)
    model.swap = fit_swap_cost(runs, tasks)
    limited = ok[ok["limit"] != "none"]
    model.domain = Domain(
        networks=sorted(set(ok["networks"].str.split().explode())),
        layer_types=sorted(exec_types), policies=sorted(ok["policy"].unique()),
        batches=model.batches,
        limits=list(limited.sort_values("limit_bytes")["limit"].unique()),
        pipelines=model.pipelines, intercept_only=intercept_only(model))
    return model


def fit(runs: pd.DataFrame, tasks: pd.DataFrame, descriptions: dict[str, Description],
        policies: list[str] | None = None) -> Model:
    """One ``ModeModel`` per execution mode and runtime found in ``runs`` that has what
    a fit needs (one that has not is named in ``unfitted`` with the reason); limits the
    backend could not enforce are left out (they would count as unconstrained time under
    a label)."""
    runs = runs[runs["limit_enforced"].astype(bool) | (runs["limit"] == "none")]
    modes, unfitted = {}, {}
    for (mode, runtime), part in runs.groupby([execution_modes(runs), runtimes(runs)]):
        name = mode_key(mode, runtime)
        try:
            modes[name] = fit_mode(part, tasks[tasks["run_id"].isin(part["run_id"])],
                                   descriptions, mode, runtime)
        except EdgeprofError as exc:
            unfitted[name] = str(exc)
    return Model(modes, policies or sorted(runs["policy"].unique()),
                 {"runs": int(len(runs)),
                  "pipelines": sorted(runs["pipeline"].astype(str).unique()),
                  **run_identities(runs)}, unfitted)


def pipeline_content(networks: str) -> str:
    """What makes two pipelines one for the model: their networks in any order (the
    runs' ``networks`` column). The cross-validation holds such twins out together and
    the held-out seed leaves out a training pipeline's twin: a copy of a training
    pipeline under another name or file is no test of generalisation."""
    return " ".join(sorted(str(networks).split()))


def run_identities(runs: pd.DataFrame) -> dict:
    """What the runs are, whatever a read named them (``read_tables`` prefixes several
    campaigns' names): each run's record digest and each pipeline file's SHA-256, where
    the tables carry them, and per mode the content of each pipeline
    (``pipeline_content``). A held-out check compares these, never names."""
    out: dict = {}
    for column, key in (("record_digest", "record_digests"),
                        ("pipeline_sha256", "pipeline_sha256s")):
        if column in runs:
            out[key] = sorted(runs[column].dropna().astype(str).unique())
    contents = runs["networks"].map(pipeline_content)
    out["pipeline_contents"] = {str(key): sorted(part.unique())
                                for key, part in contents.groupby(mode_keys(runs))}
    return out

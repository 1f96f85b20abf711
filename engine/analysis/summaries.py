"""The campaign's summaries of its runs table: speed-up over Bulk and slowdown under the
limit per pair of runs, medians with 95 % CIs over repetitions (per pipeline and per size
bin), the noise floor, the probes' overhead, and whether runs computed the same outputs.
"""

from __future__ import annotations

import pandas as pd

from engine.analysis.terminations import endings

# Runs compared for the speed-up: same pipeline, repetition and (enforced) limit, in the
# same execution mode (a native run is never paired with an emulated one), at one batch.
SPEEDUP_KEY = ["pipeline", "limit", "limit_enforced", "emulated", "sandbox", "runtime", "batch",
               "rep"]
# ... and for the slowdown under a limit: the same policy unconstrained, same mode.
SLOWDOWN_KEY = ["pipeline", "policy", "emulated", "sandbox", "runtime", "batch", "rep"]


def _speedup_reason(row: pd.Series) -> str:
    if row["termination"] != "ok":
        own = f"{row['policy']} ended '{row['termination']}'"
        # Bulk's end too where it also ended early (twenty-eighth held-out pass L3)
        bulk = row["bulk_termination"]
        return (f"{own}; bulk ended '{bulk}'" if row["policy"] != "bulk"
                and isinstance(bulk, str) and bulk != "ok" else own)
    if pd.isna(row["bulk_termination"]):
        return "bulk limit enforced differently" if row["bulk_elsewhere"] else "no bulk run"
    if row["bulk_termination"] != "ok":
        return f"bulk ended '{row['bulk_termination']}'"
    return ""


def _slowdown_reason(row: pd.Series) -> str:
    if row["limit"] == "none":
        return ""
    if row["termination"] != "ok":
        return f"{row['policy']} ended '{row['termination']}'"
    if pd.isna(row["unconstrained_termination"]):
        return "no unconstrained run"
    if row["unconstrained_termination"] != "ok":
        return f"unconstrained ended '{row['unconstrained_termination']}'"
    return ""


def with_cell_keys(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its ``runtime``, ``sandbox`` and ``batch`` columns; tables written
    before runs had them ran the lean runtime, emulated ones in the qemu guest; a table
    without a batch says nothing of it (NA, as each network's deploy batch)."""
    if df.empty:
        return df
    if "runtime" not in df:
        df = df.assign(runtime="lean")
    if "sandbox" not in df:
        df = df.assign(sandbox=df["emulated"].map({True: "vm", False: "none"}))
    if "batch" not in df:
        df = df.assign(batch=pd.array([pd.NA] * len(df), dtype="Int64"))
    return df


def speedup_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per pipeline x limit x repetition x policy (one pair per repetition): makespan,
    speed-up over Bulk (bulk makespan / policy makespan, the two runs of one interleaved
    block) and slowdown under the limit (makespan / the same policy's unconstrained
    makespan in the same repetition and execution mode). NaN, with the reason, when a run
    of the pair did not finish."""
    runs = with_cell_keys(runs)
    cols = SPEEDUP_KEY + ["size_bin", "n_networks", "param_bytes", "limit_bytes", "policy",
                          "policy_family", "workers", "termination", "makespan_s"]
    extra = ["bulk_makespan_s", "bulk_termination", "speedup", "reason",
             "unconstrained_makespan_s", "unconstrained_termination", "slowdown",
             "slowdown_reason"]
    if runs.empty:
        return pd.DataFrame(columns=cols + extra)
    bulk = runs.loc[runs["policy"] == "bulk", SPEEDUP_KEY + ["makespan_s", "termination"]]
    bulk = bulk.rename(columns={"makespan_s": "bulk_makespan_s",
                                "termination": "bulk_termination"})
    out = runs[cols].merge(bulk, on=SPEEDUP_KEY, how="left")
    out["speedup"] = out["bulk_makespan_s"] / out["makespan_s"]
    # a bulk run of the same block whose limit was enforced differently (under inherit)
    loose = [k for k in SPEEDUP_KEY if k != "limit_enforced"]
    any_bulk = runs.loc[runs["policy"] == "bulk", loose].drop_duplicates().assign(
        bulk_elsewhere=True)
    out = out.merge(any_bulk, on=loose, how="left")
    out["bulk_elsewhere"] = out["bulk_elsewhere"].eq(True)
    out["reason"] = out.apply(_speedup_reason, axis=1)
    base = runs.loc[runs["limit"] == "none", SLOWDOWN_KEY + ["makespan_s", "termination"]]
    base = base.rename(columns={"makespan_s": "unconstrained_makespan_s",
                                "termination": "unconstrained_termination"})
    out = out.merge(base, on=SLOWDOWN_KEY, how="left")
    out["slowdown"] = out["makespan_s"] / out["unconstrained_makespan_s"]
    out["slowdown_reason"] = out.apply(_slowdown_reason, axis=1)
    out = out.drop(columns="bulk_elsewhere")
    return out.sort_values(SPEEDUP_KEY + ["policy"], ignore_index=True)


# What the summaries aggregate over repetitions: times over the finished runs only (a
# killed run's time is censored: counted in runs_not_ok and named on the figures),
# memory over every run that measured it (an OOM-killed run's peak is real data, at
# the limit; leaving it out would bias the peaks down).
TIME_METRICS = ["makespan_s", "wall_s", "cpu_s"]
MEMORY_METRICS = ["peak_rss_bytes", "mean_rss_bytes", "peak_swap_bytes", "mean_swap_bytes",
                  "hwm_rss_bytes", "cg_window_peak_bytes", "cg_window_swap_peak_bytes"]
# A cell: one policy on one pipeline (or size bin) under one limit, in one execution mode.
CELL = ["emulated", "sandbox", "runtime", "batch", "limit", "limit_enforced", "size_bin",
        "policy"]


def _levels(df: pd.DataFrame, value: str, prefix: str) -> pd.DataFrame:
    """``stats.summarize`` per pipeline (over its repetitions) and per size bin (over its
    pipelines and their repetitions), stacked with a ``level`` column."""
    from engine.analysis.stats import ci_scope, summarize

    per_pipeline = summarize(df, CELL + ["pipeline"], value, prefix=prefix)
    per_bin = summarize(df, CELL, value, cluster="pipeline", prefix=prefix)
    per_bin["pipeline"] = ""
    # what a size bin's CI is about: pipelines of that size, or only the bin's own
    k = (df.dropna(subset=[value]).groupby(CELL, dropna=False)["pipeline"].nunique()
         .rename("k").reset_index())
    per_bin = per_bin.merge(k, on=CELL, how="left")
    per_bin[f"{prefix}_ci_scope"] = per_bin["k"].fillna(0).astype(int).map(ci_scope)
    per_bin = per_bin.drop(columns="k")
    return pd.concat([per_pipeline.assign(level="pipeline"), per_bin.assign(level="size_bin")],
                     ignore_index=True)


def _count_levels(df: pd.DataFrame, **agg: tuple) -> pd.DataFrame:
    """``df.groupby(...).agg(**agg)`` per pipeline and per size bin, stacked like
    ``_levels`` (a size bin's pipeline is "")."""
    parts = [df.groupby(CELL + (["pipeline"] if level == "pipeline" else []), dropna=False)
             .agg(**agg).reset_index()
             .assign(level=level, **({} if level == "pipeline" else {"pipeline": ""}))
             for level in ("pipeline", "size_bin")]
    return pd.concat(parts, ignore_index=True)


def _merge_levels(parts: list[pd.DataFrame]) -> pd.DataFrame:
    key = ["level", *CELL, "pipeline"]
    out = parts[0]
    for part in parts[1:]:
        out = out.merge(part, on=key, how="outer")
    return out.sort_values(key, ignore_index=True)[key + [c for c in out if c not in key]]


def _most_frequent(values: pd.Series) -> str:
    """The most frequent non-null value of a group ("" when none): why its runs ended."""
    values = values.dropna()
    return str(values.mode().iloc[0]) if len(values) else ""


def _every_reason(values: pd.Series) -> str:
    """A group's distinct non-null reasons, the most frequent first, joined by "; " ("" when
    none): a pair missing for the policy's own kill and one for Bulk's are both named
    (twenty-seventh held-out pass L2: the figure named only Bulk's)."""
    counts = values.dropna().value_counts(sort=True)
    return "; ".join(str(v) for v in counts.index)


def summary_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Every time and memory metric of the finished runs: median and 95 % CI per policy,
    pipeline and limit (over repetitions) and per size bin (over pipelines and
    repetitions), with how many runs did not finish."""
    runs = with_cell_keys(runs)
    if runs.empty:
        return pd.DataFrame()
    runs = runs.assign(pipeline=runs["pipeline"].astype(str))
    ok = runs[runs["termination"] == "ok"]
    parts = [_levels(ok, col, col) for col in TIME_METRICS if col in ok]
    parts += [_levels(runs, col, col) for col in MEMORY_METRICS if col in runs]
    runs = runs.assign(not_ok=runs["termination"] != "ok",
                       ended=runs["termination"].where(runs["termination"] != "ok"),
                       swap_seen=runs["swapped"].eq(True) if "swapped" in runs else False)
    if "limit_enforced_why" not in runs:
        runs = runs.assign(limit_enforced_why="")
    runs = runs.assign(outputs_differ=runs["outputs_agree"].eq(False)
                       if "outputs_agree" in runs else False)
    counts = _count_levels(runs, runs=("run_id", "size"), runs_not_ok=("not_ok", "sum"),
                           ended=("ended", endings),
                           runs_swapped=("swap_seen", "sum"),
                           runs_outputs_differ=("outputs_differ", "sum"),
                           limit_enforced_why=("limit_enforced_why", _most_frequent))
    return _merge_levels([*parts, counts])


def speedup_summary(pairs: pd.DataFrame) -> pd.DataFrame:
    """The paired ratios of ``speedup_table`` per cell: the median speed-up over Bulk and
    slowdown under the limit with their 95 % CIs, and whether each CI excludes 1
    (``*_significance``: higher, lower, no difference, too few runs)."""
    pairs = with_cell_keys(pairs)
    from engine.analysis.stats import significance

    if pairs.empty:
        return pd.DataFrame()
    pairs = pairs.assign(pipeline=pairs["pipeline"].astype(str),
                         missing=pairs["speedup"].isna(),
                         why=pairs["reason"].where(pairs["reason"] != ""),
                         slow_missing=pairs["slowdown"].isna() & (pairs["limit"] != "none"),
                         slow_why=pairs["slowdown_reason"].where(
                             pairs["slowdown_reason"] != ""))
    parts = [_levels(pairs, "speedup", "speedup"), _levels(pairs, "slowdown", "slowdown")]
    # why speed-ups are missing: the policy's own end, or Bulk's ("bulk ended 'memory'")
    parts.append(_count_levels(pairs, pairs_missing=("missing", "sum"),
                               missing_why=("why", _every_reason),
                               slowdown_pairs_missing=("slow_missing", "sum"),
                               slowdown_missing_why=("slow_why", _every_reason)))
    out = _merge_levels(parts)
    for name in ("speedup", "slowdown"):
        out[f"{name}_significance"] = [
            significance(lo, hi, n) for lo, hi, n in
            zip(out[f"{name}_ci_low"], out[f"{name}_ci_high"], out[f"{name}_n"].fillna(0))]
    out.loc[out["policy"] == "bulk", "speedup_significance"] = ""  # bulk over itself
    out.loc[out["limit"] == "none", "slowdown_significance"] = ""
    return out


def noise_floor_table(runs: pd.DataFrame) -> pd.DataFrame:
    """The spread of identical repeated runs per execution mode (stats.noise_floor)."""
    from engine.analysis.stats import noise_floor

    if runs.empty:
        return pd.DataFrame()
    ok = with_cell_keys(runs[runs["termination"] == "ok"])
    ok = ok.assign(execution_mode=execution_mode(ok))
    # runs at two batches are two cells, never repetitions of one (held-out pass 29, H1)
    return noise_floor(ok, ["pipeline", "policy", "limit", "limit_enforced", "batch"],
                       {"makespan": "makespan_s", "cpu time": "cpu_s",
                        "run max RSS": "hwm_rss_bytes", "sampled peak RSS": "peak_rss_bytes"},
                       mode="execution_mode")


def execution_mode(runs: pd.DataFrame) -> pd.Series:
    """Each run's execution mode as tables and figures name it: native or emulated with
    the sandbox that ran it (``emulated (uml)``), and the runtime where it is not the
    default (``native, caffe runtime``): runs of two modes are never aggregated
    together."""
    runs = with_cell_keys(runs)
    mode = ("emulated (" + runs["sandbox"].astype(str) + ")").where(runs["emulated"],
                                                                    "native")
    return mode.where(runs["runtime"] == "lean",
                      mode + ", " + runs["runtime"].astype(str) + " runtime")


PAIR_KEY = ["pipeline", "policy", "limit", "emulated", "sandbox", "runtime", "batch", "rep"]


def probe_overhead_table(runs: pd.DataFrame, unprobed: pd.DataFrame) -> pd.DataFrame:
    """Probed runs paired with their unprobed twins (same pipeline, policy, repetition,
    started next to each other): per pair the overhead (probed / unprobed makespan - 1)
    and its cost per task boundary; per pipeline and over all pipelines the median with
    its 95 % CI and whether the CI excludes no overhead."""
    runs, unprobed = with_cell_keys(runs), with_cell_keys(unprobed)
    from engine.analysis.stats import bootstrap_ci, cluster_bootstrap_ci, significance

    cols = ["pipeline", "pairs", "pairs_missing", "overhead_pct_median",
            "overhead_pct_ci_low", "overhead_pct_ci_high", "per_task_ms_median",
            "per_task_ms_ci_low", "per_task_ms_ci_high", "significance"]
    if runs.empty or unprobed.empty:
        return pd.DataFrame(columns=cols)
    twin = unprobed[PAIR_KEY + ["makespan_s"]].rename(
        columns={"makespan_s": "unprobed_makespan_s"})
    pairs = runs[PAIR_KEY + ["makespan_s", "tasks_finished"]].merge(twin, on=PAIR_KEY)
    missing = pairs[["makespan_s", "unprobed_makespan_s"]].isna().any(axis=1)
    missing_by = missing.groupby(pairs["pipeline"].astype(str)).sum()
    pairs = pairs[~missing].copy()
    pairs["ratio"] = pairs["makespan_s"] / pairs["unprobed_makespan_s"]
    # per task: its window opens and closes the per-window probes (two boundaries), and
    # the difference includes the 100 Hz sampler and GNU time, which --no-probes drops too
    pairs["per_task_ms"] = ((pairs["makespan_s"] - pairs["unprobed_makespan_s"]) * 1e3
                            / pairs["tasks_finished"])
    rows = []
    groups = [(str(p), g) for p, g in pairs.groupby("pipeline")] + [("all", pairs)]
    for name, g in groups:
        if name == "all":
            ratio = cluster_bootstrap_ci(g["ratio"], g["pipeline"])
            per = cluster_bootstrap_ci(g["per_task_ms"], g["pipeline"])
            n_missing = int(missing.sum())
        else:
            ratio, per = bootstrap_ci(g["ratio"]), bootstrap_ci(g["per_task_ms"])
            n_missing = int(missing_by.get(name, 0))
        sig = significance(ratio[1], ratio[2], len(g))
        rows.append([name, len(g), n_missing, *[(r - 1) * 100 for r in ratio], *per,
                     {"higher": "overhead", "lower": "faster with probes"}.get(sig, sig)])
    return pd.DataFrame(rows, columns=cols)


# Runs that must compute the same bits: one pipeline and input seed (repetition) on one
# kind of machine. Every policy and both runtimes give bit-identical outputs, natively and
# in UML alike (the same CPU; the uml backend sets the host's BLAS kernels); the qemu
# guest's TCG CPU uses other kernels, so its runs agree among themselves.
AGREE_KEY = ["pipeline", "rep", "sandbox", "batch"]


def outputs_agree(runs: pd.DataFrame) -> pd.Series:
    """Per run: whether its outputs are the ones the other finished runs of its
    ``AGREE_KEY`` group computed (the most common digest); NA where it finished no
    pipeline or no other run can tell. A run that computed other bits than its siblings
    (a sandbox's memory corrupted under pressure, say) is never a silent result."""
    if "outputs_sha256" not in runs:
        return pd.Series(pd.NA, index=runs.index, dtype="boolean")
    runs = with_cell_keys(runs)
    digests = runs["outputs_sha256"].where(runs["termination"] == "ok")
    common = digests.groupby([runs[k] for k in AGREE_KEY], dropna=False).transform(
        lambda d: d.mode().iloc[0] if d.notna().sum() >= 2 else pd.NA)
    agree = (digests == common).astype("boolean")
    return agree.where(digests.notna() & common.notna(), pd.NA)

"""Statistics of repeated runs, in one place: bootstrap confidence intervals over
repetitions and over pipelines within a size bin, paired ratios (speed-up over Bulk,
probe overhead) with their significance, the noise floor of identical runs, and Kendall's
tau for the model's rankings.

Every estimate is a median with a 95 % percentile-bootstrap interval. A CI needs at least
two values. A percentile-bootstrap CI of the median of n <= 5 values is their range, and
all of n values on one side of 1 happens by chance with probability 2 / 2**n: a
significance claim needs at least MIN_N_SIGNIFICANT values (2 / 2**6 = 3 %), below that
the label is "too few runs" whatever the CI says.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np
import pandas as pd

CI_LEVEL = 0.95
N_BOOT = 2000
CI_METHOD = f"median, {CI_LEVEL:.0%} percentile bootstrap ({N_BOOT} resamples)"
MIN_N_SIGNIFICANT = 6
# Pipelines in a size bin from which its CI generalises to pipelines of that size
# (resampling pipelines); with fewer it is conditional on the bin's own pipelines
# (resampling each pipeline's repetitions).
MIN_CLUSTERS = 6
# Significance labels of a paired ratio's CI against 1.
FASTER, SLOWER, NO_DIFFERENCE, TOO_FEW = "higher", "lower", "no difference", "too few runs"


def _percentiles(boot: np.ndarray, level: float) -> tuple[float, float]:
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(boot, [tail, 100 - tail])
    return float(lo), float(hi)


def bootstrap_ci(values: Sequence[float] | np.ndarray, level: float = CI_LEVEL,
                 n_boot: int = N_BOOT, seed: int = 0) -> tuple[float, float, float]:
    """(median, ci_low, ci_high) of ``values`` (NaN dropped), resampling the values.
    Fewer than two values: the CI is NaN (no value: the median too)."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return np.nan, np.nan, np.nan
    if len(x) == 1:
        return float(x[0]), np.nan, np.nan
    rng = np.random.default_rng(seed)
    boot = np.median(x[rng.integers(0, len(x), size=(n_boot, len(x)))], axis=1)
    return (float(np.median(x)), *_percentiles(boot, level))


def cluster_bootstrap_ci(values: Sequence[float] | np.ndarray,
                         clusters: Sequence[object] | np.ndarray, level: float = CI_LEVEL,
                         n_boot: int = N_BOOT, seed: int = 0) -> tuple[float, float, float]:
    """(median, ci_low, ci_high) of values grouped in clusters (the repetitions of each
    pipeline in a size bin; the tasks of each run). With at least MIN_CLUSTERS clusters
    the clusters are resampled whole, so the CI covers the spread between clusters (a
    statement about pipelines of that size); with fewer, each cluster's values are
    resampled within it, so the CI is conditional on these clusters (stratified
    bootstrap). One cluster: as ``bootstrap_ci``."""
    x = np.asarray(values, dtype=float)
    c = np.asarray(clusters, dtype=object)
    keep = np.isfinite(x)
    x, c = x[keep], c[keep]
    labels = list(dict.fromkeys(c.tolist()))
    if len(labels) <= 1:
        return bootstrap_ci(x, level, n_boot, seed)
    groups = [x[c == label] for label in labels]
    sizes = np.array([len(g) for g in groups])
    width = int(sizes.max())
    padded = np.full((len(groups), width), np.nan)
    for i, g in enumerate(groups):
        padded[i, :len(g)] = g
    rng = np.random.default_rng(seed)
    if len(groups) >= MIN_CLUSTERS:  # whole clusters, with replacement
        draws = padded[rng.integers(0, len(groups), size=(n_boot, len(groups)))]
    else:  # within each cluster, indices below its own size
        within = (rng.random((n_boot, len(groups), width)) * sizes[:, None]).astype(int)
        draws = padded[np.arange(len(groups))[None, :, None], within]
        draws[:, np.arange(width)[None, :] >= sizes[:, None]] = np.nan
    boot = np.nanmedian(draws.reshape(n_boot, -1), axis=1)
    return (float(np.median(x)), *_percentiles(boot, level))


def cluster_mean_ci(values: Sequence[float] | np.ndarray, clusters: Sequence[object] | np.ndarray,
                    level: float = CI_LEVEL, n_boot: int = N_BOOT, seed: int = 0
                    ) -> tuple[float, float, float]:
    """(mean, ci_low, ci_high) of values grouped in clusters (a model's errors, cells
    grouped by pipeline): the clusters are resampled whole, with replacement, and the
    mean of each resample's values taken (a MAPE's CI over pipelines). Fewer than two
    clusters: no CI."""
    x = np.asarray(values, dtype=float)
    c = np.asarray(clusters, dtype=object)
    keep = np.isfinite(x)
    x, c = x[keep], c[keep]
    if len(x) == 0:
        return np.nan, np.nan, np.nan
    labels = list(dict.fromkeys(c.tolist()))
    if len(labels) < 2:
        return float(x.mean()), np.nan, np.nan
    sums = np.array([x[c == label].sum() for label in labels])
    counts = np.array([(c == label).sum() for label in labels])
    rng = np.random.default_rng(seed)
    draw = rng.integers(0, len(labels), size=(n_boot, len(labels)))
    boot = sums[draw].sum(axis=1) / counts[draw].sum(axis=1)
    return (float(x.mean()), *_percentiles(boot, level))


def ci_scope(n_clusters: int) -> str:
    """What a cluster bootstrap's CI is about (``cluster_bootstrap_ci``)."""
    return "pipelines of the bin" if n_clusters >= MIN_CLUSTERS else "these pipelines"


def significance(ci_low: float, ci_high: float, n: int) -> str:
    """A ratio's CI against 1: ``higher`` / ``lower`` when it excludes 1, ``no
    difference`` when it contains 1, ``too few runs`` when there is no CI or fewer than
    MIN_N_SIGNIFICANT values."""
    if n < MIN_N_SIGNIFICANT or not (np.isfinite(ci_low) and np.isfinite(ci_high)):
        return TOO_FEW
    if ci_low > 1:
        return FASTER
    if ci_high < 1:
        return SLOWER
    return NO_DIFFERENCE


def cell_seed(key: object) -> int:
    """A seed of its own per cell, so that cells of equal size do not share resamples."""
    return zlib.crc32(repr(key).encode())


def summarize(df: pd.DataFrame, by: list[str], value: str, cluster: str | None = None,
              prefix: str | None = None) -> pd.DataFrame:
    """Per group of ``by``: n, the median of ``value`` and its CI (clustered by
    ``cluster`` when given: e.g. pipelines within a size bin). Columns
    ``<prefix>_median``, ``<prefix>_ci_low``, ``<prefix>_ci_high``, ``<prefix>_n``."""
    name = prefix or value
    cols = [f"{name}_median", f"{name}_ci_low", f"{name}_ci_high", f"{name}_n"]
    if df.empty:
        return pd.DataFrame(columns=[*by, *cols])
    rows = []
    for key, group in df.groupby(by, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        vals = group[value].to_numpy(dtype=float)
        if cluster is None:
            est = bootstrap_ci(vals, seed=cell_seed(key))
        else:
            est = cluster_bootstrap_ci(vals, group[cluster].to_numpy(), seed=cell_seed(key))
        rows.append([*key, *est, int(np.isfinite(vals).sum())])
    out = pd.DataFrame(rows, columns=[*by, *cols])
    # a nullable integer key (the batch, NA for the deploy one) keeps its type, so the
    # table merges with others keyed alike
    return out.astype({k: df[k].dtype for k in by if isinstance(df[k].dtype, pd.Int64Dtype)})


def kendall_tau(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Kendall's tau-b of two rankings (ties in either count as neither concordant nor
    discordant and shrink the denominator); NaN with fewer than two pairs or when
    either side is all ties."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if len(x) < 2:
        return np.nan
    i, j = np.triu_indices(len(x), k=1)
    dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
    pairs = len(i)
    ties_x, ties_y = int((dx == 0).sum()), int((dy == 0).sum())
    denom = np.sqrt(float(pairs - ties_x) * float(pairs - ties_y))
    return float((dx * dy).sum() / denom) if denom > 0 else np.nan


def noise_floor(runs: pd.DataFrame, cell: list[str], metrics: dict[str, str],
                mode: str = "emulated") -> pd.DataFrame:
    """The spread of identical repeated runs: per cell (same pipeline, policy, limit, batch) of
    finished runs with at least two repetitions, the coefficient of variation of each
    metric (sd / mean); per execution mode and metric, the median CV over the cells with
    its bootstrap CI, the largest CV, and the median relative range ((max - min) /
    median)."""
    cols = ["mode", "metric", "cells", "runs", "cv_median", "cv_ci_low", "cv_ci_high",
            "cv_max", "rel_range_median"]
    rows = []
    for label, col in metrics.items():
        if col not in runs:
            continue
        ok = runs[runs[col].notna()]
        for label_mode, part in ok.groupby(mode, sort=True):
            # a key unknown (NA: the deploy batch) is a cell too
            stats = part.groupby(cell, dropna=False)[col].agg(["mean", "std", "min", "max",
                                                               "median", "count"])
            stats = stats[stats["count"] >= 2]
            if stats.empty:
                continue
            cv = (stats["std"] / stats["mean"]).to_numpy()
            rel = ((stats["max"] - stats["min"]) / stats["median"]).to_numpy()
            med, lo, hi = bootstrap_ci(cv)
            if isinstance(label_mode, (bool, np.bool_)):
                label_mode = "emulated" if label_mode else "native"
            rows.append([label_mode, label, len(stats),
                         int(stats["count"].sum()), med, lo, hi, float(np.nanmax(cv)),
                         float(np.nanmedian(rel))])
    return pd.DataFrame(rows, columns=cols)

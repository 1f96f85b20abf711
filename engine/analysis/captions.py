"""The facts a figure's caption states that only the results know: how many pipelines
and repetitions each execution mode has, the CI method, and which cells of the paired
comparisons are significant. The report renders them into workflow/report/figures.rst
(the plot rule passes them as a param derived from its input tables)."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from engine.analysis.noise import table_warnings
from engine.analysis.stats import CI_METHOD

MAX_LISTED = 12  # cells named in a caption; more are counted


def _n(runs: pd.DataFrame, emulated: bool) -> str:
    part = runs[runs["emulated"] == emulated]
    if part.empty:
        return ""
    reps = part.groupby("pipeline")["rep"].nunique()
    # run.sequential gives each pipeline the repetitions its look decided
    span = f"{reps.min()}-{reps.max()}" if reps.min() != reps.max() else f"{reps.max()}"
    return (f"{'emulated' if emulated else 'native'}: n = {len(reps)} pipeline(s) x "
            f"{span} repetition(s)")


def _cells(summary: pd.DataFrame, name: str) -> str:
    col = f"{name}_significance"
    if summary.empty or col not in summary:
        return "none"
    rows = summary[(summary["level"] == "size_bin")
                   & summary[col].isin(["higher", "lower"])]
    if rows.empty:
        return "none"
    words = ({"higher": "slower", "lower": "faster"} if name == "slowdown"
             else {"higher": "faster", "lower": "slower"})
    text = [f"{r.policy} {words[r[col]]} ({r['size_bin']}, {r['limit']}"
            f"{', emulated' if r['emulated'] else ''}: {r[f'{name}_median']:.2f}x "
            f"[{r[f'{name}_ci_low']:.2f}, {r[f'{name}_ci_high']:.2f}])"
            for _, r in rows.head(MAX_LISTED).iterrows()]
    more = len(rows) - MAX_LISTED
    return "; ".join(text) + (f"; and {more} more (speedup_summary table)" if more > 0 else "")


def caption_facts(tables_dir: str | os.PathLike) -> dict[str, str]:
    """n per execution mode, the CI method and the significant cells, from the aggregate
    tables in ``tables_dir``; empty strings before the tables exist (a DAG being built)."""
    folder = Path(tables_dir)
    facts = {"n": "", "ci": CI_METHOD, "speedup_significant": "", "slowdown_significant": "",
             "host": ""}
    runs_path, summary_path = folder / "runs.parquet", folder / "speedup_summary.parquet"
    if not (runs_path.is_file() and summary_path.is_file()):
        return facts
    runs = pd.read_parquet(runs_path, columns=["pipeline", "rep", "emulated"])
    summary = pd.read_parquet(summary_path)
    facts["n"] = "; ".join(filter(None, (_n(runs, False), _n(runs, True))))
    facts["speedup_significant"] = _cells(summary, "speedup")
    facts["slowdown_significant"] = _cells(summary, "slowdown")
    facts["host"] = " ".join(f"WARNING, {w}." for w in table_warnings(folder))
    return facts

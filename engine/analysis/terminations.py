"""How a group of runs that did not finish ended, in words: one home for the summaries'
``ended`` column and the figures' marks, so a figure need not import the summaries."""

from __future__ import annotations

import pandas as pd


def endings(values: pd.Series) -> str:
    """How a group's runs that did not finish ended: the one way ("memory"), or each way
    with its count, the most frequent first ("2 memory, 1 timeout"): a cell of kills and
    timeouts is not all kills (sixteenth held-out pass M2)."""
    counts = values.dropna().astype(str).value_counts()
    if len(counts) <= 1:
        return str(counts.index[0]) if len(counts) else ""
    ways = sorted(counts.items(), key=lambda way: (-way[1], way[0]))
    return ", ".join(f"{n} {how}" for how, n in ways)

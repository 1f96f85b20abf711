"""Reading what Snakemake prints, for the workflow tests."""

from __future__ import annotations

import re
from collections import Counter


def job_counts(text: str) -> Counter:
    """Rule -> planned job count from a run's "Job stats:" table (empty: nothing to do).
    The rules made one per shape (``run_block_3``) count under their family's
    name (``run_block``)."""
    if "Job stats:" not in text:
        assert "Nothing to be done" in text, text[-3000:]
        return Counter()
    table = text.split("Job stats:")[1]
    counts: Counter = Counter()
    for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M):
        if m[1] != "total":
            counts[re.sub(r"_\d+$", "", m[1])] += int(m[2])
    return counts

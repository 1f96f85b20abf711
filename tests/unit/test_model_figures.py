"""The model's figures, drawn from small hand-built tables: every drawn panel shows
something and names its axes (issue 39)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from engine.model import figures
from engine.units import MIB
from tests.figure_checks import unlabelled_panels

STYLE = {"dpi": 80, "font_size": 9, "palette": "tab10"}


def _predictions() -> pd.DataFrame:
    """Two pipelines under two policies, unconstrained (no slowdown there) and at 48M."""
    rows = []
    for limit, slowdown in (("none", np.nan), ("48M", 1.4)):
        for i, policy in enumerate(("bulk", "linear")):
            rows.append({"mode": "native", "limit": limit, "policy": policy,
                         "measured_makespan_s": 1.0 + i, "predicted_makespan_s": 1.1 + i,
                         "makespan_error_pct": 10.0, "measured_makespan_ci_low": 0.9 + i,
                         "measured_makespan_ci_high": 1.2 + i,
                         "measured_hwm_rss_bytes": (60 + i) * MIB,
                         "predicted_peak_ram_bytes": (62 + i) * MIB, "peak_error_pct": 3.0,
                         "measured_slowdown": slowdown, "predicted_slowdown": slowdown * 1.1,
                         "slowdown_error_pct": 10.0})
    return pd.DataFrame(rows)


def _residuals() -> pd.DataFrame:
    return pd.DataFrame({"mode": "native", "layer": [0, 1, -1], "error_pct": [5.0, -8.0, 2.0],
                         "task_type": ["EXEC", "LOAD", "INIT"],
                         "layer_type": ["Convolution", "Convolution", ""],
                         "predicted_s": [1.05, 0.92, 1.02], "measured_s": [1.0, 1.0, 1.0]})


def _curves() -> pd.DataFrame:
    """Two limits, two size bins; the 128M limit has no curve in the first bin."""
    rows = []
    for limit, size_bin in (("48M", "0-150 MiB"), ("48M", "150-400 MiB"),
                            ("128M", "150-400 MiB")):
        for policy in ("bulk", "linear"):
            for cost in (1e-6, 1e-4, 1e-2):
                rows.append({"runtime": "lean", "sandbox": "uml", "limit": limit,
                             "size_bin": size_bin, "policy": policy, "per_page_s": cost,
                             "speedup_over_bulk": 1.0 if policy == "bulk" else 1 + cost * 50,
                             "pipelines": 2})
    return pd.DataFrame(rows)


TABLES = {"cv_predictions": _predictions(), "layer_residuals": _residuals(),
          "swap_cost_curves": _curves(), "swap_cost_crossovers": pd.DataFrame()}


@pytest.mark.parametrize("name", list(figures.FIGURES))
def test_every_drawn_model_panel_shows_something_and_names_its_axes(name):
    fig = figures.FIGURES[name](TABLES, STYLE, {})
    assert fig.axes and "no data" not in " ".join(t.get_text() for ax in fig.axes
                                                  for t in ax.texts)
    assert not (problems := unlabelled_panels(fig)), "\n".join(problems)

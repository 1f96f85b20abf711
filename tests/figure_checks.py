"""What every figure's panels owe a newcomer: something drawn, and axes that say what
they are. Shared by the campaign's and the model's figure tests."""

from __future__ import annotations

from matplotlib.axes import Axes
from matplotlib.figure import Figure


def _shown(ax: Axes) -> bool:
    return ax.get_visible() and ax.axison


def _has_data(ax: Axes) -> bool:
    """Bars, spans (a failed run's hatched slot), points, boxes or curves in data
    coordinates: a reference line (axhline, axvline) or a note alone is an empty
    placeholder."""
    shapes = [*ax.patches, *ax.collections, *ax.images]
    curves = [line for line in ax.lines
              if line.get_transform().contains_branch(ax.transData)]
    return any(a.get_visible() for a in shapes + curves)


def _cell(ax: Axes) -> tuple[range, range]:
    spec = ax.get_subplotspec()
    return spec.rowspan, spec.colspan


def _labelled_below(ax: Axes, shown: list[Axes]) -> bool:
    """``ax`` hides its x tick labels and a drawn panel lower in its column labels x."""
    if ax.xaxis.get_tick_params().get("labelbottom", True):
        return False
    rows, cols = _cell(ax)
    return any(_cell(o)[1] == cols and _cell(o)[0].start > rows.start and o.get_xlabel()
               for o in shown if o is not ax)


def _labelled_beside(ax: Axes, shown: list[Axes]) -> bool:
    """``ax`` shares its y axis with a drawn panel of its row that labels y."""
    rows, _ = _cell(ax)
    return any(ax.get_shared_y_axes().joined(ax, o) and _cell(o)[0] == rows
               and o.get_ylabel() for o in shown if o is not ax)


def unlabelled_panels(fig: Figure) -> list[str]:
    """Each drawn panel that shows nothing or leaves an axis unnamed, described; none:
    the figure passes. A no-data figure's axes are switched off, so it passes."""
    shown = [ax for ax in fig.axes if _shown(ax) and ax.get_subplotspec() is not None]
    problems = []
    for ax in shown:
        where = f"panel {_cell(ax)[0].start},{_cell(ax)[1].start} ({ax.get_title()!r})"
        if not _has_data(ax):
            problems.append(f"{where} is an empty placeholder")
        if not ax.get_xlabel() and not _labelled_below(ax, shown):
            problems.append(f"{where} has no x label")
        if not ax.get_ylabel() and not _labelled_beside(ax, shown):
            problems.append(f"{where} has no y label")
    return problems

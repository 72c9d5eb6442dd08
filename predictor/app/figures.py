"""The verbs' plots: where they go (``plot=``), how they are drawn and how they are saved
(atomically)."""
from __future__ import annotations

import os
import uuid
from pathlib import Path

from predictor.core.errors import PrismError


def new_figure(nrows: int = 1, ncols: int = 1, figsize=None, **subplots):
    """A figure and its axes (``Figure.subplots``), drawn without pyplot.

    Drawing off-screen through pyplot needs ``matplotlib.use("Agg")``, which switches the
    caller's backend too (a notebook's inline figures stop showing); a bare
    :class:`~matplotlib.figure.Figure` leaves the backend alone, saves to a file
    (:func:`save_figure`) and shows in a notebook as the value of a cell.
    """
    from matplotlib.figure import Figure
    fig = Figure(figsize=figsize)
    return fig, fig.subplots(nrows, ncols, **subplots)


def save_figure(fig, path) -> Path:
    """Write ``fig`` to ``path`` (PNG unless the suffix says otherwise) through a temporary
    file and a rename, so an interrupted save never leaves a truncated image; closes ``fig``."""
    import matplotlib.pyplot as plt
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        fig.savefig(tmp, format=path.suffix.lstrip(".") or "png", dpi=110)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)
    return path


def plot_path(value) -> Path | None:
    """``plot=`` as the PNG to write (``.png`` added where no suffix is given), or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not str(value).strip():
        raise PrismError(f"plot={value}: a file to write the figure to, e.g. plot=step.png", field='plot')
    path = Path(str(value))
    if not path.suffix:
        return path.with_suffix(".png")
    if path.suffix.lower() != ".png":
        raise PrismError(f"plot={value}: the figure is a PNG; give a path ending in .png, e.g. plot=step.png", field='plot')
    return path

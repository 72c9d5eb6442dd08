"""Saving the verbs' plots: one way, atomically."""
from __future__ import annotations

import os
import uuid
from pathlib import Path


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

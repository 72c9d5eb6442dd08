"""Writing a file so that nothing stored is lost: through a temporary sibling renamed over
the target, so a reader (or a run interrupted mid-write) finds the old file or the new,
never half of one."""
from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path


def write_atomically(path, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp)`` to write a temporary sibling of ``path``, then rename it over
    ``path``; on any error (or an interrupt) the temporary file is removed and ``path``
    is left as it was."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path

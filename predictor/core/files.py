"""Writing a file so that nothing stored is lost: through a temporary sibling renamed over
the target, so a reader (or a run interrupted mid-write) finds the old file or the new,
never half of one."""
from __future__ import annotations

import csv
import os
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

from predictor.core.errors import PrismError


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


def write_csv(path, rows: list[dict]) -> Path:
    """``rows`` as a CSV table at ``path`` (atomically), its columns every key of the rows in
    order of appearance."""
    fields = list(dict.fromkeys(k for r in rows for k in r))

    def write(tmp: Path) -> None:
        with open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)
    return write_atomically(path, write)


def writable(key: str, path, folder: bool = False, create: bool = True) -> Path:
    """``path`` once a file can be written there (``folder``: into it), its missing folders
    created (``create``; else refused with the ``mkdir -p`` that makes them); one
    :class:`PrismError` naming ``key`` otherwise, before any work is done (a figure or a run
    that cannot be saved is found out at the start, not after the computation)."""
    path = Path(path)
    target = path if folder else path.parent
    for parent in (target, *target.parents):
        if parent.exists() and not parent.is_dir():
            raise PrismError(f"{key}={path}: {parent} is a file, not a folder; choose another path", field=key)
    if not folder and path.is_dir():
        raise PrismError(f"{key}={path}: is a folder; give a file name in it", field=key)
    if not create and not target.is_dir():
        raise PrismError(f"{key}={path}: the folder {target} does not exist; create it (mkdir -p {target}) or "
                         f"write elsewhere", field=key)
    try:  # a real write: permission bits do not tell (root, read-only mounts)
        target.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=target):
            pass
    except OSError as exc:
        raise PrismError(f"{key}={path}: cannot write in {target} ({exc.strerror or exc}); choose a writable folder",
                         field=key) from None
    return path

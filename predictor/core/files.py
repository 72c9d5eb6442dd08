"""Writing a file so that nothing stored is lost: through a temporary sibling renamed over
the target, so a reader (or a run interrupted mid-write) finds the old file or the new,
never half of one."""
from __future__ import annotations

import csv
import errno
import json
import os
import socket
import stat
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from predictor.core.errors import PrismError

#: The file that makes a folder a saved set of models (:mod:`predictor.latency.artifacts`):
#: saving a set replaces its whole folder, so nothing else may be written there.
MANIFEST = "manifest.json"


def write_atomically(path, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp)`` to write a temporary sibling of ``path``, then rename it over
    ``path``; on any error (or an interrupt) while writing, the temporary file is removed
    and ``path`` is left as it was. Where only the rename fails (``path`` immutable, or
    another user's in a sticky folder), one :class:`PrismError` names the temporary file,
    which is kept: what was written may have taken a long run to measure."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        write(tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    try:
        os.replace(tmp, path)
    except OSError as exc:
        raise PrismError(f"{path}: cannot be replaced ({exc.strerror or exc}); what was to be written is kept in "
                         f"{tmp}: make {path} writable (or remove it) and run mv {tmp} {path}, or move it to another "
                         f"name", field=str(path)) from None
    except BaseException:  # an interrupt before the rename: nothing to keep
        tmp.unlink(missing_ok=True)
        raise
    return path


@contextmanager
def held_lock(path, busy: Callable[[dict], str], field: str) -> Iterator[str | None]:
    """Hold the lock file ``path`` for the block: one writer at a time of what it guards.

    The lock is a file created only if absent, holding the writer's pid, host and start
    time, and removed when the block ends. A lock left by a process that is gone from this
    host is taken over: the block gets a note saying so (None otherwise). While a live
    writer holds it, one :class:`PrismError` on ``field`` with ``busy(holder)`` as its text.
    """
    path = Path(path)
    note = None
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            break
        except FileExistsError:
            holder = _lock_holder(path)
            if not (_gone(holder) or _abandoned(path, holder)):
                raise PrismError(busy(holder), field=field) from None
            # Two writers finding one stale lock in the same instant could both take it over;
            # the window is the moment between reading the lock and removing it.
            path.unlink(missing_ok=True)
            note = (f"{path.parent}: took over the writer lock of pid {holder['pid']}, which is no longer running "
                    f"on {holder['host']} (started {holder.get('started', '?')})" if holder else
                    f"{path.parent}: took over an empty writer lock ({path.name}), left by a writer that could not "
                    f"write it")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"pid": os.getpid(), "host": socket.gethostname(),
                       "started": datetime.now(timezone.utc).isoformat(timespec="seconds")}, f)
    except BaseException:  # a full disk: an empty lock would stop every later writer
        path.unlink(missing_ok=True)
        raise
    try:
        yield note
    finally:
        path.unlink(missing_ok=True)


def _lock_holder(path: Path) -> dict:
    """What a lock file says of its writer; {} where it cannot be read (a writer that has
    just created it, or a damaged file)."""
    try:
        holder = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


#: A writer fills its lock the instant it creates it: one still unreadable this long after
#: was left by a writer that could not (a full disk, a kill in between).
LOCK_FILL_S = 10.0


def _abandoned(path: Path, holder: dict) -> bool:
    """Whether a lock names no writer and has not for :data:`LOCK_FILL_S`."""
    try:
        return not holder and time.time() - path.stat().st_mtime > LOCK_FILL_S
    except OSError:  # removed meanwhile: the next try creates it
        return False


def _gone(holder: dict) -> bool:
    """Whether the lock's writer has ended: only a process of this host can be checked."""
    if holder.get("host") != socket.gethostname() or not isinstance(holder.get("pid"), int):
        return False
    try:
        os.kill(holder["pid"], 0)  # signal 0: asks whether the process exists, sends nothing
    except ProcessLookupError:
        return True
    except PermissionError:  # it exists, under another user
        pass
    return False


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


#: The longest name of one file or folder, in bytes, on Linux's and macOS's file systems.
NAME_MAX = 255


def checked_path(key: str, value) -> Path:
    """``value`` as a Path, or one :class:`PrismError` naming ``key`` where it is no path
    (None, a number) or a part of it is longer than a file system takes: every look at such
    a path (exists, is_dir, open) fails with an OSError."""
    if not isinstance(value, str | os.PathLike) or not str(value).strip():
        raise PrismError(f"{key}={value!r}: must be a path, the name of a file or folder", field=key)
    path = Path(value)
    longest = max(path.parts, key=lambda part: len(os.fsencode(part)), default="")
    if len(os.fsencode(longest)) > NAME_MAX:
        raise PrismError(f"{key}={str(value)[:40]}...: a name of {len(os.fsencode(longest))} bytes in it, more than "
                         f"the {NAME_MAX} a file system takes; choose a shorter one", field=key)
    return path


def writable(key: str, path, folder: bool = False, create: bool = True) -> Path:
    """``path`` once a file can be written there (``folder``: into it), its missing folders
    created (``create``; else refused with the ``mkdir -p`` that makes them); one
    :class:`PrismError` naming ``key`` otherwise, before any work is done (a figure or a run
    that cannot be saved is found out at the start, not after the computation)."""
    path = checked_path(key, path)
    target = path if folder else path.parent
    for parent in (target, *target.parents):
        if parent.exists() and not parent.is_dir():
            raise PrismError(f"{key}={path}: {parent} is a file, not a folder; choose another path", field=key)
    if not folder and path.is_dir():
        raise PrismError(f"{key}={path}: is a folder; give a file name in it", field=key)
    if not folder and path.exists() and not path.is_file():  # the rename of a write would replace it
        raise PrismError(f"{key}={path}: is not a regular file (a device, pipe or socket); give a file name",
                         field=key)
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
    if not folder and path.exists():
        _replaceable(key, path)
    return path


def _replaceable(key: str, path: Path) -> None:
    """Refuse an existing ``path`` that a write's rename could not replace (immutable, or
    another user's file in a sticky folder): found out before the work, not after it."""
    try:
        with open(path, "ab"):  # nothing appended: opening for a write is the test
            pass
        folder = path.parent.stat()
        if folder.st_mode & stat.S_ISVTX and os.geteuid() not in (0, path.stat().st_uid, folder.st_uid):
            raise PermissionError(errno.EPERM, "another user's file in a sticky folder")
    except OSError as exc:
        raise PrismError(f"{key}={path}: exists and cannot be replaced ({exc.strerror or exc}); make it writable "
                         f"(chmod, chattr -i, or ask its owner) or give a new file name", field=key) from None

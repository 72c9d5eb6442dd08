"""Importers: outside measurements turned into sample-store rows (docs/method.md, "Sample store").

Each importer maps a foreign layout onto PRISM's operator vocabulary
(:mod:`predictor.core.ops`), keeps where every row came from in the ``origin`` column,
and writes one run with :func:`predictor.data.store.write_run` (never overwriting a run).

- :mod:`predictor.data.importers.ett`: the estimate-train-time CSV layout (arXiv 2509.22832).
"""

import hashlib
from pathlib import Path

import pandas as pd

from predictor.core.errors import PrismError


def sources_digest(files) -> str:
    """SHA-256 of the source ``files`` (their names and bytes, in name order): a rerun of an
    import recognises the run it already wrote from the same sources."""
    digest = hashlib.sha256()
    for path in sorted(Path(f) for f in files):
        if path.is_file():
            digest.update(f"{path.parent.name}/{path.name}".encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def earlier_import(target: Path, importer: str, version: int, digest: str) -> dict | None:
    """The report that a finished import of the same sources by the same importer version
    stored with run ``target`` (so that a rerun of a stopped import goes on where it
    stopped), or None where ``target`` is not there. A ``target`` of other sources, another
    version or another tool is refused: a run id is never reused."""
    from predictor.data.store import read_run_metadata  # the store reads pyarrow: not for --help
    if not target.exists():
        return None
    meta = read_run_metadata(target)
    if (meta.get("importer") == importer and meta.get("importer_version", meta.get("version")) == version
            and meta.get("sources_sha256") == digest and isinstance(meta.get("report"), dict)):
        return meta["report"]
    raise PrismError(f"{target} already exists, imported from other sources or by another version; a run id is "
                     f"never reused: import into another out= folder, or move the old run away first",
                     field=str(target))


def read_csv(path: Path, restore: str) -> pd.DataFrame:
    """The CSV file at ``path``, its column names stripped; one error naming it (and
    ``restore``: where a good copy comes from) where it cannot be read as a table, or where
    a column name appears twice."""
    try:
        df = pd.read_csv(path)
        # read_csv renames a repeated name X to X.1, and every reader would take the first X unsaid
        header = pd.read_csv(path, header=None, nrows=1, dtype=str, keep_default_na=False).iloc[0]
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as exc:
        raise PrismError(f"{path}: not a readable CSV ({' '.join(str(exc).split())}); {restore}",
                         field=str(path)) from None
    names = [c.strip() for c in header if c.strip()]
    twice = next((c for i, c in enumerate(names) if c in names[:i]), None)
    if twice is not None:
        raise PrismError(f"{path}: column {twice!r} appears twice; keep one", field=str(path))
    df.columns = [str(c).strip() for c in df.columns]
    return df

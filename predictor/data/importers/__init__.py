"""Importers: outside measurements turned into sample-store rows (docs/method.md, "Sample store").

Each importer maps a foreign layout onto PRISM's operator vocabulary
(:mod:`predictor.core.ops`), keeps where every row came from in the ``origin`` column,
and writes one run with :func:`predictor.data.store.write_run` (never overwriting a run).

- :mod:`predictor.data.importers.ett`: the estimate-train-time CSV layout (arXiv 2509.22832).
"""

from pathlib import Path

import pandas as pd

from predictor.core.errors import PrismError


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

"""Importers: outside measurements turned into sample-store rows (DESIGN.md, "Sample store").

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
    ``restore``: where a good copy comes from) where it cannot be read as a table."""
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as exc:
        raise PrismError(f"{path}: not a readable CSV ({' '.join(str(exc).split())}); {restore}",
                         field=str(path)) from None
    df.columns = [str(c).strip() for c in df.columns]
    return df

"""Importers: outside measurements turned into sample-store rows (DESIGN.md, "Sample store").

Each importer maps a foreign layout onto PRISM's operator vocabulary
(:mod:`predictor.core.ops`), keeps where every row came from in the ``origin`` column,
and writes one run with :func:`predictor.data.store.write_run` (never overwriting a run).

- :mod:`predictor.data.importers.ett`: the estimate-train-time CSV layout (arXiv 2509.22832).
"""

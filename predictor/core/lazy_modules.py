"""Modules that third-party imports load and the predictor never uses, deferred.

scipy's array-API layer (which ``scipy.sparse`` imports, and xgboost imports that) lists
every public name of numpy with ``hasattr``, which imports ``numpy.f2py``, the Fortran
wrapper generator (a quarter of a second: its Fortran parser, and with it
charset_normalizer). :func:`defer` registers such a module with
:class:`importlib.util.LazyLoader` (the standard library's lazy-import recipe): the module
object exists, and its code runs at the first attribute read. Anyone who uses it gets it
whole; the predictor, which does not, never pays for it.
"""
from __future__ import annotations

import importlib.util
import sys

#: Modules deferred: numpy's Fortran wrapper generator, its test helpers and masked arrays.
DEFERRED = ("numpy.f2py", "numpy.testing", "numpy.ma")


def defer(name: str) -> None:
    """Register ``name`` to load at its first use (nothing where it is loaded already or absent)."""
    if name in sys.modules:
        return
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return
    if spec is None or spec.loader is None:
        return
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    parent, _, child = name.rpartition(".")
    if parent in sys.modules:  # as the import system would: the package's attribute is the module
        setattr(sys.modules[parent], child, module)


def defer_unused() -> None:
    """:func:`defer` every module of :data:`DEFERRED`."""
    for name in DEFERRED:
        defer(name)

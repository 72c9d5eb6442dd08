"""The contract every pricing adjustment keeps (:class:`Adjustment`), and what it is shown
of the calls it prices (:class:`Batch`).

An adjustment is one named correction of the latency quantiles a base source (a trained
model, else a prior: :mod:`predictor.latency.pricer`) gives a call. One file holds all of
it: what ``prism train`` fits for it on the samples (:meth:`Adjustment.fit`, and
:meth:`Adjustment.prepare` where it takes its rows out of or off the op models' training
rows), and how it changes a call's quantiles (:meth:`Adjustment.applies`,
:meth:`Adjustment.apply`). Its fitted parameters are a typed, versioned dataclass
(:class:`Params`) stored in the models' manifest under ``adjustments.<name>``
(:func:`predictor.latency.artifacts.read_adjustments`). Its docstring names the mechanism
(a framework's source file, a vendor document, or a measurement of ours under
``measurements/`` or ``benchmarks/``): a constant fitted so that a table comes out right
is not one.

Corrections only the CPU testbed needs (:attr:`Adjustment.testbed_only`) say which test
would retire them (:attr:`Adjustment.retire_when`).

The inputs a correction reads off a call that are no feature of the op's model ride in
:attr:`~predictor.core.ops.Call.shape` as *marks* (:attr:`Adjustment.marks`): a call is
the key the quantiles are cached by (:class:`~predictor.latency.lookup.QuantileCache`), so
two calls that price differently must differ in it, and the decomposition that knows the
mark (``sm_margin``: the SMs a userbuffer collective holds; ``co_runners``: the ranks
computing beside it; ``backend``: the attention kernel) is the one place that builds
calls. The pricer takes every registered mark out of the rows before the features see
them, and gives them to the adjustments as :attr:`Batch.marks`.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from predictor.core.errors import PrismError
from predictor.core.ops import Call
from predictor.latency.evidence import Evidence

if TYPE_CHECKING:
    import pandas as pd

    from predictor.core.specs import HardwareConfig
    from predictor.latency.artifacts import ModelSet


@dataclass
class Batch:
    """The calls of one (op, pass) being priced, as an adjustment sees them: ``frame``
    the model's input columns (shape, ``dtype``, ``nodes``, ``ranks_per_node``), one array
    each; ``marks`` the registered marks (module doc), one array each (0 or "" where a call
    has none); ``evidence`` each call's so far; ``models`` the hardware's trained set, if
    any; ``levels`` the quantile levels of the rows being priced; ``quantiles`` theirs so far."""

    op: str
    pass_: str
    calls: list[Call]
    frame: dict[str, np.ndarray]
    marks: dict[str, np.ndarray]
    evidence: list[Evidence]
    models: ModelSet | None
    hw: HardwareConfig
    levels: np.ndarray
    quantiles: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.calls)

    def rows(self, keep: np.ndarray) -> dict[str, np.ndarray]:
        """The model's input columns of the calls in ``keep`` (a boolean mask)."""
        return {column: values[keep] for column, values in self.frame.items()}

    @property
    def prior(self) -> np.ndarray:
        """Which calls rest on a prior so far."""
        return np.array([e.prior for e in self.evidence], bool)

    def quantile_columns(self) -> list[int]:
        """The columns of ``models``' predictions at :attr:`levels`."""
        return [self.models.quantiles.index(a) for a in self.levels]


class Params(ABC):
    """An adjustment's fitted parameters: a frozen dataclass that round-trips through the
    manifest's JSON (``from_json(to_json(p)) == p``)."""

    @abstractmethod
    def to_json(self) -> dict[str, Any]:
        """The ``params`` object stored in the manifest."""

    @classmethod
    @abstractmethod
    def from_json(cls, value: Any, field: str) -> Params:
        """Parse a manifest's ``params`` object; a :class:`PrismError` naming ``field`` (and
        the key under it) where it is malformed (:func:`malformed`)."""


def malformed(field: str, what: str) -> PrismError:
    """The error of a manifest's adjustment parameter at ``field``."""
    return PrismError(f"{field}: {what}; retrain with prism train", field=field)


def positive(value: Any, field: str) -> float:
    """``value`` as a positive finite number, else :func:`malformed`."""
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < math.inf):
        raise malformed(field, f"{value!r:.60} is not a positive number")
    return float(value)


def mapping(value: Any, field: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise malformed(field, f"{value!r:.60} is not an object")
    return value


class Adjustment(ABC):
    """One named correction (module doc). Subclasses set the class attributes and
    implement :meth:`applies` and :meth:`apply`; the rest defaults to "nothing to fit"."""

    #: Its key in the registry and in the manifest's ``adjustments``.
    name: ClassVar[str]
    #: Bumped when its parameters' meaning changes: a manifest holding another version is refused.
    version: ClassVar[int] = 1
    #: Where its mechanism lives: a framework's source file, a vendor document, a measurement of ours.
    mechanism: ClassVar[str]
    #: Only the CPU testbed needs it (a shared 2-core VM's quirks, not a GPU's).
    testbed_only: ClassVar[bool] = False
    #: For a testbed-only one: the test whose passing without it would retire it.
    retire_when: ClassVar[str] = ""
    #: The marks (module doc) it reads off :attr:`Call.shape`, each with its value where a call has none.
    marks: ClassVar[dict[str, object]] = {}
    #: Its fitted parameters' type; None: it fits nothing.
    params_type: ClassVar[type[Params] | None] = None
    #: The top-level manifest key older sets stored its parameters under, if any.
    legacy_key: ClassVar[str | None] = None

    # -- at training time ---------------------------------------------------------------
    def fit(self, samples: pd.DataFrame, hw: HardwareConfig) -> Params | None:
        """What ``prism train`` stores for it, from the hardware's sample rows (None: nothing)."""
        return None

    def prepare(self, samples: pd.DataFrame, params: Params | None, hw: HardwareConfig) -> pd.DataFrame:
        """The sample rows as the op models learn them: without the rows it alone reads, or
        with its part taken off (default: unchanged)."""
        return samples

    # -- at pricing time ------------------------------------------------------------------
    @abstractmethod
    def applies(self, batch: Batch, params: Params | None) -> np.ndarray:
        """Which calls of ``batch`` it changes (a boolean mask)."""

    @abstractmethod
    def apply(self, batch: Batch, q: np.ndarray, params: Params | None, which: np.ndarray) -> np.ndarray:
        """The quantiles (rows of ``which``, k levels, us) of the calls in ``which``
        (:meth:`applies`' mask) as corrected; ``q`` are their quantiles so far."""

    def evidence(self, evidence: Evidence, batch: Batch) -> Evidence:
        """A changed call's evidence (default: as it was)."""
        return evidence

    # -- the manifest ---------------------------------------------------------------------
    def to_json(self, params: Params) -> dict:
        """``params`` as the manifest's ``adjustments.<name>`` entry."""
        return {"version": self.version, "params": params.to_json()}

    def from_json(self, value: Any, field: str) -> Params:
        """The typed parameters of the manifest's entry at ``field``."""
        entry = mapping(value, field)
        if entry.get("version") != self.version:
            raise malformed(f"{field}.version", f"version {entry.get('version')!r} of {self.name}'s parameters, this "
                            f"PRISM reads version {self.version}")
        if self.params_type is None:
            raise malformed(field, f"{self.name} fits no parameters")
        return self.params_type.from_json(entry.get("params"), f"{field}.params")

    def from_legacy(self, value: Any, field: str) -> Params:
        """The typed parameters of an older set's top-level :attr:`legacy_key`."""
        raise malformed(field, f"{self.name} reads no legacy key")

    def example(self) -> Params | None:
        """Parameters as a training could fit them, for the contract test (None: it fits none)."""
        return None

    def example_calls(self) -> tuple[str, list[Call]]:
        """A hardware profile whose shipped models it applies with, and calls it applies to
        among others it leaves alone, for the contract test; no calls: it changes no single
        call's quantiles (its application is elsewhere: its docstring says where)."""
        return "", []

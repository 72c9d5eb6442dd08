"""Rows of a runs table as ``prism predict`` would see them: each row's specs
(:func:`~predictor.data.published.row_workload`), and the quantiles of its operator calls
on the row's variant of its hardware profile, from the models trained on that profile.
Models load once per profile and quantiles are looked up once per variant, shared by every
row on it: ``prism predict-batch`` (:mod:`predictor.analyses.batch`) and the published runs
the predictive uncertainty learns from (:mod:`predictor.analyses.doubt`) read rows alike.
"""
from __future__ import annotations

from collections.abc import Mapping

from predictor.data.published import RowJob, row_workload
from predictor.latency.artifacts import ModelSet, trained_models
from predictor.latency.lookup import QuantileCache


class RowLookups:
    """Specs and operator quantiles of table rows; ``models_root`` as ``models_dir``."""

    def __init__(self, models_root=None):
        self.models_root = models_root
        self.hardware: dict = {}  # row_workload's profiles and their per-row variants
        self._models: dict[str, ModelSet | None] = {}  # profile -> trained models
        self._lookups: dict[tuple, QuantileCache] = {}  # hardware key -> its calls' quantiles

    def job(self, row: Mapping) -> RowJob:
        """The row as specs (one PrismError naming the column where it cannot be)."""
        return row_workload(row, self.hardware)

    def lookup(self, job: RowJob) -> QuantileCache:
        """The quantiles of the calls on ``job``'s hardware: its profile's trained models
        (None: the priors) queried on the row's variant of the profile."""
        if job.hardware_key not in self._lookups:
            name = job.hardware_key[0]
            if name not in self._models:  # trained on the profile itself, not the row's variant
                self._models[name] = trained_models(self.hardware[name], self.models_root)
            models = self._models[name]
            self._lookups[job.hardware_key] = QuantileCache(models and models.with_hardware(job.hardware),
                                                            job.hardware)
        return self._lookups[job.hardware_key]

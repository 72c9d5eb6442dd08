"""Rows of a runs table as ``prism predict`` would see them: each row's specs
(:func:`~predictor.data.published.row_workload`) as a :class:`~predictor.core.job.Job`
whose hardware is the row's variant of a profile, priced by that profile's models.
Models load once per profile and quantiles are looked up once per variant, shared by every
row on it (the :class:`~predictor.engine.predictor.Predictor` keeps them):
``prism predict-batch`` (:mod:`predictor.analyses.batch`) and the published runs the
predictive uncertainty learns from (:mod:`predictor.analyses.doubt`) read rows alike.
"""
from __future__ import annotations

from collections.abc import Mapping

from predictor.core.framework import row_framework
from predictor.core.job import Job
from predictor.data.published import RowJob, row_workload
from predictor.engine.predictor import Predictor, QuantileCache


def row_job(job: RowJob) -> Job:
    """A row's specs as a :class:`Job`: its hardware the row's variant of a profile, priced
    by that profile's models; its framework the one whose file prices the row's framework cell
    (:func:`~predictor.core.framework.row_framework`)."""
    return Job(job.model, job.hardware, job.parallel, job.gpus, row_framework(job.framework),
               hardware_key=job.hardware_key, models_from=job.hardware_key[0])


class RowLookups:
    """Specs and operator quantiles of table rows; ``models_root`` as ``models_dir``."""

    def __init__(self, models_root=None, predictor: Predictor | None = None):
        self.models_root = models_root
        self.predictor = predictor or Predictor(models_root)
        self.hardware: dict = {}  # row_workload's profiles and their per-row variants

    def job(self, row: Mapping) -> RowJob:
        """The row as specs (one PrismError naming the column where it cannot be)."""
        return row_workload(row, self.hardware)

    def lookup(self, job: RowJob) -> QuantileCache:
        """The quantiles of the calls on ``job``'s hardware: its profile's trained models
        (None: the priors) queried on the row's variant of the profile."""
        return self.predictor.pricer(row_job(job))

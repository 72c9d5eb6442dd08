"""The :class:`Predictor`: a :class:`~predictor.core.job.Job` in, its workload, step-time
distribution and report out (docs/architecture.md).

It holds what jobs share, so that a verb predicting one job and predict-batch predicting
thousands run the same chain once per job and nothing twice:

- the trained model sets, loaded once per hardware profile
  (:func:`~predictor.latency.artifacts.trained_models`);
- one :class:`~predictor.latency.lookup.QuantileCache` per hardware (a profile, or a
  runs-table row's variant of one): each distinct operator call is priced once, whatever
  job it recurs in, and :meth:`Predictor.prefetch` prices the calls of many jobs in one
  model query per op;
- each job's decomposition (:func:`~predictor.workload.decompose.decompose`), by the
  job's key.

:meth:`~Predictor.workload` decomposes, :meth:`~Predictor.step` composes
(:func:`~predictor.engine.compose.compose`), :meth:`~Predictor.composed` adds what a
report reads (the run-persistent draws, evidence tier, predictive uncertainty, memory)
and :meth:`~Predictor.report` is ``prism predict``'s :class:`~predictor.engine.report.Prediction`.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from predictor.core.framework import load_framework
from predictor.core.job import Job
from predictor.core.profiles import load_hardware
from predictor.core.specs import HardwareConfig
from predictor.engine.compose import DRAWS, PER_STEP, StepDistribution, compose, compose_holds, workload_calls
from predictor.engine.doubt import Doubt, doubt_of, doubts_of, shipped_model
from predictor.engine.report import Prediction, prediction
from predictor.latency.artifacts import TIERS, ModelSet, evidence_tier, trained_models
from predictor.latency.lookup import QuantileCache, Source
from predictor.latency.regressor import DEFAULT_QUANTILES
from predictor.workload.decompose import Workload, decompose
from predictor.workload.memory import MemoryBreakdown, memory_per_gpu

#: The engine's API: the Predictor and the values it hands out, so that the analyses read
#: them here rather than from the layers below (the quantile levels of every distribution,
#: the evidence tiers, the priced workload's types).
__all__ = ["DEFAULT_QUANTILES", "DRAWS", "PER_STEP", "TIERS", "Composed", "Doubt", "Job", "ModelSet", "Predictor",
           "Prediction", "QuantileCache", "Source", "StepDistribution", "Workload"]

#: Decompositions kept (the most recently used): a predict-batch chunk's jobs, many times over.
KEPT_WORKLOADS = 1024

#: ``doubt_model``'s default: the predictive-uncertainty model shipped in ``models/doubt``.
SHIPPED = "shipped"


@dataclass
class Composed:
    """One job composed, with what its report reads: the step-time distribution ``dist``,
    the same draws with the per-step components averaged out over a run (``persistent``;
    None where not asked for), the evidence tier, the predictive uncertainty of the run's
    median step, and the memory per GPU."""

    job: Job
    work: Workload
    models: ModelSet | None
    dist: StepDistribution
    persistent: np.ndarray | None
    tier: str
    doubt: Doubt
    memory: MemoryBreakdown
    seed: int


class Predictor:
    """Predicts jobs from the models in ``models_dir`` (None: the shipped ``models/``),
    keeping what jobs share (module docstring). ``doubt_model``: the predictive-uncertainty
    model (default: the shipped one; None: no doubt stated)."""

    def __init__(self, models_dir=None, doubt_model=SHIPPED):
        self.models_dir = models_dir
        self._doubt_model = doubt_model
        self._models: dict[tuple, ModelSet | None] = {}
        self._pricers: dict[tuple, QuantileCache] = {}
        self._works: dict[tuple, Workload] = {}

    @classmethod
    def with_models(cls, models: ModelSet | None, hardware: HardwareConfig, doubt_model=SHIPPED) -> Predictor:
        """A Predictor that prices jobs on ``hardware`` with ``models`` (a set loaded by the
        caller, or None: the priors alone) rather than those of a models folder."""
        predictor = cls(None, doubt_model)
        predictor._models[("spec", repr(hardware))] = models
        return predictor

    # -- what jobs share ------------------------------------------------------------------
    @property
    def doubt_model(self):
        if self._doubt_model == SHIPPED:
            self._doubt_model = shipped_model()
        return self._doubt_model

    def models(self, job: Job | HardwareConfig) -> ModelSet | None:
        """The trained models that price ``job`` (or a hardware profile): its profile's, or,
        for a job whose hardware is a variant of a profile (``job.models_from``), that
        profile's queried on the variant. None: no models, the priors."""
        if isinstance(job, HardwareConfig):
            return self._own_models(job)
        if job.models_from is None:
            return self._own_models(job.hardware)
        key = ("profile", job.models_from)
        if key not in self._models:  # trained on the profile itself, not the row's variant
            self._models[key] = trained_models(load_hardware(job.models_from), self.models_dir)
        models = self._models[key]
        return models and models.with_hardware(job.hardware)

    def _own_models(self, hardware: HardwareConfig) -> ModelSet | None:
        key = ("spec", repr(hardware))
        if key not in self._models:
            self._models[key] = trained_models(hardware, self.models_dir)
        return self._models[key]

    def pricer(self, job: Job | HardwareConfig) -> QuantileCache:
        """The operator quantiles of ``job``'s hardware (or of a hardware profile), shared
        by every job on it."""
        key = ("spec", repr(job)) if isinstance(job, HardwareConfig) else job.pricing_key
        if key not in self._pricers:
            hardware = job if isinstance(job, HardwareConfig) else job.hardware
            self._pricers[key] = QuantileCache(self.models(job), hardware)
        return self._pricers[key]

    def prefetch(self, jobs: Iterable[Job]) -> None:
        """Price the calls of every job in ``jobs`` that decomposes: one model query per op
        and hardware for all of them. A job that fails is left to fail on its own."""
        by_hardware: dict[tuple, tuple[Job, list]] = {}
        for job in jobs:
            try:
                calls = workload_calls(self.workload(job))
            except Exception:  # noqa: BLE001 - its own error comes when it is predicted
                continue
            by_hardware.setdefault(job.pricing_key, (job, []))[1].extend(calls)
        for job, calls in by_hardware.values():
            try:
                self.pricer(job).fill(calls)
            except Exception:  # noqa: BLE001 - priced call by call later: only the bad ones fail
                pass

    # -- the chain ------------------------------------------------------------------------
    def workload(self, job: Job) -> Workload:
        """``job`` decomposed: per pipeline stage the operator calls of a micro-batch and of a step."""
        key = job.key
        work = self._works.pop(key, None)
        if work is None:
            work = decompose(job.model, job.parallel, job.hardware, job.gpus, framework=job.framework)
            while len(self._works) >= KEPT_WORKLOADS:  # the least recently used goes
                del self._works[next(iter(self._works))]
        self._works[key] = work  # the most recently used last
        return work

    def step(self, job: Job, draws: int = DRAWS, seed: int = 0, **options) -> StepDistribution:
        """``job``'s step-time distribution (:func:`~predictor.engine.compose.compose`;
        ``options``: its ``hold``, ``calibration``, ``slow_gpus``, ``slow_factor``, ``brute_force``)."""
        models = self.models(job)
        work = self.workload(job)
        return compose(work, models, draws=draws, seed=seed, cache=self.pricer(job), **options)

    def steps(self, job: Job, holds, draws: int = DRAWS, seed: int = 0, **options) -> list[StepDistribution]:
        """:meth:`step` once per hold of ``holds`` (e.g. ``[(), PER_STEP]``: the step and
        its run-persistent twin), the operator draws shared where the holds allow
        (:func:`~predictor.engine.compose.compose_holds`): the same distributions as one
        :meth:`step` each."""
        models = self.models(job)
        work = self.workload(job)
        return compose_holds(work, models, holds, draws=draws, seed=seed, cache=self.pricer(job), **options)

    def compose(self, work: Workload, draws: int = DRAWS, seed: int = 0, on: HardwareConfig | None = None,
                **options) -> StepDistribution:
        """The step-time distribution of a workload decomposed elsewhere (a measured layout's),
        priced on ``on`` (default: the workload's hardware) as :meth:`step` prices a job."""
        on = on or work.hardware
        return compose(work, self.models(on), draws=draws, seed=seed, cache=self.pricer(on), **options)

    def tier(self, job: Job | HardwareConfig, dist: StepDistribution | None = None) -> str:
        """The evidence tier of ``job``'s prediction (of its composed ``dist`` where given;
        of any job on it for a hardware profile)."""
        return evidence_tier(self.models(job), None if dist is None else dist.evidence.values())

    def doubt(self, job: Job, dist: StepDistribution, tier: str | None = None) -> Doubt:
        """The predictive distribution of ``job``'s run median step, composed as ``dist``."""
        return doubt_of(self.workload(job), dist, tier or self.tier(job, dist), job.framework, self.doubt_model)

    def memory(self, job: Job) -> MemoryBreakdown:
        """Memory per GPU of ``job``'s fullest stage."""
        par = self.workload(job).parallel
        return memory_per_gpu(job.model, par, flash_attention=par.attention != "unfused",
                              grad_bytes=load_framework(job.framework).grad_bytes)

    def composed(self, job: Job, draws: int = DRAWS, seed: int = 0, persistent: bool = True,
                 doubt: bool = True) -> Composed:
        """``job`` composed with what a report reads (:class:`Composed`); ``doubt=False``
        leaves its predictive uncertainty to :meth:`add_doubts` (None until then)."""
        models = self.models(job)
        work = self.workload(job)
        cache = self.pricer(job)
        if persistent:
            dist, held = compose_holds(work, models, [(), PER_STEP], draws=draws, seed=seed, cache=cache)
            held = held.draws
        else:
            dist, held = compose(work, models, draws=draws, seed=seed, cache=cache), None
        tier = evidence_tier(models, dist.evidence.values())
        return Composed(job, work, models, dist, held, tier,
                        doubt_of(work, dist, tier, job.framework, self.doubt_model) if doubt else None,
                        self.memory(job), seed)

    def add_doubts(self, composed: list[Composed]) -> list[Exception | None]:
        """The predictive uncertainty of many composed jobs in one query of the doubt model
        (each :class:`Composed`'s ``doubt`` set); per job None, or the error that kept it from one."""
        errors = []
        try:
            doubts = doubts_of(composed, self.doubt_model)
        except Exception:  # noqa: BLE001 - one at a time, so that only the job at fault fails
            doubts = []
            for c in composed:
                try:
                    doubts.append(doubt_of(c.work, c.dist, c.tier, c.job.framework, self.doubt_model))
                except Exception as exc:  # noqa: BLE001 - that job's failure
                    doubts.append(exc)
        for c, d in zip(composed, doubts):
            if isinstance(d, Exception):
                errors.append(d)
            else:
                c.doubt = d
                errors.append(None)
        return errors

    def report(self, job: Job, draws: int = DRAWS, seed: int = 0, *, train_tokens: float = 1e12,
               target_step_s: float | None = None, confidence: float | None = None) -> Prediction:
        """What ``prism predict`` reports of ``job`` (:class:`~predictor.engine.report.Prediction`)."""
        return prediction(self.composed(job, draws, seed), train_tokens, target_step_s, confidence)


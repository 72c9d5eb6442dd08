"""The predictive uncertainty of one prediction: the features of a composed job that the
predictive-uncertainty model (:class:`~predictor.latency.doubt.DoubtModel`) reads, the
model shipped in ``models/doubt``, and the distribution of a run's median step it gives
(:func:`doubt_of`). Fitting and checking that model on published runs is
:mod:`predictor.analyses.doubt`'s.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from predictor.core.framework import uncertainty_code, uncertainty_framework
from predictor.core.job import check_framework  # noqa: F401  (check_framework: its old home's name)
from predictor.core.ops import DTYPE_BYTES
from predictor.engine.compose import StepDistribution
from predictor.engine.draws import inverse_cdf
from predictor.latency.artifacts import TIERS, models_dir
from predictor.latency.doubt import FEATURES, GEMM_PRECISIONS, DoubtModel
from predictor.latency.regressor import DEFAULT_QUANTILES
from predictor.workload.decompose import Workload
from predictor.workload.layers import parameter_count

#: The predictive-uncertainty model's folder under the models directory.
DOUBT = "doubt"


def family(framework: str) -> str:
    """The framework family (:data:`~predictor.latency.doubt.FRAMEWORKS`) of a runs table's
    framework cell: the frameworks' files' ``uncertainty.cells`` (the two families the table
    has no defaults for, DeepSpeed and llm-foundry), else the table's own reading
    (:func:`~predictor.data.runs_table.framework_family`), else the unrecognised one's
    (:func:`predictor.core.framework.uncertainty_framework`)."""
    return uncertainty_framework(str(framework))


def tier_code(tier: str) -> int:
    """The code of an evidence tier as :func:`~predictor.latency.artifacts.evidence_tier`
    writes it ("microbenchmarks of h100-sxm (same compute die)" is microbenchmarks)."""
    return next(i for i, name in enumerate(TIERS) if tier.startswith(name))


def calls_per_step(work: Workload) -> int:
    """Operator calls one GPU of the busiest stage launches in a step (device calls: the host
    ops describe the same calls' framework time)."""
    return max(sum(c.count for c in st.forward + st.backward if c.role != "host") * work.micro_batches
               + sum(c.count for c in st.step if c.role != "host") for st in work.stages)


def gpu_generation(hw) -> float:
    """The ``gpu`` feature: the device's GPU generation, the major of its CUDA compute
    capability (8 Ampere, 9 Hopper, 10 Blackwell and Blackwell Ultra); 0 on a CPU; -1 for a
    GPU whose profile states none. A generation no training run had lies outside the
    feature's range: the prediction is extrapolating on a kind of device no source was, and
    its interval widens to every source's reach (:func:`~predictor.latency.doubt.widen`)."""
    if not hw.host.asynchronous:
        return 0.0
    return float(math.floor(hw.device.compute_capability)) if hw.device.compute_capability else -1.0


def gemm_precision(hw) -> float:
    """The ``gemm_precision`` feature: the code (:data:`~predictor.latency.doubt.GEMM_PRECISIONS`)
    of the linear layers' GEMM precision, 0 where they run in 16 or 32 bits. A precision of
    under two bytes an element without a code is a bug, never read as 16-bit
    (tests/latency/test_doubt.py checks that every one has its code)."""
    dtype = hw.gemm_dtype
    return 0.0 if dtype is None or DTYPE_BYTES[dtype] >= 2 else float(GEMM_PRECISIONS.index(dtype))


def features(work: Workload, dist: StepDistribution, tier: str, framework: str) -> np.ndarray:
    """The :data:`~predictor.latency.doubt.FEATURES` of one prediction."""
    par, p50 = work.parallel, float(np.median(dist.draws))
    values = {
        "tier": tier_code(tier), "prior_share": dist.prior_share, "comm_share": dist.exposed_comm_s / p50,
        "bubble_share": dist.bubble_s / p50, "log2_us_per_call": math.log2(p50 * 1e6 / calls_per_step(work)),
        "log2_gpus": math.log2(work.gpus), "log2_tp": math.log2(par.tp),
        "log2_pp": math.log2(par.pp), "log2_dp": math.log2(par.dp), "log2_cp": math.log2(par.cp),
        "log2_micro_batches": math.log2(work.micro_batches), "log10_params": math.log10(parameter_count(work.model)),
        "log2_seq": math.log2(work.seq), "gemm_precision": gemm_precision(work.hardware),
        "gpu": gpu_generation(work.hardware), "framework": uncertainty_code(framework)}
    return np.array([values[f] for f in FEATURES], float)


@functools.lru_cache(maxsize=1)
def shipped_model() -> DoubtModel | None:
    """The predictive-uncertainty model shipped in ``models/doubt`` (None where it is not)."""
    directory = models_dir() / DOUBT
    return DoubtModel.load(directory) if (directory / "manifest.json").is_file() else None


@dataclass
class Doubt:
    """The predictive distribution of a run's median step: quantiles (s) at
    :data:`~predictor.latency.regressor.DEFAULT_QUANTILES`, the composed median they lean
    from (its own median may lie above it: :func:`~predictor.latency.doubt.calibrated`),
    the features the model is extrapolating on, and what it was learned from (None: no
    model, no doubt stated)."""

    quantiles_s: np.ndarray
    prediction_s: float
    extrapolating: list[str]
    learned_from: str | None
    alike: dict | None = None  # what runs like this one measured against PRISM (DoubtModel.alike)

    def draws(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` draws of the run's median step over the composed median (1 = the prediction)."""
        q = self.quantiles_s / self.prediction_s
        return inverse_cdf(q[None, :], np.asarray(DEFAULT_QUANTILES), rng.uniform(size=(1, n)))[0]


def alike_words(alike: dict) -> str:
    """What a band rests on, in words (:meth:`~predictor.latency.doubt.DoubtModel.alike`):
    the runs like the query and how far they measured from PRISM's median."""
    what = ", ".join(alike["matched_on"].values()) or "every run"
    lo, hi = alike["off_by"]
    return (f"runs like this ({what}: {alike['sources']} sources, {alike['runs']:,} runs) measured {lo:+.0%} to "
            f"{hi:+.0%} against PRISM's median")


def doubt_of(work: Workload, dist: StepDistribution, tier: str, framework: str,
             model: DoubtModel | None) -> Doubt:
    """The predictive distribution of ``work``'s median step predicted as ``dist``."""
    p50 = float(np.median(dist.draws))
    if model is None:
        return Doubt(np.full(len(DEFAULT_QUANTILES), p50), p50, [], None)
    x = features(work, dist, tier, framework)[None, :]
    return Doubt(p50 * np.exp(model.predict(x)[0]), p50, model.extrapolating(x)[0],
                 f"{model.rows_} measured runs of {len(model.sources_)} sources, left out one source at a time",
                 model.alike(x[0]))


def doubts_of(composed: list, model: DoubtModel | None) -> list[Doubt | Exception]:
    """:func:`doubt_of` of many composed jobs (each with ``work``, ``dist``, ``tier`` and
    ``job.framework``) in one query of ``model``: a row's prediction depends on its own
    features alone. A job whose features cannot be computed gets its exception instead."""
    out: list[Doubt | Exception | None] = [None] * len(composed)
    rows, X = [], []
    for i, c in enumerate(composed):
        p50 = float(np.median(c.dist.draws))
        if model is None:
            out[i] = Doubt(np.full(len(DEFAULT_QUANTILES), p50), p50, [], None)
            continue
        try:
            X.append(features(c.work, c.dist, c.tier, c.job.framework))
        except Exception as exc:  # noqa: BLE001 - that job's own failure, as doubt_of raises it
            out[i] = exc
            continue
        rows.append((i, p50))
    if rows:
        X = np.array(X)
        q, extrapolating = model.predict(X), model.extrapolating(X)
        learned = f"{model.rows_} measured runs of {len(model.sources_)} sources, left out one source at a time"
        for (i, p50), qi, ex, x in zip(rows, q, extrapolating, X):
            out[i] = Doubt(p50 * np.exp(qi), p50, ex, learned, model.alike(x))
    return out

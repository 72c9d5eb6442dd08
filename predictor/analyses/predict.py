"""``prism predict``: one workload -> the report of docs/method.md (Composer step 6).

:func:`predict` takes the typed specs of :mod:`predictor.core.specs` and returns a
:class:`Prediction`: a :class:`~predictor.core.job.Job` predicted by a
:class:`~predictor.engine.predictor.Predictor`; the command line (:mod:`predictor.app.cli`) builds the specs from
``conf/`` and renders the result (:mod:`predictor.app.render`, :mod:`predictor.app.plots`).
"""
from __future__ import annotations

from pathlib import Path

from predictor.core.job import Job, check_framework, check_gpus  # noqa: F401  (check_gpus: read here by its old name)
from predictor.core.profiles import as_hardware, as_layout, as_model
from predictor.core.specs import HardwareConfig, ModelConfig, ParallelConfig, check_draws, check_number
from predictor.engine.compose import DRAWS
from predictor.engine.predictor import Predictor
from predictor.engine.report import (  # noqa: F401  (the report's parts, read here by their old names)
    MAX_TRAIN_TOKENS,
    SECONDS_PER_DAY,
    Prediction,
    check_confidence,
    check_train_tokens,
    predictive_report,
    run_step_draws,
    steps_to_train,
)


def predict(model: ModelConfig, hardware: HardwareConfig, layout: ParallelConfig, gpus: int | None = None, *,
            models_dir: str | Path | None = None, draws: int = DRAWS, seed: int = 0, train_tokens: float = 1e12,
            target_step_s: float | None = None, confidence: float | None = None,
            framework: str | None = None) -> Prediction:
    """Predict one training job: its step-time distribution, throughput, memory and time
    and cost to train.

    Parameters
    ----------
    model : ModelConfig
        The model, e.g. ``load_model("llama3-70b")`` (:mod:`predictor.core.profiles`).
    hardware : HardwareConfig
        The hardware profile, e.g. ``load_hardware("h100-sxm")``.
    layout : ParallelConfig
        The parallel layout, e.g. ``ParallelConfig(tp=8, pp=4)``; ``dp`` is set from
        ``gpus`` where given, and ``global_batch_size=0`` takes its default
        (:func:`~predictor.core.layout.resolve_layout`). ``layout`` itself is not changed.
    gpus : int, optional
        The job's GPU count; None: dp·tp·pp·cp of ``layout``.
    models_dir : str or Path, optional
        Trained operator models, ``<models_dir>/<hardware>/``; None: the shipped ``models/``.
        Without models for the hardware, the prediction rests on priors.
    draws, seed : int
        Monte Carlo draws of the step and their seed.
    train_tokens : float
        The token budget of the time and cost to train.
    target_step_s : float, optional
        Also report P(step <= target_step_s).
    confidence : float, optional
        Also report the step time and time to train that hold with this probability
        (variability and predictive uncertainty together).
    framework : str or None
        The framework that runs the job, a file of ``conf/framework/`` or its alias (None: the
        default one, :func:`~predictor.core.framework.default_framework`); its family is a
        feature of the predictive uncertainty.

    Raises
    ------
    PrismError
        Naming the field: ``gpus``, ``confidence``, ``train_tokens`` or the layout's.
    """
    model, hardware, layout = as_model(model), as_hardware(hardware), as_layout(layout)
    level = check_confidence(confidence)
    train_tokens = check_train_tokens(train_tokens)
    check_draws("draws", draws)
    if target_step_s is not None:
        check_number("target_step_s", target_step_s)
    job = Job.of(model, hardware, layout, gpus, check_framework(framework))
    return Predictor(models_dir).report(job, draws, seed, train_tokens=train_tokens, target_step_s=target_step_s,
                                        confidence=level)

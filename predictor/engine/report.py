"""What ``prism predict`` reports of one job (docs/method.md, Composer step 6): the
:class:`Prediction`, its checks of the report's own settings (confidence, token budget),
the notes that say what was assumed, and :func:`prediction`, which assembles it from
what the :class:`~predictor.engine.predictor.Predictor` computed.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from predictor.core.errors import PrismError
from predictor.core.layout import framework_note, idle_note, kv_replication_note, report_layout, split_note
from predictor.core.mesh import tp_span_note
from predictor.core.specs import HardwareConfig, ModelConfig, ParallelConfig, check_number
from predictor.engine.compose import REPORT_QUANTILES
from predictor.engine.doubt import Doubt
from predictor.latency.artifacts import TIERS, foreign_device, unsigned_note
from predictor.latency.regressor import DEFAULT_QUANTILES
from predictor.workload.decompose import Workload
from predictor.workload.flops import model_flops_per_step

SECONDS_PER_DAY = 86400.0


@dataclass
class Prediction:
    """One job predicted. Two distributions, kept apart (docs/method.md, Composer step 5):
    ``step_time_s`` is the step-time *variability* (what the hardware does: per-step jitter
    and what a run draws once, its slowest GPUs and its kernels' own speed; ``one_run_s``
    the per-step part alone, the spread one run's log shows), ``predictive`` the *predictive
    uncertainty* of the run's median step (what PRISM does not know, learned from measured
    runs). The time and cost to train use both."""

    model: str
    hardware: str
    gpus: int
    layout: dict
    step_time_s: dict  # the hardware's variability: p5 ... p99, mean, jitter_p95_over_p50
    cdf: dict  # {"t_s": [...], "p": [...]}: the full step-time CDF on a grid (variability)
    predictive: dict  # the run's median step: quantiles, central intervals, what it extrapolates on
    tokens_per_s: float
    mfu: float
    memory_gib: dict
    fits: bool
    train_tokens: float
    time_to_train_days: dict  # p5, p50, p95
    gpu_hours: float
    cost_usd: dict | None  # p5, p50, p95 (None without a price)
    breakdown_s: dict  # compute, exposed communication, bubble, host-bound time (medians, slowest stage)
    basis: dict = field(default_factory=dict)
    tier: str = TIERS[2]  # measured samples | microbenchmarks | spec-only prior (operator_models.TIERS)
    prob_below: dict | None = None
    calibration: dict | None = None  # the in-situ calibration of the models, if fitted
    variability_source: dict | None = None  # per component its sigma, measured (n, interval) or cited
    confidence: dict | None = None  # {"level", "step_time_s", "time_to_train_days"}: what holds with that probability
    one_run_s: dict = field(default_factory=dict)  # p10, p50, p90 of one run's steps (one_run_draws)
    notes: list[str] = field(default_factory=list)  # what the user should know, e.g. models of another CPU
    #: The one step figure tokens/s, MFU, time to train, GPU-hours and cost rest on: the p50 of the
    #: run's mean step (the persistent variability times the doubt about the median step), so that
    #: tokens/s x time to train is the token budget (to a step's tokens).
    train_step_s: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def predictive_report(doubt: Doubt) -> dict:
    """The predictive distribution of the run's median step as reported: quantiles, the
    50/80/90% central intervals, what the model extrapolates on, what it learned from, and
    what runs like this one measured against PRISM (``alike``: None without a model)."""
    q = dict(zip(DEFAULT_QUANTILES, map(float, doubt.quantiles_s)))
    return {"median_step_s": {f"p{round(a * 100)}": v for a, v in q.items()},
            "interval_s": {f"{round((hi - lo) * 100)}%": [q[lo], q[hi]] for lo, hi in ((0.25, 0.75), (0.1, 0.9),
                                                                                        (0.05, 0.95))},
            "extrapolating": doubt.extrapolating, "learned_from": doubt.learned_from, "alike": doubt.alike}


def steps_to_train(train_tokens: float, tokens_per_step: float) -> int:
    """Steps of a run of ``train_tokens``: whole steps, so a budget under one step's tokens
    still takes a step (train_tokens=1 took 3.7 microseconds of a 0.8 s step)."""
    return max(1, math.ceil(train_tokens / tokens_per_step))


def run_step_draws(full: np.ndarray, persistent: np.ndarray) -> np.ndarray:
    """Mean step time over a whole run, one value per draw.

    Over many steps the per-step components (temporal, regime) average out to their mean;
    what persists for the whole run (the job's slowest GPUs, the operator models' residual:
    the same kernels recur every step) keeps its spread. So the run's mean step is the
    persistent draws (``compose(..., hold=PER_STEP)``) scaled to the full draws' mean.
    Failures and restarts are not in it (:mod:`predictor.analyses.variability` adds them).
    """
    return persistent * (full.mean() / persistent.mean())


def one_run_draws(full: np.ndarray, persistent: np.ndarray) -> np.ndarray:
    """Steps of one run whose persistent factors sit at their median: the per-step part alone.

    The full draws take every component anew each draw, what a run keeps for its whole length
    (its slowest GPUs, the kernels' own residual) as well as what moves step to step (temporal,
    regime); the persistent twin (``hold=PER_STEP``) drew the same numbers with the per-step
    components held, so ``full / persistent`` is each draw's per-step factor. Scaled to the
    full draws' median, they are the steps one run's log shows; checked against the per-step
    logs of 47 MLPerf Training runs by ``benchmarks/bench_generalization.py`` (its within-run
    section; the figures: docs/uncertainty.md).
    """
    factor = full / persistent
    return factor * (np.median(full) / np.median(factor))


def run_mean_draws(full: np.ndarray, persistent: np.ndarray, doubt: Doubt, seed: int) -> tuple[np.ndarray,
                                                                                                 np.ndarray]:
    """Draws of a run's mean step (:func:`run_step_draws` times the doubt about the median step)
    and of one step with that doubt, for a job composed with ``seed``: what the time to train,
    tokens/s and ``confidence`` rest on, the same for every verb."""
    doubt_draws = doubt.draws(np.random.default_rng(seed + 1), len(full))
    return run_step_draws(full, persistent) * doubt_draws, full * doubt_draws


def train_step(run_mean: np.ndarray) -> float:
    """The one step figure tokens/s, MFU, time to train, GPU-hours and cost rest on: the p50
    of the run's mean step (:func:`run_mean_draws`)."""
    return float(np.quantile(run_mean, 0.5))


def check_confidence(value) -> float | None:
    """``confidence`` as a probability in (0, 1), or None where it is not set."""
    if value is None:
        return None
    check_number("confidence", value)
    if not value < 1:
        raise PrismError(f"confidence={value}: a probability strictly between 0 and 1, e.g. confidence=0.95 "
                         f"(the step time and time to train that hold with that probability)", field='confidence')
    return float(value)


#: The largest token budget taken: past it a figure is a typo (and the days to train no figure to plan by).
MAX_TRAIN_TOKENS = 1e18


def check_train_tokens(value) -> float:
    """``train_tokens`` as a positive number of tokens."""
    check_number("train_tokens", value)
    if value > MAX_TRAIN_TOKENS:
        raise PrismError(f"train_tokens={value:g}: above {MAX_TRAIN_TOKENS:.0e} tokens, tens of thousands of times "
                         f"the largest published runs (15e12 to 36e12); a typo?", field="train_tokens")
    return float(value)


#: Attention kernels (FlashAttention, cuDNN, cuBLAS tensor cores) take a head width that is a
#: multiple of 8 (16-byte rows at 16-bit precision) and pad any other; every published model's
#: is (64 to 256, conf/model/).
HEAD_MULTIPLE = 8


def head_note(model: ModelConfig) -> str | None:
    """A note where ``model``'s head width is no multiple of :data:`HEAD_MULTIPLE`: a typo of
    hidden / heads more likely than a model; priced as given, which the kernels would pad."""
    widths = {"model.head_dim": model.head_dim, "model.v_head_dim": model.v_head_dim}
    odd = [f"{k}={v}" for k, v in widths.items() if v and v % HEAD_MULTIPLE]
    if not odd:
        return None
    return (f"{', '.join(odd)}: no multiple of {HEAD_MULTIPLE}, as every published model's head is (64 to 256 wide) "
            f"and attention kernels pad one to; priced as given: check it (head_dim = hidden / heads)")


def _batch_note(given: ParallelConfig, par: ParallelConfig) -> str | None:
    """Where the global batch was left to its default: it follows dp and pp."""
    if given.global_batch_size:
        return None
    return (f"parallel.global_batch_size={par.global_batch_size}, the default of this layout (4·pp micro-batches "
            f"per replica, so it changes with dp and pp); set it to compare layouts of one job")


def _attention_note(given: ParallelConfig, work: Workload, framework: str) -> str | None:
    """Which attention kernel ``parallel.attention=auto`` came to, where it is not FlashAttention-2."""
    if given.attention != "auto" or work.parallel.attention == "flash":
        return None
    return (f"parallel.attention=auto: {work.parallel.attention}, {framework}'s kernel on {work.hardware.name} "
            f"(set parallel.attention=flash, cudnn or unfused to choose)")


def _modules_note(model: ModelConfig, par: ParallelConfig) -> str | None:
    """The ``parallel.recompute_modules`` this model has none of (nothing to recompute), and
    what the memory figure leaves out (mla_up_proj)."""
    listed = [m.strip() for m in par.recompute_modules.split(",") if m.strip()]
    has = {"moe": model.num_experts > 0, "moe_act": model.num_experts > 0,
           "shared_experts": model.shared_expert_ffn_hidden_size > 0, "mla_up_proj": model.kv_lora_rank > 0}
    absent = [m for m in listed if not has.get(m, True)]
    notes = []
    if absent:
        notes.append(f"parallel.recompute_modules: {model.name} has no {', '.join(absent)} to recompute "
                     f"(nothing of {'it' if len(absent) == 1 else 'them'} in the step time or the memory)")
    if "mla_up_proj" in listed and "mla_up_proj" not in absent:
        notes.append("memory: what recomputing mla_up_proj frees is not taken off (the step time counts its recompute)")
    return "; ".join(notes) or None


def _memory_precision_note(hw: HardwareConfig) -> str | None:
    """The memory model counts mixed precision's 2-byte weights and activations
    (:mod:`predictor.workload.memory`); a float32 run holds about twice, which it does not model."""
    if hw.train_dtype != "float32":
        return None
    return ("memory / GPU counts bf16 mixed precision's 2-byte weights and activations; this float32 run "
            "(hardware.train_dtype) holds about twice as many bytes of each")


def prediction(computed, train_tokens: float = 1e12, target_step_s: float | None = None,
               confidence: float | None = None) -> Prediction:
    """The :class:`Prediction` of a job the :class:`~predictor.engine.predictor.Predictor`
    composed (``computed``: its :class:`~predictor.engine.predictor.Composed`), for a run of
    ``train_tokens``, with P(step <= ``target_step_s``) and the figures that hold with
    probability ``confidence`` where given."""
    job, work, models, dist, persistent = computed.job, computed.work, computed.models, computed.dist, \
        computed.persistent
    model, hardware, layout, par, framework = job.model, job.hardware, job.layout, job.parallel, job.framework
    gpus, level, seed = job.gpus, confidence, computed.seed
    mem, tier, doubt = computed.memory, computed.tier, computed.doubt
    q = dist.quantile(REPORT_QUANTILES)
    step = {f"p{round(a * 100)}": float(v) for a, v in zip(REPORT_QUANTILES, q)}
    step["mean"] = float(dist.draws.mean())
    step["jitter_p95_over_p50"] = step["p95"] / step["p50"]
    grid = np.quantile(dist.draws, np.linspace(0, 1, 101))
    tokens = work.tokens_per_step
    peak = hardware.mfu_peak
    steps = steps_to_train(train_tokens, tokens)
    # a run's mean step: the persistent variability times the doubt about its median
    run_mean, step_with_doubt = run_mean_draws(dist.draws, persistent, doubt, seed)
    run_q = dict(zip((0.05, 0.5, 0.95), map(float, np.quantile(run_mean, (0.05, 0.5, 0.95)))))
    ttt = {f"p{round(a * 100)}": v * steps / SECONDS_PER_DAY for a, v in run_q.items()}
    step_s = train_step(run_mean)  # tokens/s, MFU, time to train, GPU-hours and cost: all at this step
    gpu_hours = ttt["p50"] * 24 * gpus
    price = hardware.price_per_gpu_hour
    basis = {}
    for key, source in dist.basis.items():
        basis.setdefault(source, []).append(key)
    return Prediction(
        model=model.name, hardware=hardware.name, gpus=gpus,
        layout=report_layout(model, par),
        step_time_s=step, cdf={"t_s": grid.tolist(), "p": np.linspace(0, 1, 101).tolist()},
        predictive=predictive_report(doubt),
        tokens_per_s=tokens / step_s,
        mfu=model_flops_per_step(model, tokens, work.seq) / (step_s * gpus * peak), train_step_s=step_s,
        memory_gib={"weights": mem.weights / 2**30, "gradients": mem.gradients / 2**30,
                    "optimizer": mem.optimizer / 2**30, "activations": mem.activations / 2**30,
                    "workspace": mem.workspace / 2**30, "total": mem.total_gib,
                    "capacity": hardware.memory.capacity_gib, "stage": mem.stage},
        fits=mem.fits(hardware), train_tokens=train_tokens, time_to_train_days=ttt, gpu_hours=gpu_hours,
        cost_usd={k: v * 24 * gpus * price for k, v in ttt.items()} if price else None,
        breakdown_s={"compute": dist.compute_s, "exposed_communication": dist.exposed_comm_s,
                     "bubble": dist.bubble_s, "host_bound": dist.host_s},
        basis=basis, tier=tier,
        notes=[n for n in [foreign_device(models), unsigned_note(models), _attention_note(layout, work, framework),
                           split_note(model, par), head_note(model),
                           kv_replication_note(model, par),
                           idle_note(model, layout, par), framework_note(layout, framework),
                           tp_span_note(par.tp, hardware), _modules_note(model, par), _batch_note(layout, par),
                           _memory_precision_note(hardware)] if n],
        calibration=models.calibration.to_dict() if models and models.calibration else None,
        variability_source=dist.variability.to_dict(),
        one_run_s=dict(zip(("p10", "p50", "p90"),
                           map(float, np.quantile(one_run_draws(dist.draws, persistent), (0.1, 0.5, 0.9))))),
        prob_below={"t_s": float(target_step_s), "p": dist.prob_below(float(target_step_s))}
        if target_step_s else None,
        confidence=None if level is None else {
            "level": level, "step_time_s": float(np.quantile(step_with_doubt, level)),
            "time_to_train_days": float(np.quantile(run_mean, level)) * steps / SECONDS_PER_DAY})

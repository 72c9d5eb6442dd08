"""``prism predict``: one workload -> the report of DESIGN.md ("Composer", step 5)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from predictor.engine.compose import PER_STEP, REPORT_QUANTILES, QuantileCache, compose
from predictor.core.specs import HardwareConfig, ModelConfig, ParallelConfig
from predictor.core.profiles import section
from predictor.core.layout import resolve_layout
from predictor.workload.decompose import decompose
from predictor.core.errors import PrismError
from predictor.app.figures import new_figure, save_figure
from predictor.workload.memory import memory_per_gpu
from predictor.latency.artifacts import TIERS, evidence_tier, trained_models
from predictor.workload.layers import layer_parameters

SECONDS_PER_DAY = 86400.0


@dataclass
class Prediction:
    model: str
    hardware: str
    gpus: int
    layout: dict
    step_time_s: dict  # p5 ... p99 and mean
    cdf: dict  # {"t_s": [...], "p": [...]}: the full step-time CDF on a grid
    tokens_per_s: float
    mfu: float
    memory_gib: dict
    fits: bool
    train_tokens: float
    time_to_train_days: dict  # p5, p50, p95
    gpu_hours: float
    cost_usd: dict | None  # p5, p50, p95 (None without a price)
    breakdown_s: dict  # compute, exposed communication, bubble (medians, slowest stage)
    basis: dict = field(default_factory=dict)
    tier: str = TIERS[2]  # measured samples | microbenchmarks | spec-only prior (operator_models.TIERS)
    prob_below: dict | None = None
    calibration: dict | None = None  # the in-situ calibration of the models, if fitted
    confidence: dict | None = None  # {"level", "step_time_s", "time_to_train_days"}: what holds with that probability

    def to_dict(self) -> dict:
        return asdict(self)


def model_flops_per_step(model: ModelConfig, tokens: int, seq: int) -> float:
    """6N per token for the weights' matmuls plus causal attention (PaLM appendix B, with
    the 12·L·H·Q·T attention term halved for a causal mask); no recompute counted (MFU)."""
    h = model.hidden_size
    matmul_weights = model.num_layers * layer_parameters(model)[0] + model.vocab_size * h
    return 6.0 * matmul_weights * tokens + 6.0 * model.num_layers * h * seq * tokens


def run_step_draws(full: np.ndarray, persistent: np.ndarray) -> np.ndarray:
    """Mean step time over a whole run, one value per draw.

    Over many steps the per-step components (temporal, regime) average out to their mean;
    what persists for the whole run (the job's slowest GPUs, the operator models' residual:
    the same kernels recur every step) keeps its spread. So the run's mean step is the
    persistent draws (``compose(..., hold=PER_STEP)``) scaled to the full draws' mean.
    Failures and restarts are not in it (:mod:`predictor.analyses.variability` adds them).
    """
    return persistent * (full.mean() / persistent.mean())


def check_confidence(value) -> float | None:
    """``confidence`` as a probability in (0, 1), or None where it is not set."""
    if value is None:
        return None
    try:
        level = float(value)
    except (TypeError, ValueError):
        level = float("nan")  # fails the range check below
    if not 0 < level < 1:
        raise PrismError(f"confidence={value}: a probability strictly between 0 and 1, e.g. confidence=0.95 "
                         f"(the step time and time to train that hold with that probability)", field='confidence')
    return level


def predict(cfg: DictConfig, draws: int = 2000) -> Prediction:
    level = check_confidence(cfg.get("confidence"))
    model = section(cfg, "model", ModelConfig)
    hw = section(cfg, "hardware", HardwareConfig)
    par = resolve_layout(section(cfg, "parallel", ParallelConfig), cfg.get("gpus"))
    gpus = par.dp * par.tp * par.pp * par.cp
    models = trained_models(hw, cfg.get("models_dir"))
    work = decompose(model, par, hw, gpus)
    seed = int(cfg.get("seed") or 0)
    cache = QuantileCache(models, hw)  # both composes query the operator models once
    dist = compose(work, models, draws=draws, seed=seed, cache=cache)
    persistent = compose(work, models, draws=draws, seed=seed, cache=cache, hold=PER_STEP).draws
    mem = memory_per_gpu(model, par, flash_attention=par.attention == "flash")
    q = dist.quantile(REPORT_QUANTILES)
    step = {f"p{round(a * 100)}": float(v) for a, v in zip(REPORT_QUANTILES, q)}
    step["mean"] = float(dist.draws.mean())
    grid = np.quantile(dist.draws, np.linspace(0, 1, 101))
    tokens = work.tokens_per_step
    median = step["p50"]
    peak = hw.peak(hw.train_dtype)
    train_tokens = float(cfg.get("train_tokens") or 0) or 1e12
    steps = train_tokens / tokens
    run_mean = run_step_draws(dist.draws, persistent)
    ttt = {f"p{round(a * 100)}": float(v) * steps / SECONDS_PER_DAY
           for a, v in zip((0.05, 0.5, 0.95), np.quantile(run_mean, (0.05, 0.5, 0.95)))}
    gpu_hours = ttt["p50"] * 24 * gpus
    price = hw.price_per_gpu_hour
    basis = {}
    for key, source in dist.basis.items():
        basis.setdefault(source, []).append(key)
    target = cfg.get("target_step_s")
    return Prediction(
        model=model.name, hardware=hw.name, gpus=gpus,
        layout={k: getattr(par, k) for k in ("dp", "tp", "pp", "cp", "vpp", "micro_batch_size", "global_batch_size",
                                              "sequence_parallel", "recompute", "sharding", "schedule")},
        step_time_s=step, cdf={"t_s": grid.tolist(), "p": np.linspace(0, 1, 101).tolist()},
        tokens_per_s=tokens / median, mfu=model_flops_per_step(model, tokens, work.seq) / (median * gpus * peak),
        memory_gib={"weights": mem.weights / 2**30, "gradients": mem.gradients / 2**30,
                    "optimizer": mem.optimizer / 2**30, "activations": mem.activations / 2**30,
                    "total": mem.total_gib, "capacity": hw.memory.capacity_gib, "stage": mem.stage},
        fits=mem.fits(hw), train_tokens=train_tokens, time_to_train_days=ttt, gpu_hours=gpu_hours,
        cost_usd={k: v * 24 * gpus * price for k, v in ttt.items()} if price else None,
        breakdown_s={"compute": dist.compute_s, "exposed_communication": dist.exposed_comm_s,
                     "bubble": dist.bubble_s},
        basis=basis, tier=evidence_tier(models), calibration=models.calibration.to_dict() if models and models.calibration else None,
        prob_below={"t_s": float(target), "p": dist.prob_below(float(target))} if target else None,
        confidence=None if level is None else {
            "level": level, "step_time_s": float(dist.quantile(level)),
            "time_to_train_days": float(np.quantile(run_mean, level)) * steps / SECONDS_PER_DAY})


def format_prediction(p: Prediction) -> str:
    s = p.step_time_s
    lines = [
        f"{p.model} on {p.gpus} x {p.hardware}   "
        + " ".join(f"{k}={v}" for k, v in p.layout.items()),
        "",
        "step time (s)   " + "  ".join(f"{k} {v:.3f}" for k, v in s.items()),
        f"throughput      {p.tokens_per_s:,.0f} tokens/s   MFU {p.mfu:.1%}",
        f"memory / GPU    {p.memory_gib['total']:.1f} GiB of {p.memory_gib['capacity']:.0f} (stage "
        f"{p.memory_gib['stage']}: weights {p.memory_gib['weights']:.1f}, grads {p.memory_gib['gradients']:.1f}, "
        f"optimizer {p.memory_gib['optimizer']:.1f}, activations {p.memory_gib['activations']:.1f})"
        + ("" if p.fits else "   DOES NOT FIT"),
        f"critical path   compute {p.breakdown_s['compute']:.3f} s, exposed communication "
        f"{p.breakdown_s['exposed_communication']:.3f} s, bubble {p.breakdown_s['bubble']:.3f} s",
        f"train {p.train_tokens:.3g} tokens   {p.time_to_train_days['p50']:.1f} days "
        f"(90% band {p.time_to_train_days['p5']:.1f}-{p.time_to_train_days['p95']:.1f}), "
        f"{p.gpu_hours:,.0f} GPU-hours"
        + (f", ${p.cost_usd['p50']:,.0f} (band ${p.cost_usd['p5']:,.0f}-{p.cost_usd['p95']:,.0f})"
           if p.cost_usd else ", no price in the hardware profile"),
    ]
    if p.prob_below:
        lines.append(f"P(step <= {p.prob_below['t_s']:g} s) = {p.prob_below['p']:.3f}")
    if p.confidence:
        c = p.confidence
        lines.append(f"with {c['level']:.0%} confidence   step <= {c['step_time_s']:.3f} s, "
                     f"train in <= {c['time_to_train_days']:.1f} days (no failures; see prism variability)")
    lines.append(f"evidence        {p.tier}")
    lines.append("rests on        " + "; ".join(f"{src}: {', '.join(sorted(ops))}" for src, ops in p.basis.items()))
    if p.calibration:
        c = p.calibration
        if c.get("source") == "trace":
            lines.append(f"calibrated      +{c['op_overhead_us']:.0f} us per op: framework time measured in the "
                         f"profiled steps of the imported traces (prism import-trace)")
        else:
            lines.append(f"calibrated      on {c['layouts']} measured training layouts: compute "
                         f"x{c['compute_scale']:.2f}, +{c['op_overhead_us']:.0f} us per op, "
                         f"+{c['tp_overhead_us']:.0f} us per op under tp (prism calibrate)")
    return "\n".join(lines)


def plot_prediction(p: Prediction, path) -> Path:
    """A PNG of one prediction: the step-time CDF with its p5/p50/p95 (and the target, if
    any), and the median critical path split into compute, exposed communication and bubble."""
    fig, (left, right) = new_figure(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [2, 1]})
    left.plot(p.cdf["t_s"], p.cdf["p"], color="tab:blue")
    for key, style in (("p5", ":"), ("p50", "-"), ("p95", ":")):
        left.axvline(p.step_time_s[key], color="tab:blue", linestyle=style, alpha=0.6)
    if p.prob_below:
        left.axvline(p.prob_below["t_s"], color="tab:red", label=f"target: P = {p.prob_below['p']:.2f}")
        left.legend()
    left.set(xlabel="step time (s)", ylabel="P(step <= t)",
             title=f"{p.model} on {p.gpus} x {p.hardware} ({p.tier})")
    parts = list(p.breakdown_s)
    right.barh(parts[::-1], [p.breakdown_s[k] for k in parts][::-1], color="tab:orange")
    right.set(xlabel="seconds (median, slowest stage)", title="critical path")
    fig.tight_layout()
    return save_figure(fig, path)

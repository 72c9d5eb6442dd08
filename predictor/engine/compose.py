"""The probabilistic composer: operator distributions -> step-time distribution.

DESIGN.md, "Composer". For S Monte Carlo draws at once (numpy, no loop over draws):

1. Each distinct operator call of the decomposition (:mod:`predictor.workload.decompose`) gets
   its latency quantiles: compute ops from the hardware's trained models
   (:class:`predictor.latency.artifacts.ModelSet`); collectives from those models only
   when they were measured on this profile's network, else from the network prior
   (the floor of :mod:`predictor.latency.features` over NCCL's efficiency) with a wider band; ops
   without a model from the roofline prior. One draw per call and step comes by
   inverse CDF from the quantiles; ``count`` identical calls in a step add up as
   ``count * median + sqrt(count) * (draw - median)`` (independent residuals). Calls that
   rest on a prior share one draw and add ``count * (draw - median)``: a prior's error is
   systematic, which widens the band of a prediction the more of it rests on priors.
2. Variability keeps its components apart (:data:`COMPONENTS`), so that any of them can
   be held at its median (``hold``): a per-step compute factor per GPU (``temporal``), a
   persistent per-GPU factor (``spatial``), one communication regime per step shared by
   every collective (``regime``), and each op instance's residual from its quantiles
   (``residual``); ``residual:<op>`` or ``residual:<op>/<pass>`` holds one op's residual
   alone. A stage runs at the pace of its slowest GPU. Per GPU, spatial times temporal is
   lognormal with sigma ``hypot(spatial_cv, temporal_cv)``, and the maximum of N of them is
   drawn directly as ``F^-1(u^(1/N))``, whatever N is. Known-slow GPUs (``slow_gpus`` per
   stage, ``slow_factor`` slower) are a second such maximum, scaled by the factor.
3. The pipeline schedule (:mod:`predictor.engine.schedule`) is walked over the draws; the data-
   parallel gradient reduction overlaps the last micro-batch's backward, its last bucket
   exposed; the optimizer step follows.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.special import ndtri

from predictor.latency.calibration import Calibration
from predictor.core.specs import HardwareConfig
from predictor.workload.decompose import Call, Workload
from predictor.core.errors import PrismError
from predictor.latency.features import floor_us
from predictor.latency.artifacts import ModelSet
from predictor.latency.regressor import DEFAULT_QUANTILES
from predictor.engine.schedule import steady_pipeline
from predictor.core.ops import OPS

#: Share of link bandwidth NCCL reaches on large messages (nccl-tests bus bandwidth on
#: DGX A100: ~230 of 300 GB/s NVLink, ~23 of 25 GB/s per HDR NIC): a prior, not a fit.
NCCL_EFFICIENCY = 0.8
#: Relative spread (lognormal sigma) of the priors: no samples, so a wide band.
PRIOR_SIGMA = {"network": 0.15, "roofline": 0.3}
#: Efficiency of compute ops without a model, relative to the roofline floor.
ROOFLINE_EFFICIENCY = 0.5
REPORT_QUANTILES = (0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99)
#: Variability components of the composer (DESIGN.md, "Composer", step 2); the first
#: varies within a job from step to step, spatial persists for a job's allocation.
COMPONENTS = ("temporal", "spatial", "regime", "residual")
#: Components that average out over the steps of a long run.
PER_STEP = ("temporal", "regime")


@dataclass
class StepDistribution:
    """Step-time draws (seconds) and what they rest on."""

    draws: np.ndarray
    compute_s: float  # median critical-path compute of the slowest stage
    exposed_comm_s: float  # median communication not hidden behind compute
    bubble_s: float  # median pipeline idle time of the slowest stage
    basis: dict = field(default_factory=dict)  # op/pass -> models | network prior | roofline prior

    def quantile(self, q) -> np.ndarray:
        return np.quantile(self.draws, q)

    def prob_below(self, t: float) -> float:
        return float(np.mean(self.draws <= t))


def _inverse_cdf(q: np.ndarray, levels: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Draws from quantiles ``q`` (n, k) at ``levels`` for uniforms ``u`` (n, S): piecewise
    linear in log latency, tails extended with the outermost pair's slope in z-space."""
    logq = np.log(q)
    z_levels = ndtri(levels)
    z = ndtri(np.clip(u, 1e-4, 1 - 1e-4))
    out = np.empty_like(u)
    for i in range(len(q)):
        lo_slope = (logq[i, 1] - logq[i, 0]) / (z_levels[1] - z_levels[0])
        hi_slope = (logq[i, -1] - logq[i, -2]) / (z_levels[-1] - z_levels[-2])
        inner = np.interp(z[i], z_levels, logq[i])
        below, above = z[i] < z_levels[0], z[i] > z_levels[-1]
        inner[below] = logq[i, 0] + lo_slope * (z[i][below] - z_levels[0])
        inner[above] = logq[i, -1] + hi_slope * (z[i][above] - z_levels[-1])
        out[i] = np.exp(inner)
    return out


def _prior_quantiles(center_us: np.ndarray, sigma: float, levels: np.ndarray) -> np.ndarray:
    return center_us[:, None] * np.exp(sigma * ndtri(levels))[None, :]


def call_quantiles(calls: list[Call], models: ModelSet | None, hw: HardwareConfig, dtype: str,
                   levels=DEFAULT_QUANTILES) -> tuple[np.ndarray, list[str]]:
    """Latency quantiles (us) of each call, shape (len(calls), k), and the basis of each."""
    levels = np.asarray(levels)
    out = np.zeros((len(calls), len(levels)))
    basis = [""] * len(calls)
    own_network = models is not None and models.manifest.get("collective_network") == hw.network.name
    intra_only = models is not None and models.manifest.get("collective_scope") == "intra-node"
    by_op: dict[tuple, list[int]] = {}
    for i, c in enumerate(calls):
        by_op.setdefault((c.op, c.pass_), []).append(i)
    for (op, pass_), idx in by_op.items():
        idx = np.asarray(idx)
        op_dtype = hw.gemm_dtype if op == "gemm" and hw.gemm_dtype else dtype
        frame = pd.DataFrame([dict(calls[i].shape_dict, dtype=op_dtype, nodes=calls[i].nodes,
                                   ranks_per_node=calls[i].ranks_per_node) for i in idx])
        collective = OPS[op].collective
        modelled = np.full(len(idx), models is not None and models.has(op, pass_) and (not collective or own_network))
        if collective and intra_only:
            modelled &= frame["nodes"].to_numpy() <= 1
        if modelled.any():
            sub = frame[modelled].reset_index(drop=True)
            out[idx[modelled]] = models.query(op, pass_, sub)[[f"q{a:g}" for a in levels]].to_numpy()
        rest = ~modelled
        if rest.any():
            sigma = PRIOR_SIGMA["network" if collective else "roofline"]
            efficiency = NCCL_EFFICIENCY if collective else ROOFLINE_EFFICIENCY
            center = floor_us(op, pass_, frame[rest].reset_index(drop=True), hw) / efficiency
            out[idx[rest]] = _prior_quantiles(center, sigma, levels)
        prior = f"network prior ({hw.network.name})" if collective else "roofline prior"
        for i, m in zip(idx, modelled):
            basis[i] = f"models/{models.manifest.get('hardware', hw.name)}" if m else prior
    return out, basis


def _max_of_lognormals(sigma: float, n: int, u: np.ndarray) -> np.ndarray:
    """The largest of ``n`` iid lognormal(0, sigma) factors, drawn as F^-1(u^(1/n))
    (zero for ``n = 0``: no GPU to wait for)."""
    if n == 0:
        return np.zeros_like(u)
    if sigma <= 0:
        return np.ones_like(u)
    return np.exp(sigma * ndtri(np.clip(u, 1e-12, 1 - 1e-12) ** (1.0 / n)))


def workload_calls(work: Workload) -> list[Call]:
    """The distinct operator calls of a workload."""
    calls = [c for st in work.stages for c in st.forward + st.backward + st.step + ([st.p2p] if st.p2p else [])]
    return list(dict.fromkeys(calls))


def _held_residuals(calls: list[Call], hold) -> np.ndarray:
    """Which calls' residuals ``hold`` pins at their median (a boolean mask)."""
    if "residual" in hold:
        return np.ones(len(calls), bool)
    names = {h.partition(":")[2] for h in hold if h.startswith("residual:")}
    mask = np.array([c.op in names or f"{c.op}/{c.pass_}" in names for c in calls], bool)
    found = {n for n in names for c in calls if n in (c.op, f"{c.op}/{c.pass_}")}
    if names - found:
        keys = sorted({f"{c.op}/{c.pass_}" for c in calls})
        raise PrismError(f"hold: residual:{sorted(names - found)[0]} names no op of this workload; "
                         f"choose from {', '.join(keys)}", field='hold')
    return mask


class QuantileCache:
    """Latency quantiles of calls, looked up once per distinct call across many workloads
    (one model query per op for a whole batch of layouts)."""

    def __init__(self, models: ModelSet | None, hw: HardwareConfig, dtype: str | None = None):
        self.models, self.hw, self.dtype = models, hw, dtype or hw.train_dtype
        self._q: dict[Call, np.ndarray] = {}
        self._basis: dict[Call, str] = {}

    def fill(self, calls: list[Call]) -> None:
        missing = [c for c in dict.fromkeys(calls) if c not in self._q]
        if missing:
            q, basis = call_quantiles(missing, self.models, self.hw, self.dtype)
            self._q.update(zip(missing, q))
            self._basis.update(zip(missing, basis))

    def lookup(self, calls: list[Call]) -> tuple[np.ndarray, list[str]]:
        self.fill(calls)
        return np.stack([self._q[c] for c in calls]), [self._basis[c] for c in calls]


def compose(work: Workload, models: ModelSet | None, draws: int = 2000, seed: int = 0,
            dtype: str | None = None, cache: QuantileCache | None = None,
            brute_force: bool = False, hold=(), calibration: Calibration | None = None,
            slow_gpus=(), slow_factor: float = 1.0) -> StepDistribution:
    """The step-time distribution of ``work`` (seconds, ``draws`` Monte Carlo samples).

    ``dtype`` is the compute precision (default: the hardware's ``train_dtype``).
    ``hold`` names components of :data:`COMPONENTS` held at their median (no spread), or
    one op's residual as ``residual:<op>`` (every pass) or ``residual:<op>/<pass>``. Held
    or not, the same random numbers are drawn, so two holds differ only in what is held.
    ``calibration`` (default: the one stored with ``models``, if any) corrects operator
    latencies for running inside a training step (:mod:`predictor.latency.calibration`).
    ``brute_force`` draws every GPU's spatial and temporal factor and takes the slowest
    instead of the order-statistic shortcut (for testing the shortcut; its cost grows
    with the GPU count).
    ``slow_gpus`` gives, per pipeline stage, how many of its GPUs are known to be
    ``slow_factor`` times slower in compute (slow nodes); empty: none.
    """
    unknown = {h for h in hold if h not in COMPONENTS and not h.startswith("residual:")}
    if unknown:
        raise PrismError(f"hold: unknown variability component(s) {sorted(unknown)}; choose from {COMPONENTS} "
                         f"or residual:<op>/<pass>", field='hold')
    hw, par = work.hardware, work.parallel
    if slow_gpus and len(slow_gpus) != par.pp:
        raise PrismError(f"slow_gpus: {len(slow_gpus)} entries for {par.pp} pipeline stages; give one count per stage", field='slow_gpus')
    if slow_gpus and (slow_factor <= 0 or max(slow_gpus) > par.tp * par.cp * par.dp or min(slow_gpus) < 0):
        raise PrismError(f"slow_gpus={list(slow_gpus)}, slow_factor={slow_factor}: counts must lie in "
                         f"0..{par.tp * par.cp * par.dp} (GPUs per stage) and the factor be positive", field='slow_gpus')
    rng = np.random.default_rng(seed)
    var = hw.variability
    sigma = {"temporal": var.temporal_cv, "spatial": var.spatial_cv, "regime": var.comm_regime_cv}
    sigma = {k: 0.0 if k in hold else v for k, v in sigma.items()}
    unique = workload_calls(work)
    q, basis = (cache or QuantileCache(models, hw, dtype)).lookup(unique)
    calibration = calibration or (models.calibration if models is not None else None)
    par = work.parallel
    if calibration is not None:
        collective = np.array([OPS[c.op].collective for c in unique])
        q = np.where(collective[:, None], calibration.apply(q, True, par.tp), calibration.apply(q, False, par.tp))
    levels = np.asarray(DEFAULT_QUANTILES)
    median = q[:, list(levels).index(0.5)]
    u = rng.uniform(size=(len(unique), draws))
    # A prior's error is systematic: a wrong efficiency guess is wrong for every call that
    # rests on it, so those calls share one draw and their deviations add up linearly.
    systematic = np.array([not b.startswith("models/") for b in basis])
    u[systematic] = rng.uniform(size=draws)
    u[_held_residuals(unique, hold)] = 0.5
    sample = _inverse_cdf(q, levels, u)
    index = {c: i for i, c in enumerate(unique)}

    regime = np.exp(sigma["regime"] * rng.standard_normal(draws))
    gpus_per_stage = par.tp * par.cp * par.dp
    slow = list(slow_gpus) or [0] * par.pp
    sigma_gpu = float(np.hypot(sigma["temporal"], sigma["spatial"]))

    m = work.micro_batches

    def total_us(stage_calls: list[Call], stage_speed: np.ndarray, per_micro_batch: bool = False):
        """Compute and communication time of ``stage_calls`` (us per draw). Residuals of
        distinct instances are independent: ``count`` calls add ``sqrt(count)`` deviations,
        and a micro-batch's calls carry ``1/sqrt(m)`` of theirs, because the schedule repeats
        one draw for all ``m`` micro-batches, whose own residuals would partly cancel."""
        compute, comm, tp_comm = np.zeros(draws), np.zeros(draws), np.zeros(draws)
        spread = 1 / np.sqrt(m) if per_micro_batch else 1.0
        for c in stage_calls:
            i = index[c]
            scale = c.count if systematic[i] else spread * np.sqrt(c.count)
            t = c.count * median[i] + scale * (sample[i] - median[i])
            if not OPS[c.op].collective:
                compute += t * stage_speed
            elif c.role == "tp" and par.overlap_tp_comm:
                tp_comm += t * regime
            else:
                comm += t * regime
        # Overlapped TP collectives cost only what the pass's compute cannot cover
        # (perfect overlap: a lower bound on the exposed time).
        return compute, comm + np.maximum(tp_comm - compute, 0.0)

    fwd, bwd, p2p, dp_exposed, opt, compute_med, comm_med = [], [], [], [], [], [], []
    for st in work.stages:
        if brute_force:
            factors = (sigma["spatial"] * rng.standard_normal((gpus_per_stage, draws))
                       + sigma["temporal"] * rng.standard_normal((gpus_per_stage, draws)))
            factors[:slow[st.stage]] += np.log(slow_factor)
            speed = np.exp(factors).max(axis=0)
        else:
            speed = _max_of_lognormals(sigma_gpu, gpus_per_stage - slow[st.stage], rng.uniform(size=draws))
            if slow_gpus:  # drawn whenever slow GPUs are modelled, so placements share random numbers
                speed = np.maximum(speed, slow_factor * _max_of_lognormals(sigma_gpu, slow[st.stage],
                                                                           rng.uniform(size=draws)))
        fc, fm = total_us(st.forward, speed, per_micro_batch=True)
        bc, bm = total_us(st.backward, speed, per_micro_batch=True)
        fwd.append(fc + fm)
        bwd.append(bc + bm)
        p2p.append(total_us([st.p2p], speed, per_micro_batch=True)[1] if st.p2p else np.zeros(draws))
        reduce = [c for c in st.step if c.role == "dp" and c.op != "all_gather"]
        gather = [c for c in st.step if c.role == "dp" and c.op == "all_gather"]
        dp_time = total_us(reduce, speed)[1] if reduce else np.zeros(draws)
        buckets = max((c.count for c in reduce), default=1)
        if par.overlap_grad_reduce:  # hidden behind the last micro-batch's backward but its last bucket
            dp_time = np.maximum(dp_time / buckets, dp_time - (bc + bm))
        if gather:  # the sharded optimizer's weights, gathered back for the next step
            gather_time = total_us(gather, speed)[1]
            if par.overlap_param_gather:  # under the next step's forward passes but the first bucket
                gather_time = np.maximum(gather_time / buckets, gather_time - m * fc)
            dp_time = dp_time + gather_time
        dp_exposed.append(dp_time)
        opt.append(total_us([c for c in st.step if c.role == "optimizer"], speed)[0])
        compute_med.append(np.median((fc + bc) * work.micro_batches + opt[-1]))  # the optimizer is compute
        comm_med.append(np.median((fm + bm) * work.micro_batches))
    # Megatron's pipeline sends are blocking (send_forward_recv_backward ...): the sender
    # is busy until its activation (gradient) has arrived, so a transfer is part of the
    # sending stage's forward (backward) rather than a free delay.
    fwd = [f + p2p[i] for i, f in enumerate(fwd)]
    bwd = [b + (p2p[i - 1] if i else 0.0) for i, b in enumerate(bwd)]
    schedule = "1f1b" if par.schedule in ("1f1b", "zero_bubble") else par.schedule
    # every micro-batch repeats its stage's draw, so the schedule's steady state can be skipped
    pipe = steady_pipeline(np.stack(fwd), np.stack(bwd), m, schedule=schedule,
                           vpp=par.vpp if schedule == "interleaved" else 1)
    finish = pipe.rank_end + np.stack(dp_exposed) + np.stack(opt)
    step_us = finish.max(axis=0)
    slowest = int(np.argmax([np.median(x) for x in finish]))
    return StepDistribution(
        draws=step_us / 1e6,
        compute_s=compute_med[slowest] / 1e6,
        exposed_comm_s=max(float(np.median(step_us - pipe.busy[slowest]) - np.median(pipe.idle[slowest])
                                 - np.median(opt[slowest]) + comm_med[slowest]) / 1e6, 0.0),
        bubble_s=float(np.median(pipe.idle[slowest]) / 1e6),
        basis={f"{c.op}/{c.pass_}": b_ for c, b_ in zip(unique, basis)})

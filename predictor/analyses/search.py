"""``prism search``: every parallel layout of a GPU count, ranked by predicted step time.

DESIGN.md, "Analyses". :func:`enumerate_layouts` lists the layouts of exactly ``gpus``
GPUs (dp·tp·pp·cp = gpus) at one global batch; :func:`search` drops those a framework
would refuse (:func:`predictor.workload.memory.validate_layout`, and the interleaved schedule's
micro-batch rule) and those that do not fit in the GPU's memory, counting each by
reason, and ranks the rest by one statistic of the predicted step-time distribution: the
median, or a high percentile to rank by risk. It also returns two Pareto fronts: that
statistic against memory per GPU, and the median against risk (p95 / p50).

Thousands of layouts in a few seconds, in three steps:

1. Each layout is decomposed once, and once for all its vpp (decompose reads neither vpp
   nor the schedule), and every distinct operator call of all of them is looked up once
   (one :class:`~predictor.engine.compose.QuantileCache`: the same shapes recur across layouts).
2. A *screen* applies the composer's rules (:func:`predictor.engine.compose.compose`: residuals
   by inverse CDF, ``count`` calls adding ``sqrt(count)`` deviations and a micro-batch's
   calls ``1/sqrt(m)`` of theirs, calls resting on a prior sharing one draw, the slowest
   of a stage's GPUs as an order statistic, one communication regime per step,
   overlapped TP collectives costing what compute leaves uncovered, the DP reduction and
   parameter gather hidden but one bucket) to :data:`SCREEN_DRAWS` draws of all layouts
   at once, with common random numbers (the same draw of an operator call in every
   layout that makes it, so that layouts are compared on equal luck). Stages with the
   same layer count and position share their sums. The pipeline is walked exactly
   (:func:`predictor.engine.schedule.steady_pipeline`) at the median stage times (every call,
   the slowest GPU and the regime at their medians); each draw scales a rank's end by
   the ratio of the closed-form makespan at its own stage times to the one at the median
   times (``(m - 1/vpp)·max(f+b) + sum(f+b)/vpp``, exact for equal stages), which spares
   a walk per draw.
3. The best :data:`FINALISTS` by the screen (at least ``top``) are composed by
   :func:`~predictor.engine.compose.compose` itself with :data:`FINAL_DRAWS` draws, as
   ``prism predict`` would, and the ranking is redone with their figures; a layout the
   screen had lower that now ranks among the top ``top`` is composed too. Every layout
   says whether its figures are composed or screened (they agree to about 1% on median
   and p95: tests/test_search.py).

Layouts: tp a divisor of the GPUs per node (TP stays inside a node's NVLink domain); cp a
power of two that splits the sequence into 2·cp equal chunks (Megatron's causal load
balance) of shards of at least :data:`MIN_CP_TOKENS` tokens; pp any divisor up
to the layer count; interleaved 1F1B with every vpp > 1 that splits the layers into
equal chunks (1F1B otherwise); micro-batch sizes :data:`MICRO_BATCH_SIZES`; recompute
none, selective or full; sharding none, distributed optimizer or ZeRO-3 (FSDP costs the
same as ZeRO-3 here, so it is not listed twice; with dp·cp = 1 there is nothing to shard);
sequence parallelism whenever tp > 1. The global batch stays fixed: the configuration's
``parallel.global_batch_size``, or the default ``prism predict`` would use at this GPU count.
"""
from __future__ import annotations

import itertools
import time
from dataclasses import asdict, astuple, dataclass, replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
from omegaconf import DictConfig
from scipy.sparse import csr_matrix

from predictor.engine.compose import QuantileCache, _inverse_cdf, _max_of_lognormals, compose
from predictor.core.specs import HardwareConfig, ModelConfig, ParallelConfig
from predictor.core.profiles import section
from predictor.workload.decompose import Workload, decompose
from predictor.core.errors import PrismError
from predictor.app.figures import new_figure, save_figure
from predictor.core.layout import resolve_layout, validate_layout
from predictor.workload.memory import memory_per_gpu
from predictor.latency.artifacts import evidence_tier, trained_models
from predictor.analyses.predict import model_flops_per_step
from predictor.latency.regressor import DEFAULT_QUANTILES
from predictor.engine.schedule import steady_pipeline
from predictor.core.ops import OPS

#: Statistics a search can rank by: the median, high percentiles (risk-aware), the mean.
RANK_BY = {"p50": 0.5, "p90": 0.9, "p95": 0.95, "mean": None}
MICRO_BATCH_SIZES = (1, 2, 4, 8)
RECOMPUTES = ("none", "selective", "full")
SHARDINGS = ("none", "distributed_optimizer", "zero3")
#: Fewest tokens a context-parallel shard keeps: a search bound, not a framework rule;
#: below it the key-value exchange outweighs the attention it splits.
MIN_CP_TOKENS = 1024
#: Draws per layout in the screen (step 2), and for every layout shown (step 3).
SCREEN_DRAWS = 128
FINAL_DRAWS = 1000
#: Layouts composed in full before the ranking (at least ``top``), and how many times a
#: re-ranking may bring in more.
FINALISTS = 20
REFINE_ROUNDS = 4
#: Stage rows of the screen held in memory at once (rows x draws floats per array).
_STAGE_ROWS = 2048
#: Sums the screen keeps per stage kind, as compose's ``total_us`` splits them: forward
#: compute, communication and overlappable TP communication, the same for the backward, the
#: pipeline send, the DP gradient reduction, the DP parameter gather, the optimizer step.
_GROUPS = 10
_FWD, _BWD, _P2P, _REDUCE, _GATHER, _OPT = 0, 3, 6, 7, 8, 9


@dataclass
class SearchResult:
    """Ranked layouts of one model on ``gpus`` GPUs; see :func:`search`.

    ``layouts`` holds every ranked layout, best first, as a dict (its layout, step-time
    statistics in seconds, risk = p95/p50, memory per GPU, tokens/s, MFU, and
    ``composed``: whether its figures come from the composer with FINAL_DRAWS draws or
    from the screen). ``front_memory`` and ``front_risk`` are positions in ``layouts``.
    """

    model: str
    hardware: str
    gpus: int
    global_batch_size: int
    seq_length: int
    rank_by: str
    top: int
    counts: dict
    layouts: list[dict]
    front_memory: list[int]
    front_risk: list[int]
    draws: dict
    tier: str
    seconds: float

    def to_dict(self) -> dict:
        """Everything, with the top ``top`` under ``top_layouts`` and the fronts as layouts."""
        out = asdict(self)
        out["top_layouts"] = self.layouts[:self.top]
        out["front_memory"] = [self.layouts[i] for i in self.front_memory]
        out["front_risk"] = [self.layouts[i] for i in self.front_risk]
        return out


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def enumerate_layouts(model: ModelConfig, gpus: int, gpus_per_node: int, global_batch_size: int,
                      base: ParallelConfig | None = None) -> list[ParallelConfig]:
    """Every candidate layout of exactly ``gpus`` GPUs (see the module docstring for the
    axes), unchecked: :func:`search` validates them. ``base`` supplies what is not searched
    (attention kernel, gradient-reduction overlap)."""
    base = base or ParallelConfig()
    seq, layers = model.seq_length, model.num_layers
    out = []
    for tp in _divisors(gpus_per_node):
        if gpus % tp:
            continue
        cps = [cp for cp in _divisors(gpus // tp) if cp & (cp - 1) == 0
               and (cp == 1 or (seq % (2 * cp) == 0 and seq // cp >= MIN_CP_TOKENS))]
        for cp in cps:
            for pp in _divisors(gpus // (tp * cp)):
                if pp > layers:
                    break
                dp = gpus // (tp * cp * pp)
                vpps = [1] + [v for v in range(2, layers // pp + 1) if pp > 1 and layers % (pp * v) == 0]
                shardings = SHARDINGS if dp * cp > 1 else ("none",)
                for vpp, mbs, recompute, sharding in itertools.product(vpps, MICRO_BATCH_SIZES, RECOMPUTES,
                                                                      shardings):
                    out.append(replace(base, dp=dp, tp=tp, pp=pp, cp=cp, vpp=vpp,
                                       schedule="interleaved" if vpp > 1 else "1f1b", sequence_parallel=tp > 1,
                                       micro_batch_size=mbs, global_batch_size=global_batch_size,
                                       recompute=recompute, sharding=sharding))
    return out


def invalid_reason(model: ModelConfig, par: ParallelConfig, gpus: int) -> str | None:
    """The field a framework would refuse ``par`` for (None: valid)."""
    try:
        validate_layout(model, par, gpus)
    except PrismError as exc:
        return exc.field or "layout"
    micro_batches = par.global_batch_size // (par.micro_batch_size * par.dp)
    if par.schedule == "interleaved" and micro_batches % par.pp:
        return "parallel.vpp (interleaved: micro-batches not a multiple of pp)"
    return None


def pareto_front(x, y) -> list[int]:
    """Indices of the points that no other point dominates (lower or equal in both
    coordinates and lower in one), by increasing ``x``; of identical points, one.

    Examples
    --------
    >>> pareto_front([1, 2, 3, 2], [3, 1, 2, 4])
    [0, 1]
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    front, best = [], np.inf
    for i in np.lexsort((y, x)):
        if y[i] < best:
            front.append(int(i))
            best = y[i]
    return front


# ---------------------------------------------------------------- the screen

def _stage_kinds(works: list[Workload]):
    """One representative stage per (layer count, first, last) of each decomposition:
    decompose builds a stage's calls from exactly these, so equal keys mean equal calls.
    Layouts that share their stages (:func:`search` decomposes once per layout that
    differs only in vpp) share their kinds."""
    reps, kind_of_stage, layout_of_kind = [], [], []
    known: dict[int, list[int]] = {}
    for n, work in enumerate(works):
        if id(work.stages) not in known:
            seen: dict[tuple, int] = {}
            last = work.parallel.pp - 1
            for st in work.stages:
                key = (st.layers, st.stage == 0, st.stage == last)
                if key not in seen:
                    seen[key] = len(reps)
                    reps.append(st)
                    layout_of_kind.append(n)
            known[id(work.stages)] = [seen[(st.layers, st.stage == 0, st.stage == last)] for st in work.stages]
        kind_of_stage.extend(known[id(work.stages)])
    return reps, np.array(kind_of_stage), np.array(layout_of_kind)


def _kind_sums(works, reps, layout_of_kind, cache: QuantileCache, calibration, draws: int, rng):
    """Per group (:data:`_GROUPS`) and stage kind: the median sum (us; groups x kinds x 1),
    ``draws`` draws of it (groups x kinds x draws), and the DP reduction's bucket count."""
    calls, codes, kinds = [], [], []
    for k, st in enumerate(reps):
        dp = [c for c in st.step if c.role == "dp"]
        parts = [(st.forward, _FWD), (st.backward, _BWD), ([st.p2p] if st.p2p else [], _P2P),
                 ([c for c in dp if c.op != "all_gather"], _REDUCE), ([c for c in dp if c.op == "all_gather"], _GATHER),
                 ([c for c in st.step if c.role == "optimizer"], _OPT)]
        for part, code in parts:
            calls.extend(part)
            codes.extend([code] * len(part))
            kinds.extend([k] * len(part))
    codes, kinds = np.array(codes), np.array(kinds)
    # A calibration adds its tp overhead to compute ops under tp > 1: those calls draw apart.
    tp_flag = (np.array([works[n].parallel.tp > 1 for n in layout_of_kind])[kinds] if calibration is not None
               else np.zeros(len(calls), bool))
    index: tuple[dict, dict] = ({}, {})
    cols = np.array([index[f].setdefault(c, len(index[f])) for c, f in zip(calls, tp_flag.tolist())])
    cols += np.where(tp_flag, len(index[0]), 0)
    unique = list(index[0]) + list(index[1])
    q, basis = cache.lookup(unique)
    collective = np.array([OPS[c.op].collective for c in unique])
    if calibration is not None:
        flagged = (np.arange(len(unique)) >= len(index[0]))[:, None]
        q = np.where(collective[:, None], q, np.where(flagged, calibration.apply(q, False, 2),
                                                      calibration.apply(q, False, 1)))
    levels = np.asarray(DEFAULT_QUANTILES)
    median = q[:, list(levels).index(0.5)]
    u = rng.uniform(size=(len(unique), draws))
    systematic = np.array([not b.startswith("models/") for b in basis])
    u[systematic] = rng.uniform(size=draws)  # compose: a prior's error is shared by every call on it
    deviation = _inverse_cdf(q, levels, u) - median[:, None]
    count = np.array([c.count for c in unique], dtype=float)
    overlapped_tp = np.array([c.role == "tp" for c in unique]) & collective
    layout_tp_overlap = np.array([w.parallel.overlap_tp_comm for w in works])[layout_of_kind][kinds]
    coll = collective[cols]
    # as compose's total_us: compute, communication and overlappable TP communication
    # apart; the send and the DP collectives only communicate, the optimizer only computes
    passes = np.isin(codes, (_FWD, _BWD))
    keep = passes | (np.isin(codes, (_P2P, _REDUCE, _GATHER)) & coll) | ((codes == _OPT) & ~coll)
    route = np.where(~coll, 0, np.where(overlapped_tp[cols] & layout_tp_overlap, 2, 1))
    rows = (kinds * _GROUPS + codes + passes * route)[keep]
    m = np.array([w.micro_batches for w in works], dtype=float)[layout_of_kind]
    # a micro-batch's calls carry 1/sqrt(m) of their deviation: the schedule repeats one
    # draw for all m micro-batches; calls on a prior deviate together, count-fold
    spread = np.where(np.isin(codes, (_FWD, _BWD, _P2P)), 1 / np.sqrt(m[kinds]), 1.0)
    weight = np.where(systematic[cols], count[cols], spread * np.sqrt(count[cols]))[keep]
    size = len(reps) * _GROUPS
    nominal = np.bincount(rows, weights=(count * median)[cols[keep]], minlength=size)
    sums = nominal[:, None] + csr_matrix((weight, (rows, cols[keep])), shape=(size, len(unique))) @ deviation
    buckets = np.ones(len(reps))
    reduce = codes == _REDUCE
    np.maximum.at(buckets, kinds[reduce], count[cols[reduce]])
    # group-major, so that each group's rows gather contiguously
    return (nominal.reshape(-1, _GROUPS).T[:, :, None].copy(),
            sums.reshape(len(reps), _GROUPS, draws).transpose(1, 0, 2).copy(), buckets)


def _stage_times(sums, kinds, speed, regime, buckets, flags, m, first):
    """Forward and backward (us, the pipeline sends included) and what follows the
    pipeline (exposed DP collectives plus the optimizer step) of stage rows of the given
    ``kinds``, arrays (rows, S), by compose's rules. ``flags`` (rows, 2): whether the
    gradient reduction and the parameter gather overlap (TP overlap is in the sums)."""
    fc, fm, ft, bc, bm, bt, p2p, reduce, gather, opt = (sums[g][kinds] for g in range(_GROUPS))
    fc *= speed
    bc *= speed
    fm = fm * regime + np.maximum(ft * regime - fc, 0.0)  # overlapped TP: what compute cannot cover
    bm = bm * regime + np.maximum(bt * regime - bc, 0.0)
    p2p, reduce, gather = p2p * regime, reduce * regime, gather * regime
    # the reduction hides behind the last backward but its last bucket; the gather behind
    # the next step's forwards but its first
    reduce = np.where(flags[:, :1], np.maximum(reduce / buckets, reduce - (bc + bm)), reduce)
    gather = np.where(flags[:, 1:], np.maximum(gather / buckets, gather - m * fc), gather)
    received = np.where(first, 0.0, np.roll(p2p, 1, axis=0))  # the gradient sent back by the next stage
    return fc + fm + p2p, bc + bm + received, reduce + gather + opt * speed


def _closed_form(f, b, starts, layout_of_stage, m, vpp):
    """Each rank's end by the closed form of equal stages, (rows, S): the slowest rank's
    ``(m - 1/vpp)`` micro-batches plus one pass through all stages, less the backward that
    later ranks finish before rank 0."""
    total = f + b
    slowest = np.maximum.reduceat(total, starts, axis=0)
    passes = np.add.reduceat(total, starts, axis=0)
    before = np.cumsum(b, axis=0) - b
    before -= before[starts][layout_of_stage]
    v = vpp[:, None]
    return ((m[:, None] - 1 / v) * slowest + passes / v)[layout_of_stage] - before / v[layout_of_stage]


def screen(works: list[Workload], models, cache: QuantileCache, draws: int = SCREEN_DRAWS,
           seed: int = 0) -> np.ndarray:
    """(layouts, draws) step times in seconds of ``works`` (all on one hardware), by the
    screen of the module docstring (step 2)."""
    hw = works[0].hardware
    rng = np.random.default_rng(seed)
    reps, kind_of_stage, layout_of_kind = _stage_kinds(works)
    median, sums, buckets = _kind_sums(works, reps, layout_of_kind, cache,
                                       models.calibration if models is not None else None, draws, rng)
    var = hw.variability
    sigma_gpu = float(np.hypot(var.temporal_cv, var.spatial_cv))
    pars = [w.parallel for w in works]
    pps = np.array([p.pp for p in pars])
    starts = np.concatenate([[0], np.cumsum(pps)[:-1]])
    layout_of_stage = np.repeat(np.arange(len(works)), pps)
    position = np.arange(len(kind_of_stage)) - starts[layout_of_stage]
    m = np.array([w.micro_batches for w in works], dtype=float)
    interleaved = np.array([p.schedule == "interleaved" for p in pars])
    vpp = np.where(interleaved, [p.vpp for p in pars], 1)
    flags = np.array([[p.overlap_grad_reduce, p.overlap_param_gather] for p in pars])[layout_of_stage]
    first = (position == 0)[:, None]
    per_stage = np.array([p.tp * p.cp * p.dp for p in pars])  # GPUs a stage waits for
    groups, group_of_layout = np.unique(per_stage, return_inverse=True)
    # the slowest of a stage's GPUs: common random numbers per stage position
    u = rng.uniform(size=(pps.max(), draws))
    speeds = np.stack([_max_of_lognormals(sigma_gpu, int(n), u) for n in groups])
    regime = np.exp(var.comm_regime_cv * rng.standard_normal(draws))

    # every call, the slowest GPU and the regime at their medians: the exact schedule walk
    speed0 = np.array([_max_of_lognormals(sigma_gpu, int(n), np.array([0.5]))[0] for n in groups])
    f0, b0, _ = _stage_times(median, kind_of_stage, speed0[group_of_layout][layout_of_stage, None], 1.0,
                             buckets[kind_of_stage, None], flags, m[layout_of_stage, None], first)
    ends0 = np.empty(len(kind_of_stage))
    for pp, v, inter in {(p, v, i) for p, v, i in zip(pps, vpp, interleaved)}:
        cols = np.flatnonzero((pps == pp) & (vpp == v) & (interleaved == inter))
        rows = (starts[cols][None, :] + np.arange(pp)[:, None])  # (pp, layouts)
        pipe = steady_pipeline(f0[rows, 0], b0[rows, 0], m[cols].astype(int),
                               "interleaved" if inter else "1f1b", int(v))
        ends0[rows] = pipe.rank_end
    shape0 = _closed_form(f0, b0, starts, layout_of_stage, m, vpp)[:, 0]

    steps = np.empty((len(works), draws))
    lo = 0
    while lo < len(works):  # layouts in chunks of about _STAGE_ROWS stage rows
        hi = max(lo + 1, int(np.searchsorted(starts, starts[lo] + _STAGE_ROWS, side="right")) - 1)
        hi = min(hi, len(works))
        rows = slice(starts[lo], starts[hi] if hi < len(works) else len(kind_of_stage))
        local = starts[lo:hi] - starts[lo]
        owner = layout_of_stage[rows] - lo
        speed = speeds[group_of_layout[layout_of_stage[rows]], position[rows]]
        f, b, tail = _stage_times(sums, kind_of_stage[rows], speed, regime, buckets[kind_of_stage[rows], None],
                                  flags[rows], m[layout_of_stage[rows], None], first[rows])
        shape = _closed_form(f, b, local, owner, m[lo:hi], vpp[lo:hi])
        finish = (ends0[rows] / shape0[rows])[:, None] * shape + tail
        steps[lo:hi] = np.maximum.reduceat(finish, local, axis=0)
        lo = hi
    return steps / 1e6


# ---------------------------------------------------------------- ranking

def check_rank_by(value) -> str:
    """``rank_by`` as one of :data:`RANK_BY`."""
    if value not in RANK_BY:
        raise PrismError(f"rank_by={value}: choose one of {', '.join(RANK_BY)} (p50 ranks by the typical step; "
                         f"p90 or p95 by the step you can count on, risk-aware; mean by the average)", field='rank_by')
    return value


def _layout_fields(par: ParallelConfig) -> dict:
    return {"dp": par.dp, "tp": par.tp, "pp": par.pp, "cp": par.cp, "vpp": par.vpp, "mbs": par.micro_batch_size,
            "recompute": par.recompute, "sharding": par.sharding}


class Ranking(NamedTuple):
    """:func:`rank_layouts`' answer: every layout as a dict, best first; ``order[k]`` is the
    position in the input of ``layouts[k]``; the fronts are positions in ``layouts``."""

    layouts: list[dict]
    order: list[int]
    front_memory: list[int]
    front_risk: list[int]


def rank_layouts(works: list[Workload], models, rank_by: str = "p50", top: int = 10, seed: int = 0,
                 memory_gib=None, cache: QuantileCache | None = None) -> Ranking:
    """Rank ``works`` (layouts of one model on one hardware and GPU count) by ``rank_by``.

    Returns every layout as a dict, best first, and the two Pareto fronts: ``rank_by``
    against memory per GPU, and p50 against risk (p95/p50). The best are composed in full
    (module docstring, step 3); the others keep the screen's figures (``composed``
    False). ``memory_gib``: each layout's memory per GPU, if known.
    """
    check_rank_by(rank_by)
    model, hw = works[0].model, works[0].hardware
    cache = cache or QuantileCache(models, hw)
    if memory_gib is None:
        memory_gib = [memory_per_gpu(model, w.parallel, flash_attention=w.parallel.attention == "flash").total_gib
                      for w in works]
    memory = np.asarray(memory_gib, dtype=float)
    steps = screen(works, models, cache, seed=seed)
    stats = {"p50": np.quantile(steps, 0.5, axis=1), "p90": np.quantile(steps, 0.9, axis=1),
             "p95": np.quantile(steps, 0.95, axis=1), "mean": steps.mean(axis=1)}
    composed = np.zeros(len(works), bool)

    def compose_in_full(indices):
        for i in indices:
            if not composed[i]:
                draws = compose(works[i], models, draws=FINAL_DRAWS, seed=seed, cache=cache).draws
                for name, q in RANK_BY.items():
                    stats[name][i] = draws.mean() if q is None else np.quantile(draws, q)
                composed[i] = True

    key = stats[rank_by]  # updated in place as layouts are composed
    compose_in_full(np.argsort(key, kind="stable")[:max(top, FINALISTS)])
    for _ in range(REFINE_ROUNDS):  # a screened layout that now ranks among the top is composed too
        order = np.argsort(key, kind="stable")
        if composed[order[:top]].all():
            break
        compose_in_full(order[:top])
    order = np.argsort(key, kind="stable")
    fronts = pareto_front(memory, key), pareto_front(stats["p50"], stats["p95"] / stats["p50"])
    gpus, peak = works[0].gpus, hw.peak(hw.train_dtype)
    layouts = []
    for rank, i in enumerate(order, 1):
        w, p50 = works[i], float(stats["p50"][i])
        tokens = w.tokens_per_step
        layouts.append({"rank": rank, **_layout_fields(w.parallel),
                        **{f"{name}_s": float(stats[name][i]) for name in RANK_BY},
                        "risk": float(stats["p95"][i]) / p50, "memory_gib": float(memory[i]),
                        "tokens_per_s": tokens / p50,
                        "mfu": model_flops_per_step(model, tokens, w.seq) / (p50 * gpus * peak),
                        "composed": bool(composed[i])})
    position = np.empty(len(order), int)
    position[order] = np.arange(len(order))
    return Ranking(layouts, [int(i) for i in order], [int(position[i]) for i in fronts[0]],
                   [int(position[i]) for i in fronts[1]])


def search(cfg: DictConfig) -> SearchResult:
    """Enumerate, check and rank the layouts of ``cfg.gpus`` GPUs for ``cfg.model`` on
    ``cfg.hardware`` (settings ``rank_by``, ``top``, ``seed``, ``models_dir``)."""
    t0 = time.perf_counter()
    rank_by = check_rank_by(cfg.get("rank_by") or "p50")
    top = cfg.get("top")
    if not isinstance(top, int) or isinstance(top, bool) or top < 1:
        raise PrismError(f"top={top}: how many layouts to list, a positive integer, e.g. top=10", field='top')
    gpus = cfg.get("gpus")
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
        raise PrismError(f"gpus={gpus}: search needs the job's GPU count, a positive integer, e.g. gpus=1024", field='gpus')
    model = section(cfg, "model", ModelConfig)
    hw = section(cfg, "hardware", HardwareConfig)
    base = section(cfg, "parallel", ParallelConfig)
    batch = base.global_batch_size or resolve_layout(replace(base), gpus).global_batch_size  # a copy: it sets dp
    candidates = enumerate_layouts(model, gpus, hw.node.gpus_per_node, batch, base)
    invalid: dict[str, int] = {}
    fitting, memory, too_big = [], [], 0
    for par in candidates:
        reason = invalid_reason(model, par, gpus)
        if reason:
            invalid[reason] = invalid.get(reason, 0) + 1
            continue
        gib = memory_per_gpu(model, par, flash_attention=par.attention == "flash").total_gib
        if gib > hw.memory.capacity_gib:
            too_big += 1
            continue
        fitting.append(par)
        memory.append(gib)
    if not fitting:
        raise PrismError(f"gpus={gpus}: none of the {len(candidates)} layouts of {model.name} with a global batch of "
                         f"{batch} fits in {hw.memory.capacity_gib:g} GiB per GPU ({too_big} too big, "
                         f"{sum(invalid.values())} invalid); use more GPUs or a smaller parallel.global_batch_size", field='gpus')
    models = trained_models(hw, cfg.get("models_dir"))
    # decompose reads neither vpp nor the schedule (those shape the pipeline walk alone):
    # one decomposition serves every vpp of a layout
    shared: dict[tuple, Workload] = {}
    works = []
    for par in fitting:
        plain = replace(par, vpp=1, schedule="1f1b")
        key = astuple(plain)
        if key not in shared:
            shared[key] = decompose(model, plain, hw, gpus)
        works.append(replace(shared[key], parallel=par))
    ranking = rank_layouts(works, models, rank_by, top, int(cfg.get("seed") or 0), memory)
    return SearchResult(
        model=model.name, hardware=hw.name, gpus=gpus, global_batch_size=batch, seq_length=model.seq_length,
        rank_by=rank_by, top=top,
        counts={"enumerated": len(candidates), "invalid": sum(invalid.values()), "do_not_fit": too_big,
                "ranked": len(fitting), "invalid_by_reason": invalid},
        layouts=ranking.layouts, front_memory=ranking.front_memory, front_risk=ranking.front_risk,
        draws={"screen": SCREEN_DRAWS, "composed": FINAL_DRAWS}, tier=evidence_tier(models),
        seconds=time.perf_counter() - t0)


# ---------------------------------------------------------------- output

def _table(rows: list[dict], rank_by: str) -> list[str]:
    stat = [] if rank_by in ("p50", "p95") else [f"{rank_by}_s"]
    head = (f"{'rank':>5} {'dp':>5} {'tp':>3} {'pp':>3} {'cp':>3} {'vpp':>3} {'mbs':>3} {'recompute':<9} "
            f"{'sharding':<21} " + "".join(f"{c:>9}" for c in ["p50_s", "p95_s", *stat, "risk"])
            + f" {'mem_GiB':>8} {'tokens/s':>10} {'MFU':>6}")
    lines = [head]
    for r in rows:
        lines.append(f"{r['rank']:>5} {r['dp']:>5} {r['tp']:>3} {r['pp']:>3} {r['cp']:>3} {r['vpp']:>3} {r['mbs']:>3} "
                     f"{r['recompute']:<9} {r['sharding']:<21} "
                     + "".join(f"{r[c]:>9.3f}" for c in ["p50_s", "p95_s", *stat, "risk"])
                     + f" {r['memory_gib']:>8.1f} {r['tokens_per_s']:>10,.0f} {r['mfu']:>6.1%}"
                     + ("" if r["composed"] else "  (screen)"))
    return lines


def format_search(r: SearchResult) -> str:
    """The counts, the top layouts and both Pareto fronts as tables."""
    c = r.counts
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(c["invalid_by_reason"].items()))
    lines = [f"{r.model} on {r.gpus} x {r.hardware}   global batch {r.global_batch_size} x {r.seq_length} tokens   "
             f"ranked by {r.rank_by}",
             f"layouts   {c['enumerated']} enumerated, {c['invalid']} invalid{f' ({reasons})' if reasons else ''}, "
             f"{c['do_not_fit']} do not fit in memory, {c['ranked']} ranked   ({r.seconds:.1f} s)",
             "", f"top {min(r.top, len(r.layouts))} by {r.rank_by} (composed with {r.draws['composed']} draws; "
                 f"the rest screened with {r.draws['screen']})"]
    lines += _table(r.layouts[:r.top], r.rank_by)
    lines += ["", f"Pareto front: {r.rank_by} vs memory per GPU ({len(r.front_memory)} layouts)"]
    lines += _table([r.layouts[i] for i in r.front_memory], r.rank_by)
    lines += ["", f"Pareto front: p50 vs risk = p95/p50 ({len(r.front_risk)} layouts)"]
    lines += _table([r.layouts[i] for i in r.front_risk], r.rank_by)
    lines.append(f"\nevidence  {r.tier}")
    return "\n".join(lines)


def plot_search(r: SearchResult, path) -> Path:
    """A PNG of every ranked layout: ``rank_by`` against memory per GPU, and p50 against
    risk, each with its Pareto front; written atomically (temporary file, then renamed)."""
    stat = np.array([x[f"{r.rank_by}_s"] for x in r.layouts])
    memory = np.array([x["memory_gib"] for x in r.layouts])
    p50 = np.array([x["p50_s"] for x in r.layouts])
    risk = np.array([x["risk"] for x in r.layouts])
    fig, axes = new_figure(1, 2, figsize=(11, 4.2))
    for ax, x, y, front, xlabel, ylabel in (
            (axes[0], memory, stat, r.front_memory, "memory per GPU (GiB)", f"step time {r.rank_by} (s)"),
            (axes[1], p50, risk, r.front_risk, "step time p50 (s)", "risk p95 / p50")):
        ax.scatter(x, y, s=5, color="0.7", label=f"{len(r.layouts)} layouts")
        ax.plot(x[front], y[front], "o-", color="C3", ms=4, label="Pareto front")
        ax.scatter(x[:1], y[:1], marker="*", s=120, color="C0", zorder=3, label=f"best by {r.rank_by}")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        (ax.set_yscale if ax is axes[0] else ax.set_xscale)("log")  # step times span an order of magnitude
        ax.legend(fontsize=8)
    fig.suptitle(f"{r.model} on {r.gpus} x {r.hardware}: {r.counts['ranked']} layouts that fit")
    fig.tight_layout()
    return save_figure(fig, path)

"""``prism search``: every parallel layout of a GPU count, ranked by predicted step time.

docs/method.md, "Analyses". :func:`enumerate_layouts` lists the layouts of exactly ``gpus``
GPUs (dp·tp·pp·cp = gpus) at one global batch; :func:`search` drops those a framework
would refuse (:func:`predictor.workload.memory.validate_layout`, and the interleaved schedule's
micro-batch rule) and those that do not fit in the GPU's memory, counting each by
reason, and ranks the rest by one statistic of the predicted step-time distribution: the
median, or a high percentile to rank by risk. It also returns two Pareto fronts: that
statistic against memory per GPU, and the median against risk (p95 / p50).

Thousands of layouts in a few seconds, in three steps:

1. Each layout is decomposed once, and once for all its vpp (decompose reads neither vpp
   nor the schedule), and every distinct operator call of all of them is looked up once
   (one :class:`~predictor.latency.lookup.QuantileCache`: the same shapes recur across layouts).
2. The engine's screen (:func:`predictor.engine.screen.screen`) draws :data:`SCREEN_DRAWS`
   step times of all layouts at once by the composer's own stage arithmetic
   (:mod:`predictor.engine.stages`), with common random numbers, and shortens only the
   pipeline walk: exact at the median stage times, scaled per draw by a closed form.
   Steps 1 and 2 run in parts over forked worker processes, one per CPU (on Linux, from
   :data:`PARALLEL_FROM` candidates, when no other thread runs: :class:`_Workers`), and
   so do step 3's compositions; a layout's screened draws do not depend on the part it is
   in, so the ranking is the same as in one process.
3. The best :data:`FINALISTS` by the screen (at least ``top``) are composed by
   :func:`~predictor.engine.compose.compose` itself with :data:`FINAL_DRAWS` draws, as
   ``prism predict`` would, and the ranking is redone with their figures; a layout the
   screen had lower that now ranks among the top ``top`` is composed too. Every layout
   says whether its figures are composed or screened (they agree to about 1% on median
   and p95: tests/analyses/test_search.py).

Layouts: tp a divisor of the GPUs per node (TP stays inside a node's NVLink domain); for a
Mixture-of-Experts model, ep every divisor of the experts that (times etp) divides a
stage's tp·cp·dp GPUs (Megatron-Core's expert mesh); cp a
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

import gc
import itertools
import math
import multiprocessing
import numbers
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import NamedTuple

import numpy as np

from predictor.core.choices import RankBy, choice
from predictor.core.errors import PrismError
from predictor.core.framework import load_framework
from predictor.core.job import check_framework, check_gpus
from predictor.core.layout import AXES, check_count, refuse_experts_of_dense, resolve_layout, validate_layout
from predictor.core.profiles import as_hardware, as_layout, as_model
from predictor.core.specs import HardwareConfig, ModelConfig, ParallelConfig, check_number
from predictor.engine.compose import DRAWS, PER_STEP, compose_holds
from predictor.engine.doubt import doubt_of, shipped_model
from predictor.engine.predictor import Predictor, QuantileCache
from predictor.engine.report import predictive_report, run_mean_draws, train_step
from predictor.engine.screen import screen
from predictor.latency.artifacts import evidence_tier
from predictor.workload.decompose import Workload, attention_kernel, decompose
from predictor.workload.flops import model_flops_per_step
from predictor.workload.memory import GiB, memory_per_gpu

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
FINAL_DRAWS = DRAWS  # prism predict's: a composed layout's figures and median step are predict's for that job
#: Most layouts ``top`` may ask to be composed in full and listed.
MAX_TOP = 1000
#: Layouts composed in full before the ranking (at least ``top``), and how many times a
#: re-ranking may bring in more.
FINALISTS = 20
REFINE_ROUNDS = 4


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
        out = {f.name: getattr(self, f.name) for f in fields(self)}  # the layouts are plain dicts already
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
                for ep, vpp, mbs, recompute, sharding in itertools.product(
                        _expert_degrees(model, tp * cp * dp, base.etp), vpps, MICRO_BATCH_SIZES, RECOMPUTES,
                        shardings):
                    out.append(replace(base, dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, vpp=vpp,
                                       schedule="interleaved" if vpp > 1 else "1f1b", sequence_parallel=tp > 1,
                                       micro_batch_size=mbs, global_batch_size=global_batch_size,
                                       recompute=recompute, sharding=sharding))
    return out


def _expert_degrees(model: ModelConfig, stage_gpus: int, etp: int) -> list[int]:
    """Expert-parallel degrees of a stage of ``stage_gpus`` GPUs: 1 for a dense model; else
    each divisor of the experts whose ep·etp divides the stage's tp·cp·dp GPUs
    (:func:`predictor.core.layout.validate_layout`)."""
    if not model.num_experts:
        return [1]
    return [ep for ep in _divisors(model.num_experts) if stage_gpus % (ep * etp) == 0]


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


# ---------------------------------------------------------------- ranking

def check_rank_by(value) -> str:
    """``rank_by`` as one of :data:`RANK_BY`."""
    choice(RankBy, value, "rank_by", "choose one of {options} (p50 ranks by the typical step; p90 or p95 by the "
           "step you can count on, risk-aware; mean by the average)", quoted=False)
    return value


def _layout_fields(par: ParallelConfig) -> dict:
    """The searched settings of ``par``, each: a row must rebuild the very layout ranked (search
    turns sequence parallelism on under tp, and the schedule follows vpp)."""
    return {**{axis: getattr(par, axis) for axis in AXES}, "vpp": par.vpp, "schedule": par.schedule,
            "sequence_parallel": par.sequence_parallel, "mbs": par.micro_batch_size, "recompute": par.recompute,
            "sharding": par.sharding}


class Ranking(NamedTuple):
    """:func:`rank_layouts`' answer: every layout as a dict, best first; ``order[k]`` is the
    position in the input of ``layouts[k]``; the fronts are positions in ``layouts``."""

    layouts: list[dict]
    order: list[int]
    front_memory: list[int]
    front_risk: list[int]


def rank_layouts(works: list[Workload], models, rank_by: str = "p50", top: int = 10, seed: int = 0,
                 memory_gib=None, cache: QuantileCache | None = None, framework: str | None = None) -> Ranking:
    """Rank ``works`` (layouts of one model on one hardware and GPU count) by ``rank_by``.

    Returns every layout as a dict, best first, and the two Pareto fronts: ``rank_by``
    against memory per GPU, and p50 against risk (p95/p50). The best are composed in full
    (module docstring, step 3); the others keep the screen's figures (``composed``
    False). ``memory_gib``: each layout's memory per GPU, if known. A composed layout
    also states its median step as ``prism predict`` reports it (``median_step_s``: the
    predictive distribution's p50 for ``framework``) and the 80% predictive interval of it
    (``median_step_80_s``); ``p50_s`` is the step-time variability's median (the composed
    draws, a different quantity), which the ranking reads.
    """
    check_rank_by(rank_by)
    first = works[0]
    cache = cache or Predictor.with_models(models, first.hardware).pricer(first.hardware)
    if memory_gib is None:
        grad_bytes = load_framework(framework).grad_bytes
        memory_gib = [memory_per_gpu(first.model, w.parallel, flash_attention=w.parallel.attention != "unfused",
                                     grad_bytes=grad_bytes).total_gib for w in works]
    steps = screen(works, models, cache, SCREEN_DRAWS, seed)
    return _rank(steps, memory_gib, [w.parallel for w in works], first,
                 lambda indices: [composed_figures(works[i], models, cache, seed, framework) for i in indices],
                 rank_by, top)


def composed_figures(work: Workload, models, cache: QuantileCache, seed: int, framework: str) -> tuple[dict, dict]:
    """Step 3 for one layout: its :data:`RANK_BY` statistics composed in full, and its median
    step as ``prism predict`` reports it (the predictive distribution's p50, same draws and seed:
    ``median_step_s``) with the 80% predictive interval of it (``median_step_80_s``)."""
    dist, held = compose_holds(work, models, [(), PER_STEP], draws=FINAL_DRAWS, seed=seed, cache=cache)
    figures = {name: float(dist.draws.mean() if q is None else np.quantile(dist.draws, q))
               for name, q in RANK_BY.items()}
    doubt = doubt_of(work, dist, evidence_tier(models, dist.evidence.values()), framework, shipped_model())
    report = predictive_report(doubt)
    return figures, {"median_step_s": report["median_step_s"]["p50"],
                     "median_step_80_s": report["interval_s"]["80%"],
                     "train_step_s": train_step(run_mean_draws(dist.draws, held.draws, doubt, seed)[0])}


def _rank(steps: np.ndarray, memory_gib, layouts: list[ParallelConfig], like: Workload, compose_figures,
          rank_by: str, top: int) -> Ranking:
    """:func:`rank_layouts` from the screen's ``steps`` (layouts, draws) of ``layouts``;
    ``compose_figures(indices)`` gives :func:`composed_figures` of those layouts; ``like``
    is any of their workloads (model, hardware, GPUs and sequence)."""
    model, hw, memory = like.model, like.hardware, np.asarray(memory_gib, dtype=float)
    stats = {"p50": np.quantile(steps, 0.5, axis=1), "p90": np.quantile(steps, 0.9, axis=1),
             "p95": np.quantile(steps, 0.95, axis=1), "mean": steps.mean(axis=1)}
    composed = np.zeros(len(layouts), bool)
    predictive: dict[int, dict] = {}  # a composed layout's median step (predict's) and its 80% interval

    def compose_in_full(indices):
        todo = [int(i) for i in indices if not composed[i]]
        for i, (figures, interval) in zip(todo, compose_figures(todo)):
            for name in RANK_BY:
                stats[name][i] = figures[name]
            predictive[i] = interval
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
    gpus, peak = like.gpus, hw.mfu_peak
    ranked = []
    for rank, i in enumerate(order, 1):
        par, p50 = layouts[i], float(stats["p50"][i])
        tokens = par.global_batch_size * like.seq
        # tokens/s and MFU at prism predict's step for them (the run's mean step) where composed, else at the p50
        step = predictive.get(i, {}).get("train_step_s") or p50
        ranked.append({"rank": rank, **_layout_fields(par),
                       **{f"{name}_s": float(stats[name][i]) for name in RANK_BY},
                       "risk": float(stats["p95"][i]) / p50, "memory_gib": float(memory[i]),
                       "tokens_per_s": tokens / step,
                       "mfu": model_flops_per_step(model, tokens, like.seq) / (step * gpus * peak),
                       "median_step_s": predictive.get(i, {}).get("median_step_s"),
                       "median_step_80_s": predictive.get(i, {}).get("median_step_80_s"),
                       "composed": bool(composed[i])})
    position = np.empty(len(order), int)
    position[order] = np.arange(len(order))
    return Ranking(ranked, [int(i) for i in order], [int(position[i]) for i in fronts[0]],
                   [int(position[i]) for i in fronts[1]])


#: The layout fields a search enumerates (a base layout leaves them at ParallelConfig's defaults).
SEARCHED = ("dp", "tp", "pp", "cp", "ep", "vpp", "schedule", "sequence_parallel", "micro_batch_size", "recompute",
            "sharding")


def search(model: ModelConfig, hardware: HardwareConfig, gpus: int, *, base: ParallelConfig | None = None,
           rank_by: str = "p50", top: int = 10, models_dir: str | Path | None = None, seed: int = 0,
           framework: str | None = None) -> SearchResult:
    """Enumerate, check and rank the layouts of ``gpus`` GPUs for ``model`` on ``hardware``.

    Parameters
    ----------
    model, hardware
        As :func:`~predictor.analyses.predict.predict` takes them.
    gpus : int
        The job's GPU count: every layout has dp·tp·pp·cp = ``gpus``.
    base : ParallelConfig, optional
        What is not searched: the global batch (0: the default ``prism predict`` would
        use at this GPU count), the attention kernel, the overlap of gradient reduction,
        parameter gather and TP collectives. None: ``ParallelConfig()``.
    rank_by : str
        One of :data:`RANK_BY`: the statistic of the step time layouts are ranked by.
    top : int
        Layouts composed in full and listed first (:meth:`SearchResult.to_dict`).
    models_dir, seed
        As :func:`~predictor.analyses.predict.predict`.

    Raises
    ------
    PrismError
        Naming ``rank_by``, ``top`` or ``gpus``, or ``gpus`` where no layout fits.
    """
    # the search makes millions of small objects and frees none until it returns: the
    # cyclic collector's passes over them would cost a tenth of its time (measured)
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _search(model, hardware, gpus, base, rank_by, top, models_dir, seed, framework)
    finally:
        if collecting:
            gc.enable()


def _search(model, hardware, gpus, base, rank_by, top, models_dir, seed, framework) -> SearchResult:
    t0 = time.perf_counter()
    model, hardware, base = as_model(model), as_hardware(hardware), as_layout(base)
    rank_by = check_rank_by(rank_by)
    framework = check_framework(framework)
    if not isinstance(top, numbers.Integral) or isinstance(top, bool) or top < 1:
        raise PrismError(f"top={top!r}: how many layouts to list, a positive integer, e.g. top=10", field='top')
    if top > MAX_TOP:  # each is composed in full: top=100000 ran 9 minutes without a word
        raise PrismError(f"top={top}: at most {MAX_TOP} layouts are composed in full (about 0.04 s each); --json "
                         f"lists every ranked layout with its screened step time", field='top')
    top = int(top)
    if gpus is None:
        raise PrismError("gpus: search needs the job's GPU count, e.g. gpus=1024", field="gpus")
    gpus = check_gpus(gpus)
    check_number("seed", seed, integer=True, zero=True)
    check_count("global_batch_size", base.global_batch_size, zero=True)
    plain = ParallelConfig()
    fixed = [f"parallel.{key}={getattr(base, key)}" for key in SEARCHED if getattr(base, key) != getattr(plain, key)]
    if fixed:
        raise PrismError(f"{', '.join(fixed)}: search enumerates {', '.join(SEARCHED)} itself; leave them out "
                         f"(prism predict scores one layout; parallel.global_batch_size fixes the batch)",
                         field=fixed[0].split("=")[0])
    refuse_experts_of_dense(model, base)  # etp is not searched: every layout would be refused for it
    batch = base.global_batch_size or resolve_layout(base, gpus).global_batch_size
    base = replace(base, attention=attention_kernel(base.attention, framework, hardware))  # once, not per layout
    # tp is searched inside one NVLink domain: a node, or a whole NVL72 rack of 4-GPU nodes
    candidates = enumerate_layouts(model, gpus, hardware.nvlink_domain, batch, base)
    predictor = Predictor(models_dir)
    predictor.models(hardware)  # loaded (a models_dir without them refused) before any worker is forked
    predictor.doubt_model  # noqa: B018 - loaded once, before any worker is forked
    with _Workers(len(candidates), (model, hardware, gpus, predictor, seed, framework)) as workers:
        return _ranked(model, hardware, gpus, predictor, batch, rank_by, top, candidates, workers, t0, framework)


def _ranked(model, hardware, gpus, predictor, batch, rank_by, top, candidates, workers, t0,
            framework) -> SearchResult:
    """Steps 1 to 3 of the module docstring, run by ``workers``."""
    parts = workers.map(_screen_part, workers.split(candidates))
    invalid: dict[str, int] = {}
    for part in parts:
        for reason, n in part.invalid.items():
            invalid[reason] = invalid.get(reason, 0) + n
    too_big = sum(part.too_big for part in parts)
    fitting = [par for part in parts for par in part.fitting]
    if not fitting and not too_big:  # no layout is valid at all: memory is not why, and more GPUs do not help
        reasons = ", ".join(f"{reason} {n}" for reason, n in sorted(invalid.items(), key=lambda kv: -kv[1]))
        batch_bound = "parallel.global_batch_size" in invalid  # dp·micro-batch must divide it
        raise PrismError(f"gpus={gpus}: none of the {len(candidates)} layouts of {model.name} with a global batch of "
                         f"{batch} is valid (refused for {reasons}); "
                         + (f"give a parallel.global_batch_size that is a multiple of {gpus}, or use fewer GPUs"
                            if batch_bound else "use another GPU count"),
                         field="parallel.global_batch_size" if batch_bound else "gpus")
    if not fitting:
        least, states = min(part.smallest for part in parts)
        capacity = hardware.memory.capacity_gib
        need = "" if math.isinf(least) else (f"; the smallest needs {least:.1f} GiB, {states:.1f} of it the weights, "
                                              f"gradients and optimizer states")
        fix = ("use more GPUs" if states > capacity or math.isinf(least)  # no batch makes the states smaller
               else "use more GPUs or a smaller parallel.global_batch_size")
        raise PrismError(f"gpus={gpus}: none of the {len(candidates)} layouts of {model.name} with a global batch of "
                         f"{batch} fits in {capacity:g} GiB per GPU ({too_big} too big, "
                         f"{sum(invalid.values())} invalid{need}); {fix}", field='gpus')
    ranking = _rank(np.concatenate([part.steps for part in parts]), [g for part in parts for g in part.memory],
                    fitting, decompose(model, fitting[0], hardware, gpus, framework=framework),
                    lambda indices: workers.map(_compose_one, [fitting[i] for i in indices]), rank_by, top)
    return SearchResult(
        model=model.name, hardware=hardware.name, gpus=gpus, global_batch_size=batch, seq_length=model.seq_length,
        rank_by=rank_by, top=top,
        counts={"enumerated": len(candidates), "invalid": sum(invalid.values()), "do_not_fit": too_big,
                "ranked": len(fitting), "invalid_by_reason": invalid},
        layouts=ranking.layouts, front_memory=ranking.front_memory, front_risk=ranking.front_risk,
        draws={"screen": SCREEN_DRAWS, "composed": FINAL_DRAWS}, tier=predictor.tier(hardware),
        seconds=time.perf_counter() - t0)


# ---------------------------------------------------------------- the steps in worker processes

class _Screened(NamedTuple):
    """Steps 1 and 2 for a part of the candidates: the refused by reason, those too big, and
    the fitting ones with their memory per GPU and screened step times (fitting, draws)."""

    invalid: dict[str, int]
    too_big: int
    fitting: list[ParallelConfig]
    memory: list[float]
    steps: np.ndarray
    smallest: tuple[float, float]  # the least memory per GPU of a valid layout, GiB, and of its model states


#: The search under way, as the worker processes inherit it: (model, hardware, gpus,
#: models, seed, framework, quantile cache), the last the Predictor's for the hardware.
_JOB: tuple | None = None
#: Fewest candidates worth forking for; parts per worker (the layouts' costs differ).
PARALLEL_FROM = 2000
PARTS_PER_WORKER = 4


def _start(job: tuple) -> None:
    global _JOB
    model, hardware, gpus, predictor, seed, framework = job
    _JOB = (model, hardware, gpus, predictor.models(hardware), seed, framework, predictor.pricer(hardware))


def _start_worker(job: tuple) -> None:
    # Ctrl-C reaches the whole process group: the parent stops the pool and says so once,
    # and the pool's SIGTERM ends a worker without the CLI's handler (inherited) in the way
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _start(job)


def _screen_part(candidates: list[ParallelConfig]) -> _Screened:
    """Check, size, decompose and screen ``candidates`` for the search in :data:`_JOB`."""
    model, hardware, gpus, models, seed, framework, cache = _JOB
    invalid: dict[str, int] = {}
    fitting, memory, too_big, smallest = [], [], 0, (math.inf, math.inf)
    grad_bytes = load_framework(framework).grad_bytes
    for par in candidates:
        reason = invalid_reason(model, par, gpus)
        if reason:
            invalid[reason] = invalid.get(reason, 0) + 1
            continue
        need = memory_per_gpu(model, par, flash_attention=par.attention != "unfused",  # resolved in _search
                              grad_bytes=grad_bytes)
        gib = need.total_gib
        if gib < smallest[0]:
            smallest = (gib, (need.weights + need.gradients + need.optimizer) / GiB)
        if gib > hardware.memory.capacity_gib:
            too_big += 1
            continue
        fitting.append(par)
        memory.append(gib)
    # decompose reads the schedule not at all and vpp only for the layer split, which the
    # enumerated vpps (dividing the layers evenly) leave as vpp=1 has it: one decomposition
    # serves every vpp of a layout
    shared: dict[tuple, Workload] = {}
    works = []
    for par in fitting:
        plain = replace(par, vpp=1, schedule="1f1b")
        key = tuple(vars(plain).values())
        if key not in shared:
            shared[key] = decompose(model, plain, hardware, gpus, framework=framework)
        works.append(replace(shared[key], parallel=par))
    steps = screen(works, models, cache, SCREEN_DRAWS, seed) if works else np.empty((0, SCREEN_DRAWS))
    return _Screened(invalid, too_big, fitting, memory, steps, smallest)


def _compose_one(par: ParallelConfig) -> tuple[dict, list]:
    """:func:`composed_figures` of ``par`` for the search in :data:`_JOB`."""
    model, hardware, gpus, models, seed, framework, cache = _JOB
    return composed_figures(decompose(model, par, hardware, gpus, framework=framework), models, cache, seed,
                            framework)


def _cpus() -> int:
    """The CPUs this process may fork workers on: 1 off Linux or where another thread runs."""
    if sys.platform != "linux" or threading.active_count() > 1:
        return 1
    return len(os.sched_getaffinity(0))


class _Workers:
    """The processes a search runs its steps in: one per CPU this process may use, forked
    (on Linux, from :data:`PARALLEL_FROM` candidates, and where no other thread runs: a
    fork copies none, so a lock another thread holds would stay taken: :func:`_cpus`);
    else this process.
    Results come back in order and do not depend on how the work was split (the screen's
    draws are keyed: :mod:`predictor.engine.screen`; compose is seeded per layout)."""

    def __init__(self, candidates: int, job: tuple):
        self.job, self.pool = job, None
        self.workers = _cpus() if candidates >= PARALLEL_FROM else 1

    def __enter__(self) -> _Workers:
        if self.workers > 1:
            self.pool = multiprocessing.get_context("fork").Pool(self.workers, initializer=_start_worker,
                                                                 initargs=(self.job,))
        else:
            _start(self.job)
        return self

    def __exit__(self, *exc) -> None:
        global _JOB
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()
        _JOB = None

    def split(self, items: list) -> list[list]:
        """``items`` in contiguous parts, :data:`PARTS_PER_WORKER` per worker (one without)."""
        if self.pool is None:
            return [items]
        size = math.ceil(len(items) / (self.workers * PARTS_PER_WORKER))
        return [items[i:i + size] for i in range(0, len(items), size)]

    def map(self, function, items: list) -> list:
        """``function`` of each of ``items``, in order."""
        if self.pool is None:
            return [function(item) for item in items]
        return self.pool.map(function, items, chunksize=1)

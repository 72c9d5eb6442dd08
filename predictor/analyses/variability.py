"""``prism variability``: how a layout's step time spreads at scale, and why.

docs/method.md, "Analyses". Four studies of one layout, each built on the composer
(:func:`predictor.engine.compose.compose`) with one shared :class:`~predictor.latency.lookup.QuantileCache`:

1. **Slowdown versus scale.** The *nominal* step is the step with every variability
   component held at its median (``hold=COMPONENTS``: every op at its median latency, every
   GPU at median speed, the median communication regime). A slowdown of ``x`` is a step of
   at least ``(1 + x)`` times the nominal one. Its probability is reported for the layout
   at each GPU count of ``analysis.scales`` with tp, pp, cp and the micro-batches per
   replica fixed (dp and the global batch grow with the GPU count), so what changes with
   scale is only the number of GPUs a stage waits for.
2. **Variance attribution.** Holding one op's residual at its median (``residual:<op>/
   <pass>``), then each component alone, and measuring how much the step-time variance
   drops. Variance, not the p5-p95 width: independent contributions to a sum add up in
   variance, so the drops are comparable shares. Every hold draws the same random
   numbers, so a drop is what was held and not Monte Carlo noise. Shares are the drops
   normalised to sum to 1 (over ops, and separately over components); the raw drop, as a
   fraction of the variance, says how far the parts add up to the whole.
3. **Slow-node placement.** ``analysis.slow_nodes`` nodes (a node is ``gpus_per_node``
   consecutive ranks, Megatron's order: tp innermost, then cp, dp, pp) run
   ``analysis.slow_factor`` times slower. A stage waits for its slowest GPU, and the data-
   parallel gradient reduction makes every replica wait for the slowest one each step, so
   what matters is how many slow GPUs each pipeline stage holds; which replica or tp group
   they sit in does not (a tp group lies within a node whenever tp <= gpus_per_node). The
   placements compared: packed from the first, last or middle stage (all in that stage
   while it holds them, else filling as few stages as they can, every stage at the most);
   spread over stages (``slow_nodes // pp`` in each, the rest evenly apart) in the same dp
   replica, or over stages and replicas. Any count up to the job's nodes has placements
   that hold that many slow nodes; a kind the layout cannot hold is left out with a note.
4. **Time to train with failures.** The run's productive days (its mean step, as
   ``prism predict``: per-step jitter averages out, what persists does not) plus
   interruptions over the whole run, its restarts and redone work included. With failures
   at rate λ (``interruptions_per_gpu_day x gpus``), checkpoints every τ
   (``checkpoint_interval_min``, their own cost not modelled) and a restart of R
   (``restart_cost_min``), a checkpoint interval's work takes e^(λR)(e^(λτ) - 1)/λ of wall
   time on average (Daly 2006, "A higher order estimate of the optimum checkpoint interval
   for restart dumps", FGCS 22(3), eq. 5 with no dump time): the run's interruptions are
   Poisson with λ times that wall time as mean, each costing the restart and uniform lost
   work whose means make up the difference. Where λτ and λR are small this is the familiar
   λ x productive time interruptions of R plus uniform [0, τ) work each; where a failure
   comes every few minutes against half-hour checkpoints the job hardly progresses, and the
   report says so; past a stretch of e^50 (:data:`NO_PROGRESS`) it does not finish, and
   the report gives no days. Goodput = productive / total.
"""
from __future__ import annotations

import math
import numbers
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import numpy as np

from predictor.analyses.predict import (
    SECONDS_PER_DAY,
    check_gpus,
    check_train_tokens,
    predictive_report,
    run_step_draws,
    steps_to_train,
)
from predictor.core.errors import PrismError
from predictor.core.job import Job, check_framework
from predictor.core.layout import MAX_GPUS, report_layout
from predictor.core.mesh import Mesh
from predictor.core.profiles import as_hardware, as_layout, as_model
from predictor.core.specs import HardwareConfig, ModelConfig, ParallelConfig, check_draws
from predictor.engine.compose import COMPONENTS, PER_STEP, compose, workload_calls
from predictor.engine.predictor import Predictor, QuantileCache, Workload
from predictor.workload.decompose import decompose

MINUTES_PER_DAY = 1440.0


@dataclass
class AnalysisConfig:
    """The settings of :func:`variability` (``analysis:`` in conf/config.yaml); each is
    checked by :func:`check_analysis`."""

    draws: int = 2000
    thresholds: list[float] = field(default_factory=lambda: [0.05, 0.10, 0.20])
    scales: list[int] = field(default_factory=lambda: [8, 64, 512, 4096, 16384, 65536])
    top_ops: int = 8
    slow_nodes: int | None = None  # None: SLOW_NODES, or every node of a smaller job
    slow_factor: float = 1.10
    runs: int = 4000


#: Known-slow nodes placed by default (a job with fewer nodes has every one of them placed).
SLOW_NODES = 4


@dataclass
class VariabilityReport:
    model: str
    hardware: str
    gpus: int
    layout: dict
    nominal_s: float  # every component at its median
    step_time_s: dict  # p5, p50, p95, mean
    cdf: dict  # {"t_s": [...], "p": [...]}
    scales: list[dict]  # per GPU count: nominal, p50, p95, P(slowdown >= x)
    attribution: dict  # {"ops": [...], "components": [...]}: shares of the step-time variance
    placements: list[dict]  # per placement of the slow nodes: slow GPUs per stage, p50, p95
    placement_spread: float  # worst median / best median over the placements
    time_to_train: dict  # days with failures, productive days, interruptions, goodput
    predictive: dict = field(default_factory=dict)  # doubt about the median step, reported beside, never mixed in
    fits: bool = True  # the memory verdict, prism predict's: memory per GPU within the GPU's capacity
    memory_gib: dict = field(default_factory=dict)  # {"total", "capacity", "stage"}: per GPU, the fullest stage
    settings: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the user should know, e.g. a scale rounded up
    elapsed_s: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def check_analysis(a: AnalysisConfig) -> AnalysisConfig:
    """``a`` if every setting has its type and range; else one PrismError naming the first
    bad key."""
    if isinstance(a, Mapping):  # as a layout is taken: a dict of its fields
        known = {f.name for f in fields(AnalysisConfig)}
        unknown = sorted(set(map(str, a)) - known)
        if unknown:
            raise PrismError(f"settings: {unknown[0]!r} is no setting of AnalysisConfig; choose among "
                             f"{', '.join(sorted(known))}", field=f"analysis.{unknown[0]}")
        a = AnalysisConfig(**a)
    if not isinstance(a, AnalysisConfig):
        raise PrismError(f"settings={a!r}: an AnalysisConfig, e.g. AnalysisConfig(draws=2000), or a dict of its "
                         f"settings", field="settings")

    def whole(v, least):
        return isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= least

    def real(v, least):
        return isinstance(v, numbers.Real) and not isinstance(v, bool) and least <= v < math.inf

    def listed(v, test):
        return isinstance(v, list | tuple) and bool(v) and all(test(x) for x in v)

    for key in ("draws", "runs"):
        check_draws(f"analysis.{key}", getattr(a, key), least=100)
    checks = [
        ("thresholds", listed(a.thresholds, lambda x: real(x, 0) and x > 0),
         "must be a list of positive slowdowns, e.g. analysis.thresholds=[0.05,0.1,0.2]"),
        ("scales", listed(a.scales, lambda x: whole(x, 1) and x <= MAX_GPUS),
         f"must be a list of GPU counts up to {MAX_GPUS:,}, e.g. analysis.scales=[64,512,4096]"),
        ("top_ops", whole(a.top_ops, 1), "must be a whole number of at least 1"),
        ("slow_nodes", a.slow_nodes is None or whole(a.slow_nodes, 0), "must be a whole number of nodes, 0 or more"),
        ("slow_factor", real(a.slow_factor, 1), "must be a finite number, 1 or more, e.g. analysis.slow_factor=1.10 "
                                                "(10 % slower)"),
    ]
    for key, ok, fix in checks:
        if not ok:
            raise PrismError(f"analysis.{key}={getattr(a, key)!r}: {fix}", field=f"analysis.{key}")
    return a


def scaled_layout(par: ParallelConfig, micro_batches: int, gpus: int) -> ParallelConfig:
    """``par`` on ``gpus`` GPUs: tp, pp, cp and the micro-batches per replica kept."""
    dp = gpus // par.replica_gpus
    return replace(par, dp=dp, global_batch_size=par.micro_batch_size * dp * micro_batches)


def scale_points(par: ParallelConfig, scales, gpus: int) -> list[int]:
    """GPU counts of the scale study: each scale rounded up to a multiple of the fewest GPUs
    that hold the layout, plus the job's own count. That is tp·pp·cp, times the dp at which
    ep·etp divides tp·cp·dp (the experts' mesh, :mod:`predictor.core.mesh`):
    the default scale of 8 GPUs cannot hold ep=64, and would end the whole study."""
    unit = scale_unit(par)
    return sorted({math.ceil(s / unit) * unit for s in scales} | {gpus})


def scale_unit(par: ParallelConfig) -> int:
    """The fewest GPUs that hold ``par``'s layout (:func:`scale_points`)."""
    experts = par.ep * par.etp
    return par.replica_gpus * (experts // math.gcd(experts, par.tp * par.cp))


def scales_note(par: ParallelConfig, scales, gpus: int) -> str | None:
    """Which of ``scales`` :func:`scale_points` rounded up, and why; None where none."""
    points = scale_points(par, scales, gpus)
    moved = [f"{s} -> {next(p for p in points if p >= s)}" for s in dict.fromkeys(scales) if s not in points]
    if not moved:
        return None
    return (f"analysis.scales: {', '.join(moved)} GPUs, rounded up to a multiple of the {scale_unit(par)} GPUs "
            f"that hold the layout (tp·pp·cp, times the dp the experts' mesh needs)")


def slowdown_probability(draws: np.ndarray, nominal: float, thresholds) -> dict:
    """P(step >= (1 + x) nominal) for each x, keyed like ``"10%"``."""
    return {f"{x:.0%}": float(np.mean(draws >= (1 + x) * nominal)) for x in thresholds}


def nominal_step(work: Workload, models, cache: QuantileCache) -> float:
    """The step with every variability component at its median (seconds)."""
    return float(compose(work, models, draws=1, cache=cache, hold=COMPONENTS).draws[0])


def _scale_row(work, models, cache, a: AnalysisConfig, seed: int, brute_force=False) -> dict:
    draws = compose(work, models, draws=a.draws, seed=seed, cache=cache, brute_force=brute_force).draws
    nominal = nominal_step(work, models, cache)
    p50, p95 = np.quantile(draws, (0.5, 0.95))
    return {"gpus": work.gpus, "dp": work.parallel.dp, "nominal_s": nominal, "p50_s": float(p50),
            "p95_s": float(p95), "p_slowdown": slowdown_probability(draws, nominal, a.thresholds)}


def slowdown_vs_scale(model: ModelConfig, work: Workload, models, cache: QuantileCache, a: AnalysisConfig,
                      seed: int, framework: str | None = None) -> list[dict]:
    """The slowdown probabilities of ``work``'s layout at each GPU count of ``a.scales``
    (decomposed for ``framework``, as ``work`` was)."""
    rows = []
    for gpus in scale_points(work.parallel, a.scales, work.gpus):
        scaled = decompose(model, scaled_layout(work.parallel, work.micro_batches, gpus), work.hardware, gpus,
                           framework=framework)
        rows.append(_scale_row(scaled, models, cache, a, seed))
    return rows


def shortcut_check(work: Workload, models, cache: QuantileCache, a: AnalysisConfig, seed: int) -> dict:
    """The order-statistic shortcut against drawing every GPU: p50 and p95 (relative
    difference) and each slowdown probability (difference in probability)."""
    short = _scale_row(work, models, cache, a, seed)
    brute = _scale_row(work, models, cache, a, seed, brute_force=True)
    return {"gpus": work.gpus, "shortcut": short, "brute_force": brute,
            "p50_rel_diff": short["p50_s"] / brute["p50_s"] - 1, "p95_rel_diff": short["p95_s"] / brute["p95_s"] - 1,
            "p_slowdown_diff": {k: v - brute["p_slowdown"][k] for k, v in short["p_slowdown"].items()}}


def _variance_drops(work, models, cache, draws: int, seed: int, holds: dict) -> list[dict]:
    """Each hold's drop in step-time variance: share (normalised, >= 0) and raw fraction."""
    total = compose(work, models, draws=draws, seed=seed, cache=cache).draws.var()
    drops = {name: total - compose(work, models, draws=draws, seed=seed, cache=cache, hold=hold).draws.var()
             for name, hold in holds.items()}
    positive = sum(max(d, 0.0) for d in drops.values()) or 1.0
    rows = [{"name": name, "share": max(d, 0.0) / positive, "variance_drop": d / total if total else 0.0}
            for name, d in drops.items()]
    return sorted(rows, key=lambda r: -r["share"])


def attribution(work: Workload, models, cache: QuantileCache, draws: int, seed: int) -> dict:
    """Shares of the step-time variance: per op and pass (its residual held), and per
    component of :data:`COMPONENTS`."""
    keys = sorted({f"{c.op}/{c.pass_}" for c in workload_calls(work)})
    return {"ops": _variance_drops(work, models, cache, draws, seed, {k: (f"residual:{k}",) for k in keys}),
            "components": _variance_drops(work, models, cache, draws, seed, {c: (c,) for c in COMPONENTS})}


def ops_above_noise(ops: list[dict], top: int) -> tuple[list[dict], float]:
    """The first ``top`` of :func:`attribution`'s ops whose own (residual) spread drops the
    step-time variance by more than the draws' noise, and that noise: the largest rise any
    op's hold shows (a hold cannot add variance, so a rise is noise, and a drop no larger may
    be). Ops on priors carry no variability (their doubt is the predictive uncertainty's)."""
    noise = max([-o["variance_drop"] for o in ops] + [0.0])
    return [o for o in ops if o["variance_drop"] > max(noise, MIN_VARIANCE_DROP)][:top], noise


#: An op's drop in the step-time variance below this share is not shown, noise or not.
MIN_VARIANCE_DROP = 0.0005


#: The named kinds of placement of :func:`placements`, in report order.
PLACEMENT_KINDS = ("first", "last", "middle", "spread over stages, same dp replica",
                   "spread over stages and dp replicas")


def _placement_kinds(mesh: Mesh, k: int) -> dict[str, list[int] | None]:
    """Each kind of :data:`PLACEMENT_KINDS` as the node indices of its ``k`` slow nodes;
    None where the layout cannot hold that kind (a stage with too few free nodes for it).

    Packed ("first", "last", "middle"): the stages' nodes in turn from that stage outwards,
    so ``k`` slow nodes fill as few stages as they can (one stage while it holds them, every
    stage when they fill them all); always possible, as the stages' nodes cover the job's.
    Spread: ``k // pp`` slow nodes in every stage and the rest in stages evenly apart from
    the first to the last, in the same dp replica (a stage's first nodes) or in different
    ones; a node a stage shares with another one already chosen is passed over."""
    nodes = math.ceil(mesh.world_size / mesh.gpus_per_node)
    if k == nodes:  # every node slow: every kind is the same placement
        return dict.fromkeys(PLACEMENT_KINDS, list(range(nodes)))
    nodes_of = {s: mesh.stage_nodes(s) for s in range(mesh.pp)}
    mid = mesh.pp // 2
    orders = {"first": range(mesh.pp), "last": range(mesh.pp - 1, -1, -1),
              "middle": sorted(range(mesh.pp), key=lambda s: (abs(s - mid), s))}
    out: dict[str, list[int] | None] = {}
    for kind, order in orders.items():
        packed = list(dict.fromkeys(n for s in order for n in nodes_of[s]))[:k]
        out[kind] = packed if len(packed) == k else None
    extra = k % mesh.pp  # stages holding one slow node more than the others, evenly apart
    more = [round(i * (mesh.pp - 1) / max(extra - 1, 1)) for i in range(extra)]
    stages = [s for s in range(mesh.pp) for _ in range(k // mesh.pp + more.count(s))]

    def spread(preferred) -> list[int] | None:
        chosen: list[int] = []
        for i, s in enumerate(stages):
            ring, j = nodes_of[s], preferred(i, s)
            free = [ring[(j + t) % len(ring)] for t in range(len(ring)) if ring[(j + t) % len(ring)] not in chosen]
            if not free:
                return None
            chosen.append(free[0])
        return chosen

    out[PLACEMENT_KINDS[3]] = spread(lambda i, s: stages[:i].count(s))
    out[PLACEMENT_KINDS[4]] = spread(lambda i, s: i)
    return out


def _placement_name(mesh: Mesh, kind: str, chosen: list[int]) -> str:
    """How the report names a placement of ``kind``: packed ones by the stages they fill."""
    nodes = math.ceil(mesh.world_size / mesh.gpus_per_node)
    if len(chosen) == nodes:
        return "every node"
    if kind not in ("first", "last", "middle"):
        return kind
    start = {"first": 0, "last": mesh.pp - 1, "middle": mesh.pp // 2}[kind]
    if set(chosen) <= set(mesh.stage_nodes(start)):
        return f"all in stage {start} ({kind})"
    slow = [s for s, n in enumerate(mesh.gpus_per_stage_on(chosen)) if n]
    if len(slow) == mesh.pp:
        return f"packed in all {mesh.pp} stages ({kind})"
    return f"packed in stages {slow[0]}-{slow[-1]} ({kind})"


def placements(mesh: Mesh, k: int) -> dict[str, list[int]]:
    """Named placements of ``k`` slow nodes (node indices), one per kind of
    :data:`PLACEMENT_KINDS` the layout can hold (:func:`placement_note` names those it
    cannot); a repeat of an earlier one's nodes is left out. Every ``k`` up to the job's
    nodes has at least one (the packed kinds always fit)."""
    if k == 0:
        return {}
    out, seen = {}, set()
    for kind, chosen in _placement_kinds(mesh, k).items():
        if chosen is None or frozenset(chosen) in seen:
            continue
        out[_placement_name(mesh, kind, chosen)] = chosen
        seen.add(frozenset(chosen))
    return out


def placement_note(mesh: Mesh, k: int) -> str | None:
    """The kinds of placement of ``k`` slow nodes the layout cannot hold, in one line; None
    where it holds every kind."""
    missing = [kind if kind in PLACEMENT_KINDS[3:] else f"packed from the {kind} stage"
               for kind, chosen in _placement_kinds(mesh, k).items() if k and chosen is None]
    if not missing:
        return None
    sizes = sorted({len(mesh.stage_nodes(s)) for s in range(mesh.pp)})
    span = f"{sizes[0]}" if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"
    return (f"analysis.slow_nodes={k}: placement{'s' * (len(missing) > 1)} {', '.join(repr(m) for m in missing)} "
            f"left out: a stage spans {span} node(s) ({mesh.gpus_per_stage} GPUs per stage, "
            f"{mesh.gpus_per_node} per node), too few free nodes for {k} slow nodes placed that way")


def slow_node_count(work: Workload, a: AnalysisConfig) -> int:
    """``analysis.slow_nodes``, or by default :data:`SLOW_NODES` capped at the job's nodes."""
    if a.slow_nodes is not None:
        return a.slow_nodes
    return min(SLOW_NODES, math.ceil(work.gpus / work.mesh.gpus_per_node))


def place_slow_nodes(work: Workload, models, cache: QuantileCache, a: AnalysisConfig, seed: int) -> list[dict]:
    """Step time of ``work`` with ``a.slow_nodes`` slow nodes in each placement, first row
    none (every placement draws the same random numbers)."""
    gpn = work.mesh.gpus_per_node
    nodes = math.ceil(work.gpus / gpn)
    count = slow_node_count(work, a)
    if count > nodes:
        raise PrismError(f"analysis.slow_nodes={count}: the job has only {nodes} node{'s' * (nodes > 1)} "
                         f"({work.gpus} GPUs / {gpn} per node); choose at most {nodes}", field='analysis.slow_nodes')
    options = {"no slow nodes": []} | placements(work.mesh, count)
    rows = []
    for name, chosen in options.items():
        slow = work.mesh.gpus_per_stage_on(chosen)
        d = compose(work, models, draws=a.draws, seed=seed, cache=cache, slow_gpus=slow,
                    slow_factor=a.slow_factor).draws
        rows.append({"placement": name, "nodes": chosen, "slow_gpus_per_stage": list(slow),
                     "p50_s": float(np.median(d)), "p95_s": float(np.quantile(d, 0.95))})
    for r in rows:
        r["vs_no_slow_nodes"] = r["p50_s"] / rows[0]["p50_s"]
    return rows


#: Interruptions over all runs past which the lost work is drawn per run from its normal limit
#: instead of per interruption (whose arrays would not fit in memory).
MANY_FAILURES = 1_000_000


#: Log of the wall-time stretch past which a run is past any use (e^50: 5e21 times its work):
#: :func:`wall_time_stretch` calls it infinite, and the run does not finish.
NO_PROGRESS = 50.0


def wall_time_stretch(failures_per_day: float, checkpoint_min: float, restart_min: float) -> tuple[float, float]:
    """Wall time over productive time of a run failing ``failures_per_day``, checkpointing
    every ``checkpoint_min`` and restarting in ``restart_min`` (module docstring, Daly 2006),
    and the minutes each failure costs on average (its restart and its lost work).

    Past e^:data:`NO_PROGRESS` the stretch is ``math.inf`` (the run does not finish) and each
    failure costs the whole time between failures; below it the stretch grows with the
    failure rate, uncapped."""
    rate = failures_per_day / MINUTES_PER_DAY  # per minute
    if rate <= 0:
        return 1.0, restart_min + checkpoint_min / 2
    x = rate * checkpoint_min  # in logs: e^(λτ) overflows at a failure a second on a million GPUs
    log_stretch = rate * restart_min + (x if x > 30 else math.log(math.expm1(x))) - math.log(x)
    if log_stretch > NO_PROGRESS:
        return math.inf, 1 / rate
    stretch = math.exp(log_stretch)
    return stretch, (stretch - 1) / (rate * stretch)


def progress_note(hw: HardwareConfig, gpus: int) -> str | None:
    """A note where failures come so often that the run hardly progresses, or does not
    finish (:data:`NO_PROGRESS`), naming what would help."""
    var = hw.variability
    rate = var.interruptions_per_gpu_day * gpus / MINUTES_PER_DAY
    stretch = wall_time_stretch(var.interruptions_per_gpu_day * gpus, var.checkpoint_interval_min,
                                var.restart_cost_min)[0]
    if stretch < 2:
        return None
    fix = ("checkpoint more often (hardware.variability.checkpoint_interval_min), restart faster "
           "(hardware.variability.restart_cost_min) or run on fewer GPUs")
    head = (f"a failure every {1 / rate:.3g} min on {gpus:,} GPUs against checkpoints every "
            f"{var.checkpoint_interval_min:g} min and {var.restart_cost_min:g} min restarts: ")
    if math.isinf(stretch):
        return (head + f"the run does not finish (each checkpoint interval's work would take more than "
                f"e^{NO_PROGRESS:g} = {math.exp(NO_PROGRESS):.3g} times its length, its attempts failing and "
                f"redone); {fix}")
    return (head + f"each checkpoint interval's work takes {stretch:.3g} times its length (its attempts fail and "
            f"are redone); {fix}")


def fit_note(memory, hw: HardwareConfig) -> str | None:
    """A note where the layout does not fit in the GPU's memory (as ``prism predict`` flags it):
    every figure of the report is of a job that cannot run as laid out."""
    if memory.fits(hw):
        return None
    return (f"DOES NOT FIT: {memory.total_gib:.1f} GiB per GPU of {hw.memory.capacity_gib:g}; the job cannot run "
            f"as laid out, so its step, goodput and time to train are of a layout that would not start (shard more: "
            f"parallel.sharding, tp, pp, or recompute)")


def time_to_train(run_step_s: np.ndarray, steps: float, hw: HardwareConfig, gpus: int, runs: int,
                  seed: int) -> dict:
    """Days to train with interruptions and restarts, over ``runs`` Monte Carlo runs.

    ``run_step_s`` are draws of the run's mean step time (:func:`run_step_draws`). Where
    failures stretch the wall time past e^:data:`NO_PROGRESS` the run does not finish:
    ``days`` and ``interruptions`` are None and goodput 0 (no huge number that reads as a
    time).
    """
    rng = np.random.default_rng(seed)
    var = hw.variability
    productive = rng.choice(run_step_s, size=runs) * steps / SECONDS_PER_DAY
    stretch, per_failure_min = wall_time_stretch(var.interruptions_per_gpu_day * gpus, var.checkpoint_interval_min,
                                                 var.restart_cost_min)
    band = (0.05, 0.5, 0.95)

    def quantiles(x):
        return {f"p{round(q * 100)}": float(v) for q, v in zip(band, np.quantile(x, band))}

    if math.isinf(stretch):  # past NO_PROGRESS: no days, no count of interruptions, no goodput to speak of
        return {"days": None, "productive_days": quantiles(productive), "interruptions": None,
                "goodput": dict.fromkeys(quantiles(productive), 0.0)}
    expected = var.interruptions_per_gpu_day * gpus * productive * stretch
    if expected.max() < MANY_FAILURES:
        failures = rng.poisson(expected)
    else:  # Poisson past numpy's range: its normal limit (mean and variance the expected count)
        failures = np.maximum(np.rint(rng.normal(expected, np.sqrt(expected))), 0)
    restart = min(var.restart_cost_min, per_failure_min)  # failing more often than it restarts: the restart is cut
    c = 2 * (per_failure_min - restart)  # lost work per failure, uniform on [0, c): τ where failures are rare
    if failures.sum() <= MANY_FAILURES:
        lost_work = np.bincount(np.repeat(np.arange(runs), failures.astype(int)), minlength=runs,
                                weights=rng.uniform(0, c, int(failures.sum())))
    else:  # a sum of n uniforms on [0, c) without drawing each: mean n·c/2, variance n·c²/12 (central limit)
        lost_work = np.clip(rng.normal(failures * c / 2, np.sqrt(failures / 12) * c), 0, failures * c)
    total = productive + (failures * restart + lost_work) / MINUTES_PER_DAY
    return {"days": quantiles(total), "productive_days": quantiles(productive),
            "interruptions": quantiles(failures), "goodput": quantiles(productive / total)}


def variability(model: ModelConfig, hardware: HardwareConfig, layout: ParallelConfig, gpus: int | None = None, *,
                settings: AnalysisConfig | None = None, models_dir: str | Path | None = None, seed: int = 0,
                train_tokens: float = 1e12, framework: str | None = None) -> VariabilityReport:
    """The four studies of the module docstring for one job.

    Parameters
    ----------
    model, hardware, layout, gpus
        The job, as :func:`~predictor.analyses.predict.predict` takes it.
    settings : AnalysisConfig, optional
        Draws, slowdown thresholds, GPU counts of the scale study, slow nodes, runs of
        the time to train; None: the defaults of :class:`AnalysisConfig`.
    models_dir, seed, train_tokens, framework
        As :func:`~predictor.analyses.predict.predict`. The analysis is of the hardware's
        variability alone (calls resting on priors stay at their median); the predictive
        uncertainty of the median step is reported beside it (``predictive``).

    Raises
    ------
    PrismError
        Naming the field: an ``analysis.*`` setting, ``gpus``, ``train_tokens`` or the
        layout's.
    """
    t0 = time.perf_counter()
    model, hardware, layout = as_model(model), as_hardware(hardware), as_layout(layout)
    a = check_analysis(settings or AnalysisConfig())
    train_tokens = check_train_tokens(train_tokens)
    job = Job.of(model, hardware, layout, check_gpus(gpus), check_framework(framework))  # as prism predict's
    par, gpus = job.parallel, job.gpus
    predictor = Predictor(models_dir)
    models = predictor.models(hardware)
    memory = predictor.memory(job)
    fits = memory.fits(hardware)
    framework, cache, work = job.framework, predictor.pricer(job), predictor.workload(job)
    a = replace(a, slow_nodes=slow_node_count(work, a))  # the default made a number, as reported
    placed = place_slow_nodes(work, models, cache, a, seed)  # first: it checks analysis.slow_nodes
    dist, persistent = predictor.steps(job, [(), PER_STEP], a.draws, seed)
    full, persistent = dist.draws, persistent.draws
    doubt = predictor.doubt(job, dist)
    steps = steps_to_train(train_tokens, work.tokens_per_step)
    medians = [r["p50_s"] for r in placed[1:]]
    return VariabilityReport(
        model=model.name, hardware=hardware.name, gpus=gpus,
        layout=report_layout(model, par),
        nominal_s=nominal_step(work, models, cache),
        step_time_s={f"p{round(q * 100)}": float(np.quantile(full, q)) for q in (0.05, 0.5, 0.95)}
        | {"mean": float(full.mean())},
        cdf={"t_s": np.quantile(full, np.linspace(0, 1, 101)).tolist(), "p": np.linspace(0, 1, 101).tolist()},
        scales=slowdown_vs_scale(model, work, models, cache, a, seed, framework),
        attribution=attribution(work, models, cache, a.draws, seed),
        placements=placed, placement_spread=max(medians) / min(medians) if medians else 1.0,
        predictive=predictive_report(doubt), fits=fits,
        memory_gib={"total": memory.total_gib, "capacity": hardware.memory.capacity_gib, "stage": memory.stage},
        time_to_train=time_to_train(run_step_draws(full, persistent), steps, hardware, gpus, a.runs, seed)
        | {"train_tokens": train_tokens},
        settings=asdict(a),
        notes=[n for n in [fit_note(memory, hardware), scales_note(par, a.scales, gpus),
                           placement_note(work.mesh, a.slow_nodes), progress_note(hardware, gpus)] if n],
        elapsed_s=time.perf_counter() - t0)

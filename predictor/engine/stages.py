"""A pipeline stage's time per Monte Carlo draw, by the composer's rules, for one layout
or for thousands at once (docs/method.md, Composer step 2).

This is the composer's arithmetic, written once: :func:`predictor.engine.compose.compose`
runs it for one layout and walks the pipeline schedule exactly; the search's
:func:`predictor.engine.screen.screen` runs it for every layout at once. Two steps:

1. :func:`draw_stage_sums`: for each distinct stage (a *kind* of :class:`StagePlan`) and
   each :class:`Part`, the sum of its calls' latencies (us) over S draws. Each distinct
   call is drawn once per step by inverse CDF from its quantiles, inside a training step
   (:func:`predictor.latency.lookup.in_step`). ``count`` identical calls add up as
   ``count * mean + sqrt(count) * (draw - mean)``: the sum of ``count`` independent draws,
   its mean and variance exact (the mean of the distribution the draws come from,
   :func:`~predictor.engine.draws.quantile_mean`). Centred on the median instead, a sum fell
   short by ``(count - sqrt(count)) * (mean - median)``: little for a GPU kernel, whose
   repeats are tight, but a CPU's small collectives are bimodal (a 192 KB all_reduce's mean
   several times its median), and a tp=2 step of them fell short by a fifth. A
   micro-batch's calls carry ``1/sqrt(m)`` of that deviation, because the schedule repeats
   one draw for all ``m`` micro-batches, whose own residuals would partly cancel. Calls
   resting on a prior (:attr:`~predictor.latency.lookup.Evidence.prior`) stay at their
   median: a prior's spread is doubt about the median, not jitter a run would show, so it
   belongs to the predictive uncertainty (:mod:`predictor.latency.doubt`), which is told
   how much of the step rests on priors (:attr:`StageSums.prior_nominal`). Where the
   models hold a CPU's gap curve (:mod:`predictor.latency.adjustments.collective_gap`), each part's
   collectives are scaled by the curve at the compute time before them (:func:`_gap_factors`).
2. :func:`stage_times`: each stage's forward and backward of one micro-batch and what it
   does after the pipeline, per draw. Compute runs at the pace of the stage's slowest GPU
   and collectives at the step's communication regime (:mod:`predictor.engine.draws`);
   overlapped TP collectives (Megatron ``--tp-comm-overlap``, torchtitan's async TP) cost
   only what the GEMMs they are fused with leave uncovered, the attention's and the FFN's
   each on their own (:func:`_exposed`; perfect overlap: a lower bound on the exposed time);
   Megatron's pipeline sends are blocking (``send_forward_recv_backward`` ...), and so are
   those of ``torch.distributed.pipelining``'s 1F1B (each send is fused with a receive and
   waited on), so there a transfer is part of the sending stage's forward (backward);
   its ``ScheduleGPipe`` waits on its sends only after the last forward (backward), so
   under GPipe on a GPU a transfer delays its receiver alone (:data:`DEFERRED_SENDS`);
   the DP gradient reduction runs under the last micro-batch's backward but its last
   bucket, the sharded optimizer's parameter gather under the next step's first forward but
   its first bucket (Megatron ``overlap_grad_reduce`` / ``overlap_param_gather``: Megatron-Core's
   forward pre-hook waits on a bucket's gather and dispatches the next one, so the gathers run
   one bucket ahead of the first micro-batch and are done before the second;
   ``DistributedDataParallel._make_forward_pre_hook``, ``finish_param_sync``); the
   optimizer step is compute after both. The host's framework calls of each pass
   (:mod:`predictor.workload.host`) form a second timeline beside the device's
   (:func:`_host_wait`): the longer one sets the pass on CUDA, the two add on a CPU.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from predictor.core.errors import PrismError
from predictor.core.ops import FFN_ROLE, OPS, TP_FFN, Call
from predictor.engine.draws import KeyedStreams, inverse_cdf, quantile_mean
from predictor.latency.adjustments.collective_gap import ratio_at
from predictor.latency.calibration import Calibration
from predictor.latency.lookup import Evidence, QuantileCache, in_step
from predictor.latency.regressor import DEFAULT_QUANTILES
from predictor.workload.decompose import OVERLAPPED_EP, StageWork, Workload


class Part(IntEnum):
    """The sums a stage's time is built from, kept apart because :func:`stage_times`
    treats each differently."""

    FORWARD_COMPUTE = 0
    FORWARD_COMM = 1
    FORWARD_TP_OVERLAPPED = 2  # TP collectives that overlap the forward's compute
    BACKWARD_COMPUTE = 3
    BACKWARD_COMM = 4
    BACKWARD_TP_OVERLAPPED = 5
    SEND = 6  # the activation sent to the next stage; its gradient comes back alike
    GRAD_REDUCE = 7  # the DP gradient reduction, in buckets
    PARAM_GATHER = 8  # the sharded optimizer's updated weights, gathered back
    OPTIMIZER = 9
    FORWARD_HOST = 10  # the host's framework calls of a forward (:mod:`predictor.workload.host`)
    BACKWARD_HOST = 11
    FORWARD_EP_OVERLAPPED = 12  # expert-parallel all-to-alls under another micro-batch's compute
    BACKWARD_EP_OVERLAPPED = 13
    FORWARD_GEMM = 14  # the forward's dense GEMMs but the FFNs' (compute): the attention's overlapped TP hides here
    BACKWARD_GEMM = 15
    FORWARD_TP_FFN_OVERLAPPED = 16  # the feed-forward blocks' TP collectives that overlap their GEMMs
    BACKWARD_TP_FFN_OVERLAPPED = 17
    FORWARD_GEMM_FFN = 18  # the feed-forward blocks' GEMMs
    BACKWARD_GEMM_FFN = 19


#: Parts that run once per micro-batch (the rest once per step).
PER_MICRO_BATCH = (Part.FORWARD_COMPUTE, Part.FORWARD_COMM, Part.FORWARD_TP_OVERLAPPED, Part.BACKWARD_COMPUTE,
                   Part.BACKWARD_COMM, Part.BACKWARD_TP_OVERLAPPED, Part.SEND, Part.FORWARD_HOST, Part.BACKWARD_HOST,
                   Part.FORWARD_EP_OVERLAPPED, Part.BACKWARD_EP_OVERLAPPED, Part.FORWARD_GEMM, Part.BACKWARD_GEMM,
                   Part.FORWARD_TP_FFN_OVERLAPPED, Part.BACKWARD_TP_FFN_OVERLAPPED, Part.FORWARD_GEMM_FFN,
                   Part.BACKWARD_GEMM_FFN)
#: Each pass's compute parts: its dense GEMMs (the FFNs' and the others) and the rest.
FORWARD_WORK = (Part.FORWARD_COMPUTE, Part.FORWARD_GEMM, Part.FORWARD_GEMM_FFN)
BACKWARD_WORK = (Part.BACKWARD_COMPUTE, Part.BACKWARD_GEMM, Part.BACKWARD_GEMM_FFN)
#: Each pass's overlapped communication parts.
FORWARD_OVERLAPPED = (Part.FORWARD_TP_OVERLAPPED, Part.FORWARD_TP_FFN_OVERLAPPED, Part.FORWARD_EP_OVERLAPPED)
BACKWARD_OVERLAPPED = (Part.BACKWARD_TP_OVERLAPPED, Part.BACKWARD_TP_FFN_OVERLAPPED, Part.BACKWARD_EP_OVERLAPPED)
_FORWARD, _BACKWARD, _STEP, _SEND = range(4)  # where a call sits in a StageWork, in this order
#: SMs an expert-parallel dispatcher's communication kernels hold, by ``parallel.moe_dispatcher``:
#: DeepEP's dispatch and combine run on Megatron-Core's ``moe_deepep_num_sms`` = 20 SMs by
#: default (megatron/core/transformer/transformer_config.py; HybridEP's default is 16). NCCL's
#: all-to-all holds one SM per channel, a count NCCL picks at run time: not modelled (0).
DISPATCHER_SMS = {"flex": 20, "alltoall": 0, "allgather": 0}
#: Schedules whose sender goes on while its transfer is in flight: torch.distributed.pipelining's
#: ``ScheduleGPipe._step_microbatches`` keeps each micro-batch's send works in
#: ``fwd_sends_to_wait`` / ``bwd_sends_to_wait`` and waits on them after the last one
#: (torch/distributed/pipelining/schedules.py, torch 2.13), where its ``Schedule1F1B`` waits
#: on each send fused with the next receive, and Megatron-LM blocks on every one. Only on an
#: asynchronous device: on a CPU gloo moves the bytes on the cores that compute, so a send
#: costs its sender the same waited on or not (on this project's CPU, tiny at pp=2
#: measured slower under GPipe than under 1F1B, where sends in flight would have made it faster).
DEFERRED_SENDS = ("gpipe",)


def ep_sm_share(par, hw) -> float:
    """The share of a GPU's SMs that ``par``'s overlapped expert-parallel communication holds
    (0 where it is not overlapped, or the profile gives no SM count)."""
    if not par.overlap_ep_comm or not hw.device.sms:
        return 0.0
    if DISPATCHER_SMS[par.moe_dispatcher] >= hw.device.sms:  # no SM left for the compute it overlaps
        raise PrismError(f"hardware.device.sms={hw.device.sms}: parallel.moe_dispatcher={par.moe_dispatcher}'s "
                         f"kernels hold {DISPATCHER_SMS[par.moe_dispatcher]} SMs, leaving the compute none of this "
                         f"GPU's; give its real SM count (132 on an H100 SXM) or 0 where unknown",
                         field="hardware.device.sms")
    return DISPATCHER_SMS[par.moe_dispatcher] / hw.device.sms


def _identity(stage: StageWork) -> tuple:
    """The calls of ``stage`` by identity: decompose builds alike stages from the same Call
    objects, so equal identities mean equal calls (distinct objects are never merged)."""
    return (tuple(map(id, stage.forward)), tuple(map(id, stage.backward)), id(stage.p2p),
            tuple(map(id, stage.step)))


@dataclass(frozen=True)
class StagePlan:
    """Every pipeline stage of ``works`` (layouts on one hardware) as a row, layout after
    layout, each layout's stages in order, and per layout what the rules read of it.
    Stages with the same calls in layouts that treat calls alike (micro-batches, TP
    overlap, tp degree) share one *kind*, whose sums are drawn once: the search's layouts
    share most of theirs."""

    works: list[Workload]
    kinds: list[StageWork]  # one representative stage per kind
    kind_layout: np.ndarray  # (kinds,) a layout each kind belongs to
    kind: np.ndarray  # (rows,) each row's kind
    layout: np.ndarray  # (rows,) each row's layout
    position: np.ndarray  # (rows,) each row's pipeline stage in its layout
    starts: np.ndarray  # (layouts,) each layout's first row
    micro_batches: np.ndarray  # (layouts,) and the settings below, per layout
    tp: np.ndarray
    overlap_tp_comm: np.ndarray
    overlap_grad_reduce: np.ndarray
    overlap_param_gather: np.ndarray
    host_async: np.ndarray  # whether the device runs asynchronously from its host (CUDA)
    deferred_sends: np.ndarray  # whether the sender goes on while its transfer flies (DEFERRED_SENDS, on a GPU)
    ep_sm_share: np.ndarray  # share of the SMs overlapped expert-parallel all-to-alls hold (ep_sm_share)

    @property
    def pp(self) -> np.ndarray:
        """(layouts,) pipeline stages of each layout."""
        return np.diff(np.append(self.starts, len(self.kind)))

    @classmethod
    def of(cls, works: list[Workload]) -> StagePlan:
        kinds, kind_layout, kind = [], [], []
        known: dict[tuple, list[int]] = {}
        for n, work in enumerate(works):
            par = work.parallel
            key = (id(work.stages), work.micro_batches, par.overlap_tp_comm, par.tp)
            if key not in known:
                seen: dict[tuple, int] = {}
                identities = [_identity(st) for st in work.stages]
                for st, calls in zip(work.stages, identities):
                    if calls not in seen:
                        seen[calls] = len(kinds)
                        kinds.append(st)
                        kind_layout.append(n)
                known[key] = [seen[calls] for calls in identities]
            kind.extend(known[key])
        pps = np.array([len(w.stages) for w in works])
        layout = np.repeat(np.arange(len(works)), pps)
        starts = np.concatenate([[0], np.cumsum(pps)[:-1]])
        pars = [w.parallel for w in works]
        return cls(works, kinds, np.array(kind_layout), np.array(kind), layout, np.arange(len(layout)) - starts[layout],
                   starts, np.array([w.micro_batches for w in works], float), np.array([p.tp for p in pars]),
                   *(np.array([getattr(p, name) for p in pars], bool)
                     for name in ("overlap_tp_comm", "overlap_grad_reduce", "overlap_param_gather")),
                   np.array([w.hardware.host.asynchronous for w in works], bool),
                   np.array([p.schedule in DEFERRED_SENDS and w.hardware.host.asynchronous
                             for p, w in zip(pars, works)], bool),
                   np.array([ep_sm_share(p, w.hardware) for p, w in zip(pars, works)], float))


@dataclass(frozen=True)
class StageSums:
    """:func:`draw_stage_sums`' answer: per :class:`Part` and kind, the sum (us) with every
    call at its median, (parts, kinds), and drawn, (parts, kinds, S); each kind's DP bucket
    count; and the distinct calls drawn with the evidence each rests on."""

    nominal: np.ndarray
    drawn: np.ndarray
    buckets: np.ndarray
    calls: list[Call]
    evidence: list[Evidence]
    prior_nominal: np.ndarray  # (parts, kinds) the share of ``nominal`` resting on priors


def _held_residuals(calls: list[Call], hold) -> np.ndarray:
    """Which calls' residuals ``hold`` takes out (a boolean mask): all for
    ``residual``, one op's for ``residual:<op>`` or ``residual:<op>/<pass>``."""
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


#: A pass's part by route: compute, communication, the attention's overlappable TP
#: communication, host, overlapped expert-parallel communication, dense GEMMs, the FFNs'
#: overlappable TP communication, the FFNs' GEMMs.
_PASS_PARTS = {_FORWARD: (Part.FORWARD_COMPUTE, Part.FORWARD_COMM, Part.FORWARD_TP_OVERLAPPED, Part.FORWARD_HOST,
                          Part.FORWARD_EP_OVERLAPPED, Part.FORWARD_GEMM, Part.FORWARD_TP_FFN_OVERLAPPED,
                          Part.FORWARD_GEMM_FFN),
               _BACKWARD: (Part.BACKWARD_COMPUTE, Part.BACKWARD_COMM, Part.BACKWARD_TP_OVERLAPPED,
                           Part.BACKWARD_HOST, Part.BACKWARD_EP_OVERLAPPED, Part.BACKWARD_GEMM,
                           Part.BACKWARD_TP_FFN_OVERLAPPED, Part.BACKWARD_GEMM_FFN)}


def _step_part(call: Call) -> Part:
    """The part of a once-per-step call: the DP reduction or gather, or the optimizer (with
    its framework calls: Megatron's step reads the gradient norm and the overflow flag on the
    host, so the host and the device take turns)."""
    if call.role in ("optimizer", "host"):  # the step's host work is serial: it syncs on the grad norm
        return Part.OPTIMIZER
    if call.role == "dp":
        return Part.PARAM_GATHER if call.op == "all_gather" else Part.GRAD_REDUCE
    raise ValueError(f"{call.op}/{call.pass_} with role {call.role!r} in a stage's step: the composer "
                     f"has no rule for it")


def _instances(plan: StagePlan, tp: np.ndarray):
    """Every call of every kind: its kind, its place (_FORWARD ... _SEND), its column among
    the distinct calls (apart per tp degree ``tp`` of its layout), and the distinct calls
    with their tp degrees."""
    instances, lengths = [], []
    for st in plan.kinds:
        for calls in (st.forward, st.backward, st.step, [st.p2p] if st.p2p else []):  # as _FORWARD ... _SEND
            instances += calls
            lengths.append(len(calls))
    kinds = np.repeat(np.arange(len(plan.kinds)), np.add.reduceat(lengths, np.arange(0, len(lengths), 4)))
    where = np.repeat(np.tile(np.arange(4), len(plan.kinds)), lengths)
    degree = tp[plan.kind_layout[kinds]]
    degrees = np.unique(degree)
    index: dict[int, dict[Call, int]] = {int(d): {} for d in degrees}
    # most instances are the same objects (decompose's cached layer calls): each distinct
    # (object, degree) is looked up once, in order of first appearance, as a loop over all
    # instances would number them (id·len(degrees) + the degree's code names the pair)
    code = np.searchsorted(degrees, degree)
    pair = np.fromiter(map(id, instances), np.int64, len(instances)) * len(degrees) + code
    _, first, inverse = np.unique(pair, return_index=True, return_inverse=True)
    column = np.empty(len(first), int)
    for u in np.argsort(first, kind="stable"):
        i = first[u]
        same = index[int(degree[i])]
        column[u] = same.setdefault(instances[i], len(same))
    cols = column[inverse.reshape(-1)]
    sizes = [len(i) for i in index.values()]
    cols += np.cumsum([0, *sizes])[np.searchsorted(degrees, degree)]
    return kinds, where, cols, [c for i in index.values() for c in i], np.repeat(degrees, sizes)


def _parts(plan: StagePlan, calls: list[Call], kinds, where, cols) -> np.ndarray:
    """The :class:`Part` of every call instance."""
    def per_instance(test) -> np.ndarray:
        return np.array([test(c) for c in calls], bool)[cols]
    overlapping = plan.overlap_tp_comm[plan.kind_layout[kinds]]
    gemm = per_instance(lambda c: c.op == "gemm")
    route = np.select([per_instance(lambda c: OPS[c.op].host), gemm & per_instance(lambda c: c.role == FFN_ROLE),
                       gemm, ~per_instance(lambda c: OPS[c.op].collective),
                       per_instance(lambda c: c.role == "tp") & overlapping,
                       per_instance(lambda c: c.role == TP_FFN) & overlapping,
                       per_instance(lambda c: c.role == OVERLAPPED_EP)], [3, 7, 5, 0, 2, 6, 4], 1)
    step = np.zeros(len(calls), int)
    once = np.unique(cols[where == _STEP])
    step[once] = [_step_part(calls[c]) for c in once]
    return np.select([where == _FORWARD, where == _BACKWARD, where == _SEND],
                     [np.take(_PASS_PARTS[_FORWARD], route), np.take(_PASS_PARTS[_BACKWARD], route), Part.SEND],
                     step[cols])


def draw_stage_sums(plan: StagePlan, models, cache: QuantileCache, draws: int,
                    rng: np.random.Generator | KeyedStreams, calibration: Calibration | None = None,
                    hold=()) -> StageSums:
    """Step 1 of the module docstring for every kind of ``plan``, ``draws`` draws.

    ``rng``: a generator draws the distinct calls in turn; :class:`KeyedStreams` give each
    call (and tp degree) a stream of its own, whatever else is drawn.

    ``calibration`` (default: the one stored with ``models``, if any) turns operator
    quantiles into in-step ones; under one, a call is drawn apart for each tp degree.
    ``hold`` takes residuals out (:func:`_held_residuals`): a held call adds its mean; the
    same random numbers are drawn either way.
    """
    calibration = calibration or (models.calibration if models is not None else None)
    tp = plan.tp if calibration is not None else np.ones(len(plan.works), int)
    kinds, where, cols, calls, degree = _instances(plan, tp)
    q, evidence = cache.lookup(calls)
    q = in_step(q, calls, degree, calibration)
    levels = np.asarray(DEFAULT_QUANTILES)
    median = q[:, list(levels).index(0.5)]
    u = (rng.uniform(list(zip(calls, degree.tolist())), draws) if isinstance(rng, KeyedStreams)
         else rng.uniform(size=(len(calls), draws)))
    prior = np.array([e.prior for e in evidence], bool)
    centre = np.where(prior, median, quantile_mean(q, levels))
    deviation = inverse_cdf(q, levels, u) - centre[:, None]
    deviation[prior | _held_residuals(calls, hold)] = 0.0

    part = _parts(plan, calls, kinds, where, cols)
    count = np.array([c.count for c in calls], float)[cols]
    spread = np.where(np.isin(part, PER_MICRO_BATCH), 1 / np.sqrt(plan.micro_batches[plan.kind_layout[kinds]]), 1.0)
    weight = spread * np.sqrt(count)
    rows = kinds * len(Part) + part
    size = len(plan.kinds) * len(Part)
    nominal = np.bincount(rows, weights=count * centre[cols], minlength=size)
    prior_nominal = np.bincount(rows, weights=count * centre[cols] * prior[cols], minlength=size)
    drawn = nominal[:, None] + _weighted_rows(rows, cols, weight, deviation, size)
    buckets = np.ones(len(plan.kinds))
    reduce = part == Part.GRAD_REDUCE
    np.maximum.at(buckets, kinds[reduce], count[reduce])
    curve = models.adjustment("collective_gap") if models is not None else None
    if curve:  # a CPU's models: its collectives by the compute before them
        collective = np.array([OPS[c.op].collective for c in calls], bool)
        made_of = np.bincount(rows, weights=count * collective[cols], minlength=size)
        factor = _gap_factors(curve, nominal.reshape(-1, len(Part)), buckets, made_of.reshape(-1, len(Part)))
        nominal, prior_nominal, drawn = nominal * factor, prior_nominal * factor, drawn * factor[:, None]
    # part-major, so that each part's rows gather contiguously
    return StageSums(nominal.reshape(-1, len(Part)).T.copy(),
                     drawn.reshape(len(plan.kinds), len(Part), draws).transpose(1, 0, 2).copy(),
                     buckets, calls, evidence, prior_nominal.reshape(-1, len(Part)).T.copy())


def _weighted_rows(rows: np.ndarray, cols: np.ndarray, weight: np.ndarray, values: np.ndarray,
                   size: int) -> np.ndarray:
    """(size, S) the sparse product ``W @ values`` with ``W[rows[i], cols[i]] += weight[i]``,
    as scipy's CSR product computes it (duplicates summed, each row's terms added in column
    order), without importing scipy.sparse (a quarter of a second of ``prism predict``)."""
    n = len(values)
    key = rows.astype(np.int64) * n + cols
    pairs, inverse = np.unique(key, return_inverse=True)
    w = np.bincount(inverse.reshape(-1), weights=weight, minlength=len(pairs))
    r, c = pairs // n, pairs % n
    out = np.zeros((size, values.shape[1]))
    if len(pairs):
        starts = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
        out[r[starts]] = np.add.reduceat(w[:, None] * values[c], starts, axis=0)
    return out


#: A pass's collective parts, each followed by the compute parts of the pass they come after.
_GAPPED = (((Part.FORWARD_COMM, *FORWARD_OVERLAPPED), (*FORWARD_WORK, Part.FORWARD_HOST)),
           ((Part.BACKWARD_COMM, *BACKWARD_OVERLAPPED), (*BACKWARD_WORK, Part.BACKWARD_HOST)))


def _gap_factors(curve, nominal: np.ndarray, buckets: np.ndarray, collectives: np.ndarray) -> np.ndarray:
    """(kinds·parts,) the factor of each kind's parts by a CPU's gap ``curve``
    (:mod:`predictor.latency.adjustments.collective_gap`). ``nominal`` and ``collectives`` (kinds,
    parts): the median sums and how many collectives make them. A pass's collectives come
    after its compute and host time shared among them, the pipeline send after the forward,
    the DP buckets after the backward shared among them."""
    factor = np.ones_like(nominal)
    for comm, work in _GAPPED:
        gap = nominal[:, list(work)].sum(axis=1) / np.maximum(collectives[:, list(comm)].sum(axis=1), 1)
        factor[:, list(comm)] = ratio_at(curve, gap)[:, None]
    forward = nominal[:, [*FORWARD_WORK, Part.FORWARD_HOST, Part.FORWARD_COMM]].sum(axis=1)
    backward = nominal[:, [*BACKWARD_WORK, Part.BACKWARD_HOST, Part.BACKWARD_COMM]].sum(axis=1)
    factor[:, Part.SEND] = ratio_at(curve, forward)
    factor[:, [Part.GRAD_REDUCE, Part.PARAM_GATHER]] = ratio_at(curve, backward / buckets)[:, None]
    return factor.ravel()


@dataclass(frozen=True)
class StageTimes:
    """:func:`stage_times`' answer, (rows, S) each, in us: per micro-batch the forward and
    backward compute, their exposed communication (overlapped TP included) and the
    pipeline transfers a stage sends and receives; once per step the exposed DP
    collectives and the optimizer step. ``deferred`` (rows, 1): whether the stage's
    sender goes on while a transfer flies (:data:`DEFERRED_SENDS`)."""

    forward_compute: np.ndarray
    forward_comm: np.ndarray
    backward_compute: np.ndarray
    backward_comm: np.ndarray
    send: np.ndarray  # the activation sent on to the next stage
    send_back: np.ndarray  # the gradient sent back to the previous stage, as large as the activation that came
    data_parallel: np.ndarray
    optimizer: np.ndarray
    forward_host: np.ndarray  # host time the forward waits for: all of it on a CPU, the excess over the device on CUDA
    backward_host: np.ndarray
    deferred: np.ndarray

    @property
    def forward(self) -> np.ndarray:
        """One micro-batch's forward, its send included where the sender waits for it."""
        return self.forward_compute + self.forward_comm + self.forward_host + np.where(self.deferred, 0.0, self.send)

    @property
    def backward(self) -> np.ndarray:
        """One micro-batch's backward, the send of its gradient included where the sender waits for it."""
        return (self.backward_compute + self.backward_comm + self.backward_host
                + np.where(self.deferred, 0.0, self.send_back))

    @property
    def in_flight(self) -> np.ndarray:
        """The transfer over each stage's link to the next (its activation forward, the
        gradient back) that delays the receiver alone: the deferred sends, 0 elsewhere."""
        return np.where(self.deferred, self.send, 0.0)

    @property
    def after(self) -> np.ndarray:
        """What follows the stage's last backward: exposed DP collectives and the optimizer."""
        return self.data_parallel + self.optimizer


def stage_times(plan: StagePlan, sums: np.ndarray, buckets: np.ndarray, rows: slice, speed,
                regime) -> StageTimes:
    """Step 2 of the module docstring for the stage ``rows`` of ``plan`` (whole layouts).

    sums: (parts, kinds, S) per-kind sums (:class:`StageSums` ``drawn``, or ``nominal``
    with a last axis of one); buckets: (kinds,) DP buckets; speed: (rows, S) each stage's
    slowest-GPU factor; regime: (S,) the step's communication regime (or a scalar).
    """
    kind, layout = plan.kind[rows], plan.layout[rows]
    part = sums[:, kind]
    fc, bc = (sum(part[p] for p in work) * speed for work in (FORWARD_WORK, BACKWARD_WORK))
    opt = part[Part.OPTIMIZER] * speed
    share = plan.ep_sm_share[layout, None]
    fm, bm = (part[comm] * regime + _exposed(part[tp] * regime, part[tp_ffn] * regime, part[ep] * regime, compute,
                                             part[gemm] * speed, part[gemm_ffn] * speed, share)
              for comm, (tp, tp_ffn, ep), compute, (_, gemm, gemm_ffn)
              in ((Part.FORWARD_COMM, FORWARD_OVERLAPPED, fc, FORWARD_WORK),
                  (Part.BACKWARD_COMM, BACKWARD_OVERLAPPED, bc, BACKWARD_WORK)))
    send, reduce, gather = (part[p] * regime for p in (Part.SEND, Part.GRAD_REDUCE, Part.PARAM_GATHER))
    bucket = buckets[kind, None]
    reduce = np.where(plan.overlap_grad_reduce[layout, None],
                      np.maximum(reduce / bucket, reduce - (bc + bm)), reduce)
    gather = np.where(plan.overlap_param_gather[layout, None],
                      np.maximum(gather / bucket, gather - fc), gather)
    first = (plan.position[rows] == 0)[:, None]
    send_back = np.where(first, 0.0, np.roll(send, 1, axis=0))  # over the previous stage's link
    fh, bh = _host_wait(plan.host_async[layout, None], part[Part.FORWARD_HOST], part[Part.BACKWARD_HOST],
                        fc + fm, bc + bm)
    return StageTimes(fc, fm, bc, bm, send, send_back, reduce + gather, opt, fh, bh,
                      plan.deferred_sends[layout, None])


def _exposed(tp, tp_ffn, ep, compute, gemms, ffn_gemms, share):
    """What overlapped communication adds to a pass of ``compute``. An overlapped TP
    collective runs under the GEMM it is fused with, not under the pass's other work:
    Transformer Engine's userbuffers split the GEMM beside its all-gather or reduce-scatter
    (``initialize_ub``), and PyTorch's async TP fuses an all-gather into the matmul that
    consumes it and a reduce-scatter into the one that produces it
    (torch/_inductor/fx_passes/micro_pipeline_tp.py; ``fused_all_gather_matmul``,
    ``fused_matmul_reduce_scatter`` in torch/distributed/_symmetric_memory). So the
    attention's TP collectives (``tp``) cost what its projections (``gemms``: the dense
    GEMMs but the FFNs') leave uncovered, and the feed-forward blocks' (``tp_ffn``) what
    their GEMMs (``ffn_gemms``) leave: each side's sums, not each pair's (a lower bound).
    The expert-parallel all-to-alls (``ep``) run under the rest of the compute, and while
    they run their kernels hold ``share`` of the GPU's SMs, so the compute under them runs
    at 1 - share: with compute C and all-to-alls M, the pass takes max(M, C + share·M) when
    they alone overlap."""
    hidden = np.minimum(tp, gemms) + np.minimum(tp_ffn, ffn_gemms)
    return tp + tp_ffn - hidden + np.maximum(ep - (compute - hidden), share * ep)


def _host_wait(asynchronous: np.ndarray, forward_host, backward_host, forward_device, backward_device):
    """The host time each pass's timeline waits for. On an asynchronous device the host
    issues a pass's calls while the device runs the earlier ones, so the pass takes the
    longer of the two timelines (the max-plus recurrence ``finish_i = max(finish_{i-1},
    issued_i) + device_i`` with the pass's ends as synchronisation points, where Megatron
    blocks on pipeline transfers and the step on the optimizer); on a CPU the framework and
    the kernels run in turn and add."""
    return (np.where(asynchronous, np.maximum(forward_host - forward_device, 0.0), forward_host),
            np.where(asynchronous, np.maximum(backward_host - backward_device, 0.0), backward_host))

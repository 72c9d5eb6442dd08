"""Pipeline schedules as dependency graphs, walked once and vectorised over Monte Carlo draws.

Composer step 3 ("Schedule", docs/method.md). The caller hands in, for every pipeline rank i,
model chunk v and micro-batch j, the forward and backward duration of that piece of work
for each of S draws; this module walks the schedule's dependency graph once, in Python
over the O(pp·vpp·m) nodes, with every time a numpy vector over the S draws, and returns
the step's pipeline makespan per draw (plus per-rank busy time and finish time, so the
report can split the critical path into compute and bubble).

Model
-----
Virtual stage ``k = v·pp + i`` lives on rank ``i`` (Megatron's layout: model chunk ``v``
of pipeline rank ``i``); with ``vpp = 1`` it is just stage ``i``. ``K = pp·vpp`` stages.

* ``F(k, j)`` needs ``F(k-1, j)`` plus the activation transfer across the boundary
  ``k-1 | k`` (when the two stages are on different ranks, i.e. ``pp > 1``).
* ``B(k, j)`` needs ``F(k, j)`` and ``B(k+1, j)`` plus the gradient transfer across
  ``k | k+1``; the last stage's ``B(K-1, j)`` needs only its ``F(K-1, j)``.
* Each rank runs its operations one at a time, in the order its schedule prescribes:
  an op starts at ``max(previous op's finish on this rank, dependencies' arrival)``.
  A transfer is a pure delay on the edge (it occupies neither rank's compute stream).

Orders (per rank, built by :func:`rank_orders`)
-----------------------------------------------
``gpipe``: all m forwards, then all m backwards in the *same* micro-batch order
  0..m-1, as PyTorch's ``torch.distributed.pipelining.ScheduleGPipe`` runs them
  (torch/distributed/pipelining/schedules.py: the backward loop is
  ``for i in range(n_microbatches)``), the ground-truth workload's framework. GPipe's
  original paper drains in reverse; for uniform times both give the same makespan.
``1f1b``: PipeDream-Flush (Narayanan et al. 2021, arXiv 2104.04473, Fig. 4 top) as
  Megatron-LM's ``forward_backward_pipelining_without_interleaving`` runs it
  (NVIDIA/Megatron-LM, megatron/core/pipeline_parallel/schedules.py): rank i does
  ``min(pp - i - 1, m)`` warm-up forwards, then ``m - warmup`` steady-state rounds of
  one forward followed by one backward, then the remaining backwards (cool-down).
  Micro-batches run in order 0..m-1 in both directions.
``interleaved``: Megatron-LM's ``forward_backward_pipelining_with_interleaving``
  (same file). The k-th forward of a rank works on (micro-batch, chunk) from
  Megatron's ``get_schedule_table`` with ``microbatch_group_size_per_vp_stage`` at its
  default ``pp``: micro-batches are taken in groups of pp; within a group, chunk 0 for
  all pp micro-batches, then chunk 1, ... The k-th backward uses the same table with
  the chunk mirrored (``get_model_chunk_id(k, forward=False) = vpp - 1 - chunk``), and
  its micro-batch is the oldest unfinished one of that chunk (Megatron pops the
  chunk's input/output tensor queues FIFO), which is the table's micro-batch at k.
  Warm-up (``get_pp_rank_microbatches``): ``(pp - i - 1)·2 + (vpp - 1)·pp`` forwards,
  capped at ``m·vpp``; steady state: forward ``warmup + k`` then backward ``k``;
  cool-down: the remaining backwards. Megatron requires ``m % pp == 0`` here (with the
  default group size, a smaller last group "introduces dependency bubbles" and is
  refused), so this module refuses it too. ``vpp = 1`` is accepted and runs this order
  with one chunk (warm-up ``2·(pp - i - 1)``, as Megatron's interleaved function would);
  ``pp = 1`` (which Megatron never interleaves) just chains the chunks on one rank.

For uniform per-stage times f, b and no transfer time, the makespan is
``(m + pp - 1)·(f + b)`` for GPipe and 1F1B (bubble/ideal = (pp-1)/m, Narayanan 2021
§2.2) and ``m·(f + b) + (pp - 1)·(f + b)/vpp`` for the interleaved schedule with per-chunk
times f/vpp and b/vpp (bubble/ideal = (pp-1)/(vpp·m), §2.2.1); tests/engine/test_schedule.py
checks both.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from predictor.core.errors import PrismError
from predictor.core.layout import check_schedule

# Op of a rank's order: (is_backward, model chunk v, micro-batch j).
Op = tuple[bool, int, int]


@dataclass(frozen=True)
class PipelineResult:
    """One pipeline step per draw; times in the unit of the inputs.

    makespan: (S,) first forward start (time 0) to the last backward finish on any rank.
    busy: (pp, S) each rank's compute time (sum of its forward and backward durations).
    rank_end: (pp, S) when each rank finishes its last backward (where its DP gradient
        reduction of the last bucket can start).
    """

    makespan: np.ndarray
    busy: np.ndarray
    rank_end: np.ndarray

    @property
    def idle(self) -> np.ndarray:
        """(pp, S) time each rank sits idle within the makespan: the pipeline bubble."""
        return self.makespan[None, :] - self.busy

    @property
    def bubble_fraction(self) -> np.ndarray:
        """(S,) share of the makespan a rank sits idle, averaged over ranks.

        Uniform times: (pp-1)/(m+pp-1) for 1F1B. Narayanan et al.'s (pp-1)/m is the
        same bubble relative to the ideal (busy) time instead: idle / busy.
        """
        return np.mean(self.idle, axis=0) / self.makespan


def _check_schedule(schedule: str, pp: int, m: int, vpp: int) -> str:
    name = check_schedule(schedule)
    if pp < 1:
        raise PrismError(f"parallel.pp={pp}: needs at least one pipeline stage", field='parallel.pp')
    if m < 1:
        raise PrismError(f"parallel.global_batch_size: gives {m} micro-batches (global_batch_size / "
                         f"(micro_batch_size · dp)); a step needs at least one", field="parallel.global_batch_size")
    if vpp < 1:
        raise PrismError(f"parallel.vpp={vpp}: must be at least 1", field='parallel.vpp')
    if name != "interleaved" and vpp != 1:
        raise PrismError(f"parallel.vpp={vpp} with parallel.schedule={name!r}: model chunks (vpp > 1) "
                         f"need parallel.schedule='interleaved', or set parallel.vpp=1", field='parallel.vpp')
    if name == "interleaved" and m % pp != 0:
        raise PrismError(f"parallel.global_batch_size: gives {m} micro-batches, and parallel.schedule='interleaved' "
                         f"with parallel.pp={pp} needs a multiple of pp (Megatron-LM refuses it otherwise); change "
                         f"global_batch_size or micro_batch_size, or use parallel.schedule='1f1b'",
                         field="parallel.global_batch_size")
    return name


def _one_f_one_b(warmup: int, fwd_seq: list, bwd_seq: list) -> list[Op]:
    """Warm-up forwards, steady forward-then-backward rounds, cool-down backwards."""
    n = len(fwd_seq)
    order: list[Op] = [(False, *fwd_seq[k]) for k in range(warmup)]
    for k in range(n - warmup):
        order.append((False, *fwd_seq[warmup + k]))
        order.append((True, *bwd_seq[k]))
    order.extend((True, *bwd_seq[k]) for k in range(n - warmup, n))
    return order


def rank_orders(schedule: str, pp: int, m: int, vpp: int = 1) -> list[list[Op]]:
    """Each rank's operations in execution order: ``(is_backward, chunk, micro_batch)``.

    Examples
    --------
    >>> rank_orders("1f1b", pp=2, m=2)[0]
    [(False, 0, 0), (False, 0, 1), (True, 0, 0), (True, 0, 1)]
    """
    name = _check_schedule(schedule, pp, m, vpp)
    orders = []
    if name == "gpipe":
        for _ in range(pp):
            orders.append([(False, 0, j) for j in range(m)] + [(True, 0, j) for j in range(m)])
    elif name == "1f1b":
        seq = [(0, j) for j in range(m)]
        for i in range(pp):
            orders.append(_one_f_one_b(min(pp - i - 1, m), seq, seq))
    else:
        # Megatron's get_schedule_table with microbatch_group_size_per_vp_stage = pp:
        # groups of pp micro-batches; inside a group, every chunk in turn runs the group.
        group = pp
        table = [(v, j) for g in range(0, m, group) for v in range(vpp)
                 for j in range(g, min(g + group, m))]
        fwd_seq = table
        bwd_seq = [(vpp - 1 - v, j) for v, j in table]
        total = m * vpp
        for i in range(pp):
            warmup = min((pp - i - 1) * 2 + (vpp - 1) * group, total)
            orders.append(_one_f_one_b(warmup, fwd_seq, bwd_seq))
    return orders


def _times(a, field: str, vpp: int) -> np.ndarray:
    a = np.asarray(a, dtype=float)
    if a.ndim == 3:
        if vpp != 1:
            raise PrismError(f"{field}: shape {a.shape} is (pp, m, S) but parallel.vpp={vpp}; "
                             f"pass (pp, vpp, m, S)", field=field)
        a = a[:, None]
    if a.ndim != 4:
        raise PrismError(f"{field}: expected shape (pp, vpp, m, S) or (pp, m, S), got {a.shape}", field=field)
    if a.shape[1] != vpp:
        raise PrismError(f"{field}: shape {a.shape} has {a.shape[1]} model chunks but parallel.vpp={vpp}", field=field)
    return a


def _p2p(p, field: str, pp: int, vpp: int, m: int, s: int) -> np.ndarray:
    """Transfer times as a (pp, vpp, m, S) broadcast view, indexed by the boundary's lower
    virtual stage ``k = v·pp + i`` (the boundary between stages k and k+1).

    Accepted: a scalar; (S,) for every boundary; (L, S) per link, where link i joins rank i
    to rank i+1 and L = pp-1, or L = pp with row pp-1 the rank pp-1 -> rank 0 link that
    interleaving uses between chunks; or a (pp, vpp, m, S)-broadcastable array per boundary
    and micro-batch.
    """
    a = np.asarray(p, dtype=float)
    if a.ndim == 2:
        if a.shape[0] == pp - 1:
            if vpp > 1 and pp > 1:
                raise PrismError(f"{field}: shape {a.shape} gives pp-1 links, but the interleaved schedule "
                                 f"also sends from rank {pp - 1} back to rank 0; pass (pp, S)", field=field)
            a = np.concatenate([a, np.zeros((1, a.shape[1]))], axis=0)
        elif a.shape[0] != pp:
            raise PrismError(f"{field}: shape {a.shape} is per link; expected ({pp - 1}, S) or ({pp}, S)", field=field)
        a = a[:, None, None, :]
    elif a.ndim not in (0, 1, 4):
        raise PrismError(f"{field}: expected a scalar, (S,), (pp-1, S) or (pp, vpp, m, S); got {a.shape}", field=field)
    try:
        return np.broadcast_to(a, (pp, vpp, m, s))
    except ValueError:
        raise PrismError(f"{field}: shape {a.shape} does not broadcast to (pp={pp}, vpp={vpp}, m={m}, S={s})",
                         field=field) from None


def simulate_pipeline(fwd, bwd, p2p_fwd=0.0, p2p_bwd=0.0, schedule: str = "1f1b",
                      vpp: int = 1) -> PipelineResult:
    """Walk the schedule once over all draws; see the module docstring for the model.

    fwd, bwd: (pp, vpp, m, S) durations (or (pp, m, S) when vpp = 1).
    p2p_fwd, p2p_bwd: activation / gradient transfer time between consecutive stages;
    a scalar, (S,), (pp-1, S) per link (pp, S with interleaving), or (pp, vpp, m, S).
    """
    fwd = _times(fwd, "fwd", vpp)
    bwd = _times(bwd, "bwd", vpp)
    pp, _, m = fwd.shape[:3]
    if bwd.shape[:3] != fwd.shape[:3]:
        raise PrismError(f"bwd: shape {bwd.shape} does not match fwd {fwd.shape} in (pp, vpp, m)", field='bwd')
    name = _check_schedule(schedule, pp, m, vpp)
    pf0, pb0 = np.asarray(p2p_fwd, dtype=float), np.asarray(p2p_bwd, dtype=float)
    try:
        s = np.broadcast_shapes(fwd.shape[3:], bwd.shape[3:], pf0.shape[-1:] if pf0.ndim else (),
                                pb0.shape[-1:] if pb0.ndim else ())[0]
    except ValueError:
        raise PrismError(f"fwd, bwd, p2p: the draw counts (last axes) differ: {fwd.shape}, {bwd.shape}, "
                         f"{pf0.shape}, {pb0.shape}") from None
    fwd = np.broadcast_to(fwd, (pp, vpp, m, s))
    bwd = np.broadcast_to(bwd, (pp, vpp, m, s))
    pf = _p2p(pf0, "p2p_fwd", pp, vpp, m, s)
    pb = _p2p(pb0, "p2p_bwd", pp, vpp, m, s)
    cross = pp > 1  # consecutive virtual stages sit on different ranks

    n_stages = pp * vpp
    f_end = np.empty((n_stages, m, s))
    b_end = np.empty((n_stages, m, s))
    f_done = np.zeros((n_stages, m), dtype=bool)
    b_done = np.zeros((n_stages, m), dtype=bool)
    orders = rank_orders(name, pp, m, vpp)
    pos = [0] * pp
    clock = [np.zeros(s) for _ in range(pp)]
    left = sum(len(o) for o in orders)

    # Ready-queue walk: advance each rank as far as its next op's inputs allow; the
    # graph is a DAG and every order is a topological order of its rank's nodes, so
    # a pass that advances no rank means a broken order (a bug, not a user error).
    while left:
        progressed = False
        for i in range(pp):
            order, t = orders[i], clock[i]
            while pos[i] < len(order):
                is_b, v, j = order[pos[i]]
                k = v * pp + i
                if not is_b:
                    if k > 0:
                        if not f_done[k - 1, j]:
                            break
                        arrive = f_end[k - 1, j] + pf[(k - 1) % pp, (k - 1) // pp, j] if cross \
                            else f_end[k - 1, j]
                        np.maximum(t, arrive, out=f_end[k, j])
                        f_end[k, j] += fwd[i, v, j]
                    else:
                        np.add(t, fwd[i, v, j], out=f_end[k, j])
                    f_done[k, j] = True
                    t = f_end[k, j]
                else:
                    # F(k, j) precedes B(k, j) in this rank's order, so t >= its finish.
                    if k < n_stages - 1:
                        if not b_done[k + 1, j]:
                            break
                        arrive = b_end[k + 1, j] + pb[i, v, j] if cross else b_end[k + 1, j]
                        np.maximum(t, arrive, out=b_end[k, j])
                        b_end[k, j] += bwd[i, v, j]
                    else:
                        np.add(t, bwd[i, v, j], out=b_end[k, j])
                    b_done[k, j] = True
                    t = b_end[k, j]
                pos[i] += 1
                left -= 1
                progressed = True
            clock[i] = t
        if not progressed:  # pragma: no cover - would be a bug in rank_orders
            raise RuntimeError(f"pipeline schedule {name!r} deadlocked at ops {pos} (pp={pp}, m={m}, vpp={vpp})")

    rank_end = np.stack(clock)
    busy = fwd.sum(axis=(1, 2)) + bwd.sum(axis=(1, 2))
    return PipelineResult(makespan=rank_end.max(axis=0), busy=busy, rank_end=rank_end)


def pipeline_time(fwd, bwd, p2p_fwd=0.0, p2p_bwd=0.0, schedule: str = "1f1b", vpp: int = 1) -> np.ndarray:
    """(S,) pipeline makespan per draw: first forward start to last backward finish.

    Examples
    --------
    >>> f = np.ones((4, 8, 1)); pipeline_time(f, 2 * f, schedule="1f1b")  # (m + pp - 1)(f + b)
    array([33.])
    """
    return simulate_pipeline(fwd, bwd, p2p_fwd, p2p_bwd, schedule, vpp).makespan


def _walk_repeated(fwd: np.ndarray, bwd: np.ndarray, m: int, schedule: str, vpp: int,
                   links: np.ndarray | None = None) -> np.ndarray:
    """(pp, S) rank ends of ``m`` micro-batches that all take the same (pp, S) stage times,
    with ``links`` (pp, S) the transfers in flight per link (None: none)."""
    pp, s = fwd.shape
    if schedule == "interleaved":
        shape = (pp, vpp, m, s)
        f, b = (np.broadcast_to((a / vpp)[:, None, None, :], shape) for a in (fwd, bwd))
    else:
        f, b = (np.broadcast_to(a[:, None, :], (pp, m, s)) for a in (fwd, bwd))
    p2p = 0.0 if links is None else links
    return simulate_pipeline(f, b, p2p, p2p, schedule=schedule, vpp=vpp).rank_end


def _one_f_one_b_rounds(fwd: np.ndarray, bwd: np.ndarray, m: int) -> np.ndarray:
    """(pp, S) rank ends of 1F1B with repeated (pp, S) stage times, one round at a time.

    Round k is every rank's k-th backward with the forward its order puts before it (rank
    i's ``F(w_i + k)``, ``w_i = min(pp - i - 1, m)`` warm-up forwards, while it has any
    left). A round's forwards wait for the rank before's forward of the previous round;
    its backwards run up the ranks, which a reversed running maximum does for all ranks at
    once. The warm-up forwards flow down the ranks like identical jobs through a flow
    shop: rank i finishes its j-th at ``sum(fwd[:i+1]) + j·max(fwd[:i+1])``. Where the
    state (each rank's last backward and the forward it waits for) has shifted by one
    amount over pp rounds, the rounds repeat (a max-plus linear recurrence), so whole
    periods are skipped up to the cool-down: for every draw at once where all have settled,
    else for the draws settled to 1e-12 apart from the rest, which walk on.
    """
    pp, s = fwd.shape
    w = np.minimum(pp - 1 - np.arange(pp), m)
    reach, pace = np.cumsum(fwd, axis=0), np.maximum.accumulate(fwd, axis=0)
    prev = np.where(w[:, None] > 0, reach + (w[:, None] - 1) * pace, 0.0)  # last warm-up forward
    wait = np.zeros((pp, s))
    wait[1:] = reach[:-1] + w[1:, None] * pace[:-1]  # rank i's first steady forward needs F_{i-1}(w_i)
    below = np.cumsum(bwd[::-1], axis=0)[::-1]  # sum of bwd over ranks i..pp-1
    below_next = np.vstack([below[1:], np.zeros((1, s))])
    out = np.empty((pp, s))
    # draws whose rounds have settled skip ahead on their own, the rest walk on: (columns, round, prev, wait)
    todo = [(np.arange(s), 0, prev, wait)]
    while todo:
        cols, k, prev, wait = todo.pop()
        cols, ends = _rounds(fwd[:, cols], below[:, cols], below_next[:, cols], w, m, k, prev, wait, cols, todo)
        out[:, cols] = ends
    return out


def _rounds(fwd, below, below_next, w, m, k, prev, wait, cols, todo) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_one_f_one_b_rounds` from round ``k`` for the draws ``cols`` (state ``prev``,
    ``wait``): the draws walked to the end and their rank ends after round m. Draws that
    settle while others have not are put on ``todo`` to go on from the round they skip to."""
    pp, s = fwd.shape
    steady_until = m - pp  # the last round in which every rank still runs a forward
    snapshot = None
    fe, after = np.empty((pp, s)), np.empty((pp, s))
    wait = wait.copy()
    while k < m:
        # the round's arithmetic in place (the same operations, in the same order, as
        # fe = max(prev, wait) + fwd; after = where(active, fe, prev); prev = reversed running max + below)
        np.maximum(prev, wait, out=fe)
        fe += fwd
        if k + w[0] < m:  # every rank still has a forward (w falls with the rank)
            np.subtract(fe, below_next, out=after)
        else:
            np.subtract(np.where((w + k < m)[:, None], fe, prev), below_next, out=after)
        np.maximum.accumulate(after[::-1], axis=0, out=after[::-1])
        prev = after + below
        wait[1:] = fe[:-1]
        if pp <= k < steady_until and (k + 1) % pp == 0:
            state = np.concatenate([prev, wait[1:]])
            if snapshot is not None:
                shift = state - snapshot
                periods = (steady_until - k) // pp  # whole periods left before the cool-down
                if np.all(np.abs(shift - shift[:1]) <= 1e-9 * np.abs(state)):  # every draw has settled
                    prev = prev + periods * shift[0]
                    wait[1:] += periods * shift[0]
                    k += periods * pp
                    snapshot = None
                    k += 1
                    continue
                # draws settled to a thousandth of that tolerance skip ahead apart (one slow draw held
                # every draw to the full walk); the others walk on
                settled = np.all(np.abs(shift - shift[:1]) <= 1e-12 * np.abs(state), axis=0)
                if settled.any():
                    todo.append((cols[settled], k + periods * pp + 1, prev[:, settled] + periods * shift[0, settled],
                                 np.vstack([wait[:1, settled], wait[1:, settled] + periods * shift[0, settled]])))
                    keep = ~settled
                    cols, fwd, below, below_next = cols[keep], fwd[:, keep], below[:, keep], below_next[:, keep]
                    prev, wait, state = prev[:, keep], wait[:, keep], state[:, keep]
                    s = len(cols)
                    fe, after = np.empty((pp, s)), np.empty((pp, s))
            snapshot = state
        k += 1
    return cols, prev


def steady_pipeline(fwd, bwd, m, schedule: str = "1f1b", vpp: int = 1, in_flight=None) -> PipelineResult:
    """:func:`simulate_pipeline` for stage times that every micro-batch repeats, as the
    composer's are, without walking every micro-batch op by op.

    fwd, bwd: (pp, S) forward and backward time of one micro-batch on each rank (all its
    model chunks; each of the ``vpp`` chunks takes 1/vpp of it). m: the micro-batch count,
    one int or one per draw (an (S,) array, so that layouts with the same pp and vpp can be
    stacked along the draws). in_flight: (pp, S) the transfer over each rank's link to the
    next (the activation forward, its gradient back) that delays only the receiver, as
    ``simulate_pipeline``'s ``p2p`` per link; None: every transfer is in fwd and bwd.

    1F1B without transfers in flight is walked a round at a time over all ranks at once
    (:func:`_one_f_one_b_rounds`).
    The other schedules settle into a steady state in which every micro-batch adds the
    same period to every rank's end: the slowest rank's ``fwd + bwd`` (interleaved; the
    largest cycle mean of the dependency graph) or the slowest forward plus the slowest
    backward (GPipe; 1F1B with transfers in flight is tried with the slowest rank's
    ``fwd + bwd``). Their walk stops at ``2·pp`` micro-batches and at ``3·pp``; where
    every rank's end grew by exactly ``pp`` periods in between, the steady state has been
    reached and the ends at ``m`` follow by adding the remaining periods. Draws that have
    not settled are tried again from four times as many micro-batches, and walked in full
    once that is not fewer than ``m``. Either way the result is the full walk's (to
    rounding): tests/engine/test_schedule.py compares the two over random stage times.
    """
    fwd, bwd = np.asarray(fwd, dtype=float), np.asarray(bwd, dtype=float)
    pp, s = fwd.shape
    counts = np.broadcast_to(np.asarray(m, dtype=int), (s,))
    for value in np.unique(counts):
        name = _check_schedule(schedule, pp, int(value), vpp)
    vpp = vpp if name == "interleaved" else 1
    links = None if in_flight is None or not np.any(in_flight) else np.broadcast_to(np.asarray(in_flight, float),
                                                                                     (pp, s))
    end = np.empty((pp, s))
    if name == "1f1b" and links is None:
        for value in np.unique(counts):
            cols = np.flatnonzero(counts == value)
            end[:, cols] = _one_f_one_b_rounds(fwd[:, cols], bwd[:, cols], int(value))
        return PipelineResult(makespan=end.max(axis=0), busy=counts * (fwd + bwd), rank_end=end)
    period = fwd.max(axis=0) + bwd.max(axis=0) if name == "gpipe" else (fwd + bwd).max(axis=0)

    def walk(cols, count):
        return _walk_repeated(fwd[:, cols], bwd[:, cols], count, name, vpp, None if links is None else links[:, cols])

    todo = np.arange(s)
    short = 2 * pp  # a multiple of pp, as the interleaved schedule needs
    while todo.size:
        full = counts[todo] <= short + pp
        for value in np.unique(counts[todo[full]]):  # too few micro-batches to skip any: walk them all
            cols = todo[full][counts[todo[full]] == value]
            end[:, cols] = walk(cols, int(value))
        todo = todo[~full]
        if not todo.size:
            break
        first = walk(todo, short)
        second = walk(todo, short + pp)
        grown = second - first - pp * period[todo]
        settled = np.all(np.abs(grown) <= 1e-9 * second, axis=0)
        cols = todo[settled]
        end[:, cols] = second[:, settled] + (counts[cols] - short - pp) * period[cols]
        todo = todo[~settled]
        short *= 4  # few tries: one that fails costs as much as its walk, and the full walk is the last
    return PipelineResult(makespan=end.max(axis=0), busy=counts * (fwd + bwd), rank_end=end)

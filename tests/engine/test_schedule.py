"""Pipeline schedules (predictor.engine.schedule) against closed forms, hand-worked cases and a
scalar event-driven reference simulation written independently here."""
import time
import zlib

import numpy as np
import pytest

from predictor.core.errors import PrismError
from predictor.engine.schedule import pipeline_time, rank_orders, simulate_pipeline, steady_pipeline

# --------------------------------------------------------------------------- reference

def _reference_orders(schedule, pp, m, vpp):
    """Each rank's op list, derived independently of predictor.engine.schedule.

    1F1B in PyTorch's Schedule1F1B formulation (min(m, pp - i) warm-up forwards, then
    backward/forward pairs), which yields the same sequence as Megatron's (pp - i - 1)
    warm-ups then forward/backward pairs. Interleaved with Megatron's closed-form chunk
    id (k mod pp·vpp) // pp (pre-table versions of get_model_chunk_id).
    """
    orders = []
    for i in range(pp):
        ops = []
        if schedule == "gpipe":
            ops = [("F", 0, j) for j in range(m)] + [("B", 0, j) for j in range(m)]
        elif schedule == "1f1b":
            nf = min(m, pp - i)
            ops = [("F", 0, j) for j in range(nf)]
            nb = 0
            while nb < m:
                ops.append(("B", 0, nb))
                nb += 1
                if nf < m:
                    ops.append(("F", 0, nf))
                    nf += 1
        else:
            total = m * vpp

            def chunk_mb(k, forward):
                c = (k % (pp * vpp)) // pp
                j = (k // (pp * vpp)) * pp + k % pp
                return (c if forward else vpp - 1 - c), j

            w = min(2 * (pp - i - 1) + (vpp - 1) * pp, total)
            ops = [("F", *chunk_mb(k, True)) for k in range(w)]
            for k in range(total - w):
                ops.append(("F", *chunk_mb(w + k, True)))
                ops.append(("B", *chunk_mb(k, False)))
            ops += [("B", *chunk_mb(k, False)) for k in range(total - w, total)]
        orders.append(ops)
    return orders


def _reference_makespan(fwd, bwd, pf, pb, orders):
    """Scalar discrete-event simulation for one draw.

    fwd, bwd: [rank][chunk][mb] durations. pf[k][j], pb[k][j]: transfer time of
    micro-batch j across the boundary between virtual stages k and k+1. Repeatedly starts, among the ranks whose
    next op has all inputs, the op that can start earliest.
    """
    pp, vpp = len(fwd), len(fwd[0])
    n = pp * vpp
    done = {}
    free = [0.0] * pp
    nxt = [0] * pp
    while any(nxt[r] < len(orders[r]) for r in range(pp)):
        best = None
        for r in range(pp):
            if nxt[r] == len(orders[r]):
                continue
            kind, v, j = orders[r][nxt[r]]
            k = v * pp + r
            if kind == "F":
                deps = [] if k == 0 else [(("F", k - 1, j), pf[k - 1][j] if pp > 1 else 0.0)]
            else:
                deps = [(("F", k, j), 0.0)]
                if k < n - 1:
                    deps.append((("B", k + 1, j), pb[k][j] if pp > 1 else 0.0))
            if any(d not in done for d, _ in deps):
                continue
            start = max([free[r]] + [done[d] + lag for d, lag in deps])
            if best is None or start < best[0]:
                best = (start, r, kind, k, v, j)
        assert best is not None, "reference deadlocked"
        start, r, kind, k, v, j = best
        end = start + (fwd if kind == "F" else bwd)[r][v][j]
        done[(kind, k, j)] = end
        free[r] = end
        nxt[r] += 1
    return max(free)


def _cases():
    for pp in (1, 2, 4):
        for m in (1, 3, 8):
            yield "gpipe", pp, m, 1
            yield "1f1b", pp, m, 1
            for vpp in (1, 2, 3):
                if m % pp == 0:
                    yield "interleaved", pp, m, vpp


# --------------------------------------------------------------------------- closed forms

@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("pp,m", [(1, 1), (1, 5), (2, 1), (2, 2), (4, 3), (4, 8), (8, 64), (3, 2)])
def test_uniform_gpipe_1f1b(schedule, pp, m):
    f, b = 1.5, 3.25
    fwd = np.full((pp, m, 3), f)
    res = simulate_pipeline(fwd, np.full((pp, m, 3), b), schedule=schedule)
    np.testing.assert_allclose(res.makespan, (m + pp - 1) * (f + b))
    np.testing.assert_allclose(res.busy, m * (f + b))
    # bubble / ideal = (pp - 1) / m (Narayanan et al. 2021, §2.2)
    np.testing.assert_allclose(res.idle.mean(axis=0) / res.busy.mean(axis=0), (pp - 1) / m)
    np.testing.assert_allclose(res.bubble_fraction, (pp - 1) / (m + pp - 1))


@pytest.mark.parametrize("pp,m,vpp", [(2, 2, 2), (2, 4, 2), (4, 8, 2), (4, 8, 4), (4, 4, 3), (8, 16, 2),
                                      (1, 3, 2), (4, 12, 1)])
@pytest.mark.parametrize("f,b", [(1.0, 2.0), (1.0, 1.0), (2.0, 1.0)])
def test_uniform_interleaved(pp, m, vpp, f, b):
    """Per-chunk times f/vpp, b/vpp: makespan m(f+b) + (pp-1)(f+b)/vpp, i.e. bubble/ideal
    (pp-1)/(vpp·m) (Narayanan et al. 2021, §2.2.1)."""
    fwd = np.full((pp, vpp, m, 2), f / vpp)
    bwd = np.full((pp, vpp, m, 2), b / vpp)
    got = pipeline_time(fwd, bwd, schedule="interleaved", vpp=vpp)
    np.testing.assert_allclose(got, m * (f + b) + (pp - 1) * (f + b) / vpp)


def test_pp1_is_the_sum():
    rng = np.random.default_rng(0)
    fwd, bwd = rng.uniform(1, 2, (1, 5, 7)), rng.uniform(2, 4, (1, 5, 7))
    for schedule in ("gpipe", "1f1b"):
        np.testing.assert_allclose(pipeline_time(fwd, bwd, 9.0, 9.0, schedule=schedule),
                                   fwd.sum(axis=(0, 1)) + bwd.sum(axis=(0, 1)))
    f4, b4 = fwd.reshape(1, 1, 5, 7).repeat(2, axis=1), bwd.reshape(1, 1, 5, 7).repeat(2, axis=1)
    np.testing.assert_allclose(pipeline_time(f4, b4, 9.0, 9.0, schedule="interleaved", vpp=2),
                               2 * (fwd.sum(axis=(0, 1)) + bwd.sum(axis=(0, 1))))


def test_slow_stage():
    """GPipe: a stage k times slower sets m·(F+B) + (pp-1)(f+b) wherever it sits; 1F1B
    matches that for a slow last stage, and hides more of the bubble for an early one."""
    pp, m = 4, 8
    for slow in range(pp):
        fwd, bwd = np.ones((pp, m, 1)), np.full((pp, m, 1), 2.0)
        fwd[slow] *= 3
        bwd[slow] *= 3
        assert pipeline_time(fwd, bwd, schedule="gpipe")[0] == pytest.approx(m * 9 + (pp - 1) * 3)
        got = pipeline_time(fwd, bwd, schedule="1f1b")[0]
        assert m * 9 <= got <= m * 9 + (pp - 1) * 3
        if slow == pp - 1:
            assert got == pytest.approx(m * 9 + (pp - 1) * 3)
        if slow == 0:
            assert got == pytest.approx(m * 9)  # rank 0 never waits


# --------------------------------------------------------------------------- p2p

@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_p2p_hand_computed(schedule):
    """pp=2, m=2, f=1, b=2, transfer 0.5 each way.

    1F1B: rank 0 runs F0 F1 B0 B1, rank 1 runs F0 B0 F1 B1. Rank 1's F0 starts at 1.5,
    its four ops run back to back to 7.5; rank 0's B1 starts at 7.5 + 0.5 = 8, ends at 10.
    GPipe: rank 1 F0 [1.5, 2.5], F1 [2.5, 3.5], B0 [3.5, 5.5], B1 [5.5, 7.5]; rank 0 B0
    [6, 8], B1 [8, 10]. Both: 9 without transfers, 10 = 9 + two transfers with them.
    """
    fwd, bwd = np.ones((2, 2, 1)), np.full((2, 2, 1), 2.0)
    assert pipeline_time(fwd, bwd, schedule=schedule)[0] == pytest.approx(9.0)
    assert pipeline_time(fwd, bwd, 0.5, 0.5, schedule=schedule)[0] == pytest.approx(10.0)
    # Only the forward transfer: 9.5; per-draw transfer times broadcast over draws.
    got = pipeline_time(np.ones((2, 2, 3)), np.full((2, 2, 3), 2.0), np.array([0.0, 0.5, 1.0]), 0.0,
                        schedule=schedule)
    np.testing.assert_allclose(got, [9.0, 9.5, 10.0])


def test_p2p_adds_per_boundary_on_fill_and_drain():
    """GPipe, uniform times, pp stages: the first forward crosses pp-1 boundaries and the
    last backward crosses them again, nothing else waits: + (pp-1)(p_f + p_b)."""
    pp, m = 4, 6
    fwd, bwd = np.ones((pp, m, 1)), np.full((pp, m, 1), 2.0)
    base = (m + pp - 1) * 3
    assert pipeline_time(fwd, bwd, 0.25, 0.75, schedule="gpipe")[0] == pytest.approx(base + (pp - 1) * 1.0)
    links = np.array([[0.1], [0.2], [0.3]])  # (pp-1, S) per link
    assert pipeline_time(fwd, bwd, links, links, schedule="gpipe")[0] == pytest.approx(base + 2 * 0.6)


# --------------------------------------------------------------------------- reference

@pytest.mark.parametrize("schedule,pp,m,vpp", list(_cases()))
def test_matches_event_simulation(schedule, pp, m, vpp):
    rng = np.random.default_rng(zlib.crc32(repr((schedule, pp, m, vpp)).encode()))
    S = 50
    fwd = rng.lognormal(0.0, 0.5, (pp, vpp, m, S))
    bwd = 2 * rng.lognormal(0.0, 0.5, (pp, vpp, m, S))
    fwd[rng.integers(pp), :, rng.integers(m)] *= 4  # one slow micro-batch on one stage
    bwd[rng.integers(pp)] *= 1.5  # one slow stage
    n_links = pp if vpp > 1 else max(pp - 1, 1)
    pf = rng.uniform(0, 0.3, (n_links, S)) if pp > 1 else 0.0
    # Backward transfers: one per draw, or (interleaved) one per boundary and micro-batch,
    # indexed by the boundary's lower stage k = v·pp + i as (i, v, j).
    pb = rng.uniform(0, 0.3, (pp, vpp, m, S)) if schedule == "interleaved" else rng.uniform(0, 0.3, S)
    got = simulate_pipeline(fwd, bwd, pf, pb, schedule=schedule, vpp=vpp)

    orders = _reference_orders(schedule, pp, m, vpp)
    assert [[("B" if b else "F", v, j) for b, v, j in o] for o in rank_orders(schedule, pp, m, vpp)] == orders
    for s in range(S):
        bounds = range(pp * vpp - 1)
        pf_k = [[float(pf[k % pp, s])] * m for k in bounds] if pp > 1 else []
        pb_k = [[float(pb[k % pp, k // pp, j, s]) if pb.ndim == 4 else float(pb[s]) for j in range(m)]
                for k in bounds]
        want = _reference_makespan(fwd[..., s].tolist(), bwd[..., s].tolist(), pf_k, pb_k, orders)
        assert got.makespan[s] == pytest.approx(want, rel=1e-12)
    np.testing.assert_allclose(got.busy, fwd.sum(axis=(1, 2)) + bwd.sum(axis=(1, 2)))
    assert np.all(got.rank_end <= got.makespan + 1e-12)
    assert np.all(got.idle >= -1e-9)


def test_interleaved_order_matches_megatron():
    """pp=2, vpp=2, m=4, worked from Megatron-LM's get_schedule_table (group size pp) and
    get_pp_rank_microbatches (warm-up 4 on rank 0, 2 on rank 1)."""
    F = lambda v, j: (False, v, j)  # noqa: E731
    B = lambda v, j: (True, v, j)  # noqa: E731
    r0, r1 = rank_orders("interleaved", pp=2, m=4, vpp=2)
    assert r0 == [F(0, 0), F(0, 1), F(1, 0), F(1, 1),
                  F(0, 2), B(1, 0), F(0, 3), B(1, 1), F(1, 2), B(0, 0), F(1, 3), B(0, 1),
                  B(1, 2), B(1, 3), B(0, 2), B(0, 3)]
    assert r1 == [F(0, 0), F(0, 1),
                  F(1, 0), B(1, 0), F(1, 1), B(1, 1), F(0, 2), B(0, 0), F(0, 3), B(0, 1),
                  F(1, 2), B(1, 2), F(1, 3), B(1, 3),
                  B(0, 2), B(0, 3)]


def test_1f1b_warmup_counts():
    for pp, m in [(4, 8), (4, 2), (8, 3)]:
        for i, order in enumerate(rank_orders("1f1b", pp, m)):
            first_b = next(n for n, op in enumerate(order) if op[0])
            w = min(pp - i - 1, m)
            assert first_b == w + (w < m)  # warm-ups, then one steady-state forward if any is left
    pp, m, vpp = 4, 8, 2
    for i, order in enumerate(rank_orders("interleaved", pp, m, vpp)):
        first_b = next(n for n, op in enumerate(order) if op[0])
        w = min(2 * (pp - i - 1) + (vpp - 1) * pp, m * vpp)
        assert first_b == w + (w < m * vpp)


# --------------------------------------------------------------------------- errors

def test_errors_name_the_field():
    f = np.ones((2, 4, 3))
    with pytest.raises(PrismError, match="parallel.schedule"):
        pipeline_time(f, f, schedule="pipedream")
    with pytest.raises(PrismError, match="2401.10241") as err:  # refused in one place: core.layout
        pipeline_time(f, f, schedule="zero_bubble")
    assert err.value.field == "parallel.schedule"
    with pytest.raises(PrismError, match="parallel.vpp"):
        pipeline_time(np.ones((2, 2, 4, 3)), np.ones((2, 2, 4, 3)), schedule="1f1b", vpp=2)
    with pytest.raises(PrismError, match="parallel.global_batch_size: gives 3 micro-batches"):
        pipeline_time(np.ones((2, 2, 3, 1)), np.ones((2, 2, 3, 1)), schedule="interleaved", vpp=2)
    with pytest.raises(PrismError, match="parallel.global_batch_size: gives 0 micro-batches"):
        pipeline_time(np.ones((2, 0, 1)), np.ones((2, 0, 1)))
    with pytest.raises(PrismError, match="parallel.vpp"):
        pipeline_time(np.ones((2, 2, 4, 3)), np.ones((2, 2, 4, 3)), schedule="interleaved", vpp=3)
    with pytest.raises(PrismError, match="bwd"):
        pipeline_time(f, np.ones((2, 5, 3)))
    with pytest.raises(PrismError, match="p2p_fwd"):
        pipeline_time(np.ones((2, 2, 4, 3)), np.ones((2, 2, 4, 3)), np.ones((1, 3)), schedule="interleaved",
                      vpp=2)
    with pytest.raises(PrismError, match="draw counts"):
        pipeline_time(f, np.ones((2, 4, 5)))


# --------------------------------------------------------------------------- cost

def test_cost_1f1b_pp8_m64_S2000():
    rng = np.random.default_rng(1)
    pp, m, S = 8, 64, 2000
    fwd = rng.lognormal(0, 0.1, (pp, m, S))
    bwd = 2 * rng.lognormal(0, 0.1, (pp, m, S))
    t0 = time.perf_counter()
    out = pipeline_time(fwd, bwd, 0.01, 0.01, schedule="1f1b")
    dt = time.perf_counter() - t0
    print(f"\n1F1B pp={pp} m={m} S={S}: {1e3 * dt:.1f} ms ({2 * pp * m} nodes)")
    assert out.shape == (S,) and np.all(out >= (m + pp - 1) * 2.5)


# --------------------------------------------------------------------------- repeated stage times

def _full_walk(f, b, m, schedule, vpp, links=0.0):
    """simulate_pipeline over every micro-batch, each repeating the (pp, S) stage times,
    with ``links`` (pp, S) in flight over each rank's link to the next."""
    pp, s = f.shape
    if schedule == "interleaved":
        return simulate_pipeline(np.broadcast_to((f / vpp)[:, None, None], (pp, vpp, m, s)),
                                 np.broadcast_to((b / vpp)[:, None, None], (pp, vpp, m, s)), links, links,
                                 schedule=schedule, vpp=vpp).rank_end
    return simulate_pipeline(np.broadcast_to(f[:, None], (pp, m, s)), np.broadcast_to(b[:, None], (pp, m, s)),
                             links, links, schedule=schedule).rank_end


@pytest.mark.parametrize("kind", ["random", "near-equal", "uneven layers"])
def test_steady_pipeline_equals_the_full_walk(kind):
    """Skipping the steady state (and 1F1B's round-at-a-time walk) changes nothing but
    rounding, including stage times whose slowest ranks are near-equal (late to settle)."""
    rng = np.random.default_rng(zlib.crc32(kind.encode()))
    for _ in range(40):
        schedule = str(rng.choice(["1f1b", "interleaved", "gpipe"]))
        pp = int(rng.choice([2, 3, 4, 8])) if schedule == "interleaved" else int(rng.choice([1, 2, 3, 4, 8]))
        vpp = int(rng.choice([2, 3])) if schedule == "interleaved" else 1
        m = pp * int(rng.integers(1, 12)) if schedule == "interleaved" else int(rng.integers(1, 60))
        if kind == "random":
            f, b = rng.uniform(0.5, 2, (pp, 6)), rng.uniform(0.5, 4, (pp, 6))
        elif kind == "near-equal":
            f = 1 + rng.uniform(0, 0.01, (pp, 6))
            b = 2 * f + rng.uniform(0, 0.01, (pp, 6))
        else:  # some ranks hold one more layer, as 80 layers on 32 stages
            f = rng.choice([1.0, 1.5], size=(pp, 1)) * (1 + rng.uniform(0, 0.02, (pp, 6)))
            b = 2 * f
        got = steady_pipeline(f, b, m, schedule, vpp)
        np.testing.assert_allclose(got.rank_end, _full_walk(f, b, m, schedule, vpp), rtol=1e-12)
        np.testing.assert_allclose(got.busy, m * (f + b))


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "interleaved"])
def test_steady_pipeline_with_transfers_in_flight_equals_the_full_walk(schedule):
    """Transfers that delay only their receiver (GPipe's deferred sends) walk as the
    full walk's edge delays, whatever the schedule they are given with."""
    rng = np.random.default_rng(zlib.crc32(schedule.encode()))
    for _ in range(15):
        pp = int(rng.choice([2, 3, 4]))
        vpp = 2 if schedule == "interleaved" else 1
        m = pp * int(rng.integers(1, 10)) if schedule == "interleaved" else int(rng.integers(1, 40))
        f, b = rng.uniform(0.5, 2, (pp, 5)), rng.uniform(0.5, 4, (pp, 5))
        links = rng.uniform(0, 1.5, (pp, 5))
        got = steady_pipeline(f, b, m, schedule, vpp, in_flight=links)
        np.testing.assert_allclose(got.rank_end, _full_walk(f, b, m, schedule, vpp, links), rtol=1e-12)


def test_steady_pipeline_takes_a_micro_batch_count_per_draw():
    rng = np.random.default_rng(3)
    f = rng.uniform(1, 2, (4, 12))
    counts = rng.choice([4, 8, 40, 400], 12)
    got = steady_pipeline(f, 2 * f, counts, "interleaved", 2).rank_end
    for i, m in enumerate(counts):
        np.testing.assert_allclose(got[:, i], _full_walk(f[:, [i]], 2 * f[:, [i]], int(m), "interleaved", 2)[:, 0],
                                   rtol=1e-12)
    with pytest.raises(PrismError, match="multiple of pp"):
        steady_pipeline(f, f, 6, "interleaved", 2)


def test_steady_pipeline_cost_does_not_grow_with_micro_batches():
    f = np.ones((8, 1000))
    t0 = time.perf_counter()
    steady_pipeline(f, 2 * f, 100_000, "interleaved", 4)
    steady_pipeline(f, 2 * f, 100_000, "1f1b")
    assert time.perf_counter() - t0 < 2.0

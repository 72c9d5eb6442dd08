"""Sampling plans: which shapes to time, in which order, within a time budget.

"Lightweight means targeted" (docs/method.md, "Sampling"): a plan first takes the shapes of the compute
calls the composer makes for its target models (:func:`target_calls`: the calls of
:func:`predictor.workload.decompose.decompose` for each micro-batch size and TP degree),
(up to :data:`TARGETED_SHARE` of ``shapes_per_op``, every target in turn), then fills up to
``shapes_per_op`` with a scrambled Sobol design, log-uniform in a box
around those targets. Every shape whose roofline-estimated call exceeds
``max_call_ms`` is left out; the cap is halved until the whole plan's estimate fits
the budget. Compute tasks are interleaved across ops so that a run cut short by its
budget still covers every op evenly. A task carries its call in the decomposition's
own record (:class:`~predictor.workload.decompose.Call`).

This module needs no torch: plans can be built and inspected anywhere.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from itertools import product, zip_longest

import numpy as np

from predictor.core.errors import PrismError
from predictor.core.ops import BUS_FACTOR, DTYPE_BYTES, OPS, OPTIMIZERS, Call, bytes_moved, flops, unknown_op_message
from predictor.core.profiles import load_model
from predictor.core.specs import HardwareConfig, ParallelConfig, SamplingConfig
from predictor.workload.decompose import decompose
from sampling.cpu.collective_gap import rounds

# Measured kernels on a CPU run far below the roofline; assume 25% of it, plus a fixed
# per-call overhead, so the budget estimate errs on the slow side.
_EFFICIENCY = 0.25
_CALL_OVERHEAD_S = 30e-6

# The columns drawn from the Sobol point where some of an op's shape derives from them
# (:func:`_shape_from_point`); every other op draws all of its numeric shape columns.
_DRAWN = {
    "softmax": ("batch", "heads", "seq_q"),
    "masked_fill": ("batch", "heads", "seq_q"),
    "attention": ("batch", "heads", "seq_q", "head_dim"),
}
_CATEGORICAL = ("causal", "optimizer")
_ALIGNED = {"m", "n", "k", "tokens", "hidden", "vocab", "seq_q"}  # multiples of 8
#: Part of an op's shapes the targets' own may take; the rest is space-filling, so that
#: the regressor also sees shapes between and beyond them.
TARGETED_SHARE = 0.75
#: Ops that are not collectives but need a group of ranks: timed by the collective job.
GROUP_OPS = ("dtensor",)


def in_collective_job(op: str) -> bool:
    """Whether the collective job times ``op``: the collectives and :data:`GROUP_OPS`."""
    return OPS[op].collective or op in GROUP_OPS


@dataclass(frozen=True)
class Task:
    """One call (op, pass, shape) timed ``repeats`` times in ``dtype``."""

    call: Call
    dtype: str

    @property
    def key(self) -> str:
        call = self.call
        return task_key(call.op, call.pass_, self.dtype, call.shape_dict, (call.nodes, call.ranks_per_node))


def task_key(op: str, pass_: str, dtype: str, shape: dict, placement: tuple[int, int] = (1, 1)) -> str:
    """A task's identity, rebuilt identically from a stored row for resuming; a collective's
    includes its group's ``placement`` (nodes, ranks per node)."""
    cols = OPS[op].shape
    where = [f"nodes={int(placement[0])}", f"ranks_per_node={int(placement[1])}"] if OPS[op].collective else []
    return "|".join([op, pass_, dtype] + [f"{c}={_plain(shape[c])}" for c in cols] + where)


def _plain(v):
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer, float, np.floating)) and float(v).is_integer():
        return int(v)
    return v


def _sampled_call(op: str, pass_: str, shape: dict, ranks_per_node: int = 1, nodes: int = 1) -> Call:
    """One timed call as the decomposition records calls; its role is "sampled": it stands
    for no part of a step, and a collective's group is ``ranks_per_node`` ranks on each of
    ``nodes`` nodes."""
    return Call(op, pass_, tuple(sorted((c, _plain(shape[c])) for c in OPS[op].shape)), 1, "sampled",
                ranks_per_node, nodes)


@dataclass
class Plan:
    compute: list[Task]
    collectives: list[Task]
    plan_id: str
    max_call_ms: float
    estimated_s: float

    def summary(self) -> dict:
        by_op: dict[str, set] = {}
        for t in self.compute + self.collectives:
            by_op.setdefault(t.call.op, set()).add(t.call.shape)
        return {op: len(shapes) for op, shapes in by_op.items()}

    def collective_coverage(self) -> dict:
        """What the collectives cover: message sizes, group shapes (nodes x ranks per node),
        collectives and dtypes, and the tasks they make."""
        tasks = [t for t in self.collectives if OPS[t.call.op].collective]  # not the GROUP_OPS
        calls = [t.call for t in tasks]
        shapes = sorted({(c.nodes, c.ranks_per_node) for c in calls})
        sizes = sorted({c.shape_dict["message_bytes"] for c in calls})
        per_group: dict[tuple, set] = {}
        for t in tasks:
            per_group.setdefault((t.call.op, t.call.nodes, t.call.ranks_per_node, t.dtype), set()).add(
                t.call.shape_dict["message_bytes"])
        return {"sizes": max(map(len, per_group.values()), default=0), "min_bytes": min(sizes, default=0),
                "max_bytes": max(sizes, default=0), "group_shapes": [f"{n}x{k}" for n, k in shapes],
                "collectives": sorted({c.op for c in calls}), "dtypes": sorted({t.dtype for t in tasks}),
                "tasks": len(tasks)}


def call_seconds(op: str, pass_: str, shape: dict, dtype: str, hw: HardwareConfig, nodes: int = 1) -> float:
    """Pessimistic estimate of one call's time from the hardware's roofline (a collective
    over ``nodes`` nodes: the network between them)."""
    if OPS[op].collective:
        n = shape["group_size"]
        link = hw.network.intra_node if nodes <= 1 else hw.network.inter_node
        return (link.latency_us * 1e-6 + shape["message_bytes"] * BUS_FACTOR[op](n) / link.bandwidth) / _EFFICIENCY
    roof = max(flops(op, pass_, shape) / hw.peak(dtype),
               bytes_moved(op, pass_, shape, dtype) / hw.memory.bandwidth)
    return roof / _EFFICIENCY + _CALL_OVERHEAD_S


def task_seconds(task: Task, repeats: int, warmup: int, hw: HardwareConfig, rounds: int = 1) -> float:
    """Estimated time of ``task``'s ``repeats``, split over ``rounds`` passes that each
    build the call and warm it up."""
    call = task.call
    one = call_seconds(call.op, call.pass_, call.shape_dict, task.dtype, hw, call.nodes)
    setup = one if call.pass_ == "bwd" else 0.0  # the forward that builds the graph
    return (repeats + warmup * rounds) * one + setup * rounds


def round_repeats(repeats: int, rounds: int) -> list[int]:
    """``repeats`` split over ``rounds`` passes, the first ones taking the remainder."""
    return [repeats // rounds + (i < repeats % rounds) for i in range(rounds)]


#: Host ops timed where they happen rather than as calls of their own, and where.
IN_STEPS = {"collective_launch": "the host time of issuing a collective on a GPU (a CPU's collective samples hold it)",
            "checkpoint": "timed in the reference model's steps with dispatch (sampling.framework)"}


def in_steps_message(op: str) -> str:
    return f"sampling.ops: {op} is {IN_STEPS[op]}, not a call of its own: drop it from sampling.ops"


def validate(sc: SamplingConfig, hw: HardwareConfig) -> None:
    """Check a sampling config; raise :class:`PrismError` naming the field and the fix."""
    if not sc.ops:
        raise PrismError("sampling.ops=[]: names no op to sample; list some (sampling.ops=[gemm,attention]) or "
                         "leave it out for the plan's own", field='sampling.ops')
    if not sc.max_call_ms > 0:
        raise PrismError(f"sampling.max_call_ms={sc.max_call_ms}: the longest call a plan may time, in ms; must be "
                         f"positive, e.g. 50", field='sampling.max_call_ms')
    for op in sc.ops:
        if op not in OPS:
            raise PrismError(f"sampling.ops: {unknown_op_message(op)}", field='sampling.ops')
        if op in IN_STEPS:
            raise PrismError(in_steps_message(op), field='sampling.ops')
    if not sc.dtypes:  # every compute task is timed in each dtype, and the plan's costs in the first
        raise PrismError("sampling.dtypes=[]: names no dtype to time the ops in; list some "
                         "(sampling.dtypes=[float32]) or leave it out for the plan's own", field='sampling.dtypes')
    for dtype in sc.dtypes:
        if dtype not in DTYPE_BYTES:
            raise PrismError(f"sampling.dtypes: unknown dtype {dtype!r}; use {', '.join(DTYPE_BYTES)}",
                             field='sampling.dtypes')
        if not hw.peak_flops.get(dtype):
            supported = ", ".join(k for k, v in hw.peak_flops.items() if v)
            raise PrismError(f"sampling.dtypes: hardware {hw.name} has no {dtype} peak in conf/hardware/"
                             f"{hw.name}.yaml; use one of {supported}", field='sampling.dtypes')
    if any(not isinstance(n, int) or n < 1 for n in sc.seq_lengths):
        raise PrismError(f"sampling.seq_lengths: {list(sc.seq_lengths)} must be positive token counts, e.g. "
                         f"[1024,4096]; [] samples each target at its own seq_length", field='sampling.seq_lengths')
    for name in ("tp_degrees", "micro_batch_sizes"):
        values = list(getattr(sc, name))
        # a degree below 1 would be skipped as one the targets cannot take, and [] skips them all,
        # so the targets' own shapes would silently go unsampled
        if any(n < 1 for n in values) or (sc.targets and not values):
            raise PrismError(f"sampling.{name}={values}: must list positive whole numbers, e.g. [1,2]",
                             field=f"sampling.{name}")
    if sc.warmup < 0:
        raise PrismError(f"sampling.warmup={sc.warmup}: the untimed calls before the first repeat; must be a whole "
                         f"number >= 0, e.g. 2", field='sampling.warmup')
    if not isinstance(sc.seed, int) or sc.seed < 0:  # numpy's generators take no negative seed
        raise PrismError(f"sampling.seed={sc.seed}: the seed of the shapes' draw; must be a whole number >= 0",
                         field='sampling.seed')
    if not isinstance(sc.steal_retakes, int) or sc.steal_retakes < 0:
        raise PrismError(f"sampling.steal_retakes={sc.steal_retakes}: how often a call timed under steal is timed "
                         f"again; must be a whole number >= 0 (0: never)", field='sampling.steal_retakes')
    for name, minimum in [("budget_s", 1), ("repeats", 1), ("rounds", 1), ("collective_repeats", 1),
                          ("shapes_per_op", 1), ("message_sizes", 1), ("threads", 1), ("collective_world_size", 2),
                          ("rank_timeout_s", 1)]:
        if getattr(sc, name) < minimum:
            raise PrismError(f"sampling.{name}: must be >= {minimum}, got {getattr(sc, name)}",
                             field=f"sampling.{name}")
    for name in ("collective_share", "co_run_share", "max_steal"):
        if not 0 <= getattr(sc, name) <= 1:
            raise PrismError(f"sampling.{name}: must be within [0, 1], got {getattr(sc, name)}",
                             field=f"sampling.{name}")
    for col, bounds in sc.space.items():
        if (len(bounds) != 2 or not all(isinstance(b, (int, float)) for b in bounds)
                or not 0 < bounds[0] <= bounds[1]):
            raise PrismError(f"sampling.space.{col}: expected [low, high] with 0 < low <= high, got {bounds}",
                             field=f"sampling.space.{col}")


def target_calls(sc: SamplingConfig, hw: HardwareConfig) -> list[Call]:
    """The compute calls of ``sc.ops`` the composer makes for each of ``sc.targets`` at each micro-batch
    size, TP degree and sequence length of ``sc`` (every other parallel degree 1) on ``hw``:
    each (op, pass, shape) once, in the composer's order per target, the targets taken in
    turn. TP degrees a model cannot take are skipped."""
    per_model, seen = [], set()
    for name in sc.targets:
        try:
            own, calls = load_model(name), []
        except PrismError as exc:  # the message names model=, which the user did not set
            raise PrismError(f"sampling.targets: {exc}".replace(f"model={name}: ", f"{name}: "),
                             field="sampling.targets") from None
        per_model.append(calls)
        models = [dataclasses.replace(own, seq_length=n) for n in sc.seq_lengths] or [own]
        for model, tp, mbs in product(models, sc.tp_degrees, sc.micro_batch_sizes):
            try:
                work = decompose(model, ParallelConfig(tp=tp, micro_batch_size=mbs), hw)
            except PrismError as exc:
                if exc.field == "parallel.tp":  # tp does not divide the heads or the FFN width
                    continue
                raise PrismError(f"sampling.targets: {name} at tp={tp}, micro-batch size {mbs}: {exc}",
                                 field="sampling.targets") from None
            for stage in work.stages:
                for call in stage.forward + stage.backward + stage.step:
                    call = call.keyed("co_runners")  # a neighbouring rank is the co-run phase's (sampling.cpu.co_run)
                    if (not OPS[call.op].collective and call.op in sc.ops
                            and (call.op, call.pass_, call.shape) not in seen):
                        seen.add((call.op, call.pass_, call.shape))
                        calls.append(call)
    # round robin over the targets: a plan that keeps only the first shapes of an op keeps
    # every target's first ones (in target order, the third model's GEMMs were all cut)
    return [c for group in zip_longest(*per_model) for c in group if c is not None]


def _shapes_per_op(calls: list[Call]) -> dict[str, list[dict]]:
    """The distinct shapes of ``calls`` per op, in order (every pass of an op is timed at each)."""
    shapes: dict[str, list[dict]] = {}
    for call in calls:
        if call.shape_dict not in shapes.setdefault(call.op, []):
            shapes[call.op].append(call.shape_dict)
    return shapes


def _box(op: str, cols, sc: SamplingConfig, targeted: list[dict]) -> list[tuple[float, float]]:
    """Log-space bounds per drawn column: around the targets (x/4 .. x*4), inside ``space``."""
    box = []
    for c in cols:
        lo, hi = sc.space.get(c, (1, 1))
        seen = [s[c] for s in targeted if c in s]
        if seen:
            lo, hi = max(lo, min(seen) / 4), min(hi, max(seen) * 4)
            lo = min(lo, hi)
        box.append((math.log(lo), math.log(hi)))
    return box


def _round(col: str, value: float) -> int:
    if col in _ALIGNED:
        return max(8, int(round(value / 8)) * 8)
    if col == "head_dim":
        return int(2 ** round(math.log2(value)))
    if col == "params":
        return max(1000, int(round(value, -3)))
    return max(1, int(round(value)))


def _shape_from_point(op: str, point: dict, i: int) -> dict:
    """Complete a drawn point into a full shape (derived and categorical columns)."""
    s = dict(point)
    if op == "attention":
        ratio = 2 ** (i % 4)  # cycle MHA and GQA groups of 2, 4, 8 where they divide
        while s["heads"] % ratio:
            ratio //= 2
        s.update(kv_heads=s["heads"] // ratio, seq_kv=s["seq_q"], causal=i % 3 != 2)
    if op in ("softmax", "masked_fill"):
        s["seq_kv"] = s["seq_q"]
        if op == "softmax":
            s["causal"] = i % 2 == 0
    if op == "router":
        s["top_k"] = min(s["top_k"], s["experts"])
    if op == "optimizer_step":
        s["tensors"] = max(1, min(s["tensors"], s["params"] // 256))
        s["optimizer"] = OPTIMIZERS[1] if i % 4 == 3 else OPTIMIZERS[0]
    return s


def _space_filling(op, n, sc, hw, targeted, cap_s, seed) -> list[dict]:
    cols = _DRAWN.get(op) or tuple(c for c in OPS[op].shape if c not in _CATEGORICAL)
    box = _box(op, cols, sc, targeted)
    # imported here: scipy.stats costs every process that imports this module (a collective
    # job's ranks read only its constants) about 1.7 s of its start
    from scipy.stats import qmc
    sobol = qmc.Sobol(d=len(cols), scramble=True, seed=seed)
    points = sobol.random(1024)
    out, seen = [], set()
    for i, u in enumerate(points):
        point = {c: _round(c, math.exp(lo + ui * (hi - lo))) for c, ui, (lo, hi) in zip(cols, u, box)}
        shape = _shape_from_point(op, point, i)
        key = tuple(sorted(shape.items()))
        if key in seen or any(call_seconds(op, p, shape, sc.dtypes[0], hw) > cap_s
                              for p in OPS[op].passes):
            continue
        seen.add(key)
        out.append(shape)
        if len(out) == n:
            break
    return out


def _compute_tasks(sc: SamplingConfig, hw: HardwareConfig, targeted: dict[str, list[dict]],
                   cap_s: float) -> list[Task]:
    per_op: dict[str, list[dict]] = {}
    for j, op in enumerate(o for o in sc.ops if not in_collective_job(o)):
        fits = [s for s in targeted.get(op, [])
                if all(call_seconds(op, p, s, sc.dtypes[0], hw) <= cap_s for p in OPS[op].passes)]
        chosen = fits[: round(sc.shapes_per_op * TARGETED_SHARE)]
        fill = _space_filling(op, sc.shapes_per_op, sc, hw, targeted.get(op, []), cap_s, sc.seed + j)
        for s in fill:
            if len(chosen) == sc.shapes_per_op:
                break
            if s not in chosen:
                chosen.append(s)
        per_op[op] = chosen
    tasks = []  # round robin: shape i of every op before shape i+1 of any
    for i in range(max((len(v) for v in per_op.values()), default=0)):
        for op, shapes in per_op.items():
            if i < len(shapes):
                for pass_ in OPS[op].passes:
                    for dtype in sc.dtypes:
                        tasks.append(Task(_sampled_call(op, pass_, shapes[i]), dtype))
    return tasks


def group_shapes(nodes: int, ranks_per_node: int) -> list[tuple[int, int]]:
    """The collective groups that cover a job of ``nodes`` x ``ranks_per_node`` ranks, as
    (nodes, ranks per node): within one node at 2, 4, ... and all of its ranks; across 2,
    4, ... and all nodes with one rank per node and with all of them."""
    def doubling(top):
        return sorted({2 ** i for i in range(1, top.bit_length()) if 2 ** i <= top} | ({top} if top > 1 else set()))
    within = [(1, k) for k in doubling(ranks_per_node)]
    across = [(n, k) for n in doubling(nodes) for k in sorted({1, ranks_per_node})]
    return within + across


def _collective_tasks(sc: SamplingConfig, topology: tuple[int, int] | None) -> list[Task]:
    """Each collective of ``sc.ops`` at ``sc.message_sizes`` log-spaced sizes over every
    group shape of ``topology`` (nodes, ranks per node); None: one node of
    ``sc.collective_world_size`` ranks (the single-host job). The ops of :data:`GROUP_OPS`
    once per group shape and pass."""
    lo, hi = sc.space.get("message_bytes", (1024, 1 << 26))
    sizes = np.geomspace(lo, hi, sc.message_sizes)
    shapes = group_shapes(*topology) if topology else [(1, sc.collective_world_size)]
    tasks = []
    for op in (o for o in sc.ops if OPS[o].collective):
        for nodes, per_node in shapes:
            world = nodes * per_node
            for b in sizes:
                # a multiple of world * 16 bytes, so every rank's shard is whole in any dtype
                message = max(world * 16, int(round(b / (world * 16))) * world * 16)
                call = _sampled_call(op, "step", {"message_bytes": message, "group_size": world}, per_node, nodes)
                tasks.extend(Task(call, dtype) for dtype in sc.dtypes)
    if "dtensor" in sc.ops:  # tensor parallelism's framework time, on every group shape
        for nodes, per_node in shapes:
            for pass_ in OPS["dtensor"].passes:
                call = _sampled_call("dtensor", pass_, {"group_size": nodes * per_node}, per_node, nodes)
                tasks.append(Task(call, sc.dtypes[0]))
    return tasks


def _plan_id(hw: HardwareConfig, sc: SamplingConfig, tasks: list[Task]) -> str:
    """The plan's identity: what it measures and how, not the budget that shaped it."""
    text = json.dumps({"hardware": hw.name, "repeats": sc.repeats, "collective_repeats": sc.collective_repeats,
                       "warmup": sc.warmup,
                       "threads": sc.threads, "tasks": [t.key for t in tasks]})
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def make_plan(sc: SamplingConfig, hw: HardwareConfig, topology: tuple[int, int] | None = None) -> Plan:
    """The plan for ``sc`` on ``hw``: deterministic for a given config (resumable). A
    cluster job's ``topology`` (nodes, ranks per node) sets its collectives' groups
    (:func:`group_shapes`); None: the single-host job's ``sc.collective_world_size`` ranks."""
    validate(sc, hw)
    cap_s = sc.max_call_ms / 1e3
    compute_budget = sc.budget_s * (1 - sc.collective_share) * 0.8
    targeted = _shapes_per_op(target_calls(sc, hw))
    while True:
        compute = _compute_tasks(sc, hw, targeted, cap_s)
        est = sum(task_seconds(t, sc.repeats, sc.warmup, hw, min(sc.rounds, sc.repeats)) for t in compute)
        if est <= compute_budget or cap_s < 1e-4:
            break
        cap_s /= 2
    collectives = _collective_tasks(sc, topology)
    for t in collectives:  # a CPU's collectives wait out their gaps too (sampling.collectives)
        timed = rounds(sc.collective_repeats, not hw.host.asynchronous and OPS[t.call.op].collective)
        est += task_seconds(t, len(timed), sc.warmup, hw) + sum(gap for gap, _ in timed)
    return Plan(compute, collectives, _plan_id(hw, sc, compute + collectives), cap_s * 1e3, est)

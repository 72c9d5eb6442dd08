"""Sampling plans: which shapes to time, in which order, within a time budget.

"Lightweight means targeted" (DESIGN.md): a plan first takes the shapes its target
models need (:func:`predictor.workload.layers.model_ops` for each micro-batch size and TP
degree), then fills up to ``shapes_per_op`` with a scrambled Sobol design, log-uniform
in a box around those targets. Every shape whose roofline-estimated call exceeds
``max_call_ms`` is left out; the cap is halved until the whole plan's estimate fits
the budget. Compute tasks are interleaved across ops so that a run cut short by its
budget still covers every op evenly.

This module needs no torch: plans can be built and inspected anywhere.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import qmc

from predictor.core.specs import HardwareConfig, SamplingConfig

from predictor.core.profiles import load_model
from predictor.core.errors import PrismError
from predictor.core.ops import (BUS_FACTOR, DTYPE_BYTES, OPS, OPTIMIZERS, bytes_moved,
                                  flops, unknown_op_message)
from predictor.workload.layers import model_ops

# Measured kernels on a CPU run far below the roofline; assume 25% of it, plus a fixed
# per-call overhead, so the budget estimate errs on the slow side.
_EFFICIENCY = 0.25
_CALL_OVERHEAD_S = 30e-6

# How each op's shape is drawn: the columns taken from the Sobol point (the rest derive).
_DRAWN = {
    "gemm": ("m", "n", "k"),
    "bmm": ("batch", "m", "n", "k"),
    "softmax": ("batch", "heads", "seq_q"),
    "masked_fill": ("batch", "heads", "seq_q"),
    "attention": ("batch", "heads", "seq_q", "head_dim"),
    "rope": ("tokens", "heads", "head_dim"),
    "embedding": ("tokens", "hidden", "vocab"),
    "cross_entropy": ("tokens", "vocab"),
    "optimizer_step": ("params", "tensors"),
}
_ALIGNED = {"m", "n", "k", "tokens", "hidden", "vocab", "seq_q"}  # multiples of 8


@dataclass(frozen=True)
class Task:
    """One shape of one op in one pass and dtype, timed ``repeats`` times."""

    op: str
    pass_: str
    dtype: str
    shape: tuple  # sorted (column, value) pairs, hashable

    @property
    def shape_dict(self) -> dict:
        return dict(self.shape)

    @property
    def key(self) -> str:
        return task_key(self.op, self.pass_, self.dtype, self.shape_dict)


def task_key(op: str, pass_: str, dtype: str, shape: dict) -> str:
    """A task's identity, rebuilt identically from a stored row for resuming."""
    cols = OPS[op].shape
    return "|".join([op, pass_, dtype] + [f"{c}={_plain(shape[c])}" for c in cols])


def _plain(v):
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer, float, np.floating)) and float(v).is_integer():
        return int(v)
    return v


def _make_task(op, pass_, dtype, shape: dict) -> Task:
    cols = OPS[op].shape
    return Task(op, pass_, dtype, tuple((c, _plain(shape[c])) for c in cols))


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
            by_op.setdefault(t.op, set()).add(t.shape)
        return {op: len(shapes) for op, shapes in by_op.items()}


def call_seconds(op: str, pass_: str, shape: dict, dtype: str, hw: HardwareConfig) -> float:
    """Pessimistic estimate of one call's time from the hardware's roofline."""
    if OPS[op].collective:
        n = shape["group_size"]
        link = hw.network.intra_node
        return (link.latency_us * 1e-6 + shape["message_bytes"] * BUS_FACTOR[op](n) / link.bandwidth) / _EFFICIENCY
    roof = max(flops(op, pass_, shape) / hw.peak(dtype),
               bytes_moved(op, pass_, shape, dtype) / hw.memory.bandwidth)
    return roof / _EFFICIENCY + _CALL_OVERHEAD_S


def task_seconds(task: Task, repeats: int, warmup: int, hw: HardwareConfig) -> float:
    one = call_seconds(task.op, task.pass_, task.shape_dict, task.dtype, hw)
    setup = one if task.pass_ == "bwd" else 0.0  # the forward that builds the graph
    return (repeats + warmup) * one + setup


def validate(sc: SamplingConfig, hw: HardwareConfig) -> None:
    """Check a sampling config; raise :class:`PrismError` naming the field and the fix."""
    for op in sc.ops:
        if op not in OPS:
            raise PrismError(f"sampling.ops: {unknown_op_message(op)}", field='sampling.ops')
    for dtype in sc.dtypes:
        if dtype not in DTYPE_BYTES:
            raise PrismError(f"sampling.dtypes: unknown dtype {dtype!r}; use {', '.join(DTYPE_BYTES)}", field='sampling.dtypes')
        if not hw.peak_flops.get(dtype):
            supported = ", ".join(k for k, v in hw.peak_flops.items() if v)
            raise PrismError(f"sampling.dtypes: hardware {hw.name} has no {dtype} peak in conf/hardware/"
                             f"{hw.name}.yaml; use one of {supported}", field='sampling.dtypes')
    for name, minimum in [("budget_s", 1), ("repeats", 1), ("shapes_per_op", 1),
                          ("message_sizes", 1), ("threads", 1), ("collective_world_size", 2)]:
        if getattr(sc, name) < minimum:
            raise PrismError(f"sampling.{name}: must be >= {minimum}, got {getattr(sc, name)}", field=f"sampling.{name}")
    if not 0 <= sc.collective_share <= 1:
        raise PrismError(f"sampling.collective_share: must be within [0, 1], got {sc.collective_share}", field='sampling.collective_share')
    for col, bounds in sc.space.items():
        if (len(bounds) != 2 or not all(isinstance(b, (int, float)) for b in bounds)
                or not 0 < bounds[0] <= bounds[1]):
            raise PrismError(f"sampling.space.{col}: expected [low, high] with 0 < low <= high, got {bounds}", field=f"sampling.space.{col}")


def _targeted(sc: SamplingConfig) -> dict[str, list[dict]]:
    shapes: dict[str, list[dict]] = {}
    for name in sc.targets:
        model = load_model(name)
        for tp in sc.tp_degrees:
            if model.num_heads % tp or model.ffn_hidden_size % tp:
                continue
            for mbs in sc.micro_batch_sizes:
                for use in model_ops(model, mbs, model.seq_length, tp):
                    if use.shape not in shapes.setdefault(use.op, []):
                        shapes[use.op].append(use.shape)
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
    if op == "optimizer_step":
        s["tensors"] = max(1, min(s["tensors"], s["params"] // 256))
        s["optimizer"] = OPTIMIZERS[1] if i % 4 == 3 else OPTIMIZERS[0]
    return s


def _space_filling(op, n, sc, hw, targeted, cap_s, seed) -> list[dict]:
    cols = _DRAWN.get(op, ("tokens", "hidden"))
    box = _box(op, cols, sc, targeted)
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


def _compute_tasks(sc: SamplingConfig, hw: HardwareConfig, cap_s: float) -> list[Task]:
    targeted = _targeted(sc)
    per_op: dict[str, list[dict]] = {}
    for j, op in enumerate(o for o in sc.ops if not OPS[o].collective):
        fits = [s for s in targeted.get(op, [])
                if all(call_seconds(op, p, s, sc.dtypes[0], hw) <= cap_s for p in OPS[op].passes)]
        chosen = fits[: sc.shapes_per_op // 2]
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
                        tasks.append(_make_task(op, pass_, dtype, shapes[i]))
    return tasks


def _collective_tasks(sc: SamplingConfig) -> list[Task]:
    lo, hi = sc.space.get("message_bytes", (1024, 1 << 26))
    sizes = np.geomspace(lo, hi, sc.message_sizes)
    world = sc.collective_world_size
    tasks = []
    for op in (o for o in sc.ops if OPS[o].collective):
        for b in sizes:
            # a multiple of world * 16 bytes, so every rank's shard is whole in any dtype
            message = max(world * 16, int(round(b / (world * 16))) * world * 16)
            for dtype in sc.dtypes:
                tasks.append(_make_task(op, "step", dtype, {"message_bytes": message, "group_size": world}))
    return tasks


def _plan_id(hw: HardwareConfig, sc: SamplingConfig, tasks: list[Task]) -> str:
    """The plan's identity: what it measures and how, not the budget that shaped it."""
    text = json.dumps({"hardware": hw.name, "repeats": sc.repeats, "warmup": sc.warmup,
                       "threads": sc.threads, "tasks": [t.key for t in tasks]})
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def make_plan(sc: SamplingConfig, hw: HardwareConfig) -> Plan:
    """The plan for ``sc`` on ``hw``: deterministic for a given config (resumable)."""
    validate(sc, hw)
    cap_s = sc.max_call_ms / 1e3
    compute_budget = sc.budget_s * (1 - sc.collective_share) * 0.8
    while True:
        compute = _compute_tasks(sc, hw, cap_s)
        est = sum(task_seconds(t, sc.repeats, sc.warmup, hw) for t in compute)
        if est <= compute_budget or cap_s < 1e-4:
            break
        cap_s /= 2
    collectives = _collective_tasks(sc)
    est += sum(task_seconds(t, sc.repeats, sc.warmup, hw) for t in collectives)
    return Plan(compute, collectives, _plan_id(hw, sc, compute + collectives), cap_s * 1e3, est)

"""The framework time, sampled in situ: PRISM's reference model at negligible sizes.

On a CPU the host is the device, and a training step spends time outside its operators:
``nn.Module`` calls, views, splits and transposes, autograd's recording and its engine,
Python between them. A synthetic chain of framework calls (``dispatch`` in
:mod:`sampling.kernels`) times one kind of call; the reference model makes others, and
in a traced ``tiny`` step the time between its operators was four times what the chain's
per-call cost composed over the calls :data:`predictor.workload.host.CALLS` counts
(7.5 ms of a 40 ms step against 1.8 ms; issue 18). So ``prism sample`` measures the
framework time where it is spent: it trains :class:`~sampling.model.Transformer` at
sizes where every kernel is negligible (:data:`SIZES`) for ``sampling.repeats`` profiled
steps at each depth of :data:`LAYERS`, and reads each step's gaps between its operators
back as ``dispatch`` rows per pass (:func:`predictor.data.importers.trace.framework_samples`,
the profiler's measured cost per event taken off), with the ``launches`` the composer
counts around those operators. The depths give the rows four lengths: the line through
them separates what a pass pays once from what each call costs.

On a GPU (a device that runs apart from its host) the framework time is what the host
takes to issue a pass, its calls' launches included, and at these sizes the device is
never behind: :func:`host_clock_rows` reads the host's clock around each pass of the same
model as :mod:`sampling.reference` trains it there (``torch.autocast`` bf16, fused AdamW),
with the ``launches`` the composer counts for that pass in the eager family, the
reference workload's. On an H200 the 4x4 chain composed 4.5 ms of host time per
micro-batch of ``small``, which took 7.5 ms there (host-bound: its kernels ran about 1 ms).

The rows' origin is ``framework``; trained with a run's chain samples they take their
place in the ``dispatch`` model (:func:`predictor.latency.adjustments.backward_entry.in_situ_host`),
while the chain's backward samples still give the autograd engine's entry.
"""
from __future__ import annotations

import dataclasses
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch

from predictor.core.profiles import load_model
from predictor.core.specs import HardwareConfig, ParallelConfig
from predictor.data.importers.trace import framework_samples
from predictor.latency.origins import FRAMEWORK
from predictor.workload.decompose import REFERENCE_FRAMEWORK, decompose
from sampling.collectives import _sync
from sampling.kernels import TORCH_DTYPES
from sampling.model import Transformer, loss_fn
from sampling.tracing import CYCLE, trace_steps

#: The reference model these rows describe: the ground-truth suite's ``tiny``, a Llama layer.
MODEL = "tiny"
#: Its sizes shrunk until the kernels take no time: every part of the layer still runs
#: (GQA with 2 query heads per KV head, RoPE, SwiGLU, RMSNorm).
SIZES = {"hidden_size": 8, "num_heads": 2, "num_kv_heads": 1, "head_dim": 4, "ffn_hidden_size": 8,
         "vocab_size": 16, "seq_length": 8}
#: Depths trained, one set of profiled steps each.
LAYERS = (1, 2, 4, 8)


def framework_rows(steps: int, hw: HardwareConfig, device: torch.device, dtype: str,
                   seed: int = 0) -> list[dict]:
    """``dispatch`` rows of ``steps`` training steps of the negligible-size reference model
    at each depth of :data:`LAYERS` on ``device``: its profiled gaps on a CPU
    (:func:`profiled_rows`), the host's clock around each pass on a GPU
    (:func:`host_clock_rows`); and the ``checkpoint`` rows of as many steps with recompute
    (:func:`checkpoint_rows`)."""
    own = profiled_rows(steps, seed) if device.type == "cpu" else host_clock_rows(steps, hw, device, dtype, seed)
    return own + checkpoint_rows(steps, device, dtype, seed)


def _trainers(device: torch.device, seed: int, recompute: str = "none") -> tuple[list, torch.Tensor, torch.Tensor]:
    """(model, optimizer) at each depth of :data:`LAYERS` on ``device``, and one micro-batch."""
    base = dataclasses.replace(load_model(MODEL), **SIZES)
    torch.manual_seed(seed)
    ids = torch.randint(0, base.vocab_size, (1, base.seq_length + 1)).to(device)
    trainers = []
    for layers in LAYERS:
        with device:
            net = Transformer(dataclasses.replace(base, num_layers=layers), recompute)
        fused = device.type == "cuda" or None  # as sampling.reference trains it
        trainers.append((net, torch.optim.AdamW(net.parameters(), lr=1e-4, fused=fused)))
    return trainers, ids[:, :-1], ids[:, 1:]


def profiled_rows(steps: int, seed: int = 0) -> list[dict]:
    """``dispatch`` rows of ``steps`` profiled training steps (one micro-batch, AdamW) of the
    negligible-size reference model at each depth of :data:`LAYERS`, on this CPU. The
    depths take turns, one profiler cycle each, so that a drift of the machine's speed
    falls on all of them alike."""
    trainers, x, y = _trainers(torch.device("cpu"), seed)
    calls = 0

    def step() -> None:
        nonlocal calls
        net, optimizer = trainers[calls // CYCLE % len(trainers)]
        calls += 1
        loss_fn(net(x), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    with tempfile.TemporaryDirectory(prefix="prism-framework-") as tmp:
        trace_steps(step, torch.device("cpu"), Path(tmp), 0, steps * len(LAYERS))
        rows = framework_samples(sorted(Path(tmp).glob("rank0.step*.json")))
    return [dict(row, origin=FRAMEWORK) for row in rows]


def host_clock_rows(steps: int, hw: HardwareConfig, device: torch.device, dtype: str,
                    seed: int = 0, warmup: int = 2) -> list[dict]:
    """``dispatch`` rows of the host's time to issue each pass of ``steps`` training steps
    (after ``warmup``) of the negligible-size reference model at each depth of
    :data:`LAYERS`, the depths taking turns; each pass starts on an idle device. Their
    ``launches`` are the composer's count of the pass's calls in the reference's framework
    family on ``hw`` (an asynchronous profile)."""
    trainers, x, y = _trainers(device, seed)
    autocast = torch.autocast(device.type, dtype=TORCH_DTYPES[dtype]) if dtype != "float32" else nullcontext()
    counted = [_counted_launches(len(net.blocks), hw) for net, _ in trainers]
    rows = []
    for i in range(warmup + steps):
        for (net, optimizer), launches in zip(trainers, counted):
            fwd, bwd = _host_passes(net, optimizer, x, y, device, autocast)
            if i >= warmup:
                rows += [{"op": "dispatch", "pass": p, "dtype": dtype, "latency_us": us, "launches": launches[p],
                          "origin": FRAMEWORK} for p, us in (("fwd", fwd), ("bwd", bwd))]
    return rows


def _host_passes(net, optimizer, x, y, device: torch.device, autocast) -> tuple[float, float]:
    """One training step; the host's time (us) to run its forward and its backward, each
    started on an idle device."""
    _sync(device)
    t0 = time.perf_counter_ns()
    with autocast:
        loss = loss_fn(net(x), y)
    t1 = time.perf_counter_ns()
    _sync(device)
    t2 = time.perf_counter_ns()
    loss.backward()
    t3 = time.perf_counter_ns()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return (t1 - t0) / 1e3, (t3 - t2) / 1e3


def checkpoint_rows(steps: int, device: torch.device, dtype: str, seed: int = 0, warmup: int = 2) -> list[dict]:
    """``checkpoint`` rows: the host time that checkpointing every block (``recompute``
    full) adds to each pass of the negligible-size reference model at each depth of
    :data:`LAYERS`, beyond the recomputed forward's own calls, which the composer counts
    as a forward's. The host's clock around each pass, as :func:`host_clock_rows` reads it,
    of steps with and without recompute taking turns: a row is one step's pass with it
    less the median pass without it (the backward: less the median forward too)."""
    plain, _, _ = _trainers(device, seed)
    full, x, y = _trainers(device, seed, recompute="full")
    autocast = torch.autocast(device.type, dtype=TORCH_DTYPES[dtype]) if dtype != "float32" else nullcontext()
    times: dict[tuple, list] = {}
    for i in range(warmup + steps):
        for layers, pair in zip(LAYERS, zip(plain, full)):
            for recompute, (net, optimizer) in zip(("none", "full"), pair):
                passes = _host_passes(net, optimizer, x, y, device, autocast)
                if i >= warmup:
                    times.setdefault((layers, recompute), []).append(passes)
    rows = []
    for layers in LAYERS:
        fwd, bwd = np.median(np.array(times[(layers, "none")]), axis=0)
        for f, b in times[(layers, "full")]:
            for pass_, us in (("fwd", f - fwd), ("bwd", b - bwd - fwd)):
                if us > 0:  # a step quicker than the median without: no measure of the wrapper
                    rows.append({"op": "checkpoint", "pass": pass_, "dtype": dtype, "latency_us": us,
                                 "blocks": layers, "origin": FRAMEWORK})
    return rows


def _counted_launches(layers: int, hw: HardwareConfig) -> dict[str, int]:
    """The ``launches`` of the one ``dispatch`` call of each pass that the composer makes for
    the negligible-size reference model at ``layers`` layers on ``hw``."""
    model = dataclasses.replace(load_model(MODEL), **SIZES, num_layers=layers)
    stage = decompose(model, ParallelConfig(), hw, framework=REFERENCE_FRAMEWORK).stages[0]
    return {p: sum(c.shape_dict["launches"] * c.count for c in calls if c.op == "dispatch" and c.pass_ == p)
            for p, calls in (("fwd", stage.forward), ("bwd", stage.backward))}

"""A CPU's framework time, sampled in situ: PRISM's reference model at negligible sizes.

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

The rows' origin is ``framework``; trained with a run's chain samples they take their
place in the ``dispatch`` model (:func:`predictor.latency.backward_entry.in_situ_host`),
while the chain's backward samples still give the autograd engine's entry.
"""
from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import torch

from predictor.core.profiles import load_model
from predictor.data.importers.trace import framework_samples
from predictor.latency.backward_entry import FRAMEWORK
from sampling.model import Transformer
from sampling.reference import CYCLE, loss_fn, trace_steps

#: The reference model these rows describe: the ground-truth suite's ``tiny``, a Llama layer.
MODEL = "tiny"
#: Its sizes shrunk until the kernels take no time: every part of the layer still runs
#: (GQA with 2 query heads per KV head, RoPE, SwiGLU, RMSNorm).
SIZES = {"hidden_size": 8, "num_heads": 2, "num_kv_heads": 1, "head_dim": 4, "ffn_hidden_size": 8,
         "vocab_size": 16, "seq_length": 8}
#: Depths trained, one set of profiled steps each.
LAYERS = (1, 2, 4, 8)


def framework_rows(steps: int, seed: int = 0) -> list[dict]:
    """``dispatch`` rows of ``steps`` profiled training steps (one micro-batch, AdamW) of the
    negligible-size reference model at each depth of :data:`LAYERS`, on this CPU. The
    depths take turns, one profiler cycle each, so that a drift of the machine's speed
    falls on all of them alike."""
    base = dataclasses.replace(load_model(MODEL), **SIZES)
    torch.manual_seed(seed)
    ids = torch.randint(0, base.vocab_size, (1, base.seq_length + 1))
    x, y = ids[:, :-1], ids[:, 1:]
    trainers = []
    for layers in LAYERS:
        net = Transformer(dataclasses.replace(base, num_layers=layers))
        trainers.append((net, torch.optim.AdamW(net.parameters(), lr=1e-4)))
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

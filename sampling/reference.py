"""The reference training workload, one process per rank under ``torchrun`` (docs/architecture.md,
"The measuring side").

    python -m torch.distributed.run --standalone --nproc_per_node=N -m sampling.reference JOB.json

The front-end (:mod:`sampling.measure`) runs it through :mod:`sampling.launch` with a
resolved job: the model and layout, steps, warm-up, threads, backend, device and seed. Every
rank builds :class:`~sampling.model.Transformer` with the same seed and lays it out with
PyTorch's own parallelism on a ``(pp, dp, tp)`` device mesh, tp innermost as in
Megatron-LM:

- tp: DTensor tensor parallelism, ``qkv`` and ``up`` column-wise, ``out`` and ``down``
  row-wise (two all-reduces per layer in the forward, two in the backward); embedding,
  final norm and head replicated;
- dp: ``DistributedDataParallel``, or FSDP2 ``fully_shard`` per block with
  ``parallel.sharding`` fsdp / zero3; gradients are reduced once per step;
- pp: :mod:`torch.distributed.pipelining`, one stage per rank, GPipe or 1F1B over
  ``global_batch_size / (micro_batch_size * dp)`` micro-batches; without pp the same
  micro-batches are accumulated.

A step runs from a barrier to the end of the AdamW step (CUDA synchronised). On CUDA the
step is torch's fused AdamW, as torchtitan's default (``optimizer.implementation``
"fused") and the sampled ``optimizer_step``: the default (foreach) took 31.9 ms of a
115 ms ``llama3-8b`` two-layer step on an H200, where the fused one ran the same 1.5 B
parameters in about 13 ms. Weights are made on the device (initialising 1.5 B
parameters on one CPU thread took 23 s before the first step). Each rank
writes its timed steps to ``rank<r>.json`` in the job's folder, each with the share of the
busy CPU time the hypervisor took during it (its steal, the largest any rank read:
:mod:`sampling.cpu.steal`); warm-up steps are not kept. A step above ``max_steal`` does not count
towards ``steps``: up to ``steal_retakes`` more steps are timed in place of such steps, and
every timed step is written. Rank 0 reports the steps done for the front-end's progress bar.

With ``trace_dir`` set, each rank profiles ``trace_steps`` more steps with ``torch.profiler``
(``record_shapes=True``, what ``prism import-trace`` reads), spread evenly between its timed
steps (:func:`sampling.tracing.trace_points`), and writes ``<trace_dir>/rank<r>.step<k>.json``,
with the profiler's cost per recorded op on this CPU (:func:`sampling.tracing.profiler_cost_us`)
in the trace's metadata. Every traced step is its own profiler cycle (one untraced step, one
warm-up, one recorded): on CPU, a recording that runs on for several steps slows the
memory-bound ops of the later ones (+45% step time on the ``small`` model from the third
recorded step on, measured here), so one-step cycles keep the traced steps as fast as
untraced ones. Spread, so that the traced steps catch the moments the timed ones do: a
2-core slice's speed wanders within a minute. With the traces after the timed steps,
``benchmarks/bench_trace.py`` found a layout's timed steps 21% slower, and another's 20%
faster, than its traced ones; with all of them halfway, small at one rank's traced steps
still ran slower than its timed ones in some runs.
"""
from __future__ import annotations

import json
import math
import os
import time
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.nn.parallel import DistributedDataParallel

from predictor.core.layout import layers_per_stage
from predictor.core.specs import ModelConfig, ParallelConfig
from sampling.collectives import _sync
from sampling.cpu.steal import read_ticks, steal_share
from sampling.launch import report_progress, worker_main
from sampling.model import Transformer, loss_fn
from sampling.tracing import trace_points, trace_steps

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}
#: Megatron-style TP plan of a block: column-parallel into the sharded inner width,
#: row-parallel back out (its all-reduce restores the replicated residual stream).
TP_PLAN = {"qkv": ColwiseParallel(), "out": RowwiseParallel(),
           "up": ColwiseParallel(), "down": RowwiseParallel()}


def keep_stage(net: Transformer, stage: int, stages: int) -> Transformer:
    """Trim ``net`` to pipeline stage ``stage``: its blocks (:func:`layers_per_stage`),
    the embeddings on the first stage, the final norm and head on the last."""
    counts = layers_per_stage(len(net.blocks), stages)
    start = sum(counts[:stage])
    net.blocks = torch.nn.ModuleList(list(net.blocks)[start:start + counts[stage]])
    if stage > 0:
        net.embed = net.pos = None
    if stage < stages - 1:
        net.norm = net.head = None
    return net


class Trainer:
    """One rank's model, optimizer, data and step under the job's layout."""

    def __init__(self, job: dict, device: torch.device):
        m, par = ModelConfig(**job["model"]), ParallelConfig(**job["parallel"])
        self.device, self.par = device, par
        mesh = init_device_mesh(device.type, (par.pp, par.dp, par.tp), mesh_dim_names=("pp", "dp", "tp"))
        stage, dp_rank = mesh["pp"].get_local_rank(), mesh["dp"].get_local_rank()
        self.micro_batches = par.global_batch_size // (par.micro_batch_size * par.dp)

        torch.manual_seed(job["seed"])  # the same initial weights on every rank
        with device:
            net = Transformer(m, recompute=par.recompute)
        if par.pp > 1:
            net = keep_stage(net, stage, par.pp)
        if par.tp > 1:
            for block in net.blocks:
                parallelize_module(block, mesh["tp"], TP_PLAN)
        if par.dp > 1 and par.sharding in ("fsdp", "zero3"):
            for block in net.blocks:
                fully_shard(block, mesh=mesh["dp"])
            fully_shard(net, mesh=mesh["dp"])
        elif par.dp > 1:
            net = DistributedDataParallel(net, process_group=mesh["dp"].get_group(),
                                          device_ids=[device.index] if device.type == "cuda" else None)
        self.net = net
        self.optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4, fused=device.type == "cuda" or None)

        # Random tokens, fixed per data-parallel replica (tp and pp peers see the same).
        gen = torch.Generator().manual_seed(job["seed"] * 1000 + dp_rank)
        ids = torch.randint(0, m.vocab_size, (self.micro_batches * par.micro_batch_size, m.seq_length + 1),
                            generator=gen).to(device)
        self.inputs, self.labels = ids[:, :-1], ids[:, 1:]
        self.schedule = None
        if par.pp > 1:
            self.first, self.last = stage == 0, stage == par.pp - 1
            pipe = PipelineStage(net, stage, par.pp, device, group=mesh["pp"].get_group())
            self.schedule = SCHEDULES[par.schedule](pipe, self.micro_batches, loss_fn=loss_fn)
        self.autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda"
                         else nullcontext())

    def _accumulate(self) -> None:
        """Forward and backward of every micro-batch; the gradient reduction (DDP, FSDP)
        runs in the last one's backward only."""
        chunks = zip(self.inputs.chunk(self.micro_batches), self.labels.chunk(self.micro_batches))
        for i, (x, y) in enumerate(chunks):
            last = i == self.micro_batches - 1
            sync = nullcontext()
            if isinstance(self.net, DistributedDataParallel) and not last:
                sync = self.net.no_sync()
            elif isinstance(self.net, FSDPModule):
                self.net.set_requires_gradient_sync(last)
            with sync, self.autocast:
                loss = loss_fn(self.net(x), y) / self.micro_batches
            loss.backward()

    def step(self) -> None:
        if self.schedule is None:
            self._accumulate()
        else:
            with self.autocast:
                if self.first:
                    self.schedule.step(self.inputs)
                elif self.last:
                    self.schedule.step(target=self.labels)
                else:
                    self.schedule.step()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def run_job(job: dict) -> list[float]:
    """Train ``job``'s layout on this rank; return and write its timed step times (s)."""
    torch.set_num_threads(job["threads_per_rank"])
    device = torch.device("cpu")
    if job["device"] == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    dist.init_process_group(job["backend"], device_id=device if device.type == "cuda" else None)
    rank = dist.get_rank()
    out = Path(job["dir"])
    trainer = Trainer(job, device)
    times, steals = [], []
    traces = trace_points(job["warmup"], job["steps"], job["trace_steps"]) if job.get("trace_dir") else {}
    i = 0
    while another_step(i, steals, job):
        if i in traces:
            _trace(trainer, device, job, rank, traces[i], sum(n for at, n in traces.items() if at < i))
        dist.barrier()
        _sync(device)
        before = read_ticks()
        t0 = time.perf_counter()
        trainer.step()
        _sync(device)  # CUDA kernels are asynchronous: the step ends when they do
        elapsed = time.perf_counter() - t0
        if i >= job["warmup"]:
            times.append(elapsed)
            steals.append(_shared_steal(steal_share(before, read_ticks()), device))
        if rank == 0:
            report_progress(job, i + 1)
        i += 1
    steal = [None if math.isnan(x) else x for x in steals]  # JSON has no NaN
    (out / f"rank{rank}.json").write_text(json.dumps({"rank": rank, "step_time_s": times, "steal": steal}))
    dist.destroy_process_group()
    return times


def another_step(done: int, steals: list[float], job: dict) -> bool:
    """Whether to run one more step after ``done`` steps (warm-up included) whose timed ones
    read ``steals``: until the planned steps, then while fewer than ``steps`` were left alone
    by the hypervisor (a share of NaN, unknown, counts as left alone) and ``steal_retakes``
    more are allowed."""
    planned = job["warmup"] + job["steps"]
    undisturbed = sum(not s > job["max_steal"] for s in steals)
    return done < planned or (done < planned + job["steal_retakes"] and undisturbed < job["steps"])


def _shared_steal(share: float, device: torch.device) -> float:
    """The largest steal share any rank read over the step (NaN: none could), so that every
    rank decides alike whether to time a step in its place."""
    value = torch.tensor([-1.0 if math.isnan(share) else share], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return float("nan") if value.item() < 0 else value.item()


def _trace(trainer: Trainer, device: torch.device, job: dict, rank: int, steps: int, first: int) -> None:
    """Profile ``steps`` steps into ``job["trace_dir"]``, numbered from ``first`` (module docstring)."""
    def step() -> None:
        dist.barrier()
        trainer.step()
        _sync(device)
    trace_steps(step, device, Path(job["trace_dir"]), rank, steps, first)


if __name__ == "__main__":
    worker_main(run_job)

"""Collective sampling, one process per rank (docs/architecture.md, "The measuring side").

    python -m torch.distributed.run --standalone --nproc_per_node=2 -m sampling.collectives JOB.json

Two jobs time collectives with :func:`time_collectives`:

- the single-host job: :mod:`sampling.runner` runs this module through
  :mod:`sampling.launch` with a resolved job (tasks, repeats, deadline, store location;
  Hydra stays in the front-end), all ranks on one node;
- a cluster job (:func:`sampling.runner.run_sampling` under torchrun or srun), whose ranks
  jointly time every task over the sub-group of its placement (nodes x ranks per node).

A task runs on its group only (the first ``nodes`` nodes, the first ``ranks_per_node``
ranks of each), one collective at a time across the job, so that no two share the
network; the other ranks wait. Consecutive tasks of one op and group are timed as a block
(:func:`blocks`), round by round: repeat r of every size, then repeat r + 1. A slow spell
of a shared host then lands as one repeat of many sizes, which their medians ignore, not
as every repeat of one size: in a suite run timed size by size, the 12 KB
all_reduce's repeats 6-9 took 5.5-5.8 ms in a row against 2.1-2.4 ms medians of the sizes
beside it, and its median of 5.1 ms put a tp=2 layout that issues it 69% high. Each
repeat starts after a barrier of the group and is timed on every member; the stored
latency is the slowest member's, since a collective ends when its last member does. On a
CPU each repeat of a collective is timed as a step issues it, after some computing on
every member rather than straight after the barrier, since gloo's collectives cost several
times more after a gap: its own repeats after ``STEP_GAP_S``, and a third as many after
each shorter gap, whose rows train the gap curve (:mod:`predictor.latency.adjustments.collective_gap`,
:func:`~sampling.cpu.collective_gap.rounds`). The group's lowest rank writes the rows as parts
of the run, so the run keeps every finished block even if killed. The host op ``dtensor``
(:mod:`sampling.tensor_parallel`) needs a group of ranks too, and is timed alike, without
the gap.
"""
from __future__ import annotations

import os
import socket
import time
from datetime import datetime, timezone
from itertools import groupby

import torch
import torch.distributed as dist

from predictor.core.ops import DTYPE_BYTES
from predictor.data.store import RunWriter
from sampling.cpu.collective_gap import compute_for, rounds
from sampling.kernels import TORCH_DTYPES
from sampling.launch import report_progress, worker_main
from sampling.tensor_parallel import build_pair


def build_collective(op: str, message_bytes: int, dtype: str, device, index: int, members: list[int], group=None):
    """A zero-argument function running one collective of ``group`` (whose global ranks
    are ``members``; this rank is ``members[index]``); ``message_bytes`` per rank."""
    t = TORCH_DTYPES[dtype]
    size = len(members)
    n = message_bytes // DTYPE_BYTES[dtype]
    full = torch.ones(n, dtype=t, device=device)
    shard = torch.ones(n // size, dtype=t, device=device)
    if op == "all_reduce":
        return lambda: dist.all_reduce(full, group=group)
    if op == "all_gather":
        return lambda: dist.all_gather_into_tensor(full, shard, group=group)
    if op == "reduce_scatter":
        return lambda: dist.reduce_scatter_tensor(shard, full, group=group)
    if op == "all_to_all":
        out = torch.empty_like(full)
        return lambda: dist.all_to_all_single(out, full, group=group)
    if op == "send_recv":
        # the first half of the group sends to the second, member i to member i + size/2: across
        # nodes where the group spans them (its members are node-major), else within the node
        half = size // 2
        if index >= 2 * half:
            return lambda: None  # the odd one out of an odd group
        peer = members[index + half] if index < half else members[index - half]
        return (lambda: dist.send(full, peer)) if index < half else (lambda: dist.recv(full, peer))
    raise ValueError(f"unknown collective {op!r}")


def _numbers(rounds: list[tuple[float, str | None]]) -> list[int]:
    """Each round's repeat number within its origin: 0, 1, ... for the run's own and for each gap."""
    seen: dict = {}
    out = []
    for _, origin in rounds:
        out.append(seen.get(origin, 0))
        seen[origin] = out[-1] + 1
    return out


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def group_ranks(placement: list[tuple[int, int]], shapes) -> dict[tuple[int, int], list[int]]:
    """The global ranks of each group shape (nodes, ranks per node), node-major: nodes
    0..n-1, local ranks 0..k-1 of each; ``placement[r]`` is rank r's (node, local rank)."""
    where = {p: r for r, p in enumerate(placement)}
    return {(n, k): [where[(node, local)] for node in range(n) for local in range(k)] for n, k in shapes}


#: The most bytes a block's buffers may hold together (each task holds about twice its
#: message): small messages, whose timings a slow spell of the host distorts most, share
#: rounds, and a block of the largest ones is a single task, as long as a repeat takes.
BLOCK_BYTES = 64 << 20


def blocks(tasks: list[dict]) -> list[list[dict]]:
    """``tasks`` cut into runs of consecutive tasks of one op, pass, dtype and group shape,
    whose messages take at most :data:`BLOCK_BYTES` of buffers together (one task at least)."""
    out = []
    for _, run in groupby(tasks, key=lambda t: (t["op"], t.get("pass"), t["dtype"], t["nodes"], t["ranks_per_node"])):
        out.append([])
        held = 0
        for task in run:
            size = 2 * int(task["shape"].get("message_bytes", 0))
            if out[-1] and held + size > BLOCK_BYTES:
                out.append([])
                held = 0
            out[-1].append(task)
            held += size
    return out


def _build(task: dict, rank: int, members: list[int], group, device):
    if task["op"] == "dtensor":  # a host op timed on the group's ranks
        return build_pair(task["pass"], group, device)
    return build_collective(task["op"], task["shape"]["message_bytes"], task["dtype"], device,
                            members.index(rank), members, group)


def time_collectives(tasks: list[dict], job: dict, rank: int, placement: list[tuple[int, int]], device,
                     writer: RunWriter | None, base: dict, control=None, on_done=None) -> int:
    """Time ``tasks`` (op, dtype, shape, nodes, ranks_per_node) jointly with every rank of
    the initialised process group, a block at a time (:func:`blocks`); see the module doc.
    ``job`` gives repeats, warmup, deadline (wall clock, rank 0's word stops every rank,
    checked before each block) and flush_every_s; ``writer`` takes the rows of the groups
    this rank leads; ``control`` is the group that carries the stop word (gloo; None: the
    default group); ``on_done(n)`` follows progress. Returns the tasks done. A lost peer
    raises (RuntimeError) on the ranks that wait for it."""
    groups = group_ranks(placement, sorted({(t["nodes"], t["ranks_per_node"]) for t in tasks}))
    handles = {shape: dist.new_group(ranks) for shape, ranks in groups.items()}  # every rank, same order
    done, last_flush = 0, time.monotonic()
    try:
        for block in blocks(tasks):
            stop = torch.tensor([int(time.time() > job["deadline"])])
            dist.broadcast(stop, 0, group=control)  # every rank stops together, at rank 0's word
            if stop.item():
                break
            shape = (block[0]["nodes"], block[0]["ranks_per_node"])
            members = groups[shape]
            if rank in members:
                group = handles[shape]
                # a CPU's collective after a step's gap; the host op dtensor right after the barrier: it
                # is the framework's time, and the composer adds the collective its pair ends with as a
                # collective, whose gap's cost is then counted once
                timed = rounds(job["repeats"], device.type == "cpu" and block[0]["op"] != "dtensor")
                fns = [_build(task, rank, members, group, device) for task in block]
                for fn in fns:
                    for _ in range(job["warmup"]):
                        fn()
                times = [[] for _ in block]
                for gap, _ in timed:
                    for fn, each in zip(fns, times):
                        dist.barrier(group=group)
                        _sync(device)
                        compute_for(gap)  # a GPU's gap is its device's compute, not a host spin: not measured there
                        t0 = time.perf_counter_ns()
                        fn()
                        _sync(device)
                        each.append((time.perf_counter_ns() - t0) / 1e3)
                del fns  # the block's buffers, before the next block's
                slowest = torch.tensor(times, dtype=torch.float64, device=device)
                dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=group)
                if rank == members[0] and writer is not None:
                    now = datetime.now(timezone.utc)
                    writer.add([dict(base, op=task["op"], **{"pass": task.get("pass", "step")}, dtype=task["dtype"],
                                     **task["shape"], ranks_per_node=shape[1], nodes=shape[0], rank=rank,
                                     latency_us=float(v), repeat=r, timestamp=now,
                                     **({"origin": origin} if origin else {}))
                                for task, row in zip(block, slowest.tolist())
                                for (_, origin), r, v in zip(timed, _numbers(timed), row)])
                    if time.monotonic() - last_flush > job["flush_every_s"]:
                        writer.flush()
                        last_flush = time.monotonic()
            done += len(block)
            if on_done is not None:
                on_done(done)
    finally:
        if writer is not None:
            writer.flush()
    return done


def run_job(job: dict) -> int:
    """The single-host job: every rank on one node, rank 0 writing the rows."""
    backend = job["backend"]
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device(f"cuda:{local}") if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    control = dist.new_group(backend="gloo") if backend != "gloo" else None
    writer = RunWriter(job["output_dir"], job["run_id"], job["metadata"], prefix=f"collective-{rank}",
                       owner=False) if rank == 0 else None
    base = dict(hardware=job["hardware"], device_name=job["device_name"], world_size=world,
                run_id=job["run_id"], host=socket.gethostname(), torch_version=torch.__version__,
                backend=backend, origin="sampled")
    done = time_collectives(job["tasks"], job, rank, [(0, r) for r in range(world)], device, writer, base, control,
                            on_done=(lambda n: report_progress(job, n)) if rank == 0 else None)
    dist.destroy_process_group()
    return done


if __name__ == "__main__":
    worker_main(run_job)

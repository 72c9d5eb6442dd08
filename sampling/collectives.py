"""Collective sampling, one process per rank under ``torchrun`` (DESIGN.md, "Collectives").

    python -m torch.distributed.run --standalone --nproc_per_node=2 -m sampling.collectives JOB.json

The front-end (:mod:`sampling.runner`) runs it through :mod:`sampling.launch` with a
resolved job: the tasks, repeats, deadline and store location; Hydra stays in the
front-end. Each repeat starts after a barrier and is timed on every rank; the stored
latency is the slowest rank's, since a collective ends when its last member does. Rank 0
writes the rows as parts of the front-end's run, so the run keeps every finished message
size even if killed.
"""
from __future__ import annotations

import os
import socket
import time
from datetime import datetime, timezone

import torch
import torch.distributed as dist

from predictor.core.ops import DTYPE_BYTES
from predictor.data.store import RunWriter
from sampling.kernels import TORCH_DTYPES
from sampling.launch import report_progress, worker_main


def build_collective(op: str, message_bytes: int, dtype: str, device, rank: int, world: int):
    """A zero-argument function running one collective; ``message_bytes`` per rank."""
    t = TORCH_DTYPES[dtype]
    n = message_bytes // DTYPE_BYTES[dtype]
    full = torch.ones(n, dtype=t, device=device)
    shard = torch.ones(n // world, dtype=t, device=device)
    if op == "all_reduce":
        return lambda: dist.all_reduce(full)
    if op == "all_gather":
        return lambda: dist.all_gather_into_tensor(full, shard)
    if op == "reduce_scatter":
        return lambda: dist.reduce_scatter_tensor(shard, full)
    if op == "all_to_all":
        out = torch.empty_like(full)
        return lambda: dist.all_to_all_single(out, full)
    if op == "send_recv":
        # pairs (0,1), (2,3), ...: even ranks send, odd ranks receive
        peer = rank + 1 if rank % 2 == 0 else rank - 1
        if peer >= world:
            return lambda: None
        return (lambda: dist.send(full, peer)) if rank % 2 == 0 else (lambda: dist.recv(full, peer))
    raise ValueError(f"unknown collective {op!r}")


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_job(job: dict) -> int:
    backend = job["backend"]
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device(f"cuda:{local}") if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    ranks_per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    writer = RunWriter(job["output_dir"], job["run_id"], job["metadata"], prefix=f"collective-{rank}") \
        if rank == 0 else None
    base = dict(hardware=job["hardware"], device_name=job["device_name"], world_size=world,
                ranks_per_node=ranks_per_node, nodes=max(world // ranks_per_node, 1),
                run_id=job["run_id"], host=socket.gethostname(), torch_version=torch.__version__,
                backend=backend, origin="sampled")
    done, last_flush = 0, time.monotonic()
    try:
        for task in job["tasks"]:
            stop = torch.tensor([int(time.time() > job["deadline"])], device=device)
            dist.broadcast(stop, 0)  # every rank stops together, at rank 0's word
            if stop.item():
                break
            fn = build_collective(task["op"], task["shape"]["message_bytes"], task["dtype"],
                                  device, rank, world)
            for _ in range(job["warmup"]):
                fn()
            times = []
            for _ in range(job["repeats"]):
                dist.barrier()
                _sync(device)
                t0 = time.perf_counter_ns()
                fn()
                _sync(device)
                times.append((time.perf_counter_ns() - t0) / 1e3)
            slowest = torch.tensor(times, dtype=torch.float64, device=device)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            if writer is not None:
                now = datetime.now(timezone.utc)
                writer.add([dict(base, op=task["op"], **{"pass": "step"}, dtype=task["dtype"],
                                 **task["shape"], latency_us=float(v), repeat=r, timestamp=now)
                            for r, v in enumerate(slowest.tolist())])
                if time.monotonic() - last_flush > job["flush_every_s"]:
                    writer.flush()
                    last_flush = time.monotonic()
            done += 1
            if rank == 0:
                report_progress(job, done)
    finally:
        if writer is not None:
            writer.flush()
    dist.destroy_process_group()
    return done


if __name__ == "__main__":
    worker_main(run_job)

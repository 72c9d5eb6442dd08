"""Collective sampling, one process per rank under ``torchrun`` (DESIGN.md, "Collectives").

    python -m torch.distributed.run --standalone --nproc_per_node=2 -m sampling.collectives JOB.json

The front-end (:mod:`sampling.runner`) writes JOB.json, a resolved job with the tasks,
repeats, deadline and store location; Hydra stays in the front-end. Each repeat starts
after a barrier and is timed on every rank; the stored latency is the slowest rank's,
since a collective ends when its last member does. Rank 0 writes the rows as parts of
the front-end's run, so the run keeps every finished message size even if killed.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from datetime import datetime, timezone

import torch
import torch.distributed as dist

from predictor.data.store import RunWriter
from predictor.core.ops import DTYPE_BYTES
from sampling.kernels import TORCH_DTYPES


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
    progress = None
    if rank == 0 and job.get("progress", True):
        from tqdm import tqdm
        progress = tqdm(total=len(job["tasks"]), desc="collectives", unit="size", file=sys.stderr)
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
            if progress is not None:
                progress.update()
    finally:
        if writer is not None:
            writer.flush()
        if progress is not None:
            progress.close()
    dist.destroy_process_group()
    return done


def _interrupt(signum, frame):
    raise KeyboardInterrupt  # so the finally clause flushes the rows measured so far


def worker_main(run) -> None:
    """A torchrun worker's entry: ``run`` the job in the JSON file named by argv[1]; SIGTERM
    (torchrun passes it on) and Ctrl-C end it with exit code 130 and no traceback."""
    signal.signal(signal.SIGTERM, _interrupt)
    with open(sys.argv[1]) as f:
        job = json.load(f)
    try:
        run(job)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    worker_main(run_job)

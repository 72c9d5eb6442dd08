"""The host time of issuing a collective and of DTensor's tensor parallelism on this
machine's device: the GPU profiles' ``collective_launch_us`` and ``dtensor_fwd_us``/``dtensor_bwd_us`` priors
(``predictor.workload.host``).

    python experiments/collective_launch/bench_collective_launch.py                  # this CPU (gloo)
    python experiments/collective_launch/bench_collective_launch.py --device cuda    # a GPU host (NCCL): the priors

On a device that runs asynchronously the host returns from a collective once it has
queued it, so a loop of issues, timed without waiting for the device, gives the host's
time per issue: c10d's Python front-end, its work object and events, NCCL's enqueue and
the kernel launch. A plain eager call (``x.add_(1)``, one kernel) is timed the same way,
for the part of that which every launch pays. On a CPU, gloo runs the collective before it
returns, so the figure is the whole collective's.

DTensor's share is one column- then row-parallel pair of 4x4 linear layers
(:func:`sampling.tensor_parallel.build_pair`, the host op ``dtensor``) less the same two
``nn.Linear`` layers unsharded, forward and backward, each timed as a run of calls with one
wait for the device at its end (the kernels of 4x4 tensors take less than their issue).

The group has one rank, the only one a single GPU can hold (NCCL refuses two ranks on one
device), so the collectives run on one member: their host path is the same, and NCCL's
enqueue for a group of one is its shortest. DTensor on a one-rank mesh propagates
shardings and redistributes as on more, but may skip a collective a larger mesh issues: the
``dtensor`` figure is a floor for its ``tp`` > 1 cost.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn

from predictor.core.files import write_csv
from sampling.tensor_parallel import WIDTH, build_pair, run_pass


def host_us(fn: Callable[[], object], wait: Callable[[], None], calls: int, rounds: int, warmup: int = 20) -> float:
    """Median over ``rounds`` of the host's time per call over ``calls`` calls issued back to back."""
    for _ in range(warmup):
        fn()
    wait()
    per_call = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        per_call.append((time.perf_counter() - t0) / calls * 1e6)
        wait()
    return statistics.median(per_call)


def step_us(fn: Callable[[], object], wait: Callable[[], None], calls: int, rounds: int, warmup: int = 20) -> float:
    """Median over ``rounds`` of the time per call of ``calls`` calls and one wait for the device."""
    def run():
        for _ in range(calls):
            fn()
        wait()
    return host_us(run, lambda: None, 1, rounds, warmup=2) / calls


def collectives(device: torch.device, message_bytes: int) -> dict[str, Callable[[], object]]:
    """A plain eager call and the three collectives a layout issues, on ``message_bytes`` of bf16."""
    n = message_bytes // 2
    x = torch.ones(n, dtype=torch.bfloat16, device=device)
    out = torch.empty(n * dist.get_world_size(), dtype=torch.bfloat16, device=device)
    return {"eager call (x.add_(1))": lambda: x.add_(1),
            "all_reduce": lambda: dist.all_reduce(x),
            "all_gather_into_tensor": lambda: dist.all_gather_into_tensor(out, x),
            "reduce_scatter_tensor": lambda: dist.reduce_scatter_tensor(x, out)}


def plain_pair(pass_: str, device: torch.device) -> Callable[[], object]:
    """The pair of :func:`~sampling.tensor_parallel.build_pair` on one device, without DTensor."""
    pair = nn.Sequential(nn.Linear(WIDTH, WIDTH, bias=False), nn.Linear(WIDTH, WIDTH, bias=False)).to(device)
    return run_pass(pair, torch.randn(WIDTH, WIDTH, device=device), pass_)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--calls", type=int, default=200, help="calls per timed run")
    ap.add_argument("--rounds", type=int, default=15, help="timed runs per figure (their median is printed)")
    ap.add_argument("--out", help="also write the figures to this CSV")
    args = ap.parse_args()
    # torch 2.13 renames the two tensor collectives; the 2.11 on the lent GPUs has only these names
    warnings.filterwarnings("ignore", category=FutureWarning, module="torch.distributed")
    device = torch.device(args.device)
    torch.set_num_threads(1)
    if device.type == "cuda":
        device = torch.device("cuda", device.index or 0)  # NCCL binds the group to one device
        torch.cuda.set_device(device)
    wait = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    backend = "nccl" if device.type == "cuda" else "gloo"
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group(backend, init_method=f"file://{os.path.join(tmp, 'store')}", rank=0, world_size=1)
        try:
            rows = []
            base = {"device": name, "torch": torch.__version__, "backend": backend, "ranks": 1}
            for message_bytes in (4096, 4 << 20):
                for what, fn in collectives(device, message_bytes).items():
                    us = host_us(fn, wait, args.calls, args.rounds)
                    rows.append(dict(base, what=what, pass_="issue", message_bytes=message_bytes, us=round(us, 2)))
                    print(f"{name}: {what}, {message_bytes} B: {us:.1f} us of host time a call", flush=True)
            for pass_ in ("fwd", "bwd"):
                sharded = step_us(build_pair(pass_, dist.group.WORLD, device), wait, args.calls, args.rounds)
                plain = step_us(plain_pair(pass_, device), wait, args.calls, args.rounds)
                figures = {"dtensor pair": sharded, "plain pair": plain, "dtensor less plain": sharded - plain}
                for what, us in figures.items():
                    rows.append(dict(base, what=what, pass_=pass_, message_bytes=0, us=round(us, 2)))
                print(f"{name}: a DTensor tensor-parallel pair {pass_}: {sharded:.1f} us, unsharded {plain:.1f} us: "
                      f"DTensor's share {sharded - plain:.1f} us", flush=True)
        finally:
            dist.destroy_process_group()
    if args.out:
        write_csv(args.out, rows)


if __name__ == "__main__":
    main()

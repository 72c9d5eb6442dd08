"""Activation checkpointing's host time per block: what ``prism sample`` stores as the
``checkpoint`` op (:func:`sampling.framework.checkpoint_rows`), on this machine's device.

    python experiments/checkpoint_host/bench_checkpoint_host.py                  # this CPU
    python experiments/checkpoint_host/bench_checkpoint_host.py --device cuda    # a GPU host: the profiles' prior

For each pass, the Theil-Sen slope over the depths of the rows' medians: the time one
checkpointed block adds beyond its recomputed forward's calls. Two wrappers are timed:
``torch.utils.checkpoint`` without reentry, as PRISM's reference model (and torchtitan)
checkpoint a block, and with it, as Megatron's ``tensor_parallel.checkpoint`` (an
``autograd.Function`` that re-runs the forward under ``enable_grad`` in its backward) does.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from scipy.stats import theilslopes
from torch.utils import checkpoint as torch_checkpoint

import sampling.model
from predictor.core.files import write_csv
from sampling.framework import checkpoint_rows


def per_block(rows: list[dict]) -> dict[str, float]:
    """Per pass, the slope (us per block) of the rows' medians against their blocks."""
    out = {}
    for pass_ in ("fwd", "bwd"):
        by_blocks: dict[int, list] = {}
        for r in rows:
            if r["pass"] == pass_:
                by_blocks.setdefault(r["blocks"], []).append(r["latency_us"])
        blocks = np.array(sorted(by_blocks), float)
        medians = np.array([np.median(by_blocks[b]) for b in sorted(by_blocks)])
        out[pass_] = float(theilslopes(medians, blocks)[0])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--dtype", help="the passes' autocast dtype (default: float32 on a CPU, bfloat16 on a GPU)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per depth and wrapper")
    ap.add_argument("--out", help="also write the per-block figures to this CSV")
    args = ap.parse_args()
    device = torch.device(args.device)
    dtype = args.dtype or ("float32" if device.type == "cpu" else "bfloat16")
    torch.set_num_threads(1)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    results = []
    plain = torch_checkpoint.checkpoint
    for wrapper, reentrant in (("non-reentrant (PRISM's reference, torchtitan)", False),
                               ("reentrant (Megatron's CheckpointFunction)", True)):
        sampling.model.checkpoint = lambda fn, *a, use_reentrant=False, _r=reentrant, **k: plain(
            fn, *a, use_reentrant=_r, **k)
        t0 = time.perf_counter()
        slopes = per_block(checkpoint_rows(args.steps, device, dtype))
        print(f"{name}, {wrapper}: {slopes['fwd']:.1f} us a block forward, {slopes['bwd']:.1f} us backward "
              f"({time.perf_counter() - t0:.1f} s)", flush=True)
        results.append({"device": name, "torch": torch.__version__, "wrapper": wrapper, "dtype": dtype,
                        "fwd_us_per_block": round(slopes["fwd"], 1), "bwd_us_per_block": round(slopes["bwd"], 1)})
    sampling.model.checkpoint = plain
    if args.out:
        write_csv(args.out, results)


if __name__ == "__main__":
    main()

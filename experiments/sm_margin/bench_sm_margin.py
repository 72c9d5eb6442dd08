"""A GEMM on the SMs a userbuffers collective leaves: the ratio PRISM prices it at
(:data:`predictor.workload.decompose.USERBUFFER_SMS`: SMs / (SMs - 16)) against a GPU.

    python experiments/sm_margin/bench_sm_margin.py --out sm_margin.csv    # on a GPU host (CuPy)

Transformer Engine's pipelined and bulk overlaps run their collective on 16 SMs beside the
GEMM (``initialize_ub``'s ``num_sm``, with ``set_sm_margin``). Here a kernel holds 16 SMs
(one 1,024-thread block with most of an SM's shared memory on each, spinning on the clock,
on a stream of its own) while the GEMMs of a tensor-parallel layer run; each GEMM is timed
alone and beside it, by CUDA events over repeated calls, with cuBLASLt told of the margin
(``torch._C._set_sm_carveout_experimental``: its SM count target, as ``set_sm_margin``
sets it) and not.
"""
from __future__ import annotations

import argparse

import cupy as cp
import numpy as np
import torch

from predictor.core.files import write_csv

HOLD = r"""
extern "C" __global__ void hold(long long cycles) {
    extern __shared__ char smem[];
    long long start = clock64();
    while (clock64() - start < cycles) {
        if (threadIdx.x == 0) smem[0] = (char) start;
    }
}
"""
#: (m, n, k): Llama-3 70B's row-parallel forward GEMMs at tp 8 (attention output, FFN
#: down) and a column-parallel backward one (FFN up's data gradient), 8k tokens.
SHAPES = [(8192, 8192, 1024), (8192, 8192, 3584), (8192, 8192, 7168), (16384, 8192, 3584)]
SMEM = 200 * 1024


def time_gemm(a, b, repeats: int) -> float:
    """Mean ms of ``a @ b`` over ``repeats`` calls, by CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        a @ b
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / repeats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sms", type=int, default=16, help="SMs to hold (Transformer Engine's num_sm)")
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--out", help="also write the figures to this CSV")
    args = ap.parse_args()
    props = torch.cuda.get_device_properties(0)
    total = props.multi_processor_count
    torch.backends.cuda.preferred_blas_library("cublaslt")  # where the SM count target applies
    kernel = cp.RawKernel(HOLD, "hold")
    kernel.max_dynamic_shared_size_bytes = SMEM
    stream = cp.cuda.Stream(non_blocking=True)
    rows = []
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        time_gemm(a, b, 5)
        alone = min(time_gemm(a, b, args.repeats) for _ in range(3))
        row = {"device": props.name, "m": m, "n": n, "k": k, "held_sms": args.sms, "sms": total,
               "alone_ms": round(alone, 4), "priced": round(total / (total - args.sms), 4)}
        for told in (False, True):
            torch._C._set_sm_carveout_experimental(args.sms if told else None)
            time_gemm(a, b, 3)
            beside = []
            for _ in range(3):
                with stream:  # ~2 GHz: held for twice the GEMMs' time alone, and more
                    kernel((args.sms,), (1024,), (np.int64(2e9 * alone * args.repeats * 4 / 1e3),),
                           shared_mem=SMEM)
                torch.cuda._sleep(1_000_000)  # the holding blocks resident before the GEMMs queue
                beside.append(time_gemm(a, b, args.repeats))
                stream.synchronize()
            key = "told" if told else "untold"
            row[f"beside_{key}_ms"] = round(min(beside), 4)
            row[f"ratio_{key}"] = round(min(beside) / alone, 4)
        torch._C._set_sm_carveout_experimental(None)
        print(f"{props.name}: gemm {m}x{n}x{k} bf16 alone {alone:.3f} ms; beside {args.sms} held SMs "
              f"x{row['ratio_untold']:.3f}, cuBLASLt told of them x{row['ratio_told']:.3f} (PRISM prices "
              f"x{row['priced']:.3f})", flush=True)
        rows.append(row)
    if args.out:
        write_csv(args.out, rows)


if __name__ == "__main__":
    main()

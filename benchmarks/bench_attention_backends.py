"""Causal attention throughput of each SDPA backend on this GPU, forward and forward+backward.

    python benchmarks/bench_attention_backends.py --out attention_backends.csv   # on a GPU host

Why: PRISM's H100 attention model is FlashAttention-2's published throughput, while
Transformer Engine prefers its cuDNN fused attention on Hopper; the MoE long-context rows
of issue 19 hang on which one a run used. The FA3 paper's figures give cuDNN's forward
only; this measures both backends' forward and backward on the same card, at the shapes
of those rows (head dim 128, causal, bf16, 2k-32k tokens per sequence).

FLOPs are counted as FlashAttention's benchmarks count them: forward 4·b·h·s²·d / 2
(causal), backward 2.5× the forward. Each figure is the median of ``--repeats`` timed
calls (CUDA events) after three untimed ones. A backend that cannot run a shape is
reported as such, not skipped silently.
"""
from __future__ import annotations

import argparse
import csv
import sys
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"default": None, "flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}
#: (batch, sequence) at 32k tokens a call, the heads of a Llama/Qwen-class layer.
SHAPES = [(16, 2048), (8, 4096), (4, 8192), (2, 16384), (1, 32768)]
HEADS, HEAD_DIM = 32, 128


def _median_ms(fn, repeats: int) -> float:
    for _ in range(3):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    torch.cuda.synchronize()
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return sorted(s.elapsed_time(e) for s, e in zip(starts, ends))[repeats // 2]


def measure(backend: str, batch: int, seq: int, repeats: int) -> dict:
    q, k, v = (torch.randn(batch, HEADS, seq, HEAD_DIM, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    grad = torch.randn_like(q)
    flops = 4 * batch * HEADS * seq * seq * HEAD_DIM / 2
    row = {"backend": backend, "batch": batch, "seq": seq, "heads": HEADS, "head_dim": HEAD_DIM,
           "device": torch.cuda.get_device_name(), "torch": torch.__version__}
    try:
        with sdpa_kernel([BACKENDS[backend]]) if BACKENDS[backend] is not None else nullcontext():
            fwd = _median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), repeats)
            both = _median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad),
                              repeats)
    except RuntimeError as exc:
        return dict(row, error=str(exc).splitlines()[0][:120])
    bwd = both - fwd
    return dict(row, fwd_ms=fwd, bwd_ms=bwd, fwd_tflops=flops / fwd / 1e9, bwd_tflops=2.5 * flops / bwd / 1e9,
                fwd_bwd_tflops=3.5 * flops / both / 1e9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="CSV of one row per backend and shape")
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_attention_backends: needs a CUDA GPU; torch sees none here")
    rows = [measure(b, batch, seq, args.repeats) for batch, seq in SHAPES for b in BACKENDS]
    fields = sorted({key for row in rows for key in row}, key=lambda k: list(rows[0]).index(k)
                    if k in rows[0] else 99)
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    for r in rows:
        if "error" in r:
            print(f"{r['backend']:>9} s={r['seq']:>6}: cannot run ({r['error']})")
        else:
            print(f"{r['backend']:>9} s={r['seq']:>6}: fwd {r['fwd_tflops']:6.1f}  bwd {r['bwd_tflops']:6.1f}  "
                  f"fwd+bwd {r['fwd_bwd_tflops']:6.1f} TFLOP/s")


if __name__ == "__main__":
    main()

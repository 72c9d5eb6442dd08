"""Causal attention throughput of each SDPA backend on this GPU, forward and forward+backward.

    python experiments/attention_backends/bench_attention_backends.py --out attention_backends.csv   # on a GPU host
    python experiments/attention_backends/bench_attention_backends.py --out long.csv --seqs 65536,131072 --heads 16 \
        --backends flash,cudnn

Why: PRISM's H100 attention model is FlashAttention-2's published throughput, while
Transformer Engine prefers its cuDNN fused attention on Hopper; the MoE long-context rows
of issue 19 hang on which one a run used. The FA3 paper's figures give cuDNN's forward
only; this measures both backends' forward and backward on the same card, at the shapes
of those rows (head dim 128, causal, bf16, 2k-32k tokens per sequence by default; ``--seqs``
up to the 128k of the longest). A call holds ``--tokens`` tokens (at least one sequence).

FLOPs are counted as FlashAttention's benchmarks count them: forward 4·b·h·s²·d / 2
(causal), backward 2.5× the forward. Each figure is the median of ``--repeats`` timed
calls (CUDA events) after three untimed ones. A backend that cannot run a shape is
reported as such, not skipped silently.
"""
from __future__ import annotations

import argparse
import sys
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from predictor.core.files import write_csv
from sampling.timers import event_median_ms

BACKENDS = {"default": None, "flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}
#: Sequence lengths, tokens a call and heads by default: a Llama/Qwen-class layer.
SEQS, TOKENS, HEADS, HEAD_DIM = (2048, 4096, 8192, 16384, 32768), 32768, 32, 128


def measure(backend: str, batch: int, seq: int, heads: int, repeats: int) -> dict:
    q, k, v = (torch.randn(batch, heads, seq, HEAD_DIM, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    grad = torch.randn_like(q)
    flops = 4 * batch * heads * seq * seq * HEAD_DIM / 2
    row = {"backend": backend, "batch": batch, "seq": seq, "heads": heads, "head_dim": HEAD_DIM,
           "device": torch.cuda.get_device_name(), "torch": torch.__version__}
    try:
        with sdpa_kernel([BACKENDS[backend]]) if BACKENDS[backend] is not None else nullcontext():
            fwd = event_median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), repeats)
            both = event_median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad),
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
    ap.add_argument("--seqs", default=",".join(map(str, SEQS)), help="sequence lengths, comma-separated")
    ap.add_argument("--tokens", type=int, default=TOKENS, help=f"tokens a call (default {TOKENS})")
    ap.add_argument("--heads", type=int, default=HEADS, help=f"attention heads (default {HEADS})")
    ap.add_argument("--backends", default=",".join(BACKENDS), help=f"of {', '.join(BACKENDS)}")
    args = ap.parse_args()
    seqs = [int(s) for s in args.seqs.split(",")]
    backends = args.backends.split(",")
    unknown = sorted(set(backends) - set(BACKENDS))
    if unknown:
        sys.exit(f"bench_attention_backends: --backends {','.join(unknown)}: choose from {', '.join(BACKENDS)}")
    if not torch.cuda.is_available():
        sys.exit("bench_attention_backends: needs a CUDA GPU; torch sees none here")
    rows = [measure(b, max(1, args.tokens // seq), seq, args.heads, args.repeats) for seq in seqs for b in backends]
    write_csv(args.out, rows)
    for r in rows:
        if "error" in r:
            print(f"{r['backend']:>9} s={r['seq']:>6}: cannot run ({r['error']})")
        else:
            print(f"{r['backend']:>9} s={r['seq']:>6}: fwd {r['fwd_tflops']:6.1f}  bwd {r['bwd_tflops']:6.1f}  "
                  f"fwd+bwd {r['fwd_bwd_tflops']:6.1f} TFLOP/s")


if __name__ == "__main__":
    main()

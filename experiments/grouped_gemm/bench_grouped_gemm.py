"""An MoE layer's expert GEMMs on this GPU: one GEMM per local expert in turn (how PRISM
prices a grouped GEMM without a model of its own, ``STAND_INS`` in
predictor/latency/adjustments/grouped_gemm.py) against one grouped kernel (``torch._grouped_mm``) and against
a single dense GEMM of all the experts' tokens (the best case).

    python experiments/grouped_gemm/bench_grouped_gemm.py --out grouped_gemm.csv   # on a GPU host

Shapes: the fc1 (gate and up, 2·ffn wide) and fc2 GEMMs of a rank's local experts at
balanced routing, forward, bf16, for Qwen3-235B-A22B (hidden 4096, expert ffn 1536; 16 or
4 local experts at ep 8 or 32) and Mixtral 8x22B (hidden 6144, ffn 16384; one local expert
at ep 8), at 256-8192 tokens an expert. Each figure is the median of ``--repeats`` timed
calls (CUDA events) after three untimed ones; a path that cannot run a shape says why.
"""
from __future__ import annotations

import argparse
import sys

import torch

from predictor.core.files import write_csv
from sampling.timers import event_median_ms

#: (name, hidden, expert ffn, local experts)
LAYERS = [("qwen3-235b ep8", 4096, 1536, 16), ("qwen3-235b ep32", 4096, 1536, 4), ("mixtral-8x22b ep8", 6144, 16384, 1)]
TOKENS = (256, 1024, 4096, 8192)


def _paths(experts: int, tokens: int, k: int, n: int) -> dict:
    """The three ways to run ``experts`` GEMMs of [tokens, k] x [k, n]."""
    x = torch.randn(experts * tokens, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(experts, k, n, device="cuda", dtype=torch.bfloat16)
    offs = torch.arange(1, experts + 1, device="cuda", dtype=torch.int32) * tokens
    parts = x.split(tokens)
    return {"per_expert": lambda: [p @ w[e] for e, p in enumerate(parts)],
            "grouped_mm": lambda: torch._grouped_mm(x, w, offs=offs),
            "dense": lambda: x @ w[0]}


def measure(layer: str, hidden: int, ffn: int, experts: int, tokens: int, repeats: int) -> list[dict]:
    rows = []
    for gemm, k, n in (("fc1", hidden, 2 * ffn), ("fc2", ffn, hidden)):
        flops = 2 * experts * tokens * k * n
        for path, fn in _paths(experts, tokens, k, n).items():
            row = {"layer": layer, "gemm": gemm, "experts": experts, "tokens_per_expert": tokens, "k": k, "n": n,
                   "path": path, "device": torch.cuda.get_device_name(), "torch": torch.__version__}
            try:
                ms = event_median_ms(fn, repeats)
            except (RuntimeError, AttributeError) as exc:
                rows.append(dict(row, error=str(exc).splitlines()[0][:120]))
                continue
            rows.append(dict(row, ms=ms, tflops=flops / ms / 1e9))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="CSV of one row per layer, GEMM, token count and path")
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_grouped_gemm: needs a CUDA GPU; torch sees none here")
    rows = [r for name, h, f, e in LAYERS for t in TOKENS for r in measure(name, h, f, e, t, args.repeats)]
    write_csv(args.out, rows)
    for r in rows:
        head = f"{r['layer']:<18} {r['gemm']} {r['experts']:>2}x{r['tokens_per_expert']:>5} {r['path']:<10}"
        print(f"{head} cannot run ({r['error']})" if "error" in r
              else f"{head} {r['ms']:8.3f} ms {r['tflops']:6.1f} TFLOP/s")


if __name__ == "__main__":
    main()

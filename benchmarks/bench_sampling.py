"""How long `prism sample sampling=quick` takes here and what it measures.

    python benchmarks/bench_sampling.py [extra overrides ...]

Prints wall time, distinct shapes per op, minimum repeats per shape, and the step time
of the `tiny` reference model (fwd + bwd + AdamW) on this CPU.
"""
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

from predictor.core.ops import COLLECTIVE_OPS, COMPUTE_OPS
from predictor.core.profiles import load_model
from predictor.data.summary import summarize
from sampling.model import Transformer


def bench_quick(extra):
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "predictor.app.cli", "sample", "hardware=local-cpu",
                        "sampling=quick", f"output_dir={out}", *extra],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        table = summarize(out)
    print(f"prism sample sampling=quick {' '.join(extra)}: {wall:.1f} s wall")
    print(table.to_string(index=False))
    by_op = table.groupby("op").agg(shapes=("shapes", "min"), min_repeats=("min_repeats", "min"))
    print(f"fewest shapes of a compute op: {by_op.loc[list(COMPUTE_OPS)].shapes.min()}")
    print(f"fewest message sizes of a collective: {by_op.loc[list(COLLECTIVE_OPS)].shapes.min()}")
    print(f"fewest repeats of a shape: {by_op.min_repeats.min()}")


def bench_tiny_step(steps=20):
    torch.set_num_threads(2)
    model = load_model("tiny")
    net = Transformer(model)
    opt = torch.optim.AdamW(net.parameters())
    ids = torch.randint(0, model.vocab_size, (1, model.seq_length + 1))
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(net(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - t0)
    print(f"tiny training step (mbs 1, seq {model.seq_length}, 2 threads): "
          f"median {np.median(times[3:]) * 1e3:.1f} ms, max {max(times) * 1e3:.1f} ms")


if __name__ == "__main__":
    bench_tiny_step()
    bench_quick(sys.argv[1:])

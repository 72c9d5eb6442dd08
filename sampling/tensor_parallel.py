"""The host op ``dtensor``: the framework time of tensor parallelism as torch's DTensor does
it, timed on the ranks of a collective job (:mod:`sampling.collectives`).

One call is one column-parallel linear layer followed by one row-parallel one
(``ColwiseParallel`` then ``RowwiseParallel`` of ``torch.distributed.tensor.parallel``, the
pairs of a transformer layer: ``qkv``/``out`` and ``up``/``down``) on 4x4 tensors, so that
the kernels and the transfers take no time and what is left is the framework's: the
modules' input and output redistributions and DTensor's dispatch and sharding propagation.

The collective each pass of a pair needs is priced as a collective, so it is kept out of
the timing: the forward issues its all-reduce, a functional collective whose wait falls to
the op that reads its output (none here; a repeat's barrier follows the collective), and the
backward computes the parameters' gradients only, since the input's gradient ends in the
column-parallel layer's all-reduce, which autograd's thread issues and waits for. With it,
on two gloo ranks of this 2-core machine, a backward took 3.3 ms against 1.8 ms without
(median of 60 interleaved repeats), and the composer counted that all-reduce twice:
`tiny` at tp=2 came out 12-24% over. Left out with it: the input gradient's own framework
calls (its matmul and the redistribution's autograd node).
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

#: Width of the pair's tensors: small enough that only the framework's time is left.
WIDTH = 4


class _Pair(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.column = nn.Linear(width, width, bias=False)
        self.row = nn.Linear(width, width, bias=False)

    def forward(self, x):
        return self.row(self.column(x))


def build_pair(pass_: str, group, device: torch.device) -> Callable[[], object]:
    """A zero-argument function running one tensor-parallel pair over the process group
    ``group`` (every member calls it): its forward, or its backward replayed on one graph."""
    # imported here, not with the module: DTensor's modules cost every sampling process
    # about 1 s of its start, and only this op needs them
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = DeviceMesh.from_group(group, device.type)
    width = WIDTH * mesh.size()  # each rank holds a WIDTH-wide shard
    pair = parallelize_module(_Pair(width).to(device), mesh, {"column": ColwiseParallel(), "row": RowwiseParallel()})
    return run_pass(pair, torch.randn(WIDTH, width, device=device), pass_)


def run_pass(module: nn.Module, x: torch.Tensor, pass_: str) -> Callable[[], object]:
    """A zero-argument function running ``module`` on ``x``: its forward, or its backward
    replayed on one graph (the parameters' gradients: the module docstring says why not
    the input's)."""
    if pass_ == "fwd":
        return lambda: module(x)
    out = module(x)
    grad = torch.ones_like(out)
    params = list(module.parameters())
    return lambda: torch.autograd.grad(out, params, grad, retain_graph=True)

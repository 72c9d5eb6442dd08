"""Features of an operator call, and the hardware floor its latency is measured against.

The regressors learn ``log(latency / floor)`` (docs/method.md, "Regressors"): the floor is
the roofline time ``max(flops / peak, bytes / bandwidth)`` for compute ops (Williams et
al. 2009, "Roofline") and ``alpha + bytes * bus_factor / bandwidth`` for collectives
(the nccl-tests bus bandwidth model). Trees cannot extrapolate, but a floor-relative
target only has to learn an efficiency, which flattens out for large shapes — so
predictions outside the sampled box follow the physics instead of staying flat.

A table of calls (``frame``) is a pandas DataFrame (sample rows) or a mapping of column
name to array (the composer's calls): this module does not import pandas, which
``prism predict`` never needs.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from predictor.core.errors import PrismError
from predictor.core.ops import BUS_FACTOR, OPS, OPTIMIZERS, bytes_moved, dtype_bytes, flops
from predictor.core.specs import HardwareConfig

#: Columns a collective's features read besides its shape (from the sample store).
TOPOLOGY = ("ranks_per_node", "nodes")
#: Matrix products whose (m, n, k) decide the GPU kernel cuBLAS can run.
MATMULS = ("gemm", "bmm", "grouped_gemm")
#: Bytes a matrix dimension must be a multiple of for cuBLAS's vectorised tensor-core kernels.
ALIGNMENT_BYTES = 16
#: Share of the tensor-core peak a GPU matrix product reaches when a dimension is not: cuBLAS
#: falls back to kernels that load one element at a time. Traced on an H100 (a gpt3-1.3b
#: step of the reference workload, whose output layer has GPT-2's unpadded 50,257 tokens:
#: measurements/h100-gpt3-1.3b-step-trace.json.gz): its forward and both backward GEMMs ran
#: cutlass_75_tensorop_bf16_s1688gemm_*_align1 at 108-139 TFLOP/s, 0.11-0.14 of the bf16
#: peak (0.128 over the 12 calls' time), 40% of the step's kernel time; aligned GEMMs of
#: that size run at 0.6-0.8.
UNALIGNED_PEAK_SHARE = 0.128


def feature_names(op: str) -> list[str]:
    """The feature columns of ``op``'s model, in order (stored in the manifest)."""
    shape = [f"log2_{c}" if c not in ("causal", "optimizer") else c for c in OPS[op].shape]
    if OPS[op].host:
        return shape + ["log2_floor_us"]
    if OPS[op].collective:
        return shape + list(TOPOLOGY) + ["log2_floor_us"]
    # An optimizer step is launch-bound for small tensors and bandwidth-bound for large ones.
    per_tensor = ["log2_params_per_tensor"] if op == "optimizer_step" else []
    return shape + per_tensor + ["dtype_bytes", "log2_flops", "log2_bytes", "log2_intensity", "log2_floor_us"]


def _column(frame: Mapping, name: str, op: str) -> np.ndarray:
    if name not in frame:
        raise PrismError(f"{op}: shape column {name!r} is missing; {op} needs "
                         f"{', '.join(OPS[op].shape)}", field=str(op))
    values = np.asarray(frame[name])
    if _has_empty(values):
        raise PrismError(f"{op}: shape column {name!r} has empty values", field=str(op))
    return values


def _has_empty(values: np.ndarray) -> bool:
    """Whether a column holds an empty cell: NaN (the one value unequal to itself) or None."""
    if values.dtype.kind == "f":
        return bool(np.isnan(values).any())
    return values.dtype.kind == "O" and any(v is None or v != v for v in values)


def call_dtypes(frame: Mapping, rows: int) -> np.ndarray:
    """Each call's precision (``dtype`` column; float32 where the table has none)."""
    return np.asarray(frame["dtype"]) if "dtype" in frame else np.full(rows, "float32")


def _shape(op: str, frame: Mapping) -> dict:
    shape = {c: _column(frame, c, op) for c in OPS[op].shape}
    for c, v in shape.items():
        if c == "causal":
            shape[c] = v.astype(bool)
        elif c != "optimizer":
            shape[c] = v.astype(float)
    return shape


def floor_us(op: str, pass_: str, frame: Mapping, hw: HardwareConfig) -> np.ndarray:
    """The hardware floor of each row's call, in microseconds (always > 0)."""
    s = _shape(op, frame)
    if OPS[op].host:
        return np.maximum(host_floor_us(op, pass_, s, hw), 1e-3)
    if OPS[op].collective:
        intra = _column(frame, "nodes", op).astype(float) <= 1
        per_node = _column(frame, "ranks_per_node", op).astype(float)
        net = hw.network
        # Across nodes, a group's r ranks per node drive r NICs in parallel (NCCL runs a ring
        # per NIC); the bus bandwidth is theirs together, at most the intra-node link's.
        across = np.minimum(net.inter_node.bandwidth * per_node, net.intra_node.bandwidth)
        if op == "all_to_all":
            # An all-to-all has no ring: each rank sends (n - r)/n of its buffer to other nodes
            # through its own NIC and (r - 1)/n over the node's fabric (expert-parallel
            # dispatch; nccl-tests alltoall bus bandwidth across nodes is the per-GPU NIC's).
            n = np.maximum(s["group_size"], 2.0)
            across = (n - 1) / ((n - per_node) / net.inter_node.bandwidth + (per_node - 1) / net.intra_node.bandwidth)
        bandwidth = np.where(intra, net.intra_node.bandwidth, across)
        alpha_us = np.where(intra, net.intra_node.latency_us, net.inter_node.latency_us)
        return alpha_us + s["message_bytes"] * BUS_FACTOR[op](s["group_size"]) / bandwidth * 1e6
    dtypes = call_dtypes(frame, len(s[OPS[op].shape[0]]))
    memory = bytes_moved(op, pass_, s, dtypes) / hw.memory.bandwidth * 1e6
    return np.maximum(np.maximum(compute_floor_us(op, pass_, frame, hw), memory), 1e-3)


def compute_floor_us(op: str, pass_: str, frame: Mapping, hw: HardwareConfig) -> np.ndarray:
    """A compute op's FLOPs at the peak of each row's precision, in microseconds."""
    s = _shape(op, frame)
    dtypes = call_dtypes(frame, len(s[OPS[op].shape[0]]))
    names, which = np.unique(dtypes, return_inverse=True)
    peak = np.array([hw.peak(d) for d in names], dtype=float)[which]
    if op in MATMULS and hw.device.kind == "gpu":
        peak = peak * np.where(unaligned(s, dtypes), UNALIGNED_PEAK_SHARE, 1.0)
    return flops(op, pass_, s) / peak * 1e6


def unaligned(shape: Mapping, dtypes: np.ndarray) -> np.ndarray:
    """Whether each matrix product has a leading dimension that is no multiple of
    :data:`ALIGNMENT_BYTES` in a tensor-core precision (fp32 runs CUDA cores, which load an
    element at a time either way). Row-major X[m, k] @ W[k, n] = Y[m, n] leads with k and n,
    in both backward products too; the rows m (tokens, an expert's share of them) never lead."""
    size = dtype_bytes(dtypes)
    size = np.where(size >= 1, np.floor(size), 0.5)  # the elements alone: block scales are a tensor of their own
    odd = np.zeros(len(size), bool)
    for dim in ("n", "k"):
        odd |= np.mod(np.asarray(shape[dim], float) * size, ALIGNMENT_BYTES) != 0
    return odd & (np.asarray(dtypes) != "float32")


def host_floor_us(op: str, pass_: str, shape: Mapping, hw: HardwareConfig):
    """A host op's prior time (us) from the hardware's :class:`~predictor.core.specs.HostSpec`:
    per eager call the CPU side of its pass plus the device API's launch; per collective its
    issue; per DTensor pair its framework time; per checkpointed block its pass's wrapper."""
    host = hw.host
    if op == "checkpoint":
        each = host.checkpoint_bwd_us if pass_ == "bwd" else host.checkpoint_fwd_us
        return np.asarray(shape["blocks"], float) * each
    if op in ("collective_launch", "dtensor"):
        each = (host.collective_launch_us if op == "collective_launch" else
                host.dtensor_bwd_us if pass_ == "bwd" else host.dtensor_fwd_us)
        return np.full(np.shape(shape["group_size"]), each, float)
    cpu = host.autograd_us if pass_ == "bwd" else host.dispatch_us
    return np.asarray(shape["launches"], float) * (cpu + host.launch_us)


def features(op: str, pass_: str, frame: Mapping, hw: HardwareConfig) -> tuple[np.ndarray, np.ndarray]:
    """Feature matrix (columns of :func:`feature_names`) and floor (us) for each row."""
    s = _shape(op, frame)
    floor = floor_us(op, pass_, frame, hw)
    cols = []
    for c in OPS[op].shape:
        if c == "causal":
            cols.append(s[c].astype(float))
        elif c == "optimizer":
            cols.append(np.array([OPTIMIZERS.index(o) for o in s[c]], dtype=float))
        else:
            cols.append(np.log2(np.maximum(s[c], 1.0)))
    if OPS[op].collective:
        cols += [_column(frame, c, op).astype(float) for c in TOPOLOGY]
    elif not OPS[op].host:
        if op == "optimizer_step":
            cols.append(np.log2(s["params"] / np.maximum(s["tensors"], 1.0)))
        dtypes = call_dtypes(frame, len(floor))
        f = np.maximum(flops(op, pass_, s), 1.0)
        b = np.maximum(bytes_moved(op, pass_, s, dtypes), 1.0)
        cols += [dtype_bytes(dtypes), np.log2(f), np.log2(b), np.log2(f / b)]
    cols.append(np.log2(floor))
    return np.column_stack(cols), floor

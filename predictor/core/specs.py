"""The domain's values: a model, a hardware profile, a parallel layout, and the settings
of sampling, measuring and regressors, as plain dataclasses.

They know nothing of Hydra or YAML: ``predictor.core.profiles`` reads them from
``conf/``, the command line (``predictor.app.config``) composes them from overrides, and
a notebook can build them directly. A model and a hardware profile check their own values
when they are made, whichever way that is: a zero head count or a negative bandwidth
would otherwise price operators at zero or print NaN far from its cause.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from numbers import Integral, Real

from predictor.core.errors import PrismError

#: The choices of :class:`ModelConfig`'s enumerated settings.
ACTIVATIONS = ("gelu", "swiglu")
NORMS = ("layernorm", "rmsnorm")
POSITIONS = ("learned", "rope")


def check_number(key: str, value, *, integer: bool = False, zero: bool = False) -> None:
    """Raise one :class:`PrismError` naming ``key`` unless ``value`` is a finite number
    above zero (at least zero where ``zero``), and an integer where ``integer``."""
    kind = Integral if integer else Real
    if (isinstance(value, kind) and not isinstance(value, bool) and math.isfinite(value)
            and (value >= 0 if zero else value > 0)):
        return
    what = ("a non-negative " if zero else "a positive ") + ("integer" if integer else "finite number")
    raise PrismError(f"{key}={value!r}: must be {what}", field=key)


@dataclass
class ModelConfig:
    """A decoder-only transformer (GPT and Llama families)."""

    name: str
    family: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    ffn_hidden_size: int
    vocab_size: int
    seq_length: int
    activation: str  # gelu | swiglu
    norm: str  # layernorm | rmsnorm
    position: str  # learned | rope
    tied_embeddings: bool
    num_experts: int = 0  # routed experts of a Mixture-of-Experts model; 0: dense

    def __post_init__(self):
        for key in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "ffn_hidden_size",
                    "vocab_size", "seq_length"):
            check_number(f"model.{key}", getattr(self, key), integer=True)
        check_number("model.num_experts", self.num_experts, integer=True, zero=True)
        if self.num_heads % self.num_kv_heads:
            raise PrismError(f"model.num_kv_heads={self.num_kv_heads}: must divide model.num_heads={self.num_heads} "
                             f"(each key-value head serves a group of query heads); pick a divisor of "
                             f"{self.num_heads}", field="model.num_kv_heads")
        for key, choices in (("activation", ACTIVATIONS), ("norm", NORMS), ("position", POSITIONS)):
            if getattr(self, key) not in choices:
                raise PrismError(f"model.{key}={getattr(self, key)!r}: unknown; choose one of: {', '.join(choices)}",
                                 field=f"model.{key}")


@dataclass
class DeviceSpec:
    kind: str  # gpu | cpu
    name: str
    match: list[str] = field(default_factory=list)


@dataclass
class MemorySpec:
    bandwidth: float  # bytes/s
    capacity_gib: float
    l2_bytes: int = 0


@dataclass
class LinkSpec:
    bandwidth: float  # bytes/s per GPU, per direction
    latency_us: float
    nics_per_node: int | None = None


@dataclass
class NetworkSpec:
    name: str
    intra_node: LinkSpec
    inter_node: LinkSpec


@dataclass
class NodeSpec:
    gpus_per_node: int


@dataclass
class VariabilitySpec:
    spatial_cv: float
    temporal_cv: float
    comm_regime_cv: float
    interruptions_per_gpu_day: float
    checkpoint_interval_min: float
    restart_cost_min: float


@dataclass
class HardwareConfig:
    """A device plus the cluster network it is assumed to sit in."""

    name: str
    device: DeviceSpec
    peak_flops: dict[str, float | None]
    memory: MemorySpec
    node: NodeSpec
    network: NetworkSpec
    price_per_gpu_hour: float | None
    power_w: float | None
    variability: VariabilitySpec
    train_dtype: str = "bfloat16"  # the precision of compute ops when training on it
    # The linear layers' GEMMs where they run in another precision than train_dtype:
    # float8 for torchtitan's Float8 linears or Transformer Engine fp8; null = train_dtype.
    gemm_dtype: str | None = None
    # Another profile whose operator models this one borrows when it has none of its own:
    # a GPU with the same compute die (H200 = H100's GH100), so the models' efficiency
    # relative to the roofline floor carries over; the floor is this profile's.
    models_from: str | None = None

    def __post_init__(self):
        for dtype, peak in self.peak_flops.items():
            if peak is not None:  # null: the device has no such precision
                check_number(f"hardware.peak_flops.{dtype}", peak)
        check_number("hardware.memory.bandwidth", self.memory.bandwidth)
        check_number("hardware.memory.capacity_gib", self.memory.capacity_gib)
        check_number("hardware.memory.l2_bytes", self.memory.l2_bytes, integer=True, zero=True)
        check_number("hardware.node.gpus_per_node", self.node.gpus_per_node, integer=True)
        for side in ("intra_node", "inter_node"):
            link = getattr(self.network, side)
            check_number(f"hardware.network.{side}.bandwidth", link.bandwidth)
            check_number(f"hardware.network.{side}.latency_us", link.latency_us, zero=True)
            if link.nics_per_node is not None:
                check_number(f"hardware.network.{side}.nics_per_node", link.nics_per_node, integer=True)
        for key in ("price_per_gpu_hour", "power_w"):
            if getattr(self, key) is not None:  # null: unknown, and left out of cost and energy
                check_number(f"hardware.{key}", getattr(self, key))
        spread = self.variability
        for key in ("spatial_cv", "temporal_cv", "comm_regime_cv", "interruptions_per_gpu_day", "restart_cost_min"):
            check_number(f"hardware.variability.{key}", getattr(spread, key), zero=True)
        check_number("hardware.variability.checkpoint_interval_min", spread.checkpoint_interval_min)

    def peak(self, dtype: str) -> float:
        value = self.peak_flops.get(dtype)
        if not value:
            raise PrismError(f"hardware.peak_flops.{dtype}: {self.name} has no {dtype} peak; "
                             f"pick a dtype it supports ({', '.join(k for k, v in self.peak_flops.items() if v)})",
                             field=f"hardware.peak_flops.{dtype}")
        return value


@dataclass
class ParallelConfig:
    """The parallel layout, with torchtitan/Megatron axis names."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    vpp: int = 1
    sequence_parallel: bool = False
    micro_batch_size: int = 1
    global_batch_size: int = 0  # 0: micro_batch_size x dp x 4·pp
    recompute: str = "none"  # none | selective | full
    sharding: str = "none"  # none | zero1 | zero2 | zero3 | fsdp | distributed_optimizer
    schedule: str = "1f1b"  # 1f1b | interleaved | gpipe (predictor.core.layout.SCHEDULES)
    attention: str = "flash"  # flash (fused kernel) | unfused (baddbmm + softmax + bmm)
    overlap_grad_reduce: bool = True
    # Sharded optimizers: the updated weights' all-gather runs under the next forward
    # (Megatron --overlap-param-gather, FSDP prefetch).
    overlap_param_gather: bool = True
    # TP collectives run under the layer's GEMMs (Megatron --tp-comm-overlap, torchtitan
    # async TP); off: they run between them.
    overlap_tp_comm: bool = False

    @property
    def replica_gpus(self) -> int:
        """GPUs of one data-parallel replica: tp·cp·pp."""
        return self.tp * self.cp * self.pp

    @property
    def world_size(self) -> int:
        """GPUs of the job: dp·tp·cp·pp (ep lives inside dp·cp: :mod:`predictor.core.mesh`)."""
        return self.dp * self.replica_gpus


@dataclass
class SamplingConfig:
    """A sampling plan: which ops, how many shapes, how long (see conf/sampling/)."""

    name: str
    budget_s: float
    collective_share: float
    repeats: int
    warmup: int
    threads: int
    dtypes: list[str]
    ops: list[str]
    shapes_per_op: int
    message_sizes: int
    collective_world_size: int
    max_call_ms: float
    targets: list[str]
    micro_batch_sizes: list[int]
    tp_degrees: list[int]
    space: dict[str, list]  # column -> [low, high]
    seed: int = 0
    flush_every_s: float = 2.0


@dataclass
class MeasureConfig:
    """How ``prism measure`` times the reference workload (see conf/measure/)."""

    name: str
    steps: int
    warmup: int
    threads_per_rank: int
    backend: str  # auto | gloo | nccl
    device: str  # auto | cpu | cuda
    timeout_s: float
    seed: int = 0
    trace_dir: str | None = None  # also write torch.profiler traces of trace_steps more steps here
    trace_steps: int = 3


@dataclass
class RegressorConfig:
    name: str
    quantiles: list[float]
    params: dict = field(default_factory=dict)

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
from decimal import Decimal
from numbers import Integral, Real

from predictor.core.choices import (
    Activation,
    Balancing,
    DeviceKind,
    Dispatcher,
    Family,
    Norm,
    Position,
    RouterScore,
    TrainDtype,
    choice,
    values,
)
from predictor.core.errors import PrismError
from predictor.core.precision import LOW_PRECISION_OPS, canonical_gemm_dtype, check_gemm_ops, no_peak, peak_of

#: The choices of :class:`ModelConfig`'s enumerated settings (:mod:`predictor.core.choices`).
ACTIVATIONS = values(Activation)
#: Precisions a whole model trains in (mixed precision's compute type); lower ones are GEMM-only.
TRAIN_DTYPES = values(TrainDtype)
#: Model families: GPT layers keep dropout (its masks count in the activations), Llama's do not.
FAMILIES = values(Family)
#: Bounds of a model's sizes: past them a figure is a typo (and a list per layer would not fit in memory).
MAX_LAYERS = 2048
#: Each of a model's sizes bounded far above the largest published figure (the reason says which), so
#: that a typo (hidden_size=1e9) is refused rather than priced at billions of GiB per GPU.
MAX_SIZES = {
    "num_layers": (MAX_LAYERS, "the deepest published models have a few hundred"),
    "hidden_size": (1 << 18, "the widest published models have 12,288 to 25,600: GPT-3, Megatron's 1T"),
    "num_heads": (1 << 14, "published models have at most 160: Megatron's 1T"),
    "num_kv_heads": (1 << 14, "published models have at most 160: Megatron's 1T"),
    "head_dim": (1 << 14, "published heads are 64 to 256 wide"),
    "ffn_hidden_size": (1 << 20, "the widest published FFN is PaLM 540B's 73,728"),
    "vocab_size": (1 << 22, "the largest published vocabularies have about 256,000 tokens: Gemma"),
    "seq_length": (1 << 24, "the longest published contexts are 1 to 10 million tokens: Llama 4"),
}
NORMS = values(Norm)
POSITIONS = values(Position)
ROUTER_SCORES = values(RouterScore)
BALANCINGS = values(Balancing)
DISPATCHERS = values(Dispatcher)
#: A call or step timed while the hypervisor took more than this share of the busy CPU time
#: (its steal, :mod:`sampling.cpu.steal`) times the host's other guests as much as the hardware: in a
#: suite run's measure stage passes under 1-12% steal ran up to 25% slower. The
#: sampler times such a call again (``sampling.max_steal``), ``prism measure`` such a step, and
#: ``prism validate`` leaves it out.
DISTURBING_STEAL = 0.05


def _finite(value: Real) -> bool:
    """Whether ``value`` is finite as a float: an integer past a float's range (10**400) is
    not, and would raise OverflowError in the first figure computed from it."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def check_number(key: str, value, *, integer: bool = False, zero: bool = False) -> None:
    """Raise one :class:`PrismError` naming ``key`` unless ``value`` is a finite number
    above zero (at least zero where ``zero``), and an integer where ``integer``. Text
    ("1e12") is refused, as the command line's values arrive typed, and so is a boolean:
    True is no count of 1."""
    kind = Integral if integer else Real
    if (isinstance(value, kind) and not isinstance(value, bool) and _finite(value)
            and (value >= 0 if zero else value > 0)):
        return
    what = ("a non-negative " if zero else "a positive ") + ("integer" if integer else "finite number")
    if isinstance(value, Integral) and not _finite(value):  # 10**400: its digits would fill the screen
        raise PrismError(f"{key}={Decimal(value):.3e}: must be {what} within a float's range", field=key)
    if isinstance(value, str | bool):
        what += f", not {'text' if isinstance(value, str) else 'true or false'}; pass a number"
    raise PrismError(f"{key}={value!r}: must be {what}", field=key)


#: The most Monte Carlo draws (or runs) an analysis takes, predict-batch's too: a million take
#: 4 GB for llama3-405b at pp=16, ten thousand times that did not fit, and their
#: sampling error is long negligible (about 0.2% of a step at 500 draws).
MAX_DRAWS = 1_000_000


def check_draws(key: str, value, least: int = 1) -> None:
    """Raise one :class:`PrismError` naming ``key`` unless ``value`` is a whole number of
    Monte Carlo draws from ``least`` to :data:`MAX_DRAWS`."""
    check_number(key, value, integer=True)
    if not least <= value <= MAX_DRAWS:
        raise PrismError(f"{key}={value}: must be a whole number from {least:,} to {MAX_DRAWS:,} (Monte Carlo samples; "
                         f"more would not fit in memory)", field=key)


def check_switch(key: str, value) -> None:
    """Raise one :class:`PrismError` naming ``key`` unless ``value`` is True or False: "no"
    from a CSV or JSON, or 2, would count as on."""
    if not isinstance(value, bool):
        raise PrismError(f"{key}={value!r}: true or false", field=key)


def check_name(key: str, value, folder: bool = False) -> None:
    """Raise one :class:`PrismError` naming ``key`` unless ``value`` is a non-empty text
    (without a path separator where it names a folder too, as a hardware's models do)."""
    if isinstance(value, str) and value.strip() and not (folder and ("/" in value or "\\" in value)):
        return
    what = "a non-empty text without / or \\ (it names the folder of its models)" if folder else "a non-empty text"
    raise PrismError(f"{key}={value!r}: must be {what}, e.g. {key}=my-{key.split('.')[0]}", field=key)


def check_unit(key: str, value: float, low: float, high: float, unit: str) -> None:
    """Raise one :class:`PrismError` naming ``key`` where a positive ``value`` lies outside
    ``low`` to ``high``, the range of every device in ``unit`` (``"bytes/s, e.g. 3.35e+12
    for 3.35 TB/s"``): a figure written in another unit (3.35 for 3.35 TB/s, 989 for 989
    TFLOP/s) would be a thousandfold off and still print a plausible-looking report."""
    if not low <= value <= high:
        raise PrismError(f"{key}={value:g}: outside {low:g}-{high:g}, where every device lies; give it in {unit}",
                         field=key)


@dataclass
class ModelConfig:
    """A decoder-only transformer (GPT and Llama families), dense or Mixture-of-Experts."""

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
    # Mixture-of-Experts (Megatron-Core's names: --moe-router-topk, --moe-ffn-hidden-size,
    # --moe-shared-expert-intermediate-size, --moe-layer-freq); ignored where num_experts = 0.
    top_k: int = 0  # experts each token is routed to (0: dense)
    moe_ffn_hidden_size: int = 0  # one routed expert's FFN width (0: ffn_hidden_size)
    shared_expert_ffn_hidden_size: int = 0  # all shared experts' FFN width together (0: none)
    moe_layer_freq: int = 1  # every moe_layer_freq-th layer is MoE (Megatron: layer i if i % freq == 0)
    first_dense_layers: int = 0  # leading dense layers (DeepSeek's first_k_dense_replace)
    router_score: str = "softmax"  # softmax | sigmoid (DeepSeek-V3)
    moe_balancing: str = "aux_loss"  # aux_loss | aux_free (DeepSeek's bias-based) | none
    # Multi-head latent attention (DeepSeek-V2/V3, arXiv 2405.04434 sec. 2.1): the low-rank
    # query and key-value compressions; 0: standard (grouped-query) attention.
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0  # the decoupled RoPE part of each query/key head (head_dim: its no-RoPE part)
    v_head_dim: int = 0  # value head width (0: head_dim)
    # Sliding-window (local) attention: each query attends to at most attention_window keys
    # before it (0: the whole causal prefix), in every layer but each global_attention_every-th
    # (layer i attends globally where (i + 1) % N == 0; 0: none does). Megatron-Core's
    # --window-size and --window-attn-skip-freq, Hugging Face's sliding_window and layer_types.
    attention_window: int = 0
    global_attention_every: int = 0
    # Multi-token prediction modules the architecture defines (DeepSeek-V3, arXiv 2412.19437 sec. 2.2:
    # each one more transformer layer predicting a further token through the shared output head;
    # config.json num_nextn_predict_layers). Trained only where parallel.mtp_layers says so.
    mtp_layers: int = 0
    # Other names tables and frameworks give the model ("Llama-3.1-8B", "meta-llama/Meta-Llama-3-8B",
    # NeMo's recipe llama31_8b): predictor.core.profiles.match_model reads them.
    aliases: tuple[str, ...] = ()

    def __post_init__(self):
        check_name("model.name", self.name)
        self.aliases = tuple(self.aliases)  # YAML gives a list
        for alias in self.aliases:
            check_name("model.aliases", alias)
        check_switch("model.tied_embeddings", self.tied_embeddings)
        for key, (most, why) in MAX_SIZES.items():
            check_number(f"model.{key}", getattr(self, key), integer=True)
            if getattr(self, key) > most:
                raise PrismError(f"model.{key}={getattr(self, key)}: more than {most:,} ({why}); a typo?",
                                 field=f"model.{key}")
        for key in ("num_experts", "top_k", "moe_ffn_hidden_size", "shared_expert_ffn_hidden_size",
                    "first_dense_layers", "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "v_head_dim",
                    "attention_window", "global_attention_every", "mtp_layers"):
            check_number(f"model.{key}", getattr(self, key), integer=True, zero=True)
        check_number("model.moe_layer_freq", self.moe_layer_freq, integer=True)
        if self.num_experts:
            if not 1 <= self.top_k <= self.num_experts:
                raise PrismError(f"model.top_k={self.top_k}: must be 1..model.num_experts={self.num_experts} "
                                 f"(each token picks top_k of the routed experts); "
                                 f"{'raise' if self.top_k < 1 else 'lower'} top_k",
                                 field="model.top_k")
            if self.first_dense_layers >= self.num_layers:
                raise PrismError(f"model.first_dense_layers={self.first_dense_layers}: leaves no MoE layer of "
                                 f"model.num_layers={self.num_layers}; lower it", field="model.first_dense_layers")
        if self.global_attention_every and not self.attention_window:
            raise PrismError(f"model.global_attention_every={self.global_attention_every}: says which layers attend "
                             f"beyond a sliding window, and model.attention_window is 0 (every layer attends "
                             f"globally); give the window, or set global_attention_every=0",
                             field="model.global_attention_every")
        for key, kind in (("router_score", RouterScore), ("moe_balancing", Balancing)):
            choice(kind, getattr(self, key), f"model.{key}")
        if bool(self.kv_lora_rank) != bool(self.qk_rope_head_dim):
            raise PrismError(f"model.kv_lora_rank={self.kv_lora_rank}, model.qk_rope_head_dim="
                             f"{self.qk_rope_head_dim}: multi-head latent attention needs both (or neither)",
                             field="model.kv_lora_rank")
        if self.num_heads % self.num_kv_heads:
            raise PrismError(f"model.num_kv_heads={self.num_kv_heads}: must divide model.num_heads={self.num_heads} "
                             f"(each key-value head serves a group of query heads); pick a divisor of "
                             f"{self.num_heads}", field="model.num_kv_heads")
        for key, kind in (("family", Family), ("activation", Activation), ("norm", Norm), ("position", Position)):
            choice(kind, getattr(self, key), f"model.{key}")


#: What a device can be: an accelerator the host drives asynchronously, or the host itself.
DEVICE_KINDS = values(DeviceKind)


@dataclass
class DeviceSpec:
    kind: str  # gpu | cpu
    name: str
    compute_capability: float = 0.0  # CUDA's (9.0 Hopper, 10.0 Blackwell); 0: none (a CPU)
    sms: int = 0  # streaming multiprocessors (0: a CPU)
    match: list[str] = field(default_factory=list)
    # exponentials (MUFU.EX2) the special function units return per clock per SM; 0: not stated.
    # Read by the attention_sfu adjustment (predictor/latency/adjustments/attention_sfu.py)
    exp2_per_clk_per_sm: float = 0.0


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
    gpus_per_node: int  # GPUs of one host (one OS image, one set of NICs): 8 in a DGX, 4 in a GB200 compute tray
    # GPUs that share one NVLink (NVSwitch) domain, where it is larger than a node: 72 in a
    # GB200/GB300 NVL72 rack (18 trays of 4). Collectives inside it run at the NVLink
    # bandwidth (predictor.core.mesh places groups by domain); null: one node.
    nvlink_domain: int | None = None


@dataclass
class VariabilitySpec:
    spatial_cv: float
    temporal_cv: float
    comm_regime_cv: float
    interruptions_per_gpu_day: float
    checkpoint_interval_min: float
    restart_cost_min: float


@dataclass
class HostSpec:
    """The host side of a device (docs/method.md, Composer step 2): whether the device runs
    asynchronously from the host (CUDA: the host issues work ahead and the device waits
    only when the host falls behind; a CPU runs the framework and the kernels in turn),
    and the priors of the host ops (:data:`predictor.core.ops.HOST_OPS`) where no host
    samples exist: per eager framework call, the CPU side of the forward (Python, module
    and autograd.Function calls, the dispatcher, autograd's recording) and of the backward
    (the autograd engine's node), the device API's kernel launch, one collective's issue,
    one DTensor tensor-parallel pair of linear layers and one activation-checkpointed block,
    each in each pass. Each profile cites its figures."""

    asynchronous: bool
    dispatch_us: float
    autograd_us: float
    launch_us: float
    collective_launch_us: float
    dtensor_fwd_us: float  # one DTensor tensor-parallel pair (column- then row-parallel linear) in the forward
    dtensor_bwd_us: float  # the same pair's backward
    checkpoint_fwd_us: float  # one checkpointed block's wrapper in the forward
    checkpoint_bwd_us: float  # one checkpointed block's recomputation set-up in the backward, its calls aside


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
    host: HostSpec
    train_dtype: str = "bfloat16"  # the precision of compute ops when training on it
    # The linear layers' GEMMs where they run in another precision than train_dtype
    # (predictor.core.precision: float8 tensor-wise, float8_blockwise, mxfp8, nvfp4; attention,
    # norms and element-wise ops stay in train_dtype); null = train_dtype. A precision
    # without a peak_flops entry is refused.
    gemm_dtype: str | None = None
    # Which GEMMs run in gemm_dtype (predictor.core.precision.LOW_PRECISION_OPS): the linear
    # layers (gemm) and the experts (grouped_gemm) by default; one of them for recipes that
    # convert only that kind (torchao's "MXFP8 for Grouped GEMMs only").
    gemm_ops: list[str] = field(default_factory=lambda: list(LOW_PRECISION_OPS))
    # Another profile whose operator models this one borrows when it has none of its own:
    # a GPU with the same compute die (H200 = H100's GH100), so the models' efficiency
    # relative to the roofline floor carries over; the floor is this profile's.
    models_from: str | None = None
    # Whether power_w is a whole module's, its CPU included (GH200's datasheet gives only the
    # module's 450-1000 W), where the other profiles' are the GPU board's: compare says so
    # beside the energy it reckons from it.
    power_includes_cpu: bool = False

    def __post_init__(self):
        check_name("hardware.name", self.name, folder=True)
        check_switch("hardware.power_includes_cpu", self.power_includes_cpu)
        for key, kind in (("device", DeviceSpec), ("memory", MemorySpec), ("node", NodeSpec),
                          ("network", NetworkSpec), ("variability", VariabilitySpec), ("host", HostSpec),
                          ("peak_flops", dict)):
            if not isinstance(getattr(self, key), kind):  # a section of the YAML built by hand, or left out
                raise PrismError(f"hardware.{key}={getattr(self, key)!r}: must be a {kind.__name__} (see the "
                                 f"{key} section of conf/hardware/h100-sxm.yaml)", field=f"hardware.{key}")
        choice(DeviceKind, self.device.kind, "hardware.device.kind", "choose {or_options}")
        # 0 is "none" (a CPU, or not given); a negative figure picked the wrong attention kernel or SM share
        check_number("hardware.device.compute_capability", self.device.compute_capability, zero=True)
        check_number("hardware.device.sms", self.device.sms, integer=True, zero=True)
        check_number("hardware.device.exp2_per_clk_per_sm", self.device.exp2_per_clk_per_sm, zero=True)
        if self.device.kind == "gpu" and not self.device.sms:  # would price the SMs userbuffers and DeepEP hold at none
            raise PrismError("hardware.device.sms=0: a GPU's streaming multiprocessor count, e.g. 132 on an H100 SXM "
                             "(0 is a CPU's, of hardware.device.kind=cpu)", field="hardware.device.sms")
        for dtype, peak in self.peak_flops.items():
            if peak is not None:  # null: the device has no such precision
                check_number(f"hardware.peak_flops.{dtype}", peak)
                check_unit(f"hardware.peak_flops.{dtype}", peak, 1e9, 1e18, "FLOP/s, e.g. 989.5e+12 for 989.5 TFLOP/s")
        check_number("hardware.memory.bandwidth", self.memory.bandwidth)
        check_unit("hardware.memory.bandwidth", self.memory.bandwidth, 1e9, 1e15,
                   "bytes/s, e.g. 3.35e+12 for 3.35 TB/s")
        check_number("hardware.memory.capacity_gib", self.memory.capacity_gib)
        check_unit("hardware.memory.capacity_gib", self.memory.capacity_gib, 1e-4, 1e6, "GiB, e.g. 80")
        check_number("hardware.memory.l2_bytes", self.memory.l2_bytes, integer=True, zero=True)
        check_number("hardware.node.gpus_per_node", self.node.gpus_per_node, integer=True)
        if self.node.nvlink_domain is not None:
            check_number("hardware.node.nvlink_domain", self.node.nvlink_domain, integer=True)
            if self.node.nvlink_domain % self.node.gpus_per_node:
                raise PrismError(f"hardware.node.nvlink_domain={self.node.nvlink_domain}: must be a multiple of "
                                 f"hardware.node.gpus_per_node={self.node.gpus_per_node} (a domain holds whole "
                                 f"nodes); e.g. 72 for an NVL72 rack of 4-GPU trays, or null",
                                 field="hardware.node.nvlink_domain")
        # an unknown name is refused here; a known one the device lacks (nvfp4 on H100) when a
        # prediction needs its peak (peak()), so that a profile can be composed and then edited
        choice(TrainDtype, self.train_dtype, "hardware.train_dtype",
               "choose one of {options} (fp8 and fp4 GEMMs go in hardware.gemm_dtype; the rest of the model stays "
               "in train_dtype)")
        self.gemm_dtype = canonical_gemm_dtype(self.gemm_dtype)
        check_gemm_ops(self.gemm_ops)
        for side in ("intra_node", "inter_node"):
            link = getattr(self.network, side)
            check_number(f"hardware.network.{side}.bandwidth", link.bandwidth)
            check_unit(f"hardware.network.{side}.bandwidth", link.bandwidth, 1e6, 1e14,
                       "bytes/s per GPU and direction, e.g. 50e+9 for one 400 Gb/s NIC")
            check_number(f"hardware.network.{side}.latency_us", link.latency_us, zero=True)
            if link.latency_us:  # 0: a link priced by bandwidth alone
                check_unit(f"hardware.network.{side}.latency_us", link.latency_us, 0.01, 1e5,
                           "microseconds, e.g. 5.0 for 5 us (5e-06 is 5 us in seconds)")
            if link.nics_per_node is not None:
                check_number(f"hardware.network.{side}.nics_per_node", link.nics_per_node, integer=True)
        # null: unknown, and left out of cost and energy; the ranges hold every card's list price
        # and board power (a GB200 superchip's 2,700 W for two GPUs), a thousandfold either side
        for key, low, high, unit in (("price_per_gpu_hour", 1e-3, 1e3, "USD per GPU-hour, e.g. 2.49"),
                                     ("power_w", 1.0, 1e4, "watts per GPU, e.g. 700")):
            if getattr(self, key) is not None:
                check_number(f"hardware.{key}", getattr(self, key))
                check_unit(f"hardware.{key}", getattr(self, key), low, high, unit)
        spread = self.variability
        for key in ("spatial_cv", "temporal_cv", "comm_regime_cv", "interruptions_per_gpu_day", "restart_cost_min"):
            check_number(f"hardware.variability.{key}", getattr(spread, key), zero=True)
        for key in ("spatial_cv", "temporal_cv", "comm_regime_cv"):
            if getattr(spread, key) >= 1:  # a share, not percent: 5 would spread steps over 100x
                raise PrismError(f"hardware.variability.{key}={getattr(spread, key)}: a coefficient of variation is "
                                 f"a share below 1 (0.03 for 3%)", field=f"hardware.variability.{key}")
        check_number("hardware.variability.checkpoint_interval_min", spread.checkpoint_interval_min)
        check_switch("hardware.host.asynchronous", self.host.asynchronous)
        for key in ("dispatch_us", "autograd_us", "launch_us", "collective_launch_us", "dtensor_fwd_us",
                    "dtensor_bwd_us", "checkpoint_fwd_us", "checkpoint_bwd_us"):
            check_number(f"hardware.host.{key}", getattr(self.host, key), zero=True)

    @property
    def nvlink_domain(self) -> int:
        """GPUs of one NVLink domain: ``node.nvlink_domain``, else one node."""
        return self.node.nvlink_domain or self.node.gpus_per_node

    @property
    def mfu_peak(self) -> float:
        """The peak MFU is reckoned against: the GEMMs' precision's where ``gemm_dtype`` sets
        one, since fp8 and fp4 recipes run nearly all the model's FLOPs there (against
        bf16's, an nvfp4 Llama 3 405B on GB300 came to 137%), else the training precision's."""
        return self.peak(self.gemm_dtype or self.train_dtype)

    def peak(self, dtype: str) -> float:
        value = peak_of(self.peak_flops, dtype)  # float8_blockwise: float8's where not listed
        if not value and dtype == self.gemm_dtype:
            raise no_peak(self.name, dtype, self.peak_flops)
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
    recompute: str = "none"  # none | selective | per_op | full (core.layout.RECOMPUTES)
    sharding: str = "none"  # none | zero1 | zero2 | zero3 | fsdp | distributed_optimizer
    schedule: str = "1f1b"  # 1f1b | interleaved | gpipe (predictor.core.layout.SCHEDULES)
    attention: str = "auto"  # auto (the framework's own) | flash (FlashAttention-2) | cudnn | unfused
    overlap_grad_reduce: bool = True
    # Sharded optimizers: the updated weights' all-gather runs under the next forward
    # (Megatron --overlap-param-gather, FSDP prefetch).
    overlap_param_gather: bool = True
    # TP collectives run under the layer's GEMMs (Megatron --tp-comm-overlap, torchtitan
    # async TP); off: they run between them.
    overlap_tp_comm: bool = False
    # Megatron's loss fused (--cross-entropy-loss-fusion; NeMo's GPTConfig turns it on): one
    # pass as torch's cross entropy makes; off, Megatron's default: its fp32 passes
    # (predictor.workload.decompose.loss_op). Other frameworks run torch's either way.
    loss_fusion: bool = False
    # Mixture-of-Experts (Megatron-Core): expert tensor parallelism (--expert-tensor-parallel-size;
    # 1 as torchtitan's default and Megatron's MoE model zoo set it), the token dispatcher
    # (--moe-token-dispatcher-type: alltoall, flex = DeepEP/HybridEP, allgather), the
    # capacity factor (--moe-expert-capacity-factor; 0: dropless) and forced balanced routing
    # (--moe-router-force-load-balancing, a benchmarking switch).
    etp: int = 1
    moe_dispatcher: str = "alltoall"  # alltoall | flex | allgather (predictor.workload.layers.dispatch_bytes)
    moe_capacity_factor: float = 0.0
    moe_force_balance: bool = False
    # Megatron-Core --overlap-moe-expert-parallel-comm: the expert-parallel all-to-alls of one
    # micro-batch run under another's compute (1F1B A2A overlap).
    overlap_ep_comm: bool = False
    # The layers captured in CUDA graphs (Megatron-Core --cuda-graph-impl / cuda_graph_scope,
    # torch.cuda.graphs): on a GPU each pass's host work is one graph launch per layer, where
    # eager PyTorch issues every kernel and framework call (predictor.workload.host).
    cuda_graphs: bool = False
    # Megatron-Core --recompute-modules under recompute=selective, comma-separated: core_attn
    # layernorm mlp moe moe_act shared_experts mla_up_proj (predictor.core.layout.RECOMPUTE_MODULES);
    # empty: core_attn, the classic selective recompute (Korthikanti et al. 2022).
    recompute_modules: str = ""
    # Megatron-Core --mtp-num-layers: multi-token prediction modules trained beside the model, on
    # the last pipeline stage, each one more transformer layer and the output layer and loss again
    # (megatron/core/transformer/multi_token_prediction.py); NeMo's and Megatron-Bridge's DeepSeek-V3
    # recipes train the one the architecture defines (model.mtp_layers).
    mtp_layers: int = 0

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
    seq_lengths: list[int] = field(default_factory=list)  # the targets' sequence lengths; [] = each model's own
    # a CPU host of several ranks: the budget's part for timing targeted ops beside a neighbouring
    # rank (sampling.cpu.co_run); 0: none
    co_run_share: float = 0.25
    # timed repeats of each task of the collective job (collectives, dtensor pairs): a CPU's
    # small collectives vary 0.6-7.6 ms between repeats (gloo's threads waking); ten repeats
    # gave the sizes of 1-140 KB medians of 1.4-4.9 ms where all of them pool to 2.8
    collective_repeats: int = 30
    # passes over the compute plan, each timing its share of every shape's repeats, so that a
    # shape's repeats span the run: a CPU slice's speed wanders by 1.5x over tens of seconds
    # (5 s medians of one gemm), and repeats timed back to back catch one moment
    rounds: int = 1
    # a compute call timed while the hypervisor took more than this share of the busy CPU time
    # (DISTURBING_STEAL) is timed again, at most steal_retakes times
    max_steal: float = DISTURBING_STEAL
    steal_retakes: int = 2
    seed: int = 0
    flush_every_s: float = 2.0
    # a cluster job: how long a rank may be silent (a collective's wait, a rank's record) before it
    # counts as hung or lost and the others go on without it
    rank_timeout_s: float = 600.0

    def __post_init__(self):
        # NaN passes every "below the minimum" test of the plan's checks (a NaN budget never ends)
        for key in ("budget_s", "collective_share", "max_call_ms", "co_run_share", "flush_every_s", "rank_timeout_s",
                    "max_steal"):
            check_number(f"sampling.{key}", getattr(self, key), zero=True)


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
    # steps timed beyond ``steps`` at most, in place of those the hypervisor disturbed (DISTURBING_STEAL)
    steal_retakes: int = 10


@dataclass
class RegressorConfig:
    name: str
    quantiles: list[float]
    params: dict = field(default_factory=dict)

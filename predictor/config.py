"""Configuration: Hydra composes ``conf/``; plain dataclasses type-check each section.

``load_config(overrides)`` returns the composed :class:`omegaconf.DictConfig`;
``section(cfg, "sampling", SamplingConfig)`` turns one group into a checked dataclass.
Every failure becomes one :class:`PrismError` that names the key and the fix.
"""
from __future__ import annotations

import functools

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from predictor.errors import PrismError

REPO_ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = Path(os.environ.get("PRISM_CONF_DIR", REPO_ROOT / "conf"))
GROUPS = ("model", "hardware", "parallel", "sampling", "regressor", "measure")


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
    nics_per_node: Optional[int] = None


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
    peak_flops: dict[str, Optional[float]]
    memory: MemorySpec
    node: NodeSpec
    network: NetworkSpec
    price_per_gpu_hour: Optional[float]
    power_w: Optional[float]
    variability: VariabilitySpec
    train_dtype: str = "bfloat16"  # the precision of compute ops when training on it
    # The linear layers' GEMMs where they run in another precision than train_dtype:
    # float8 for torchtitan's Float8 linears or Transformer Engine fp8; null = train_dtype.
    gemm_dtype: Optional[str] = None
    # Another profile whose operator models this one borrows when it has none of its own:
    # a GPU with the same compute die (H200 = H100's GH100), so the models' efficiency
    # relative to the roofline floor carries over; the floor is this profile's.
    models_from: Optional[str] = None

    def peak(self, dtype: str) -> float:
        value = self.peak_flops.get(dtype)
        if not value:
            raise PrismError(f"hardware.peak_flops.{dtype}: {self.name} has no {dtype} peak; "
                             f"pick a dtype it supports ({', '.join(k for k, v in self.peak_flops.items() if v)})")
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
    schedule: str = "1f1b"  # 1f1b | interleaved | gpipe | zero_bubble
    attention: str = "flash"  # flash (fused kernel) | unfused (baddbmm + softmax + bmm)
    overlap_grad_reduce: bool = True
    # Sharded optimizers: the updated weights' all-gather runs under the next forward
    # (Megatron --overlap-param-gather, FSDP prefetch).
    overlap_param_gather: bool = True
    # TP collectives run under the layer's GEMMs (Megatron --tp-comm-overlap, torchtitan
    # async TP); off: they run between them.
    overlap_tp_comm: bool = False


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
    trace_dir: Optional[str] = None  # also write torch.profiler traces of trace_steps more steps here
    trace_steps: int = 3


@dataclass
class RegressorConfig:
    name: str
    quantiles: list[float]
    params: dict = field(default_factory=dict)


def _check_override(text: str) -> None:
    try:
        OverridesParser.create().parse_overrides([text])
    except HydraException:
        raise PrismError(
            f"malformed override {text!r}: write key=value, e.g. sampling.budget_s=60, "
            f"hardware=local-cpu or sampling.ops=[gemm,attention]") from None


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def load_config(overrides: list[str] = ()) -> DictConfig:
    """Compose ``conf/config.yaml`` with Hydra overrides (``key=value`` strings)."""
    for text in overrides:
        _check_override(text)
        key, _, value = text.lstrip("+~").partition("=")
        if key in GROUPS and value not in group_options(key):
            raise PrismError(f"{key}={value}: no conf/{key}/{value}.yaml; "
                             f"choose one of: {', '.join(group_options(key))}")
    try:
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            return compose("config", overrides=list(overrides))
    except (HydraException, OmegaConfBaseException) as exc:
        cause = exc.__cause__
        if isinstance(cause, OmegaConfBaseException) and getattr(cause, "full_key", None):
            raise PrismError(f"{cause.full_key}: no such setting; `prism <verb> --show-config` "
                             f"lists the settings (to add a new key anyway: +{cause.full_key}=...)") from None
        raise PrismError(f"configuration: {' '.join(str(exc).split())}") from None


def section(cfg: DictConfig, name: str, schema: type):
    """Check ``cfg[name]`` against the dataclass ``schema`` and return an instance."""
    node = cfg.get(name)
    if node is None:
        raise PrismError(f"{name}: missing from the configuration")
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), node)
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", "") or ""
        msg = str(exc).splitlines()[0]
        raise PrismError(f"{name}.{key}: {msg}" if key else f"{name}: {msg}") from None


def load_entry(group: str, name: str, schema: type):
    """One entry of a config group (``conf/<group>/<name>.yaml``), outside any composed config."""
    path = CONF_DIR / group / f"{name}.yaml"
    if not path.exists():
        raise PrismError(f"{group} {name!r}: no conf/{group}/{name}.yaml; "
                         f"choose one of: {', '.join(group_options(group))}")
    return section(OmegaConf.create({group: OmegaConf.load(path)}), group, schema)


def load_hardware(name: str) -> HardwareConfig:
    return load_entry("hardware", name, HardwareConfig)


def match_hardware(gpu: str) -> str | None:
    """The ``conf/hardware`` profile whose ``device.name`` or ``device.match`` entry best
    fits a GPU name (spaces and case ignored). The longest match wins, so
    ``NVIDIAGH200120GB`` is gh200 (``GH200``), not h200 (``H200``)."""
    def norm(text):
        return re.sub(r"\s+", "", str(text)).lower()
    key, best = norm(gpu), (0, None)
    for name, candidates in _device_names():
        for candidate in candidates:
            c = norm(candidate)
            if c and c in key and len(c) > best[0]:
                best = (len(c), name)
    return best[1]


@functools.lru_cache(maxsize=1)
def _device_names() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Each hardware profile's device name and ``match`` aliases, read once per process
    (batch predictions match a GPU name per row)."""
    entries = []
    for name in group_options("hardware"):
        device = OmegaConf.load(CONF_DIR / "hardware" / f"{name}.yaml").get("device") or {}
        entries.append((name, (str(device.get("name", "")), *map(str, device.get("match") or []))))
    return tuple(entries)


def load_model(name: str) -> ModelConfig:
    return load_entry("model", name, ModelConfig)

"""The string choices of PRISM's settings, each an enumeration, and the one check of them.

A setting that takes one of a few names (``parallel.recompute``, ``parallel.schedule``,
``model.norm``, ``output`` ...) is declared here once, as a :class:`StrEnum`: a member is
its string (``Recompute.FULL == "full"``, hashed and formatted as it), so the specs keep
plain strings and code comparing them to text keeps working. :func:`choice` checks a
value against one and refuses anything else with one :class:`PrismError` naming the
setting and its options; the wording of that line is the caller's template, so that every
refusal reads as it always did (``parallel.schedule='x': unknown; choose one of: 1f1b,
interleaved, gpipe``).

Python 3.10 has no :class:`enum.StrEnum` (3.11 added it); a small one stands in there.
This module imports nothing but :mod:`enum`, so ``prism --help`` stays light.
"""
from __future__ import annotations

import enum
from typing import TypeVar

from predictor.core.errors import PrismError

try:
    from enum import StrEnum
except ImportError:  # Python 3.10
    class StrEnum(str, enum.Enum):  # type: ignore[no-redef]
        """A member is its string: ``==``, ``hash``, ``str()`` and ``format`` as the text."""

        __str__ = str.__str__
        __format__ = str.__format__

        @staticmethod
        def _generate_next_value_(name, start, count, last_values):
            return name.lower()


E = TypeVar("E", bound=StrEnum)

#: The default wording of a refusal: ``{options}`` lists every choice (``a, b, c``) and
#: ``{or_options}`` the same ending in "or" (``a, b or c``).
UNKNOWN = "unknown; choose one of: {options}"


def values(kind: type[StrEnum]) -> tuple[str, ...]:
    """The choices of ``kind`` as plain strings, in declaration order."""
    return tuple(member.value for member in kind)


def options(kind: type[StrEnum], last: str = ", ") -> str:
    """The choices of ``kind`` as a list in words: ``a, b, c``, or with ``last=" or "``
    ``a, b or c``."""
    names = values(kind)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + last + names[-1]


def choice(kind: type[E], value, field: str, say: str = UNKNOWN, *, quoted: bool = True, written=None) -> E:
    """``value`` as a member of ``kind``, or one :class:`PrismError` naming ``field``:
    ``{field}={value!r}: {say}`` (``{value}`` unquoted where not ``quoted``; ``written`` in
    its place where given: the value as written, where ``value`` is its normalised reading),
    ``say`` a template of ``{options}`` and ``{or_options}`` (:data:`UNKNOWN` by default)."""
    try:
        return kind(value)
    except (ValueError, TypeError):
        pass
    value = value if written is None else written
    shown = repr(value) if quoted else value
    text = say.format(options=options(kind), or_options=options(kind, " or "))
    raise PrismError(f"{field}={shown}: {text}", field=field)


# ---------------------------------------------------------------- a model (ModelConfig)

class Family(StrEnum):
    """Model families: GPT layers keep dropout (its masks count in the activations), Llama's do not."""

    GPT = "gpt"
    LLAMA = "llama"


class Activation(StrEnum):
    GELU = "gelu"
    SWIGLU = "swiglu"


class Norm(StrEnum):
    LAYERNORM = "layernorm"
    RMSNORM = "rmsnorm"


class Position(StrEnum):
    LEARNED = "learned"
    ROPE = "rope"


class RouterScore(StrEnum):
    """A Mixture-of-Experts router's scores: softmax, or sigmoid (DeepSeek-V3)."""

    SOFTMAX = "softmax"
    SIGMOID = "sigmoid"


class Balancing(StrEnum):
    """How a router balances its experts: an auxiliary loss, DeepSeek's bias (aux-free), or none."""

    AUX_LOSS = "aux_loss"
    AUX_FREE = "aux_free"
    NONE = "none"


# ---------------------------------------------------------------- a hardware profile (HardwareConfig)

class DeviceKind(StrEnum):
    """An accelerator the host drives asynchronously, or the host itself."""

    GPU = "gpu"
    CPU = "cpu"


class TrainDtype(StrEnum):
    """Precisions a whole model trains in (mixed precision's compute type); lower ones are GEMM-only."""

    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"
    FLOAT32 = "float32"


class GemmDtype(StrEnum):
    """The precisions ``hardware.gemm_dtype`` may name (null: the GEMMs run in train_dtype)."""

    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"
    FLOAT8 = "float8"
    FLOAT8_BLOCKWISE = "float8_blockwise"
    MXFP8 = "mxfp8"
    NVFP4 = "nvfp4"


# ---------------------------------------------------------------- a parallel layout (ParallelConfig)

class Recompute(StrEnum):
    NONE = "none"
    SELECTIVE = "selective"
    PER_OP = "per_op"
    FULL = "full"


class Sharding(StrEnum):
    NONE = "none"
    ZERO1 = "zero1"
    ZERO2 = "zero2"
    ZERO3 = "zero3"
    FSDP = "fsdp"
    DISTRIBUTED_OPTIMIZER = "distributed_optimizer"


class Schedule(StrEnum):
    ONE_F_ONE_B = "1f1b"
    INTERLEAVED = "interleaved"
    GPIPE = "gpipe"


class Attention(StrEnum):
    """auto (the framework's own), flash (FlashAttention-2), cudnn, flash_triton (FlashAttention's
    Triton kernel, llm-foundry's attn_impl: triton), unfused."""

    AUTO = "auto"
    FLASH = "flash"
    CUDNN = "cudnn"
    FLASH_TRITON = "flash_triton"
    UNFUSED = "unfused"


class Dispatcher(StrEnum):
    """Megatron-Core's --moe-token-dispatcher-type: alltoall, flex (DeepEP/HybridEP), allgather."""

    ALLTOALL = "alltoall"
    FLEX = "flex"
    ALLGATHER = "allgather"


# ---------------------------------------------------------------- the models (RegressorConfig)

class Learner(StrEnum):
    """The learners ``regressor.name`` picks among: predictor.latency.regressor's QuantileXGBRegressor."""

    XGBOOST = "xgboost"


# ---------------------------------------------------------------- the verbs' settings

class Output(StrEnum):
    """What ``output=`` prints (``--json`` is ``output=json``)."""

    TABLE = "table"
    JSON = "json"


class RankBy(StrEnum):
    """``prism search``'s ranking statistic of the step time."""

    P50 = "p50"
    P90 = "p90"
    P95 = "p95"
    MEAN = "mean"


class MeasureDevice(StrEnum):
    """``measure.device``: auto follows the hardware profile."""

    AUTO = "auto"
    CPU = "cpu"
    CUDA = "cuda"


class MeasureBackend(StrEnum):
    """``measure.backend``: auto follows the device (gloo on CPU, NCCL on CUDA)."""

    AUTO = "auto"
    GLOO = "gloo"
    NCCL = "nccl"

"""Import PyTorch profiler (Kineto, Chrome-trace JSON) traces into the sample store.

Users already hold traces of their jobs: ``torch.profiler.profile(record_shapes=True)``
exported with ``export_chrome_trace``, one file per rank. :func:`import_trace` reads
them as a stream (:mod:`predictor.data.importers.chrome_json`) and turns every operator
call it recognises into one sample row (origin ``trace``), timed *in situ*: inside the
real step, with its neighbours' cache traffic and the framework around it.

How a call becomes a row
------------------------
- **Forward.** The outermost recognised op on a thread is one instance of a PRISM op:
  ``aten::linear``/``mm``/``addmm``/``matmul`` -> gemm, ``aten::bmm``/``baddbmm`` -> bmm,
  ``aten::scaled_dot_product_attention`` (and its flash/efficient/cudnn kernels) ->
  attention, ``aten::rms_norm``/``layer_norm``, ``aten::embedding``,
  ``aten::cross_entropy_loss``, ``aten::gelu``, ``aten::_grouped_mm`` -> grouped_gemm
  (Mixture-of-Experts experts: m the mean tokens per group), an out-of-place ``aten::add`` of two
  same-shape activations at model level -> residual_add, and ``Optimizer.step#Adam*``
  -> optimizer_step (parameters and tensors counted from its per-tensor or foreach
  ``lerp_``). Python-level composites (RoPE written as mul/cat, SwiGLU as silu x mul)
  have no aten op of their own: a ``torch.profiler.record_function("prism::<op>")``
  region names them, as PRISM's reference model does; their shape is read from the
  first op inside.
- **Backward.** Autograd records which forward op created each backward node (the
  ``Sequence number`` both carry). Every node created inside a forward instance is
  charged to that instance's backward row: a linear's dX and dW GEMMs, or all the
  small nodes of an RMSNorm, add up to one ``bwd`` call as PRISM's vocabulary defines it.
- **Collectives.** ``record_param_comms`` (NCCL) gives the collective, message size and
  group; gloo's ``gloo:<collective>`` regions give the collective and the buffer (the
  group is the only multi-rank process group of the job, else the row is skipped).
- **DTensor.** Under tensor parallelism through DTensor a GEMM is recorded twice: the
  DTensor op with the global tensor's shape, around the local op that ran on the shard,
  its time the shard's kernel and DTensor's dispatch together. Such calls are counted and
  left out (not yet read per shard); a plain GEMM's nested ops have its own shape.
- **Latency.** On a GPU trace an instance's latency is the summed duration of the
  kernels it launched (linked by ``External id``); on a CPU trace it is the wall time
  of the op (forward) or of its backward nodes (backward).

Everything else is counted, not dropped silently: the outermost unrecognised CPU ops
and backward nodes with their total time, and GPU kernels no recognised op launched.

Profiler steps
--------------
Where the trace marks steps (``ProfilerStep#N``, from ``prof.step()``), the importer also
samples the host side of the step: the time the recognised calls leave unexplained on the
step's thread (views, copies, autograd's own bookkeeping, Python). On a CPU trace each gap
between recognised calls is charged to the pass of the compute call that follows it, and
each step's forward and backward gaps become one ``dispatch`` row each (a host op, origin
``trace``), whose ``launches`` are the framework calls the composer counts around those
calls on a CPU (:data:`predictor.workload.host.CALLS`, ``cpu-eager``): models trained on
the traces then compose the framework time the steps measured, per call as the composer
counts them. The gaps before the optimizer step and after it are not charged: under DDP
they hold the wait for the last gradient all-reduce, which the composer composes as
communication. The report also gives the unexplained time per recognised compute call
over the whole step (:func:`framework_us_per_call`). GPU traces get neither: their
kernels run asynchronously to the CPU that records the steps.

A profiled step that ran over :data:`DISTURBED_STEP` times the median step (three steps or
more) caught the machine in another state: its calls, every one slowed at once, would enter
the samples as each call's own spread. Its calls (begun within it, on any thread) and its
framework time are left out, and the report names it.

The profiler's own cost
-----------------------
On a CPU trace every recorded event costs wall time inside its parent's duration and the
step's. ``prism measure`` measures that cost per event on the machine it traces
(:func:`sampling.tracing.profiler_cost_us`) and writes it into each trace
(``prism_profiler_cost_us``); the importer takes it off every call per event recorded
inside it, and off the framework time per event recorded outside the calls. For other
traces give it as ``profiler_cost_us=`` (the report says when it is not known). The cost is
a mean: on a busy CPU a short call with events inside can measure less than their mean
cost. Such a call is kept at :data:`FLOOR_US` (counted in the report), not dropped: a
dropped call would leave its op's cheapest calls out of the samples and its framework
calls out of the ``dispatch`` rows' count.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from predictor.core.errors import PrismError
from predictor.core.ops import DTYPE_BYTES, OPS
from predictor.core.profiles import fits_profile, load_hardware, match_hardware
from predictor.data import store
from predictor.data.importers.chrome_json import TraceStream
from predictor.workload.host import CALLS, HOOK_CALLS_PER_TENSOR, host_family

IMPORTER_VERSION = 1
#: The region torch DDP records around each forward (one per micro-batch it runs).
_DDP_FORWARD = "DistributedDataParallel.forward"

#: Profiler "Input type" / collective "dtype" spellings -> vocabulary dtypes.
_DTYPES = {"float": "float32", "Float": "float32", "c10::BFloat16": "bfloat16", "BFloat16": "bfloat16",
           "c10::Half": "float16", "Half": "float16", "c10::Float8_e4m3fn": "float8", "Float8_e4m3fn": "float8"}
#: Ops whose input types are the instance's compute dtype (autocast casts inside linear).
_CORE = re.compile(r"^aten::(mm|addmm|bmm|baddbmm|_scaled_dot_product_\w+|_flash_attention_forward)$")
_BACKWARD = "autograd::engine::evaluate_function: "
_ANNOTATION = re.compile(r"^prism::(\w+)$")
_OPTIMIZER = re.compile(r"^Optimizer\.step#(\w+)\.step$")
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
#: A profiled step that ran over this many times the median step caught the machine in
#: another state (a pre-empted core, a collector's pause, a page-in burst): its calls, all
#: slowed at once, would enter the samples as each call's own spread, which the composer sums
#: as independent and centred on the mean. It is left out and named in the report.
DISTURBED_STEP = 2.0
#: No recorded event lasts longer (us): a trace covers a few steps, and one op of an hour is
#: a corrupt duration, not a slow call.
MAX_EVENT_US = 3.6e9
#: The least time a CPU call is kept at once the profiler's cost is taken off: about what
#: PyTorch's cheapest eager call takes on a CPU (samples/local-cpu dispatch fwd: 2.7 us per
#: call, module calls 5.8-6.5 us: conf/hardware/a100-sxm4-80gb.yaml, host.dispatch_us).
FLOOR_US = 1.0
_GLOO = re.compile(r"^gloo:(\w+)$")
_COLLECTIVES = {  # c10d / gloo collective names -> vocabulary
    "allreduce": "all_reduce", "all_reduce": "all_reduce", "allreduce_coalesced": "all_reduce",
    "allgather": "all_gather", "all_gather": "all_gather", "_allgather_base": "all_gather",
    "all_gather_into_tensor": "all_gather", "allgather_into_tensor_coalesced": "all_gather",
    "reduce_scatter": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter", "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "all_to_all": "all_to_all", "alltoall": "all_to_all", "alltoall_base": "all_to_all",
    "all_to_allv": "all_to_all", "send": "send_recv", "recv": "send_recv",
}
#: The op an Adam step runs once per parameter tensor (or once over all, foreach/fused).
_PARAMETER_COUNTERS = ("aten::lerp_", "aten::_foreach_lerp_", "aten::_fused_adamw_", "aten::_fused_adam_")
_KERNEL_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
# A forward op's sequence number is kept until its backward node arrives; forward ops that
# never get one (no grad) would pile up, so the oldest are forgotten past this many.
_MAX_PENDING_SEQ = 1 << 20


def _numel(dims) -> int:
    return int(np.prod(dims)) if dims else 1


def _dtype(args: dict, index: int = 0) -> str | None:
    types = args.get("Input type") or []
    return _DTYPES.get(types[index]) if index < len(types) else None


def _dims(args: dict) -> list:
    return args.get("Input Dims") or []


def _gemm(name: str, args: dict):
    """(op, shape) of a matrix product from its input dims, or None for other layouts."""
    d = _dims(args)
    if name == "aten::linear" and len(d) >= 2 and len(d[1]) == 2 and d[0]:
        return "gemm", {"m": _numel(d[0][:-1]), "n": d[1][0], "k": d[1][1]}
    a, b = (d[1], d[2]) if name in ("aten::addmm", "aten::baddbmm") and len(d) >= 3 else (d[:2] + [[], []])[:2]
    if len(a) >= 2 and len(b) == 2 and a[-1] == b[0]:  # [..., m, k] @ [k, n]
        return "gemm", {"m": _numel(a[:-1]), "n": b[1], "k": b[0]}
    if len(a) == 3 and len(b) == 3 and a[0] == b[0] and a[2] == b[1]:
        return "bmm", {"batch": a[0], "m": a[1], "n": b[2], "k": a[2]}
    if len(a) == 4 and len(b) == 4 and a[:2] == b[:2] and a[3] == b[2]:  # [b, h, m, k] @ [b, h, k, n]
        return "bmm", {"batch": a[0] * a[1], "m": a[2], "n": b[3], "k": a[3]}
    return None


def _grouped_mm(name: str, args: dict):
    """(grouped_gemm, shape) of torch's grouped matrix product (the experts of a
    Mixture-of-Experts layer, torchtitan's MoE): tokens [total, k] against expert weights
    [experts, k, n] split by offsets (each expert's mean share: ``m = total / experts``),
    or [experts, m, k] @ [experts, k, n]."""
    d = _dims(args)
    if len(d) < 2 or len(d[1]) != 3:
        return None
    a, (groups, k, n) = d[0], d[1]
    if len(a) == 2 and a[1] == k:
        return "grouped_gemm", {"batch": groups, "m": max(1, a[0] // groups), "n": n, "k": k}
    if len(a) == 3 and a[0] == groups and a[2] == k:
        return "grouped_gemm", {"batch": groups, "m": a[1], "n": n, "k": k}
    return None


def _attention(name: str, args: dict):
    d = _dims(args)
    if len(d) < 3 or len(d[0]) != 4 or len(d[1]) != 4:
        return None
    concrete = args.get("Concrete Inputs") or []
    # SDPA(q, k, v, attn_mask, dropout_p, is_causal, ...); the fused kernels take is_causal 5th too
    # except _scaled_dot_product_flash_attention(q, k, v, dropout_p, is_causal, ...).
    index = 4 if name in ("aten::_scaled_dot_product_flash_attention",
                          "aten::_scaled_dot_product_flash_attention_for_cpu") else 5
    causal = len(concrete) > index and concrete[index] == "True"
    (b, h, sq, hd), (_, kv, skv, _) = d[0], d[1]
    return "attention", {"batch": b, "heads": h, "kv_heads": kv, "seq_q": sq, "seq_kv": skv,
                         "head_dim": hd, "causal": causal}


def _tokens_hidden(op: str):
    def shape(name: str, args: dict):
        d = _dims(args)
        return (op, {"tokens": _numel(d[0][:-1]), "hidden": d[0][-1]}) if d and d[0] else None
    return shape


def _embedding(name: str, args: dict):
    d = _dims(args)
    if len(d) >= 2 and len(d[0]) == 2:
        return "embedding", {"tokens": _numel(d[1]), "hidden": d[0][1], "vocab": d[0][0]}
    return None


def _cross_entropy(name: str, args: dict):
    d = _dims(args)
    if d and len(d[0]) == 2:
        return "cross_entropy", {"tokens": d[0][0], "vocab": d[0][1]}
    return None


def _residual_add(name: str, args: dict):
    d = _dims(args)
    if len(d) >= 2 and len(d[0]) == 3 and d[0] == d[1]:  # [batch, seq, hidden] + the same
        return "residual_add", {"tokens": _numel(d[0][:-1]), "hidden": d[0][-1]}
    return None


#: aten op name -> its (op, shape) reader. The outermost match on a thread wins.
FORWARD = {
    "aten::linear": _gemm, "aten::matmul": _gemm, "aten::mm": _gemm, "aten::addmm": _gemm,
    "aten::bmm": _gemm, "aten::baddbmm": _gemm,
    "aten::scaled_dot_product_attention": _attention,
    "aten::_scaled_dot_product_flash_attention": _attention,
    "aten::_scaled_dot_product_flash_attention_for_cpu": _attention,
    "aten::_scaled_dot_product_efficient_attention": _attention,
    "aten::_scaled_dot_product_cudnn_attention": _attention,
    "aten::rms_norm": _tokens_hidden("rmsnorm"), "aten::layer_norm": _tokens_hidden("layernorm"),
    "aten::gelu": _tokens_hidden("gelu"), "aten::embedding": _embedding,
    "aten::cross_entropy_loss": _cross_entropy, "aten::add": _residual_add,
    "aten::_grouped_mm": _grouped_mm,
}
def _region_shape(op: str, first_op: str, d: list) -> dict | None:
    """The shape of a ``prism::<op>`` region from the first input of the first op inside it:
    rope's q or k ``[batch, heads, seq, head_dim]``; an activation's ``[..., hidden]``, or
    SwiGLU's fused ``[..., 2 * hidden]`` when the region starts by splitting it."""
    if op == "rope" and len(d) == 4:
        return {"tokens": d[0] * d[2], "heads": d[1], "head_dim": d[3]}
    if op in ("swiglu", "gelu", "residual_add", "rmsnorm", "layernorm") and len(d) >= 2:
        fused = op == "swiglu" and first_op in ("aten::chunk", "aten::split", "aten::split_with_sizes")
        return {"tokens": _numel(d[:-1]), "hidden": d[-1] // 2 if fused else d[-1]}
    return None


@dataclass
class _Instance:
    """One recognised call: its op, shape and dtype, and the time charged to each pass."""

    op: str
    shape: dict | None
    dtype: str | None
    cpu_us: dict = field(default_factory=lambda: defaultdict(float))
    nested: dict = field(default_factory=lambda: defaultdict(int))  # events recorded inside, per pass
    gpu_us: dict = field(default_factory=lambda: defaultdict(float))
    ranks: list | None = None  # a collective's global ranks, where the trace gives them
    ts: float = 0.0  # when its first call began (us): the profiled step it belongs to
    sharded: bool = False  # a DTensor op: its shape the global tensor's, its kernel a shard's


@dataclass
class _Frame:
    end: float
    owner: tuple | None  # (instance, pass) charged for the work inside
    backward: bool  # inside an autograd backward node
    unknown: bool  # inside an outermost unrecognised op (its children are not counted again)


@dataclass
class TraceReport:
    """What :func:`import_trace` wrote, and what it could not map."""

    run_file: str
    run_id: str
    hardware: str
    device_name: str
    files: int
    trace_mb: float
    events: int
    rows: int
    rows_per_op: dict[str, int]
    kind: str  # cpu (op wall times) | gpu (kernel times)
    steps: int
    step_ms_median: float | None  # of the steps kept
    disturbed_steps: list[dict]  # {file, step, ms} of each step left out (:func:`disturbed_steps`)
    attributed_share: float | None  # of the profiled step time, in recognised instances
    profiler_cost_us: float | None  # per recorded event, taken off CPU timings (None: not known)
    op_overhead_us: float | None  # unexplained step time per compute instance (CPU traces)
    unknown_ops: list[dict] = field(default_factory=list)  # {name, calls, total_ms}
    unknown_kernels: list[dict] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> count
    floored: dict[str, int] = field(default_factory=dict)  # "op pass" -> calls kept at FLOOR_US
    elapsed_s: float = 0.0

    def table(self) -> str:
        lines = [f"run file       {self.run_file}",
                 f"hardware       {self.hardware}  (device {self.device_name}, {self.kind} trace)",
                 f"read           {self.files} file(s), {self.trace_mb:.1f} MB, {self.events:,} events "
                 f"({self.elapsed_s:.1f} s)",
                 f"rows           {self.rows}: " + ", ".join(f"{k} {v}" for k, v in self.rows_per_op.items())]
        if self.steps:
            lines.append(f"steps          {self.steps} profiled, median {self.step_ms_median:.1f} ms; recognised "
                         f"ops cover {self.attributed_share:.0%} of it")
        if self.disturbed_steps:
            ran = ", ".join(f"{d['file']} step #{d['step']} ran {d['ms']:.1f} ms" for d in self.disturbed_steps)
            lines.append(f"disturbed      {ran}, over {DISTURBED_STEP:g}x the median: its calls were left out "
                         f"(the machine in another state, not the calls' own spread)")
        if self.kind == "cpu":
            lines.append(f"profiler cost  {self.profiler_cost_us:.2f} us per recorded event, taken off every timing"
                         if self.profiler_cost_us is not None else
                         "profiler cost  not known: CPU timings include the profiler's own (give profiler_cost_us=)")
        if self.op_overhead_us is not None:
            lines.append(f"framework time {self.op_overhead_us:.1f} us per compute call (the rest of the step; "
                         f"its forward and backward gaps are stored as dispatch rows, the host op)")
        for title, items in (("unknown ops", self.unknown_ops), ("unknown kernels", self.unknown_kernels)):
            if items:
                total = sum(i["calls"] for i in items)
                shown = ", ".join(f"{i['name']} x{i['calls']} ({i['total_ms']:.1f} ms)" for i in items[:8])
                lines.append(f"{title:<14} {total} calls of {len(items)} kinds, by time: {shown}")
        for reason, n in self.skipped.items():
            lines.append(f"skipped        {n} {reason}")
        if self.floored:
            lines.append(f"{f'at {FLOOR_US:g} us':<15}" + ", ".join(f"{n} {what}" for what, n in self.floored.items())
                         + " calls: shorter than the profiler's mean cost of the events inside them (kept)")
        return "\n".join(lines)


def _identity(e: dict) -> bytes:
    """What fixes a recorded event: what ran, where and when. A trace is known by its events'
    (run metadata ``event_fingerprints``), so the same trace gzipped or written again by another
    JSON tool (whitespace, key order) is known as the same. Their arguments stay out: no two
    recordings share every event's start to the nanosecond, and rendering them as well (sorted
    JSON) cost 14 us an event against 3.5 on this machine's CPU trace events, where the whole
    import takes about 8 (docs/validation-log.md, the 502 MB trace: 11.5 s for 1.38 M events)."""
    return repr((e.get("ph"), e.get("cat"), e.get("name"), e.get("pid"), e.get("tid"), e.get("ts"),
                 e.get("dur"))).encode("utf-8", "backslashreplace")


def _fingerprint(path: Path) -> str | None:
    """The SHA-256 of a trace file's bytes (None where it cannot be read: the reader names why).
    Runs imported before the events' fingerprint (``event_fingerprints``, :func:`_identity`) hold
    only this one, so it still refuses their files, byte for byte, and before any file is read."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def _refuse_copies(paths: list[Path], fingerprints: list[str | None], alike: str) -> None:
    """Refuse two files of the same trace (``alike`` says how they match): a copy of one
    rank's trace read as another rank would count its calls twice."""
    first = {}
    for path, fingerprint in zip(paths, fingerprints):
        if fingerprint is not None and first.setdefault(fingerprint, path) != path:
            raise PrismError(f"{first[fingerprint]} and {path} hold the same trace ({alike}); "
                             f"pass each rank's trace once", field=str(path))


def _refuse_imported_before(paths: list[Path], fingerprints: list[str | None], out, key: str) -> None:
    """Refuse a file whose fingerprint (the run metadata's ``key``) a trace run of the store
    ``out`` already holds: its calls would be counted twice, and a regressor's quantiles
    weighted toward that one job."""
    wanted = {f: p for p, f in zip(paths, fingerprints) if f is not None}
    if not wanted or not Path(out).is_dir():
        return
    for run in sorted(Path(out).glob("trace-*.parquet")):
        try:
            held = store.read_run_metadata(run).get(key) or []
        except (PrismError, ValueError):
            continue  # a damaged run file: the verbs that read the store name it
        for fingerprint in held:
            if fingerprint in wanted:
                raise PrismError(f"{wanted[fingerprint]}: this trace was imported already, as {run}; importing it "
                                 f"again would count its steps twice. Delete that run file first to import it "
                                 f"anew, or import into another out=", field=str(wanted[fingerprint]))


class _TraceReader:
    """The state of reading one rank's trace (see the module doc)."""

    def __init__(self, path: Path):
        self.path = path
        self.instances: list[_Instance] = []
        self.stacks: dict[tuple, list[_Frame]] = defaultdict(list)
        self.seq_owner: dict[int, _Instance | None] = {}
        self.ext_owner: dict[int, tuple] = {}
        self.kernels: list[tuple[int, str, float]] = []
        self.unknown_ops: Counter = Counter()
        self.unknown_ms: Counter = Counter()
        self.skipped: Counter = Counter()
        self.shapeless: Counter = Counter()  # calls of FORWARD ops without "Input Dims"
        self.shaped = 0  # calls of FORWARD ops with them
        self.steps: list[dict] = []  # {tid, start, end, attributed_us, compute_instances}
        self.events = 0
        self.metadata: dict = {}
        self.digest = hashlib.sha256()  # of the events' identities (:func:`_identity`), as they stream

    def read(self) -> dict:
        """Stream the file; return its top-level metadata."""
        stream = TraceStream(self.path)
        self.metadata = stream.metadata  # filled as it streams: the rank comes before the events
        saw_op = False
        non_finite, first_bad = Counter(), None  # field -> events
        for e in stream.events():
            self.events += 1
            self.digest.update(_identity(e))
            if e.get("ph") != "X":
                continue
            cat = e.get("cat")
            try:
                # json reads NaN and Infinity; no profiler writes them, and a NaN time fails every
                # comparison, so the calls around it vanish from the rows without a word
                bad = [k for k in ("ts", "dur") if not math.isfinite(float(e.get(k, 0.0)))]
                dur = float(e.get("dur", 0.0))
                bad += ["dur < 0"] * (dur < 0) + ["dur over an hour"] * (MAX_EVENT_US < dur < math.inf)  # nor these
                if bad:
                    non_finite.update(bad)
                    first_bad = first_bad or (self.events, e.get("name"))
                    continue
                if cat in _KERNEL_CATS:
                    self.kernels.append((e.get("args", {}).get("External id"), e.get("name", "?"), float(e["dur"])))
                elif cat in ("cpu_op", "user_annotation", "python_function"):
                    saw_op = True
                    self._cpu_event(e)
            except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
                what = (f"is malformed: it lacks its {exc.args[0]!r} field" if isinstance(exc, KeyError) else
                        f"is malformed: a field of the wrong type or form ({exc})")
                raise PrismError(f"{self.path}: event {self.events} ({e.get('name')!r}) {what}; a profiler event "
                                 f"has a name, numeric ts and dur (us) and args; export the trace again with "
                                 f"torch.profiler (export_chrome_trace)", field=str(self.path)) from None
        if non_finite:
            counts = " and ".join(f"{k} in {n:,} events" for k, n in sorted(non_finite.items()))
            raise PrismError(f"{self.path}: non-finite or impossible times (NaN, Infinity, dur < 0 or over an hour): "
                             f"{counts}, first "
                             f"at event {first_bad[0]} ({first_bad[1]!r}); the trace is corrupt, export it again with "
                             f"torch.profiler (export_chrome_trace)", field=str(self.path))
        if not saw_op:
            raise PrismError(f"{self.path}: a Chrome trace without PyTorch operator events (cpu_op); not a "
                             f"PyTorch profiler trace, or one recorded without ProfilerActivity.CPU",
                             field=str(self.path))
        if self.shapeless and not self.shaped:  # its compute calls would all be unknown ops, none a row
            calls = ", ".join(f"{n} x{c}" for n, c in self.shapeless.most_common(4))
            raise PrismError(f"{self.path}: recorded without shapes (no Input Dims on its {calls}), and a sample "
                             f"is a call of a known shape; record the trace again with "
                             f"torch.profiler.profile(..., record_shapes=True)", field=str(self.path))
        return stream.metadata

    def _cpu_event(self, e: dict) -> None:
        name, args = e.get("name", ""), e.get("args") or {}
        ts, dur = float(e["ts"]), float(e.get("dur", 0.0))
        if name in FORWARD:
            if "Input Dims" in args:
                self.shaped += 1
            else:
                self.shapeless[name] += 1
        stack = self.stacks[(e.get("pid"), e.get("tid"))]
        while stack and stack[-1].end <= ts:
            stack.pop()
        parent = stack[-1] if stack else _Frame(math.inf, None, False, False)
        if _STEP.match(name):
            self.steps.append({"number": int(_STEP.match(name).group(1)), "tid": e.get("tid"), "start": ts,
                               "end": ts + dur, "attributed_us": 0.0,
                               "compute_instances": 0, "loose_events": 0, "calls": [], "loose": [], "ddp_forwards": 0})
            stack.append(_Frame(ts + dur, None, False, False))
            return
        owner, frame = parent.owner, None
        if owner is not None:
            instance, pass_ = owner
            instance.nested[pass_] += 1
            if instance.shape is None and pass_ == "fwd" and _dims(args):  # a prism:: region's first op
                first = _dims(args)[0]
                instance.shape = _region_shape(instance.op, name, first) if first else None
                instance.dtype = instance.dtype or _dtype(args)
            if pass_ == "fwd" and _CORE.match(name):
                instance.dtype = _dtype(args) or instance.dtype
            if pass_ == "fwd" and instance.op == "gemm" and name in FORWARD:
                inner = FORWARD[name](name, args)  # under DTensor the local matmul is another shape
                instance.sharded |= inner is not None and inner[0] == "gemm" and inner[1] != instance.shape
            if instance.op == "optimizer_step" and name in _PARAMETER_COUNTERS:
                self._count_parameters(instance, name, args)
            frame = _Frame(ts + dur, owner, parent.backward, False)
        else:
            frame = self._new_owner(name, args, ts, dur, parent, e.get("tid"))
            step = self._step_at(ts, e.get("tid"))
            if step is not None:  # its recording cost lands outside every recognised call
                step["loose_events"] += 1
                step["loose"].append(ts)
                step["ddp_forwards"] += name == _DDP_FORWARD
        seq, fwd_tid = args.get("Sequence number"), args.get("Fwd thread id")
        if seq is not None and fwd_tid == 0 and not frame.backward:
            # The last forward op recorded with a sequence number is the one that created the node.
            self.seq_owner[seq] = frame.owner[0] if frame.owner and frame.owner[1] == "fwd" else None
            if len(self.seq_owner) > _MAX_PENDING_SEQ:
                del self.seq_owner[next(iter(self.seq_owner))]
        if frame.owner is not None and "External id" in args:
            self.ext_owner[args["External id"]] = frame.owner
        stack.append(frame)

    def _new_owner(self, name: str, args: dict, ts: float, dur: float, parent: _Frame, tid) -> _Frame:
        end = ts + dur
        if name.startswith(_BACKWARD):
            instance = self.seq_owner.pop(args.get("Sequence number"), None)
            if instance is None:
                self._unknown(name[len(_BACKWARD):], dur)
                return _Frame(end, None, True, True)
            first_node = "bwd" not in instance.cpu_us  # a call's backward is one call however many nodes
            instance.cpu_us["bwd"] += dur
            self._charge(ts, dur, tid, instance, "bwd", first=first_node)
            return _Frame(end, (instance, "bwd"), True, False)
        if parent.backward:  # ops inside a backward node we could not attribute
            return _Frame(end, None, True, True)
        mapped = self._forward(name, args)
        if mapped is None:
            if not parent.unknown and _is_op(name):
                self._unknown(name, dur)
            return _Frame(end, None, False, parent.unknown or _is_op(name))
        instance, pass_, compute = mapped
        instance.cpu_us[pass_] += dur
        instance.ts = ts
        self.instances.append(instance)
        self._charge(ts, dur, tid, instance, pass_, first=True, compute=compute)
        return _Frame(end, (instance, pass_), False, False)

    def _forward(self, name: str, args: dict):
        reader = FORWARD.get(name)
        if reader is not None:
            mapped = reader(name, args)
            if mapped is None:
                return None
            op, shape = mapped
            return _Instance(op, shape, _dtype(args)), "fwd", True
        region = _ANNOTATION.match(name)
        if region:
            op = region.group(1)
            if op not in OPS or OPS[op].collective:
                self.skipped[f"prism::{op} regions (no such compute op)"] += 1
                return None
            return _Instance(op, None, None), "fwd", True
        opt = _OPTIMIZER.match(name)
        if opt:
            if not opt.group(1).startswith("Adam"):
                self.skipped[f"{opt.group(1)} optimizer steps (only Adam/AdamW are in the vocabulary)"] += 1
                return None
            return _Instance("optimizer_step", {"params": 0, "tensors": 0, "optimizer": "adamw"}, "float32",
                             ), "step", True
        gloo = _GLOO.match(name)
        if gloo or name == "record_param_comms":
            return self._collective(name, gloo, args)
        return None

    def _collective(self, name: str, gloo, args: dict):
        if gloo:
            op = _COLLECTIVES.get(gloo.group(1))
            dims = _dims(args)
            if op is None or not dims or not isinstance(dims[0], list):
                return None
            dtype = _dtype(args)
            group = None  # the process group: known once the whole file is read (_rows)
            message = _numel(dims[0]) * DTYPE_BYTES.get(dtype or "float32", 4)
        else:
            op = _COLLECTIVES.get(str(args.get("Collective name", "")))
            if op is None:
                self.skipped[f"collective {args.get('Collective name')!r} (not in the vocabulary)"] += 1
                return None
            dtype = _DTYPES.get(str(args.get("dtype")), "float32")
            nelems = args.get("Out msg nelems" if op == "all_gather" else "In msg nelems") or 0
            message = int(nelems) * DTYPE_BYTES[dtype]
            group = int(args.get("Group size") or 2)
        if op == "send_recv":
            group = 2
        shape = {"message_bytes": int(message), "group_size": group}
        instance = _Instance(op, shape, dtype)
        instance.ranks = _ranks(args.get("Process Group Ranks"))
        return instance, "step", False

    @staticmethod
    def _count_parameters(instance: _Instance, name: str, args: dict) -> None:
        first = _dims(args)[0] if _dims(args) else []
        tensors = first if first and isinstance(first[0], list) else [first]  # foreach: a list of dims
        instance.shape["tensors"] += len(tensors)
        instance.shape["params"] += sum(_numel(t) for t in tensors)

    def _step_at(self, ts: float, tid) -> dict | None:
        """The profiler step of thread ``tid`` running at ``ts`` (the latest first: events come in order)."""
        for step in reversed(self.steps):
            if step["start"] <= ts < step["end"] and step["tid"] == tid:
                return step
        return None

    def _charge(self, ts: float, dur: float, tid, instance: _Instance, pass_: str, first: bool,
                compute: bool = True) -> None:
        """Add a recognised call's time (and count: ``first`` of its pass) to the profiler
        step it ran in. A collective is not charged (DDP's run on their own threads,
        overlapping the step) but bounds the framework time around it (:func:`_framework_rows`)."""
        step = self._step_at(ts, tid)
        if step is None:
            return
        step["calls"].append((ts, ts + dur, pass_ if compute else "step", instance if first else None))
        if compute:
            step["attributed_us"] += dur
            step["compute_instances"] += int(first)

    def _unknown(self, name: str, dur: float) -> None:
        self.unknown_ops[name] += 1
        self.unknown_ms[name] += dur / 1e3


def _ranks(value) -> list | None:
    """``Process Group Ranks`` as a list (Kineto writes a list or its string form)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return [int(r) for r in value] if isinstance(value, list) and value else None


def _topology(group: int, ranks: list | None, ranks_per_host: int) -> dict:
    """The nodes a group spans and its ranks per node: from its ranks where given, else
    assuming consecutive ranks (tensor parallel innermost, as Megatron lays them out)."""
    if ranks:
        per_node = Counter(r // ranks_per_host for r in ranks)
        return {"ranks_per_node": max(per_node.values()), "nodes": len(per_node)}
    return {"ranks_per_node": min(group, ranks_per_host), "nodes": max(1, math.ceil(group / ranks_per_host))}


def _is_op(name: str) -> bool:
    """An operator (counted when unrecognised), not a user region or a profiler marker."""
    return name.startswith(("aten::", "c10d::", "_c10d_functional::", "torch::", "fbgemm::", "te::")) \
        or name.endswith("Backward0")


def _group_size(metadata: dict) -> int | None:
    """The group of gloo collectives: the one multi-rank process group of the job."""
    info = metadata.get("distributedInfo") or {}
    sizes = {int(pg.get("pg_size", 0)) for pg in info.get("pg_config") or [] if int(pg.get("pg_size", 0)) > 1}
    if len(sizes) == 1:
        return sizes.pop()
    if not sizes and int(info.get("world_size", 1)) > 1:
        return int(info["world_size"])
    return None


def import_trace(paths, out, hardware: str | None = None, profiler_cost_us: float | None = None,
                 progress: bool = False) -> TraceReport:
    """Read profiler traces (one file per rank) and write their calls as one sample run.

    Parameters
    ----------
    paths : trace files (``.json`` or ``.json.gz``) exported by ``torch.profiler``.
    out : the sample store (a folder) to write ``trace-<hardware>-<stamp>-<id>.parquet`` into.
    hardware : profile of the device traced; default: matched from the trace's GPU name
        (required for CPU traces, which name no device).
    profiler_cost_us : what recording one event costs on the traced CPU; default: the value
        ``prism measure`` writes into its traces (``prism_profiler_cost_us``), else none.
        On CPU traces it is taken off every call per event recorded inside it, and off the
        framework time per event recorded outside the calls.
    progress : show a progress bar over the files.

    Returns
    -------
    TraceReport

    Examples
    --------
    >>> report = import_trace(["rank0.json", "rank1.json"], "samples/trace",
    ...                       hardware="local-cpu")                       # doctest: +SKIP
    >>> report.rows_per_op["gemm"]                                        # doctest: +SKIP
    """
    from tqdm import tqdm

    start = time.monotonic()
    out = store.store_folder(out)
    paths = [Path(p) for p in paths]
    twice = sorted({str(p) for p in paths if sum(q.resolve() == p.resolve() for q in paths) > 1})
    if twice:
        raise PrismError(f"import-trace: {twice[0]} given twice; pass each rank's file once", field=twice[0])
    if not paths:
        raise PrismError("import-trace: no trace files given; pass the JSON files torch.profiler exported",
                         field='import-trace')
    if hardware is not None:
        load_hardware(hardware)  # an unknown name: one line listing the profiles, before any file is read
    if profiler_cost_us is not None and not 0 <= profiler_cost_us < math.inf:
        raise PrismError(f"profiler_cost_us={profiler_cost_us}: give the microseconds (>= 0) one recorded event "
                         f"costs, e.g. 0.5", field='profiler_cost_us')
    fingerprints = [_fingerprint(p) for p in paths]
    _refuse_copies(paths, fingerprints, "identical bytes")
    _refuse_imported_before(paths, fingerprints, out, "fingerprints")  # before the files are read
    readers = []
    for path in tqdm(paths, desc="traces", unit="file", disable=not progress):
        reader = _TraceReader(path)
        reader.read()
        readers.append(reader)
    events = [reader.digest.hexdigest() for reader in readers]
    _refuse_copies(paths, events, "the same events, compressed or formatted otherwise")
    _refuse_imported_before(paths, events, out, "event_fingerprints")
    metadata = readers[0].metadata
    device_props = metadata.get("deviceProperties") or []
    device_name = str(device_props[0].get("name")) if device_props else "cpu"
    kind = "gpu" if any(r.kernels for r in readers) else "cpu"
    if hardware is None:
        hardware = match_hardware(device_name) if device_props else None
        if hardware is None:
            raise PrismError(f"hardware=NAME is required: the trace names no known GPU (device {device_name!r}); "
                             f"give the conf/hardware profile of the machine traced, e.g. hardware=local-cpu",
                             field='hardware')
    elif device_props and (traced := match_hardware(device_name)) not in (None, hardware) \
            and not fits_profile(device_name, hardware):
        # another GPU's profile would file this GPU's kernel times as that GPU's samples; a profile
        # whose names fit the device (the user's own h100-pcie for an H100 PCIe) is the user's to choose
        raise PrismError(f"hardware={hardware}: the trace was recorded on {device_name} (profile {traced}); drop "
                         f"hardware= or give hardware={traced}", field='hardware')
    if profiler_cost_us is None:
        recorded = metadata.get("prism_profiler_cost_us")
        profiler_cost_us = float(recorded) if recorded is not None else None
    cost = (profiler_cost_us or 0.0) if kind == "cpu" else 0.0  # kernel times do not include it
    profile = load_hardware(hardware)
    if profile.device.kind != kind:  # CPU op times are no GPU's kernel times, nor the reverse
        why = "its ops launched GPU kernels" if kind == "gpu" else "no GPU kernels in it"
        example = ", e.g. hardware=local-cpu" if kind == "cpu" else ""
        raise PrismError(f"hardware={hardware}: a {profile.device.kind.upper()} profile, but {paths[0]} is a "
                         f"{kind.upper()} trace ({why}); give the profile of the machine traced{example}",
                         field='hardware')
    world = int((metadata.get("distributedInfo") or {}).get("world_size", len(readers)))
    hosts = {r.metadata.get("host_name") for r in readers}
    # GPUs per host from the profile; a CPU job traced on one host has every rank there
    ranks_per_host = profile.node.gpus_per_node if kind == "gpu" or len(hosts) > 1 else world
    unknown_ops, unknown_ms, unknown_kernels, unknown_kernel_ms, skipped, floored = (Counter() for _ in range(6))
    frames, steps = [], []
    main_steps = [_main_thread_steps(reader) for reader in readers]
    odd = {id(s) for s in disturbed_steps([s for own in main_steps for s in own])}
    disturbed = []
    for reader, own in zip(readers, main_steps):
        windows = [(s["start"], s["end"]) for s in own if id(s) in odd]
        disturbed += [{"file": reader.path.name, "step": s["number"], "ms": (s["end"] - s["start"]) / 1e3}
                      for s in own if id(s) in odd]
        frames.append(_rows(reader, kind, ranks_per_host, cost, unknown_kernels, unknown_kernel_ms, skipped, floored,
                            windows))
        unknown_ops.update(reader.unknown_ops)
        unknown_ms.update(reader.unknown_ms)
        skipped.update(reader.skipped)
        steps += [s for s in own if id(s) not in odd]
    framework = _framework_rows(steps, cost) if kind == "cpu" else []
    if framework:
        frames.append(pd.DataFrame(framework))
    rows = pd.concat(frames, ignore_index=True)
    if rows.empty:  # a run of no rows would be a store that reads as holding none
        unknown = ", ".join(f"{u['name']} x{u['calls']}" for u in _by_time(unknown_ops, unknown_ms)[:6]) or "none"
        raise PrismError(f"{', '.join(map(str, paths))}: no call of an op PRISM recognises (unknown ops, by time: "
                         f"{unknown}" + "".join(f"; skipped {n} {reason}" for reason, n in skipped.items())
                         + "); nothing written. Trace training steps of a PyTorch model (its aten::linear, "
                         "scaled_dot_product_attention, layer_norm, ... calls are the samples)", field=str(paths[0]))
    step_us = np.array([s["end"] - s["start"] for s in steps])
    attributed = np.array([s["attributed_us"] for s in steps])
    instances = np.array([s["compute_instances"] for s in steps])
    profiler_us = cost * np.array([s["loose_events"] for s in steps], dtype=float)
    share = float(attributed.sum() / step_us.sum()) if len(steps) else None
    if share is not None and share > 1.01:  # calls nest in their step: more time in them than in it is corruption
        raise PrismError(f"{', '.join(map(str, paths))}: the recognised calls last {share:.3g} times the profiled "
                         f"steps they lie in; their durations (dur) are corrupt: export the trace again with "
                         f"torch.profiler (export_chrome_trace)", field=str(paths[0]))
    overhead = framework_us_per_call(step_us - profiler_us, attributed, instances) if kind == "cpu" else None
    run_id = f"trace-{store.new_run_id(hardware)}"  # two imports within a second get two runs
    rows = rows.assign(hardware=hardware, device_name=device_name, world_size=world, run_id=run_id,
                       host=str(metadata.get("host_name") or ""), origin="trace",
                       timestamp=pd.Timestamp.now(tz="UTC"), backend=str(
                           (metadata.get("distributedInfo") or {}).get("backend") or ""))
    rows["repeat"] = rows.groupby(["op", "pass", "dtype"] + [c for c in store.SHAPE_COLUMNS
                                                             if c in rows], dropna=False).cumcount()
    meta = {"importer": "trace", "importer_version": IMPORTER_VERSION, "hardware": hardware,
            "files": [str(p) for p in paths], "fingerprints": fingerprints,
            "event_fingerprints": events, "kind": kind,
            "profiler_cost_us": profiler_cost_us,
            "steps": len(steps), "step_us": step_us.tolist(), "profiler_us": profiler_us.tolist(),
            "disturbed_steps": disturbed,
            "attributed_us": attributed.tolist(), "compute_instances": instances.tolist(),
            "op_overhead_us": overhead}
    run_file = str(store.write_run(rows, out, run_id, meta))
    return TraceReport(
        run_file=run_file, run_id=run_id, hardware=hardware, device_name=device_name, files=len(paths),
        trace_mb=sum(p.stat().st_size for p in paths) / 1e6, events=sum(r.events for r in readers),
        rows=len(rows), rows_per_op=dict(Counter(rows["op"])), kind=kind,
        steps=len(steps), step_ms_median=float(np.median(step_us) / 1e3) if len(steps) else None,
        disturbed_steps=disturbed, attributed_share=share,
        profiler_cost_us=profiler_cost_us if kind == "cpu" else None,
        op_overhead_us=overhead, unknown_ops=_by_time(unknown_ops, unknown_ms),
        unknown_kernels=_by_time(unknown_kernels, unknown_kernel_ms), skipped=dict(skipped), floored=dict(floored),
        elapsed_s=time.monotonic() - start)


def disturbed_steps(steps: list[dict]) -> list[dict]:
    """The profiled steps of ``steps`` (every file's, each rank's own) that ran over
    :data:`DISTURBED_STEP` times their median: none unless three steps or more were profiled,
    of two neither is the odd one out. A step is its file's: ``prism measure`` writes one per
    file, each numbered alike by its own profiler cycle."""
    if len(steps) < 3:
        return []
    median = float(np.median([s["end"] - s["start"] for s in steps]))
    return [s for s in steps if s["end"] - s["start"] > DISTURBED_STEP * median]


def _main_thread_steps(reader: _TraceReader) -> list[dict]:
    """The profiled steps of the thread that ran the training loop (the one with most)."""
    main = Counter(s["tid"] for s in reader.steps).most_common(1)
    return [s for s in reader.steps if main and s["tid"] == main[0][0]]


def framework_samples(paths) -> list[dict]:
    """The ``dispatch`` rows (op, pass, dtype, latency_us, launches) of CPU traces that
    ``prism measure``'s tracing wrote (the profiler's cost in their metadata): the host side
    of each profiled step, as :func:`import_trace` stores it (module doc, "Profiler steps").
    ``prism sample`` samples a CPU's framework time with it (:mod:`sampling.framework`)."""
    rows = []
    for path in paths:
        reader = _TraceReader(Path(path))
        reader.read()
        rows += _framework_rows(_main_thread_steps(reader), float(reader.metadata["prism_profiler_cost_us"]))
    return rows


def _framework_rows(steps: list[dict], cost_us: float) -> list[dict]:
    """Each profiled step's framework time as a ``dispatch`` row per pass (module doc,
    "Profiler steps"): the gaps before the pass's compute calls, less the profiler's cost
    of the events recorded in them, over the framework calls the composer counts around
    those calls on a CPU."""
    table = CALLS[host_family(None, asynchronous=False)]
    rows = []
    for step in steps:
        loose = np.sort(step["loose"])
        gap, launches, last = {"fwd": 0.0, "bwd": 0.0}, {"fwd": 0, "bwd": 0}, step["start"]
        for start, end, pass_, instance in sorted(step["calls"], key=lambda c: c[:2]):
            if pass_ in gap:
                events = np.searchsorted(loose, start) - np.searchsorted(loose, last)
                gap[pass_] += max(start - last - cost_us * events, 0.0)
                launches[pass_] += table.get(instance.op, (0, 0))[pass_ == "bwd"] if instance else 0
            last = max(last, end)
        # DDP's reducer hook per parameter tensor in each of its backwards, as decompose counts them
        tensors = sum(i.shape["tensors"] for *_, i in step["calls"] if i and i.op == "optimizer_step")
        launches["bwd"] += HOOK_CALLS_PER_TENSOR * tensors * step["ddp_forwards"]
        rows += [{"op": "dispatch", "pass": p, "dtype": "float32", "latency_us": gap[p], "launches": launches[p]}
                 for p in gap if gap[p] > 0 and launches[p] > 0]
    return rows


def _by_time(calls: Counter, ms: Counter) -> list[dict]:
    return [{"name": n, "calls": calls[n], "total_ms": round(ms[n], 3)} for n, _ in ms.most_common()]


def _rows(reader: _TraceReader, kind: str, ranks_per_host: int, cost_us: float, unknown_kernels: Counter,
          unknown_kernel_ms: Counter, skipped: Counter, floored: Counter, disturbed: list[tuple]) -> pd.DataFrame:
    """One row per (instance, pass) of one rank's trace; GPU latencies from its kernels, CPU
    ones less ``cost_us`` per profiler event recorded inside the call (at least
    :data:`FLOOR_US`, counted in ``floored`` by op and pass). Instances begun within a
    ``disturbed`` (start, end) window, on any thread, are left out (:func:`disturbed_steps`)."""
    if kind == "gpu":
        for ext, name, dur in reader.kernels:
            owner = reader.ext_owner.get(ext)
            if owner is None:
                unknown_kernels[name] += 1
                unknown_kernel_ms[name] += dur / 1e3
            else:
                owner[0].gpu_us[owner[1]] += dur
    group = _group_size(reader.metadata)
    rows = []
    for inst in reader.instances:
        if any(start <= inst.ts < end for start, end in disturbed):
            skipped[f"calls in profiled steps that ran over {DISTURBED_STEP:g}x the median step"] += 1
            continue
        if inst.sharded:
            skipped[f"{inst.op} calls of DTensor (tensor parallel): the shape the trace gives is the global "
                    f"tensor's, the time its shard's and DTensor's own; not read per shard yet"] += 1
            continue
        if inst.shape is None or (inst.op == "optimizer_step" and not inst.shape["params"]):
            skipped[f"{inst.op} calls whose shape the trace does not give"] += 1
            continue
        shape = dict(inst.shape)
        if any(isinstance(v, (int, float)) and not isinstance(v, bool) and v <= 0 and c in store.SHAPE_COLUMNS
               for c, v in shape.items() if c not in ("params", "tensors")):  # filled in as the trace is read
            skipped[f"{inst.op} calls with a non-positive size in their shape"] += 1
            continue
        if shape.get("group_size", 1) is None:
            if group is None:
                skipped["gloo collectives of a job with several process groups (group unknown)"] += 1
                continue
            shape["group_size"] = group
        if "group_size" in shape:
            shape.update(_topology(shape["group_size"], inst.ranks, ranks_per_host))
        measured = inst.gpu_us if kind == "gpu" else inst.cpu_us
        for pass_, us in measured.items():
            if not us > 0:
                skipped[f"{inst.op} {pass_} calls without time"] += 1
                continue
            if kind == "cpu" and inst.nested[pass_] and cost_us * inst.nested[pass_] > us - FLOOR_US:
                floored[f"{inst.op} {pass_}"] += 1
                us = min(us, FLOOR_US)
            elif kind == "cpu":
                us -= cost_us * inst.nested[pass_]
            rows.append({"op": inst.op, "pass": pass_, "dtype": inst.dtype or "float32", "latency_us": us, **shape})
    return pd.DataFrame(rows, columns=["op", "pass", "dtype", "latency_us"] if not rows else None)


def framework_us_per_call(step_us: np.ndarray, attributed_us: np.ndarray, calls: np.ndarray) -> float | None:
    """The median over profiled steps of the step time no recognised call explains, per
    recognised compute call (the median: a profiler cycle's first step can run slow)."""
    keep = calls > 0
    if not keep.any():
        return None
    return float(np.median(np.maximum(step_us[keep] - attributed_us[keep], 0.0) / calls[keep]))

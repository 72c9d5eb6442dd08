"""Rules of a parallel layout: the choices each setting takes, which layouts a framework
accepts, how layers split over pipeline stages, and the defaults a layout is completed
with. Every rule about a layout's validity lives here, once; the group sizes and rank
placement it implies live in :mod:`predictor.core.mesh`.
"""
from __future__ import annotations

import numbers
from dataclasses import replace

from predictor.core.errors import PrismError
from predictor.core.specs import DISPATCHERS, ModelConfig, ParallelConfig, check_number

#: The parallel axes a layout names (torchtitan's and Megatron's names), as reports list them.
AXES = ("dp", "tp", "pp", "cp", "ep")
#: The choices of :class:`~predictor.core.specs.ParallelConfig`'s enumerated settings.
SHARDINGS = ("none", "zero1", "zero2", "zero3", "fsdp", "distributed_optimizer")
#: ``selective`` is Megatron's (the attention core, or --recompute-modules); ``per_op`` is
#: torchtitan's per-op selective checkpointing (selective_ac_option='op').
RECOMPUTES = ("none", "selective", "per_op", "full")
SCHEDULES = ("1f1b", "interleaved", "gpipe")
ATTENTIONS = ("auto", "flash", "cudnn", "unfused")
#: Megatron-Core's --recompute-modules (megatron/core/transformer/transformer_config.py).
RECOMPUTE_MODULES = ("core_attn", "layernorm", "mlp", "moe", "moe_act", "shared_experts", "mla_up_proj")


def check_schedule(schedule: str) -> str:
    """``schedule`` as one of :data:`SCHEDULES`, or one error naming ``parallel.schedule``:
    the one place that decides which pipeline schedules PRISM predicts."""
    if schedule == "zero_bubble":
        raise PrismError("parallel.schedule=zero_bubble: not modelled. Zero-bubble pipelines (ZB-H1, Qi et al. "
                         "2024, arXiv 2401.10241) split each backward into its input- and weight-gradient halves "
                         "and delay the latter into the bubble; PRISM's decomposition does not separate them yet. "
                         "Use parallel.schedule=1f1b, whose step is an upper bound on ZB-H1's",
                         field="parallel.schedule")
    if schedule not in SCHEDULES:
        raise PrismError(f"parallel.schedule={schedule!r}: unknown; choose one of: {', '.join(SCHEDULES)}",
                         field="parallel.schedule")
    return schedule


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


#: The layout's whole-number settings.
COUNTS = ("dp", "tp", "pp", "cp", "ep", "etp", "vpp", "micro_batch_size", "global_batch_size")
#: The layout's on/off settings.
SWITCHES = ("sequence_parallel", "overlap_grad_reduce", "overlap_param_gather", "overlap_tp_comm", "loss_fusion",
            "moe_force_balance", "overlap_ep_comm")


def check_recompute_modules(par: ParallelConfig) -> None:
    """``parallel.recompute_modules``: a comma-separated string of known modules, each once,
    under ``recompute=selective`` (the only granularity Megatron reads it under)."""
    text, key = par.recompute_modules, "parallel.recompute_modules"
    if not isinstance(text, str):
        raise PrismError(f"{key}={text!r}: a comma-separated string, e.g. {key}='moe,mlp' (quoted on the command "
                         f"line)", field=key)
    modules = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in modules if m not in RECOMPUTE_MODULES]
    if unknown:
        raise PrismError(f"{key}: {unknown[0]!r} unknown; choose among: {', '.join(RECOMPUTE_MODULES)}", field=key)
    twice = sorted({m for m in modules if modules.count(m) > 1})
    if twice:
        raise PrismError(f"{key}={text!r}: {', '.join(twice)} listed twice; name each module once", field=key)
    if modules and par.recompute != "selective":
        raise PrismError(f"{key}={text!r}: read under parallel.recompute=selective only (got {par.recompute}); set "
                         f"recompute=selective or leave recompute_modules empty", field=key)


def validate_layout(model: ModelConfig, par: ParallelConfig, gpus: int | None = None,
                    seq: int | None = None) -> None:
    """Raise :class:`PrismError` naming the field if ``par`` cannot run ``model``.

    ``gpus`` (when given) must equal dp·tp·pp·cp (expert parallelism folds into tp·cp·dp,
    as in Megatron-Core: :mod:`predictor.core.mesh`); ``seq`` defaults to
    ``model.seq_length``.
    """
    for name in COUNTS:
        check_number(f"parallel.{name}", getattr(par, name), integer=True)
    for name in SWITCHES:
        if not isinstance(getattr(par, name), bool):  # "false" from a CSV or JSON would count as on
            raise PrismError(f"parallel.{name}={getattr(par, name)!r}: true or false", field=f"parallel.{name}")
    if par.sharding not in SHARDINGS:
        raise PrismError(f"parallel.sharding={par.sharding!r}: unknown; choose one of: {', '.join(SHARDINGS)}",
                         field='parallel.sharding')
    if par.recompute not in RECOMPUTES:
        raise PrismError(f"parallel.recompute={par.recompute!r}: unknown; choose one of: {', '.join(RECOMPUTES)}",
                         field='parallel.recompute')
    check_schedule(par.schedule)
    check_recompute_modules(par)
    if par.attention not in ATTENTIONS:
        raise PrismError(f"parallel.attention={par.attention!r}: unknown; choose auto, flash, cudnn or unfused",
                         field='parallel.attention')
    check_number("parallel.moe_capacity_factor", par.moe_capacity_factor, zero=True)  # on a dense model too
    if par.moe_dispatcher not in DISPATCHERS:  # a typo is named on a dense model too, where it does nothing yet
        raise PrismError(f"parallel.moe_dispatcher={par.moe_dispatcher!r}: unknown; choose one of: "
                         f"{', '.join(DISPATCHERS)}", field="parallel.moe_dispatcher")
    tp, name = par.tp, model.name
    if model.num_heads % tp:
        raise PrismError(f"parallel.tp={tp}: does not divide model.num_heads={model.num_heads} of {name}; "
                         f"pick tp among {_divisors(model.num_heads)}", field='parallel.tp')
    if model.num_kv_heads >= tp and model.num_kv_heads % tp:
        raise PrismError(f"parallel.tp={tp}: does not divide model.num_kv_heads={model.num_kv_heads} of {name}; "
                         f"pick tp among {_divisors(model.num_kv_heads)} (or above {model.num_kv_heads}, "
                         f"replicating KV heads)", field='parallel.tp')
    if model.ffn_hidden_size % tp:
        raise PrismError(f"parallel.tp={tp}: does not divide model.ffn_hidden_size={model.ffn_hidden_size} "
                         f"of {name}; pick a tp that divides it", field='parallel.tp')
    if par.pp > model.num_layers:
        raise PrismError(f"parallel.pp={par.pp}: more pipeline stages than model.num_layers="
                         f"{model.num_layers} of {name}; use pp <= {model.num_layers}", field='parallel.pp')
    if par.vpp > 1 and par.schedule != "interleaved":
        raise PrismError(f"parallel.vpp={par.vpp}: virtual stages need parallel.schedule=interleaved "
                         f"(got {par.schedule}); set the schedule or vpp=1", field='parallel.vpp')
    if par.schedule == "interleaved":
        if par.vpp < 2 or par.pp < 2:
            raise PrismError(f"parallel.schedule=interleaved: needs parallel.pp >= 2 and parallel.vpp >= 2 "
                             f"(got pp={par.pp}, vpp={par.vpp}); set vpp or use schedule=1f1b",
                             field='parallel.schedule')
        chunks = par.pp * par.vpp
        if chunks > model.num_layers and (model.num_layers + 2) % chunks:
            raise PrismError(f"parallel.vpp={par.vpp}: pp·vpp = {chunks} model chunks exceed "
                             f"model.num_layers={model.num_layers} (Megatron's embedding and loss slots allow "
                             f"{model.num_layers + 2} when that divides evenly); lower vpp", field='parallel.vpp')
    per_step = par.micro_batch_size * par.dp
    if par.global_batch_size % per_step:
        raise PrismError(f"parallel.global_batch_size={par.global_batch_size}: not a multiple of "
                         f"parallel.micro_batch_size·dp = {par.micro_batch_size}·{par.dp} = {per_step}; "
                         f"use a multiple of {per_step}", field='parallel.global_batch_size')
    seq = model.seq_length if seq is None else seq
    check_number("seq", seq, integer=True)
    if seq % par.cp:
        raise PrismError(f"parallel.cp={par.cp}: does not divide the sequence length {seq}; "
                         f"pick cp among {_divisors(seq) if seq <= 1 << 20 else 'its divisors'}", field='parallel.cp')
    if par.sequence_parallel is True and par.tp > 1 and (seq // par.cp) % par.tp:
        raise PrismError(f"parallel.sequence_parallel: splits each rank's {seq // par.cp} tokens over tp={par.tp} "
                         f"ranks, which does not divide them (Megatron refuses it); pick a sequence length that "
                         f"tp·cp divides or sequence_parallel=false", field='parallel.sequence_parallel')
    if model.num_experts or par.ep > 1 or par.etp > 1:
        _validate_experts(model, par)
    if gpus is not None:
        need = par.world_size
        if gpus != need:
            raise PrismError(f"gpus={gpus}: must equal dp·tp·pp·cp = {par.dp}·{par.tp}·{par.pp}·{par.cp} "
                             f"= {need}; set gpus={need} or change parallel.dp", field='gpus')



def _validate_experts(model: ModelConfig, par: ParallelConfig) -> None:
    """Expert parallelism as Megatron-Core maps it (megatron/core/parallel_state.py,
    ``expert_decoder_rank_generator``): the experts' own mesh etp·ep·expert_dp spans the
    same tp·cp·dp ranks of a pipeline stage as the dense layers' mesh, so ep·etp must
    divide tp·cp·dp and expert_dp = tp·cp·dp / (ep·etp); ep must divide the experts."""
    name, ep, etp = model.name, par.ep, par.etp
    check_number("parallel.etp", etp, integer=True)
    if not model.num_experts:
        axis = "ep" if ep > 1 else "etp"
        raise PrismError(f"parallel.{axis}={getattr(par, axis)}: {name} has no experts (model.num_experts=0); "
                         f"expert parallelism splits the experts of a Mixture-of-Experts model; set "
                         f"parallel.{axis}=1", field=f"parallel.{axis}")
    if model.num_experts % ep:
        raise PrismError(f"parallel.ep={ep}: does not divide model.num_experts={model.num_experts} of {name}; "
                         f"pick ep among {_divisors(model.num_experts)}", field="parallel.ep")
    ranks = par.tp * par.cp * par.dp
    if ep * etp > ranks:
        raise PrismError(f"parallel.ep={ep}: ep·etp = {ep}·{etp} = {ep * etp} is beyond the tp·cp·dp = {ranks} "
                         f"GPUs of a pipeline stage ({par.tp}·{par.cp}·{par.dp}); lower ep or etp, or add GPUs",
                         field="parallel.ep")
    if ranks % (ep * etp):
        raise PrismError(f"parallel.ep={ep}: ep·etp = {ep}·{etp} = {ep * etp} must divide the tp·cp·dp = "
                         f"{par.tp}·{par.cp}·{par.dp} = {ranks} GPUs of a pipeline stage (the experts' mesh "
                         f"etp·ep·expert_dp spans them); pick ep·etp among {_divisors(ranks)}",
                         field="parallel.ep")
    moe_ffn = model.moe_ffn_hidden_size or model.ffn_hidden_size
    if moe_ffn % etp:
        raise PrismError(f"parallel.etp={etp}: does not divide model.moe_ffn_hidden_size={moe_ffn} of {name}; "
                         f"pick etp among its divisors (1 is Megatron's MoE default)", field="parallel.etp")
    if par.tp > 1 and ep > 1 and not par.sequence_parallel:
        raise PrismError(f"parallel.sequence_parallel=False: Megatron-Core requires sequence parallelism with "
                         f"expert and tensor parallelism together (tp={par.tp}, ep={ep}); set "
                         f"parallel.sequence_parallel=true", field="parallel.sequence_parallel")
    check_number("parallel.moe_capacity_factor", par.moe_capacity_factor, zero=True)
    if 0 < par.moe_capacity_factor < 1:
        raise PrismError(f"parallel.moe_capacity_factor={par.moe_capacity_factor}: below 1 drops tokens even "
                         f"under perfect balance; use >= 1, or 0 for dropless", field="parallel.moe_capacity_factor")


def layers_per_stage(num_layers: int, pp: int, vpp: int = 1) -> list[int]:
    """Transformer layers of each pipeline stage.

    Megatron-Core splits the layers evenly over its pp·vpp model chunks. Where they do not
    divide but two more would, it runs with ``--account-for-embedding-in-pipeline-split
    --account-for-loss-in-pipeline-split`` (the embedding and the loss each take a layer's
    slot: Qwen3-235B's 94 layers as 32 chunks of 3; Megatron's
    ``get_num_layers_to_build``), so the first and the last stage hold one layer fewer;
    torchtitan weighs the embedding and the output as a layer each alike
    (``generate_llm_fqn_per_model_part``: Llama 3.1 405B's 126 layers on 8 stages, 15 on
    the first and the last).
    Otherwise ``num_layers // pp`` each, the remainder one apiece to the first stages (so no
    two stages differ by more than one layer; Megatron takes such splits as explicit
    first/last stage layer counts).
    """
    if pp < 1 or num_layers < pp:
        raise PrismError(f"parallel.pp={pp}: needs 1 <= pp <= model.num_layers={num_layers}", field='parallel.pp')
    chunks = pp * vpp
    if num_layers % chunks and (num_layers + 2) % chunks == 0:
        out = [(num_layers + 2) // pp] * pp
        out[0] -= 1
        out[-1] -= 1
        return out
    base, extra = divmod(num_layers, pp)
    return [base + (i < extra) for i in range(pp)]


def with_default_batch(par: ParallelConfig) -> ParallelConfig:
    """``par`` with ``global_batch_size`` 0 replaced by its default: 4·pp micro-batches per
    replica (the 1F1B bubble then stays under a fifth of the step)."""
    if par.global_batch_size == 0:
        par = replace(par, global_batch_size=par.micro_batch_size * par.dp * 4 * par.pp)
    return par


def resolve_layout(par: ParallelConfig, gpus: int | None) -> ParallelConfig:
    """A copy of ``par`` with dp filled from ``gpus``, the default global batch
    (:func:`with_default_batch`), and sequence parallelism off at tp=1, where it splits nothing."""
    for axis in ("tp", "pp", "cp", "dp"):
        check_number(f"parallel.{axis}", getattr(par, axis), integer=True)
    # numpy ints from a DataFrame row as Python ints, so that what is reported is plain JSON
    par = replace(par, **{k: int(v) for k in COUNTS if isinstance(v := getattr(par, k), numbers.Integral)})
    per_replica = par.replica_gpus
    if gpus:
        if par.dp != 1 and par.dp * per_replica != gpus:
            raise PrismError(f"gpus={gpus} and parallel.dp={par.dp} disagree: dp·tp·pp·cp = {par.dp * per_replica}; "
                             f"set one of them (dp follows from gpus where dp is left at 1)", field="parallel.dp")
        if gpus % per_replica:
            raise PrismError(f"gpus={gpus}: not a multiple of tp·pp·cp = {per_replica}; choose gpus or the layout so "
                             f"that gpus = dp·tp·pp·cp", field="gpus")
        par = replace(par, dp=gpus // per_replica)
    if par.sequence_parallel is True and par.tp == 1:  # Megatron turns it off there, with a warning (arguments.py)
        par = replace(par, sequence_parallel=False)
    return with_default_batch(par)

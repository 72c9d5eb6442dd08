"""Rules of a parallel layout: the choices each setting takes, which layouts a framework
accepts, how layers split over pipeline stages, and the defaults a layout is completed
with. Every rule about a layout's validity lives here, once; the group sizes and rank
placement it implies live in :mod:`predictor.core.mesh`.
"""
from __future__ import annotations

import numbers
from dataclasses import replace

from predictor.core.choices import Attention, Dispatcher, Recompute, Schedule, Sharding, choice, values
from predictor.core.errors import PrismError
from predictor.core.framework import load_framework
from predictor.core.specs import ModelConfig, ParallelConfig, check_number

#: The parallel axes a layout names (torchtitan's and Megatron's names), as reports list them.
AXES = ("dp", "tp", "pp", "cp", "ep")
#: The choices of :class:`~predictor.core.specs.ParallelConfig`'s enumerated settings.
SHARDINGS = values(Sharding)
#: ``selective`` is Megatron's (the attention core, or --recompute-modules); ``per_op`` is
#: torchtitan's per-op selective checkpointing (selective_ac_option='op').
RECOMPUTES = values(Recompute)
SCHEDULES = values(Schedule)
ATTENTIONS = values(Attention)
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
    choice(Schedule, schedule, "parallel.schedule")
    return schedule


def divisors(n: int) -> str:
    """``n``'s divisors as a message lists them: "1, 2, 4"."""
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


#: The layout's whole-number settings.
COUNTS = ("dp", "tp", "pp", "cp", "ep", "etp", "vpp", "micro_batch_size", "global_batch_size")
#: The largest job PRISM sizes: 2^24 GPUs, far beyond any cluster, short of the counts
#: whose token and byte totals overflow the models' float features.
MAX_GPUS = 1 << 24
#: The most sequences a step takes, a micro-batch or the global batch: 2^30, a million times
#: the largest published global batches (thousands); past it a figure is a typo, and its
#: count of micro-batches would overflow the schedule's integers.
MAX_BATCH = 1 << 30
#: The most multi-token prediction modules PRISM prices: published recipes train 1 (DeepSeek-V3) or 2.
MAX_MTP_LAYERS = 8
#: The layout's on/off settings.
SWITCHES = ("sequence_parallel", "overlap_grad_reduce", "overlap_param_gather", "overlap_tp_comm", "loss_fusion",
            "moe_force_balance", "overlap_ep_comm", "cuda_graphs")


def check_count(name: str, value, zero: bool = False) -> None:
    """``parallel.<name>`` (one of :data:`COUNTS`): a whole number above zero (at least zero
    where ``zero``), at most :data:`MAX_GPUS` for a degree, :data:`MAX_BATCH` for a batch."""
    key = f"parallel.{name}"
    check_number(key, value, integer=True, zero=zero)
    most, what = (MAX_BATCH, "sequences") if name.endswith("batch_size") else (MAX_GPUS, "GPUs")
    if value > most:
        shown = f"{value:,}" if value < 10**12 else f"{value:.3e}"
        raise PrismError(f"{key}={shown}: more than {most:,} {what}, far past any published job; a typo?", field=key)


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


def selective_modules(recompute: str, modules: str) -> frozenset[str]:
    """The modules selective recompute re-runs in the backward: ``modules`` (the
    comma-separated ``parallel.recompute_modules``) or, empty, Megatron's default, the
    attention core; none under another ``recompute``."""
    if recompute != "selective":
        return frozenset()
    return frozenset(m.strip() for m in modules.split(",") if m.strip()) or frozenset({"core_attn"})


def validate_layout(model: ModelConfig, par: ParallelConfig, gpus: int | None = None,
                    seq: int | None = None) -> None:
    """Raise :class:`PrismError` naming the field if ``par`` cannot run ``model``.

    ``gpus`` (when given) must equal dp·tp·pp·cp (expert parallelism folds into tp·cp·dp,
    as in Megatron-Core: :mod:`predictor.core.mesh`); ``seq`` defaults to
    ``model.seq_length``.
    """
    for name in COUNTS:
        check_count(name, getattr(par, name))
    if par.world_size > MAX_GPUS:
        raise PrismError(f"parallel: dp·tp·pp·cp = {par.world_size:,} GPUs, more than the {MAX_GPUS:,} PRISM sizes; "
                         f"lower parallel.dp", field="parallel.dp")
    for name in SWITCHES:
        if not isinstance(getattr(par, name), bool):  # "false" from a CSV or JSON would count as on
            raise PrismError(f"parallel.{name}={getattr(par, name)!r}: true or false", field=f"parallel.{name}")
    choice(Sharding, par.sharding, "parallel.sharding")
    choice(Recompute, par.recompute, "parallel.recompute")
    check_schedule(par.schedule)
    check_recompute_modules(par)
    choice(Attention, par.attention, "parallel.attention", "unknown; choose {or_options}")
    check_number("parallel.moe_capacity_factor", par.moe_capacity_factor, zero=True)  # on a dense model too
    check_number("parallel.mtp_layers", par.mtp_layers, integer=True, zero=True)
    if par.mtp_layers > MAX_MTP_LAYERS:
        raise PrismError(f"parallel.mtp_layers={par.mtp_layers}: more than {MAX_MTP_LAYERS} multi-token prediction "
                         f"modules (published recipes train 1 or 2); a typo?", field="parallel.mtp_layers")
    choice(Dispatcher, par.moe_dispatcher, "parallel.moe_dispatcher")  # a typo named on a dense model too
    tp, name = par.tp, model.name
    if model.num_heads % tp:
        raise PrismError(f"parallel.tp={tp}: does not divide model.num_heads={model.num_heads} of {name}; "
                         f"pick tp among {divisors(model.num_heads)}", field='parallel.tp')
    if model.num_kv_heads >= tp and model.num_kv_heads % tp:
        raise PrismError(f"parallel.tp={tp}: does not divide model.num_kv_heads={model.num_kv_heads} of {name}; "
                         f"pick tp among {divisors(model.num_kv_heads)} (or above {model.num_kv_heads}, "
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
    if par.cp > 1 and seq % (2 * par.cp):
        # Load-balanced context parallelism cuts the causal sequence into 2·cp equal chunks and gives
        # rank r chunks r and 2·cp-1-r (Megatron-Core's get_batch_on_this_cp_rank views it as
        # [2·cp, seq/(2·cp)]; Transformer Engine's attention with cp needs each rank's tokens even)
        total = gpus or par.world_size  # a cp the job's GPUs do not split into tp·pp·cp is no fix either
        fits = [d for d in range(2, min(seq // 2, 1 << 12) + 1)
                if seq % (2 * d) == 0 and total % (par.tp * par.pp * d) == 0]
        pick = f"cp among {', '.join(map(str, fits))} (or 1, none)" if fits else "cp=1 (no context parallelism)"
        raise PrismError(f"parallel.cp={par.cp}: the sequence of {seq} tokens (model.seq_length) does not cut into "
                         f"2·cp = {2 * par.cp} equal chunks, as load-balanced context parallelism cuts it; pick "
                         f"{pick}, or a model.seq_length that is a multiple of {2 * par.cp}", field='parallel.cp')
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



def refuse_experts_of_dense(model: ModelConfig, par: ParallelConfig) -> None:
    """A dense model (no experts) takes no expert parallelism: ep and etp stay 1."""
    if model.num_experts or (par.ep == 1 and par.etp == 1):
        return
    axis = "ep" if par.ep > 1 else "etp"
    raise PrismError(f"parallel.{axis}={getattr(par, axis)}: {model.name} has no experts (model.num_experts=0); "
                     f"expert parallelism splits the experts of a Mixture-of-Experts model; set "
                     f"parallel.{axis}=1", field=f"parallel.{axis}")


def _validate_experts(model: ModelConfig, par: ParallelConfig) -> None:
    """Expert parallelism as Megatron-Core maps it (megatron/core/parallel_state.py,
    ``expert_decoder_rank_generator``): the experts' own mesh etp·ep·expert_dp spans the
    same tp·cp·dp ranks of a pipeline stage as the dense layers' mesh, so ep·etp must
    divide tp·cp·dp and expert_dp = tp·cp·dp / (ep·etp); ep must divide the experts."""
    name, ep, etp = model.name, par.ep, par.etp
    check_number("parallel.etp", etp, integer=True)
    refuse_experts_of_dense(model, par)
    if model.num_experts % ep:
        raise PrismError(f"parallel.ep={ep}: does not divide model.num_experts={model.num_experts} of {name}; "
                         f"pick ep among {divisors(model.num_experts)}", field="parallel.ep")
    ranks = par.tp * par.cp * par.dp
    if ep * etp > ranks:
        raise PrismError(f"parallel.ep={ep}: ep·etp = {ep}·{etp} = {ep * etp} is beyond the tp·cp·dp = {ranks} "
                         f"GPUs of a pipeline stage ({par.tp}·{par.cp}·{par.dp}); lower ep or etp, or add GPUs",
                         field="parallel.ep")
    if ranks % (ep * etp):
        raise PrismError(f"parallel.ep={ep}: ep·etp = {ep}·{etp} = {ep * etp} must divide the tp·cp·dp = "
                         f"{par.tp}·{par.cp}·{par.dp} = {ranks} GPUs of a pipeline stage (the experts' mesh "
                         f"etp·ep·expert_dp spans them); pick ep·etp among {divisors(ranks)}",
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


def resolve_layout(par: ParallelConfig, gpus: int | None, framework: str | None = None) -> ParallelConfig:
    """A copy of ``par`` with dp filled from ``gpus``, the default global batch
    (:func:`with_default_batch`), sequence parallelism off at tp=1, where it splits nothing,
    and its settings as framework family ``framework`` runs them (:func:`framework_layout`)."""
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
    return with_default_batch(framework_layout(par, framework))


#: Shardings that keep gradients or weights sharded through the backward: ZeRO-2 and -3, FSDP.
BACKWARD_SHARDINGS = ("zero2", "zero3", "fsdp")


def framework_recompute(recompute: str, framework: str | None) -> tuple[str, str | None]:
    """``parallel.recompute`` as framework family ``framework`` (None: any) runs it, and a note
    where that is not what the name says elsewhere (its spec's ``recompute.aliases``:
    torchtitan's selective mode is its per-op policy, ``selective_ac_option='op'`` in its
    Llama 3 train configs, ``per_op``). The one reading of a recompute name by framework, for
    ``predict`` and ``predict-batch`` alike."""
    if not framework:
        return recompute, None
    return load_framework(framework).recompute(recompute)


def framework_layout(par: ParallelConfig, framework: str | None) -> ParallelConfig:
    """``par`` as framework family ``framework`` (None: any) runs it
    (:func:`framework_recompute`), or one error naming the setting it does not offer (its
    spec's ``refuses``)."""
    if not framework:
        return par
    spec = load_framework(framework)
    for rule in spec.refuses:
        if rule.holds(par):
            raise PrismError(rule.text(par, spec.name), field=rule.field)
    recompute = spec.recompute(par.recompute)[0]
    return par if recompute == par.recompute else replace(par, recompute=recompute)


def framework_note(given: ParallelConfig, framework: str | None) -> str | None:
    """What a setting of ``given`` means under framework family ``framework`` where the
    price reads it otherwise than its name (:func:`framework_layout`; its spec's ``notes``)."""
    if not framework:
        return None
    spec = load_framework(framework)
    note = spec.recompute(given.recompute)[1]
    if note:
        return note
    return next((rule.text(given, spec.name) for rule in spec.notes if rule.holds(given)), None)


def report_layout(model: ModelConfig, par: ParallelConfig) -> dict:
    """The settings of layout ``par`` a report shows: every degree, the expert ones for a MoE
    model, and what else sets the step (one list for predict, compare and variability)."""
    keys = (*AXES, *(("etp", "moe_dispatcher") if model.num_experts else ()), "vpp", "micro_batch_size",
            "global_batch_size", "sequence_parallel", "recompute", "sharding", "schedule",
            *(("mtp_layers",) if par.mtp_layers else ()))
    return {k: getattr(par, k) for k in keys}


def idle_note(model: ModelConfig, given: ParallelConfig, par: ParallelConfig) -> str | None:
    """The settings of ``given`` asked for that do nothing in layout ``par`` (resolved by
    :func:`resolve_layout`), and why: the same prediction comes out without them."""
    idle = []
    if par.tp == 1:
        asked = [f"parallel.{k}=true" for k in ("sequence_parallel", "overlap_tp_comm") if getattr(given, k) is True]
        if asked:  # Megatron turns sequence parallelism off there (arguments.py)
            idle.append(f"{', '.join(asked)}: off at tp=1, where no tensor-parallel collective runs")
    if par.dp * par.cp == 1 and given.sharding != "none":  # states shard over the dp·cp replicas
        idle.append(f"parallel.sharding={given.sharding}: nothing to shard at dp·cp=1, one copy of the states")
    if not model.num_experts or par.ep == 1:
        asked = [f"parallel.{k}=true" for k in ("overlap_ep_comm", "moe_force_balance") if getattr(given, k) is True]
        asked += [f"parallel.moe_dispatcher={given.moe_dispatcher}"] * (given.moe_dispatcher != "alltoall")
        # a capacity caps each expert's tokens on one GPU too: idle only without experts
        asked += [f"parallel.moe_capacity_factor={given.moe_capacity_factor:g}"] * (
            not model.num_experts and given.moe_capacity_factor != 0)
        if par.etp > 1:  # the expert-tensor-parallel gathers stay: overlapped, and by allgather's group
            asked = [a for a in asked if "overlap_ep_comm" not in a and "allgather" not in a]
        if asked:
            why = " at ep=1, where no token leaves its GPU" if model.num_experts else f", {model.name} has no experts"
            idle.append(f"{', '.join(asked)}: nothing to do{why}")
    return "; ".join(idle) + " (the same prediction as without)" if idle else None


def kv_replication_note(model: ModelConfig, par: ParallelConfig) -> str | None:
    """Where tp exceeds the KV heads, each rank holds a copy of one (workload.layers), a layout
    Megatron-Core's TransformerConfig has refused in its releases ("num_query_groups must be
    a multiple of tensor_model_parallel_size"): the user should know the layout may not run."""
    if model.num_kv_heads >= par.tp:
        return None
    return (f"parallel.tp={par.tp} exceeds model.num_kv_heads={model.num_kv_heads}: priced with each rank holding a "
            f"copy of one KV head; Megatron-Core's TransformerConfig refuses this layout in its releases "
            f"(num_query_groups must be a multiple of tensor_model_parallel_size): check the framework takes it, "
            f"or pick tp among {divisors(model.num_kv_heads)}")


def split_note(model: ModelConfig, par: ParallelConfig) -> str | None:
    """How the layers split where pp·vpp does not divide them (:func:`layers_per_stage`):
    over the stages, and with vpp > 1 over a stage's model chunks, which the interleaved
    schedule prices as equal shares of their stage. Multi-token prediction modules take a
    layer's slot each (:func:`predictor.workload.layers.stage_layers`)."""
    layers, chunks, vpp = model.num_layers + par.mtp_layers, par.pp * par.vpp, par.vpp
    if layers % chunks == 0:
        return None
    stages = layers_per_stage(layers, par.pp, vpp)
    counted = f"model.num_layers={model.num_layers}" + (f" and parallel.mtp_layers={par.mtp_layers} (a slot each, "
                                                         f"on the last stage)" if par.mtp_layers else "")
    head = f"{counted} do not divide over pp·vpp = {chunks} model chunks"
    if (layers + 2) % chunks == 0:
        return (f"{head}: the embedding and the loss each take a layer's slot (Megatron-Core's --account-for-"
                f"embedding-in-pipeline-split --account-for-loss-in-pipeline-split); layers per stage "
                f"{', '.join(map(str, stages))}")
    parts = ([f"the first stages hold one layer more (Megatron's explicit first/last stage layer counts): layers "
              f"per stage {', '.join(map(str, stages))}"] if len(set(stages)) > 1
             else [f"each stage holds {stages[0]} layers"])
    uneven = [n for n in dict.fromkeys(stages) if n % vpp]
    if uneven:
        splits = ", ".join(f"{n} as {'+'.join(str(n // vpp + (i < n % vpp)) for i in range(vpp))}" for n in uneven)
        parts.append(f"a stage's layers split unevenly over its {vpp} chunks ({splits}; Megatron-Core takes such a "
                     f"split as --pipeline-model-parallel-layout), priced as equal chunks of the stage")
    return f"{head}: {'; '.join(parts)}"

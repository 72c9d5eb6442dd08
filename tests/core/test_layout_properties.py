"""Random layouts: each gives a prediction or one clear error naming the field (hypothesis)."""
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from predictor.app.config import load_config
from predictor.core.errors import PrismError
from predictor.core.profiles import load_model, section
from predictor.core.specs import HardwareConfig, ParallelConfig
from predictor.engine.compose import compose
from predictor.latency.artifacts import ModelSet, models_dir
from predictor.workload.decompose import decompose
from predictor.workload.memory import memory_per_gpu

HW = section(load_config(["hardware=a100-sxm4-80gb"]), "hardware", HardwareConfig)
MODELS = ModelSet.load(models_dir() / HW.name, HW)
FIELDS = ("parallel.", "gpus", "model.", "seq")

@st.composite
def plausible(draw):
    """Layouts that mostly make sense (so most draws reach a prediction)."""
    dp, mbs = draw(st.sampled_from([1, 2, 4, 8])), draw(st.sampled_from([1, 2, 4]))
    pp = draw(st.sampled_from([1, 2, 4]))
    vpp = draw(st.sampled_from([1, 1, 2])) if pp > 1 else 1
    return {"dp": dp, "tp": draw(st.sampled_from([1, 2, 4, 8])), "pp": pp, "cp": draw(st.sampled_from([1, 1, 2])),
            "vpp": vpp, "micro_batch_size": mbs, "global_batch_size": mbs * dp * pp * draw(st.integers(1, 4)),
            "sequence_parallel": draw(st.booleans()),
            "recompute": draw(st.sampled_from(["none", "selective", "full"])),
            "sharding": draw(st.sampled_from(["none", "zero1", "zero3", "fsdp", "distributed_optimizer"])),
            "schedule": "interleaved" if vpp > 1 else draw(st.sampled_from(["1f1b", "gpipe", "zero_bubble"]))}


wild = st.fixed_dictionaries({
    "dp": st.integers(-1, 64), "tp": st.sampled_from([0, 1, 2, 3, 4, 8, 16, 64]),
    "pp": st.sampled_from([1, 2, 3, 4, 8, 200]), "cp": st.sampled_from([1, 2, 3, 4]),
    "vpp": st.sampled_from([1, 2, 3]), "micro_batch_size": st.integers(0, 8),
    "global_batch_size": st.integers(0, 512), "sequence_parallel": st.booleans(),
    "recompute": st.sampled_from(["none", "selective", "full", "sometimes"]),
    "sharding": st.sampled_from(["none", "zero1", "zero3", "fsdp", "distributed_optimizer", "zero9"]),
    "schedule": st.sampled_from(["1f1b", "gpipe", "interleaved", "zero_bubble", "round_robin"]),
})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(["tiny", "gpt3-1.3b", "llama3-8b", "llama2-70b"]), par=st.one_of(plausible(), wild),
       gpus=st.one_of(st.none(), st.integers(1, 4096)))
def test_random_layouts_predict_or_name_the_field(model, par, gpus):
    try:
        p = ParallelConfig(**par)
        m = load_model(model)
        work = decompose(m, p, HW, gpus)
        dist = compose(work, MODELS, draws=64)
        assert (dist.draws > 0).all()
        assert memory_per_gpu(m, p).total > 0
    except PrismError as exc:
        message = str(exc)
        assert "\n" not in message and exc.field and exc.field.startswith(FIELDS), message
        assert exc.field.partition("=")[0] in message, message
        return
    # zero_bubble is refused, never predicted as another schedule
    assert par["schedule"] != "zero_bubble", "parallel.schedule=zero_bubble was predicted"


@st.composite
def expert_layouts(draw):
    """Mixture-of-Experts layouts: ep among divisors and non-divisors of the experts, etp,
    dispatchers, capacity factors and forced balancing, on top of a plausible layout."""
    par = draw(plausible())
    return {**par, "ep": draw(st.sampled_from([1, 2, 3, 4, 8, 16, 64])), "etp": draw(st.sampled_from([1, 1, 2])),
            "moe_dispatcher": draw(st.sampled_from(["alltoall", "flex", "allgather", "deepep"])),
            "moe_capacity_factor": draw(st.sampled_from([0.0, 0.0, 1.25, 0.5])),
            "moe_force_balance": draw(st.booleans()), "overlap_ep_comm": draw(st.booleans()),
            "recompute_modules": draw(st.sampled_from(["", "", "moe_act,layernorm", "moe", "mlp,mla_up_proj",
                                                       "attn_everything"]))}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(["mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", "llama4-scout"]),
       par=expert_layouts(), gpus=st.one_of(st.none(), st.integers(1, 4096)), top_k=st.sampled_from([None, 0, 300]))
def test_random_moe_layouts_predict_or_name_the_field(model, par, gpus, top_k):
    from dataclasses import replace

    try:
        m = load_model(model)
        if top_k is not None:
            m = replace(m, top_k=top_k)  # 0 or more than the experts: refused, naming model.top_k
        p = ParallelConfig(**par)
        work = decompose(m, p, HW, gpus)
        dist = compose(work, MODELS, draws=32)
        assert (dist.draws > 0).all()
        assert memory_per_gpu(m, p).total > 0
        assert top_k is None
    except PrismError as exc:
        message = str(exc)
        assert "\n" not in message and exc.field and exc.field.startswith(FIELDS), message
        assert exc.field.partition("=")[0] in message, message

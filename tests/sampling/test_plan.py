import pytest

from predictor.app.config import load_config
from predictor.core.errors import PrismError
from predictor.core.ops import COLLECTIVE_OPS, COMPUTE_OPS, OPS
from predictor.core.profiles import load_model, section
from predictor.core.specs import HardwareConfig, ParallelConfig, SamplingConfig
from predictor.workload.decompose import decompose
from sampling.plan import make_plan, target_calls


def _configs(*overrides):
    cfg = load_config(list(overrides))
    return section(cfg, "sampling", SamplingConfig), section(cfg, "hardware", HardwareConfig)


#: Ops only a GPU job makes: eager mixed precision's (autocast runs on CUDA only:
#: decompose._master_weights) and Megatron's loss (Megatron runs on CUDA: decompose.loss_op).
GPU_ONLY = ("master_weights", "grad_accumulate", "vocab_parallel_cross_entropy")


def test_quick_plan_covers_the_vocabulary():
    sc, hw = _configs("sampling=quick")
    plan = make_plan(sc, hw)
    counts = plan.summary()
    cpu_ops = [op for op in COMPUTE_OPS if op not in GPU_ONLY]
    assert all(counts[op] >= 20 for op in cpu_ops), counts
    assert all(counts[op] >= 8 for op in COLLECTIVE_OPS), counts
    passes = {(t.call.op, t.call.pass_) for t in plan.compute}
    sampled = (*cpu_ops, "dispatch")  # collective_launch is a GPU host's: a CPU's collectives include it
    assert passes == {(op, p) for op in sampled for p in OPS[op].passes}


def test_plans_are_deterministic_and_start_with_target_shapes():
    sc, hw = _configs()
    a, b = make_plan(sc, hw), make_plan(sc, hw)
    assert [t.key for t in a.compute] == [t.key for t in b.compute] and a.plan_id == b.plan_id
    # tiny's QKV projection: tokens 128, (4 + 2*2) heads * 32, hidden 128
    assert a.compute[0].key == "gemm|fwd|float32|m=128|n=256|k=128"


@pytest.mark.parametrize("name", ["llama3-8b", "llama3-70b"])
def test_target_shapes_are_the_composers_calls(name):
    sc, hw = _configs("hardware=h100-sxm", "sampling.dtypes=[bfloat16]", f"sampling.targets=[{name}]",
                      "sampling.tp_degrees=[8]", "sampling.micro_batch_sizes=[1]", "sampling.budget_s=100000",
                      "sampling.max_call_ms=1000")
    work = decompose(load_model(name), ParallelConfig(tp=8), hw)
    composed = {(c.op, c.pass_, c.shape) for st in work.stages for c in st.forward + st.backward + st.step
                if not OPS[c.op].collective and c.op in sc.ops}
    assert {(c.op, c.pass_, c.shape) for c in target_calls(sc, hw)} == composed
    planned = {(t.call.op, t.call.pass_, t.call.shape) for t in make_plan(sc, hw).compute}
    # planned at the op's shape columns: an attention call's kernel (backend) is its framework's
    # choice, which the sampler leaves to torch
    assert {(op, p, tuple((k, v) for k, v in shape if k in OPS[op].shape)) for op, p, shape in composed} <= planned
    # the output head at the Megatron-padded vocabulary shard: 128,256 -> 129,024 / 8
    head = (("k", load_model(name).hidden_size), ("m", 8192), ("n", 16128))
    assert ("gemm", "fwd", head) in composed and ("gemm", "bwd", head) in planned


def test_tp_degrees_a_target_cannot_take_are_skipped():
    sc, hw = _configs("sampling.targets=[tiny]", "sampling.tp_degrees=[1,3]")
    assert target_calls(sc, hw) == target_calls(*_configs("sampling.targets=[tiny]", "sampling.tp_degrees=[1]"))


def test_a_smaller_budget_shrinks_shapes_not_their_number():
    big = make_plan(*_configs("sampling.budget_s=600"))
    small = make_plan(*_configs("sampling.budget_s=20"))
    assert small.summary() == big.summary()
    assert small.max_call_ms < big.max_call_ms and small.estimated_s < big.estimated_s
    assert small.plan_id != big.plan_id  # other shapes, another plan
    assert make_plan(*_configs("sampling.budget_s=900")).plan_id == big.plan_id  # same shapes


@pytest.mark.parametrize("override, message", [
    ("sampling.ops=[gemm,conv2d]", "sampling.ops: unknown op 'conv2d'"),
    ("sampling.dtypes=[float16]", "sampling.dtypes: hardware local-cpu has no float16"),
    ("sampling.collective_world_size=1", "sampling.collective_world_size: must be >= 2"),
    ("sampling.seed=-1", "sampling.seed=-1: the seed of the shapes' draw"),  # was numpy's ValueError
    ("sampling.targets=[nosuch]", "sampling.targets: nosuch: no conf/model/nosuch.yaml"),  # named model=
    ("sampling.space.m=[0,10]", r"sampling.space.m: expected \[low, high\]"),
])
def test_invalid_plans_name_the_field(override, message):
    with pytest.raises(PrismError, match=message):
        make_plan(*_configs(override))


def test_every_target_s_shapes_are_planned():
    """Targets are taken in turn: the quick plan's third target (small) keeps its own GEMMs."""
    sc, hw = _configs("sampling=quick")
    planned = {(t.call.op, t.call.shape) for t in make_plan(sc, hw).compute}
    for name in sc.targets:
        work = decompose(load_model(name), ParallelConfig(), hw)
        gemms = {("gemm", c.shape) for c in work.stages[0].forward if c.op == "gemm"}
        assert gemms & planned, name
    # small's QKV projection: tokens 256, (6 + 2*2) heads * 64, hidden 384
    assert ("gemm", (("k", 384), ("m", 256), ("n", 640))) in planned


def test_seq_lengths_sample_the_targets_at_those_lengths():
    """sampling.seq_lengths decomposes each target at each length (a GPU plan's 1k-8k),
    not only at its own seq_length; a length that is no token count is refused."""
    sc, hw = _configs("sampling=quick", "sampling.targets=[small]", "sampling.seq_lengths=[64,512]")
    seqs = {c.shape_dict["seq_q"] for c in target_calls(sc, hw) if c.op == "attention"}
    assert seqs == {64, 512}  # small's own 256 is not among them
    sc, hw = _configs("sampling=quick", "sampling.seq_lengths=[0]")
    with pytest.raises(PrismError) as err:
        make_plan(sc, hw)
    assert err.value.field == "sampling.seq_lengths"


def test_the_gpu_plan_samples_the_gpu_only_ops_and_long_sequences():
    sc, hw = _configs("sampling=gpu", "hardware=h100-sxm")
    plan = make_plan(sc, hw)
    ops = {t.call.op for t in plan.compute}
    assert set(GPU_ONLY) <= ops and {t.dtype for t in plan.compute} == {"bfloat16"}
    assert max(t.call.shape_dict["seq_q"] for t in plan.compute if t.call.op == "attention") >= 8192


def test_rounds_share_a_shape_s_repeats_and_each_round_warms_it_up_again():
    from sampling.plan import call_seconds, round_repeats, task_seconds
    assert round_repeats(10, 3) == [4, 3, 3] and round_repeats(2, 3) == [1, 1, 0] and round_repeats(5, 1) == [5]
    hw = section(load_config(["hardware=local-cpu"]), "hardware", HardwareConfig)
    sc = section(load_config(["sampling.ops=[gemm]", "sampling.shapes_per_op=2"]), "sampling", SamplingConfig)
    for task in make_plan(sc, hw).compute:
        call = task.call
        one = call_seconds(call.op, call.pass_, call.shape_dict, task.dtype, hw)
        setup = one if call.pass_ == "bwd" else 0.0
        extra = task_seconds(task, 10, 2, hw, rounds=3) - task_seconds(task, 10, 2, hw)
        assert extra == pytest.approx(2 * (2 * one + setup))  # two more warm-ups and graph builds

import pytest

from predictor.app.config import load_config

from predictor.core.specs import HardwareConfig, SamplingConfig

from predictor.core.profiles import section
from predictor.core.errors import PrismError
from predictor.core.ops import COLLECTIVE_OPS, COMPUTE_OPS, OPS
from sampling.plan import make_plan


def _configs(*overrides):
    cfg = load_config(list(overrides))
    return section(cfg, "sampling", SamplingConfig), section(cfg, "hardware", HardwareConfig)


def test_quick_plan_covers_the_vocabulary():
    sc, hw = _configs("sampling=quick")
    plan = make_plan(sc, hw)
    counts = plan.summary()
    assert all(counts[op] >= 20 for op in COMPUTE_OPS), counts
    assert all(counts[op] >= 8 for op in COLLECTIVE_OPS), counts
    passes = {(t.op, t.pass_) for t in plan.compute}
    assert passes == {(op, p) for op in COMPUTE_OPS for p in OPS[op].passes}


def test_plans_are_deterministic_and_start_with_target_shapes():
    sc, hw = _configs()
    a, b = make_plan(sc, hw), make_plan(sc, hw)
    assert [t.key for t in a.compute] == [t.key for t in b.compute] and a.plan_id == b.plan_id
    # tiny's QKV projection: tokens 128, (4 + 2*2) heads * 32, hidden 128
    assert a.compute[0].key == "gemm|fwd|float32|m=128|n=256|k=128"


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
    ("sampling.space.m=[0,10]", r"sampling.space.m: expected \[low, high\]"),
])
def test_invalid_plans_name_the_field(override, message):
    with pytest.raises(PrismError, match=message):
        make_plan(*_configs(override))

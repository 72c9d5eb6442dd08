"""conf/hardware/a100-sxm4-40gb.yaml: a 40GB A100 cell picks it (a bare "A100" stays the 80GB
part's), it borrows the 80GB part's models, and it is slower exactly where its datasheet says so:
the memory-bound kernels, on its 1,555 GB/s against 2,039 GB/s; the tensor-core rates are the same."""
from dataclasses import replace

from predictor.core.job import Job
from predictor.core.profiles import load_hardware, load_model, match_hardware
from predictor.core.specs import ParallelConfig
from predictor.data.published import row_hardware
from predictor.engine.predictor import Predictor


def test_a100_40gb_loads_and_is_picked_by_its_cells():
    hw = load_hardware("a100-sxm4-40gb")
    assert hw.models_from == "a100-sxm4-80gb" and hw.memory.capacity_gib == 40
    assert row_hardware("A100-SXM4-40GB") == "a100-sxm4-40gb" and match_hardware("a100_40gb") == "a100-sxm4-40gb"
    assert match_hardware("A100") == match_hardware("A100 80GB") == "a100-sxm4-80gb"


def test_a100_40gb_is_slower_where_its_bandwidth_is_lower():
    small, large = load_hardware("a100-sxm4-40gb"), load_hardware("a100-sxm4-80gb")
    assert small.peak_flops == large.peak_flops and small.memory.bandwidth < large.memory.bandwidth
    predictor = Predictor()
    model = replace(load_model("gpt3-1.3b"), seq_length=2048)
    par = ParallelConfig(dp=8, micro_batch_size=4, global_batch_size=64)
    steps = {hw.name: predictor.step(Job(model, hw, par, 8, "megatron-core"), 50, 0).compute_s for hw in (small, large)}
    assert steps["a100-sxm4-80gb"] < steps["a100-sxm4-40gb"] < steps["a100-sxm4-80gb"] * large.memory.bandwidth / \
        small.memory.bandwidth

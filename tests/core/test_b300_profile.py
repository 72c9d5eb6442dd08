"""conf/hardware/b300.yaml (HGX / DGX B300, Blackwell Ultra): it loads, a B300 table cell
picks it (and GB300 cells stay gb300-nvl72's), it borrows the B200's models, and it is
faster than the B200 exactly where its datasheets say so."""
from predictor.core.profiles import load_hardware, match_hardware
from predictor.data.published import row_hardware


def test_b300_loads_and_is_picked_by_its_cells():
    hw = load_hardware("b300")
    assert hw.name == "b300" and hw.models_from == "b200" and hw.node.gpus_per_node == 8
    assert row_hardware("B300-SXM-270GB") == "b300" and match_hardware("DGX B300") == "b300"
    assert match_hardware("GB300") == "gb300-nvl72" and match_hardware("NVIDIA GB300") == "gb300-nvl72"


def test_b300_is_faster_than_b200_where_its_datasheet_says_so():
    b300, b200 = load_hardware("b300"), load_hardware("b200")
    # HGX B300: dense FP4 105 PFLOPS / 8 against HGX B200's 72 / 8
    assert b300.peak_flops["nvfp4"] > b200.peak_flops["nvfp4"]
    # ConnectX-8 800 Gb/s per GPU against ConnectX-7 400 Gb/s
    assert b300.network.inter_node.bandwidth == 2 * b200.network.inter_node.bandwidth
    assert b300.memory.capacity_gib > b200.memory.capacity_gib
    # the same dense BF16/FP8/TF32 tensor-core rates, HBM bandwidth and NVLink 5
    for dtype in ("bfloat16", "float8", "tfloat32", "mxfp8"):
        assert b300.peak_flops[dtype] == b200.peak_flops[dtype]
    assert b300.memory.bandwidth == b200.memory.bandwidth
    assert b300.network.intra_node.bandwidth == b200.network.intra_node.bandwidth

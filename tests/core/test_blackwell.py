"""Blackwell profiles (issue 19): B200, GB200 NVL72 and GB300 NVL72, their precisions and
their 72-GPU NVLink domain, and the published Blackwell rows mapped onto them."""
import numpy as np
import pandas as pd
import pytest

from predictor.analyses.batch import predict_table
from predictor.analyses.compare import compare
from predictor.app.cli import main
from predictor.core.errors import PrismError
from predictor.core.mesh import Mesh
from predictor.core.ops import DTYPE_BYTES, Call, bytes_moved, flops
from predictor.core.precision import GEMM_DTYPES, OUTPUT_ROLE, call_dtype
from predictor.core.profiles import load_hardware, load_model
from predictor.core.specs import ParallelConfig
from predictor.data.importers.microbench import import_microbench
from predictor.data.published import row_gemm_ops, row_hardware, row_precision, row_workload
from predictor.data.runs_table import bandwidth, cell
from predictor.latency.artifacts import TIERS, trained_models
from predictor.latency.lookup import QuantileCache
from predictor.workload.decompose import decompose

BLACKWELL = ("b200", "gb200-nvl72", "gb300-nvl72")
MOE_TABLE = "e2e_moe_blackwell_visible.csv"


@pytest.mark.parametrize("name", BLACKWELL)
def test_datasheet_peaks_are_dense_and_ordered_by_precision(name):
    hw = load_hardware(name)
    bf16, fp8, fp4 = (hw.peak(d) for d in ("bfloat16", "float8", "nvfp4"))
    assert fp8 == 2 * bf16  # every Blackwell datasheet: FP8 is twice FP16/BF16
    assert hw.peak("mxfp8") == fp8 == hw.peak("float8_blockwise")  # block scales ride the FP8 tensor cores
    assert fp4 == (3 if name == "gb300-nvl72" else 2) * fp8  # Blackwell Ultra: 1.5x GB200's dense FP4
    assert hw.power_w >= 1000 and hw.memory.bandwidth == 8e12


def test_nvlink_domain_is_apart_from_the_node():
    b200, gb200, gb300 = (load_hardware(n) for n in BLACKWELL)
    assert (b200.node.gpus_per_node, b200.nvlink_domain) == (8, 8)  # one DGX B200: a node is the domain
    for rack in (gb200, gb300):
        assert (rack.node.gpus_per_node, rack.nvlink_domain) == (4, 72)  # 18 trays of 4 in one NVLink domain
    assert gb300.network.inter_node.bandwidth == 2 * gb200.network.inter_node.bandwidth  # CX-8 800 vs CX-7 400


def test_groups_inside_an_nvl72_rack_stay_on_nvlink():
    layout = ParallelConfig(tp=8, cp=2, dp=8, pp=4)
    rack = Mesh.of(layout, 4, 72)
    node = Mesh.of(layout, 4)
    assert rack.topology("tp") == (8, 1) and node.topology("tp") == (4, 2)  # tp=8 spans two 4-GPU trays
    assert rack.topology("cp") == (2, 1)
    assert rack.topology("dp") == (4, 2)  # 8 ranks 16 apart: 72 // 16 = 4 per rack, two racks
    assert rack.topology("pp") == (1, 2)  # stages 128 ranks apart sit in different racks
    moe = ParallelConfig(dp=32, pp=8, ep=32)
    assert Mesh.of(moe, 4, 72).topology("ep") == (32, 1)  # ep=32 inside one rack: all-to-all on NVLink
    assert Mesh.of(moe, 8).topology("ep") == (8, 4)  # on 8-GPU nodes it spans 4 of them


def test_decompose_places_tp_collectives_on_nvlink_in_a_rack():
    model, layout = load_model("llama3-70b"), ParallelConfig(tp=8, pp=4, dp=8, sequence_parallel=True)
    for name, nodes in (("gb200-nvl72", 1), ("b200", 1), ("h100-sxm", 1)):
        work = decompose(model, layout, load_hardware(name), gpus=256)
        tp_calls = [c for c in work.stages[0].forward if c.role == "tp"]
        assert tp_calls and all(c.nodes == nodes and c.ranks_per_node == 8 for c in tp_calls), name
    hw = load_hardware("gb200-nvl72")
    hw.node.nvlink_domain = None  # the same trays without the rack's NVLink Switch
    tp_calls = [c for c in decompose(model, layout, hw, gpus=256).stages[0].forward if c.role == "tp"]
    assert all(c.nodes == 2 and c.ranks_per_node == 4 for c in tp_calls)


def test_bytes_per_element_count_the_block_scales():
    assert DTYPE_BYTES["mxfp8"] == 1 + 1 / 32  # E4M3 + one E8M0 scale per 32
    assert DTYPE_BYTES["nvfp4"] == 0.5 + 1 / 16  # E2M1 + one E4M3 scale per 16
    assert DTYPE_BYTES["float8"] < DTYPE_BYTES["float8_blockwise"] < DTYPE_BYTES["bfloat16"]


def test_linears_run_in_the_low_precision_and_the_rest_in_bf16():
    assert call_dtype("gemm", "compute", "bfloat16", "nvfp4") == "nvfp4"
    assert call_dtype("grouped_gemm", "compute", "bfloat16", "mxfp8") == "mxfp8"
    assert call_dtype("gemm", OUTPUT_ROLE, "bfloat16", "nvfp4") == "bfloat16"  # the LM head
    for op in ("attention", "rmsnorm", "swiglu", "residual_add", "optimizer_step"):
        assert call_dtype(op, "compute", "bfloat16", "nvfp4") == "bfloat16"
    assert call_dtype("gemm", "compute", "bfloat16", None) == "bfloat16"
    work = decompose(load_model("llama3-8b"), ParallelConfig(), load_hardware("gb200-nvl72"))
    heads = [c for c in work.stages[-1].forward if c.op == "gemm" and c.role == OUTPUT_ROLE]
    assert len(heads) == 1 and heads[0].shape_dict["n"] >= 128256


def test_lower_precision_gemms_are_faster_on_gb200():
    hw = load_hardware("gb200-nvl72")
    calls = [Call.of("gemm", "fwd", {"m": 16384, "n": 8192, "k": 8192})]
    p50 = {}
    for dtype in ("bfloat16", "float8", "mxfp8", "nvfp4"):
        hw.gemm_dtype = None if dtype == "bfloat16" else dtype
        q, evidence = QuantileCache(trained_models(hw), hw).lookup(calls)
        p50[dtype] = q[0, 3]
        assert evidence[0].text == "models/gb200-nvl72"
    assert p50["nvfp4"] < p50["float8"] <= p50["mxfp8"] < p50["bfloat16"]


def test_low_precision_gemms_cast_their_operands_and_bf16_ones_do_not():
    """Every fp8/fp4 GEMM but the LM head quantizes its activation (forward) and its output
    gradient (backward); a bf16 job has no casts. The casts cost what they move."""
    model, par = load_model("llama3-8b"), ParallelConfig(tp=8, dp=8, micro_batch_size=2, global_batch_size=64)
    hw = load_hardware("gb200-nvl72")
    assert not [c for st in decompose(model, par, hw, 64).stages for c in st.forward + st.backward
                if c.op == "quantize"]
    hw.gemm_dtype = "nvfp4"
    st = decompose(model, par, hw, 64).stages[0]
    for calls, pass_, side in ((st.forward, "fwd", "k"), (st.backward, "bwd", "n")):
        gemms = [c for c in calls if c.op == "gemm" and c.role != OUTPUT_ROLE]
        casts = [c for c in calls if c.op == "quantize"]
        assert [(c.pass_, c.count, c.shape_dict["tokens"], c.shape_dict["hidden"]) for c in casts] == \
            [(pass_, g.count, g.shape_dict["m"], g.shape_dict[side]) for g in gemms]
    shape = {"tokens": 4096, "hidden": 8192}
    assert flops("quantize", "bwd", shape) == flops("quantize", "fwd", shape) == 3 * 4096 * 8192
    assert bytes_moved("quantize", "fwd", shape, "bfloat16") == 2.5 * 4096 * 8192 * 2


def test_unknown_precision_names_the_field_and_lists_the_choices(capsys):
    job = ["predict", "model=llama3-8b", "gpus=8"]
    assert main([*job, "hardware=b200", "hardware.gemm_dtype=fp5"]) == 2
    err = capsys.readouterr().err
    assert "hardware.gemm_dtype='fp5'" in err and all(d in err for d in GEMM_DTYPES)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_precision_the_gpu_lacks_is_refused_in_one_line(capsys):
    job = ["predict", "model=llama3-8b", "gpus=8"]
    for hardware, dtype in (("h100-sxm", "nvfp4"), ("h100-sxm", "mxfp8"), ("a100-sxm4-80gb", "fp8")):
        assert main([*job, f"hardware={hardware}", f"hardware.gemm_dtype={dtype}"]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "hardware.gemm_dtype=" in err and hardware in err, err
    assert main([*job, "hardware=gb300-nvl72", "hardware.gemm_dtype=NVFP4", "--json"]) == 0  # aliases, any case
    capsys.readouterr()


@pytest.mark.parametrize("gpu, profile", [
    ("GB200", "gb200-nvl72"), ("NVIDIA GB200", "gb200-nvl72"), ("sm_100_GB200", "gb200-nvl72"),
    ("GB300", "gb300-nvl72"), ("sm_103", "gb300-nvl72"),
    ("B200", "b200"), ("B200-SXM", "b200"), ("B200-SXM-180GB", "b200"), ("DGX B200", "b200"),
    ("NVIDIA B200", "b200"), ("H100", "h100-sxm"),
])
def test_gpu_names_as_tables_write_them(gpu, profile):
    assert row_hardware(gpu) == profile


def test_a_gpu_without_a_profile_names_the_column():
    with pytest.raises(PrismError, match="gpu='B100'") as err:
        row_hardware("B100")  # no profile (B300 has one since 11-28: conf/hardware/b300.yaml, not GB300 NVL72)
    assert err.value.field == "gpu"


@pytest.mark.parametrize("text, expected", [
    ("MXFP8 (e4m3, 1x32 blocks) linears; BF16 elsewhere; BF16 Adam moments", ("bfloat16", "mxfp8")),
    ("NVFP4", ("bfloat16", "nvfp4")),
    ("NVFP4 (FP8 attention)", ("bfloat16", "nvfp4")),
    ("NVFP4 linears (vanilla NVFP4 recipe), attention F16", ("bfloat16", "nvfp4")),
    ("FP8 (NeMo FP8 hybrid)", ("bfloat16", "float8")),
    ("FP8 blockwise (DeepSeek-style recipe), fp8-param-gather, bf16 Adam moments", ("bfloat16", "float8_blockwise")),
    ("bf16 baseline", ("bfloat16", "bfloat16")),
    ("no fp8, bf16", ("bfloat16", "bfloat16")),
])
def test_precision_cells(text, expected):
    assert row_precision(text, "NVIDIA NeMo 25.09 (Megatron-Core)") == expected


@pytest.mark.parametrize("text, ops", [
    ("MXFP8 for Linears only", ("gemm",)),
    ("MXFP8 for Grouped GEMMs only", ("grouped_gemm",)),
    ("MXFP8 for Linears + Grouped GEMMs", ("gemm", "grouped_gemm")),
    ("MXFP8 (e4m3, 1x32 blocks) linears; BF16 elsewhere", ("gemm", "grouped_gemm")),
])
def test_precision_cells_that_convert_one_kind_of_gemm(text, ops):
    assert row_gemm_ops(text) == ops
    assert call_dtype("grouped_gemm", "compute", "bfloat16", "mxfp8", ops) == (
        "mxfp8" if "grouped_gemm" in ops else "bfloat16")


def test_gemm_ops_name_only_gemms():
    hw = load_hardware("b200")
    with pytest.raises(PrismError, match="hardware.gemm_ops") as err:
        type(hw)(**{**vars(hw), "gemm_ops": ["attention"]})
    assert err.value.field == "hardware.gemm_ops"


def test_cells_that_state_nothing_and_nic_counts_before_their_names():
    assert cell({"recompute": "none stated"}, "recompute") == ""
    assert cell({"seq_parallel": "n/a (TP=1)"}, "seq_parallel") == ""
    assert cell({"recompute": "none"}, "recompute") == "none"
    row = {"inter_node": "4x ConnectX-7 IB NDR 400 Gb/s per node"}
    assert bandwidth(row, "inter_node", 4)[0] == 50e9  # one 400 Gb/s NIC per GPU
    assert bandwidth({"inter_node": "8x 200 Gb/s HDR InfiniBand per node"}, "inter_node", 8)[0] == 25e9
    assert bandwidth({"inter_node": "InfiniBand HDR"}, "inter_node", 8)[0] is None  # names no figure: the profile's
    for unreadable in ("-400 Gb/s per GPU", "1e30 Gb/s"):  # a figure, but not a plain one: refused, not ignored
        with pytest.raises(PrismError, match="not a plain positive number") as err:
            bandwidth({"inter_node": unreadable}, "inter_node", 8)
        assert err.value.field == "inter_node"


@pytest.fixture(scope="module")
def mlperf_rows():
    from predictor.core.profiles import DATA_DIR
    table = pd.read_csv(DATA_DIR / "e2e" / MOE_TABLE)
    return table[table.set_id == "mlperf_training_v51_blackwell"]


def test_dense_blackwell_rows_map_to_their_profiles(mlperf_rows):
    assert len(mlperf_rows) == 12
    cache: dict = {}
    for _, r in mlperf_rows.iterrows():
        job = row_workload({str(k).lower(): v for k, v in r.items()}, cache)
        expected = {"GB200": "gb200-nvl72", "GB300": "gb300-nvl72", "B200-SXM-180GB": "b200"}[r.gpu]
        assert job.hardware.name == expected
        assert job.hardware.gemm_dtype == ("nvfp4" if "NVFP4" in r.precision else "float8")
        assert job.hardware.node.gpus_per_node == r.gpus_per_node
        if expected != "b200":  # "4x ConnectX-? ... per node" on 4-GPU trays: one NIC per GPU
            assert job.hardware.network.inter_node.bandwidth == (100e9 if r.gpu == "GB300" else 50e9)
            assert job.hardware.nvlink_domain == 72


def test_dense_blackwell_rows_predict(mlperf_rows):
    out = predict_table(mlperf_rows, draws=200)
    assert (out.pred_status == "ok").all(), out.pred_status.tolist()
    p50 = out.pred_iter_time_s_p50.to_numpy()
    assert np.isfinite(p50).all() and (p50 > 0).all()
    # bands hold their order
    assert (out.pred_iter_time_s_p5 <= out.pred_iter_time_s_p50).all()


def test_compare_shows_each_rack_and_its_tier():
    c = compare(load_model("llama3-70b"), ["h100-sxm", "b200", "gb200-nvl72", "gb300-nvl72"],
                ParallelConfig(tp=8, pp=4), gpus=256, draws=300)
    assert [r.hardware for r in c.results] == ["h100-sxm", "b200", "gb200-nvl72", "gb300-nvl72"]
    assert all(r.tier in TIERS for r in c.results)
    assert [r.nvlink_domain for r in c.results] == [8, 8, 72, 72]
    assert not any("spans" in n for n in c.notes)  # tp=8 stays inside every NVLink domain here
    wide = compare(load_model("llama3-70b"), ["b200", "gb200-nvl72"], ParallelConfig(tp=16, pp=4), gpus=256,
                   draws=300)
    assert [n.split(":")[0] for n in wide.notes if "spans" in n] == ["b200"]


def test_rack_collectives_are_imported_with_their_group_sizes(tmp_path):
    from predictor.core.profiles import DATA_DIR
    report = import_microbench(DATA_DIR / "microbench", "gb200-nvl72", tmp_path)
    rows = pd.read_parquet(report.run_file)
    coll = rows[rows.op.isin(["all_reduce", "all_gather", "reduce_scatter", "all_to_all"])]
    assert coll.group_size.max() == 72 and (coll.nodes == 1).all()  # one NVLink domain
    gemm = rows[rows.op == "gemm"]
    assert len(gemm) and (gemm.origin == "microbench:xla-gemm:sm_100_B200").all()  # B200's GEMMs, named

"""A performance table as NVIDIA's recipes publish one (issue 52, "read the tables people have"):
its header in plain words ("#-GPUs", "System", "Sequence Length", "FSDP" as a switch, "ETP"), no
model dimensions (the registry has them) and no dp (the GPUs and the other degrees make it)."""
import pytest

from predictor.core.errors import PrismError
from predictor.data.published import row_workload
from predictor.data.runs_table import header_columns, with_columns

HEADER = ["Model", "System", "#-GPUs", "Precision", "GBS", "MBS", "Sequence Length", "FSDP", "TP", "PP", "CP", "VP",
          "EP", "ETP", "Tokens / sec / GPU"]


def _row(*cells):
    return dict(zip([h.lower() for h in HEADER], cells))


def test_the_plain_header_fills_the_columns():
    got = header_columns([h.lower() for h in HEADER])
    assert got["system"] == "gpu" and got["#-gpus"] == "num_gpus" and got["sequence length"] == "seq_len"
    assert got["etp"] == "etp" if "etp" in got else True  # etp is a column of its own name
    assert got["tokens / sec / gpu"] == "tokens_per_s_per_gpu"


def test_a_row_without_dimensions_or_dp_is_read_from_the_registry_and_the_gpus():
    job = row_workload(_row("LLAMA3_70B", "DGX-GB200", "64", "MXFP8", "128", "1", "8192", "0", "2", "4", "1", "5",
                            "n/a", "n/a", "1000"), {})
    assert job.model.num_layers == 80 and job.model.hidden_size == 8192
    assert job.parallel.dp == 8 and job.parallel.vpp == 5 and job.hardware.name == "gb200-nvl72"
    assert any("dp: blank, read as 8" in n for n in job.assumed)
    assert job.parallel.sharding == "none"  # FSDP 0: off


def test_fsdp_as_a_switch_and_the_etp_column():
    job = row_workload(_row("Qwen3 30B-A3B", "DGX-H100", "16", "BF16", "512", "2", "4096", "1", "1", "1", "1", "n/a",
                            "8", "2", ""), {})
    assert job.parallel.sharding == "fsdp" and job.parallel.dp == 16
    assert job.parallel.ep == 8 and job.parallel.etp == 2


@pytest.mark.parametrize("model, says", [
    ("Nemotron 3 Nano 30B-A3B", "Mamba"), ("Nemotron-H 56B", "Mamba"), ("NVIDIA-Nemotron-Nano-9B-v2", "Mamba"),
    ("Qwen3-VL-235B-A22B", "vision-language"), ("Llama 3.2 Vision 90B", "vision-language"),
    ("DeepSeek-V3.2", "Sparse Attention"), ("GLM-5", "DSA"),  # not the V3 or GLM-4.5 their names contain
    ("Some Model 7B", "names neither GPT nor Llama")])
def test_a_model_it_cannot_price_is_refused_naming_the_column(model, says):
    with pytest.raises(PrismError) as err:
        row_workload(_row(model, "DGX-H100", "8", "BF16", "64", "1", "4096", "0", "1", "1", "1", "", "", "", ""), {})
    assert err.value.field == "model" and says in str(err.value)


def test_nemotron_3_8b_is_in_the_registry():
    job = row_workload(with_columns(_row("Nemotron 3 8B", "DGX-H100", "8", "FP8-DS", "128", "1", "4096", "0", "1", "1",
                                         "1", "", "", "", "")), {})
    assert (job.model.num_layers, job.model.hidden_size, job.model.ffn_hidden_size) == (32, 4096, 16384)


def test_a_recipe_name_s_context_suffix_is_the_sequence_length_where_the_row_gives_none():
    """Megatron-Bridge names a recipe by its model and context (``llama3_8b_16k``): the registry's
    8B, at 16,384 tokens unless the row's own sequence length says otherwise."""
    blank = row_workload(_row("llama3_8b_16k", "DGX-H100", "8", "BF16", "32", "1", "", "0", "1", "1", "2", "",
                              "", "", ""), {})
    assert blank.model.num_layers == 32 and blank.model.seq_length == 16384
    assert any("seq_len=16384 read from the model cell" in n for n in blank.assumed)
    stated = row_workload(_row("llama3_8b_16k", "DGX-H100", "8", "BF16", "32", "1", "8192", "0", "1", "1", "2", "",
                               "", "", ""), {})
    assert stated.model.seq_length == 8192


@pytest.mark.parametrize("cell, gemm", [("FP8-MX", "mxfp8"), ("fp8_mx", "mxfp8"), ("FP8-CS", "float8"),
                                        ("bf16_with_fp8_subchannel_scaling_mixed", "float8_blockwise"),
                                        ("FP8-SC", "float8_blockwise"), ("fp8_sc", "float8_blockwise"),
                                        ("FP8 (MX)", "mxfp8"), ("NVFP4", "nvfp4"), ("BF16", "bfloat16")])
def test_the_recipes_precision_names(cell, gemm):
    """Megatron-Bridge's scripts/performance name MXFP8 ``fp8_mx`` (its tables: FP8-MX), not an
    fp8 with one scale per tensor, and subchannel (128-block) FP8 ``fp8_sc``."""
    job = row_workload(_row("LLAMA3_70B", "DGX-GB200", "64", cell, "128", "1", "8192", "0", "2", "4", "1", "5",
                            "", "", ""), {})
    assert job.hardware.gemm_dtype in (gemm, None) and (job.hardware.gemm_dtype or "bfloat16") == gemm


def test_megatron_bridge_rows_take_its_recipes_sequence_parallelism_and_tp_overlap():
    """A Megatron-Bridge row that leaves them blank runs as its recipes do: sequence parallelism
    on and userbuffers TP overlap on wherever tp > 1; at tp = 1 neither."""
    row = dict(_row("LLAMA3_70B", "DGX-H100", "64", "FP8-CS", "128", "1", "8192", "0", "4", "8", "1", "5", "", "",
                    ""), framework="Megatron-Bridge")
    job = row_workload(row, {})
    assert job.parallel.sequence_parallel and job.parallel.overlap_tp_comm
    assert any("tp_comm_overlap on with tp > 1" in n for n in job.assumed)
    one = row_workload(dict(row, tp="1", pp="1", vp=""), {})
    assert not one.parallel.sequence_parallel and not one.parallel.overlap_tp_comm
    nemo = row_workload(dict(row, framework="NeMo"), {})  # NeMo's own defaults are not Bridge's
    assert not nemo.parallel.overlap_tp_comm


def test_megatron_bridge_moe_rows_route_as_its_benchmarks_force_them():
    """Megatron-Bridge's performance recipes force balanced routing for every MoE model; a row
    that says it routed for real is read so."""
    row = dict(_row("Qwen3 30B-A3B", "DGX-H100", "16", "BF16", "512", "2", "4096", "0", "1", "1", "1", "", "8", "1",
                    ""), framework="Megatron-Bridge")
    assert row_workload(row, {}).parallel.moe_force_balance
    assert not row_workload(dict(row, notes="dropless (real routing)"), {}).parallel.moe_force_balance
    assert not row_workload(dict(row, framework="Megatron-Core"), {}).parallel.moe_force_balance


def test_a_table_without_a_sequence_length_takes_the_registry_s_and_says_so():
    """A published architecture's pre-training length fills a blank or absent seq_len; a model
    the registry does not know is refused, naming seq_len."""
    row = _row("LLAMA3_70B", "DGX-H100", "64", "BF16", "128", "1", "", "0", "4", "4", "1", "", "", "", "")
    del row["sequence length"]
    job = row_workload(row, {})
    assert job.model.seq_length == 8192 and any("seq_len=8192 from it" in n for n in job.assumed)
    with pytest.raises(PrismError) as err:
        row_workload(dict(row, model="my llama", layers="32", hidden="4096", heads="32"), {})
    assert err.value.field == "seq_len"


def test_cuda_graphs_named_in_a_row_take_the_host_out_of_the_step():
    """A row whose text names CUDA graphs runs its layers as graph replays: its host work is
    one launch a layer and pass, not a call per kernel."""
    row = dict(_row("LLAMA3_8B", "DGX-H100", "8", "BF16", "8", "1", "8192", "0", "1", "1", "1", "", "", "", ""),
               notes="CUDA graphs on (full iteration)")
    graphed = row_workload(row, {})
    assert graphed.parallel.cuda_graphs and any("CUDA graphs" in n for n in graphed.assumed)
    assert not row_workload(dict(row, notes="no CUDA graphs"), {}).parallel.cuda_graphs

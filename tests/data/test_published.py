"""Published runs (predictor.data.published): the rows, their measured step times, their specs."""
import numpy as np
import pandas as pd
import pytest

from predictor.core.errors import PrismError
from predictor.data.published import (
    ASSUMED,
    FLOP_COUNT,
    measured_step_s,
    published_runs,
    row_model,
    row_workload,
    single_node_runs,
)
from predictor.data.runs_table import framework_family

H100_SETS = ("torchtitan", "megatronlm_readme_h100", "neusight_dist")


def test_narayanan_step_times_follow_eq3(reference_data):
    rows = published_runs(reference_data / "e2e", ["narayanan2021_t1"])
    assert len(rows) == 10 and rows.measured_s.notna().all()
    r = rows.iloc[0]  # GPT 1.7B on 32 A100 at 137 TFLOP/s: eq. 3 of arXiv 2104.04473
    b, s, L, h, V = r.gbs, r.seq_len, r.layers, r.hidden, r.vocab
    eq3 = 96 * b * s * L * h ** 2 * (1 + s / (6 * h) + V / (16 * L * h))
    assert r.measured_s == pytest.approx(eq3 / (137e12 * 32), rel=1e-12)


def test_h100_rows_take_what_their_sources_state(reference_data):
    rows = published_runs(reference_data / "e2e", H100_SETS, gpu="H100")
    assert set(rows.set_id) == set(H100_SETS) and rows.gpu.str.contains("H100").all()
    megatron = rows[rows.set_id == "megatronlm_readme_h100"]
    assert (megatron.zero_or_distopt == "distributed optimizer").all()
    assert ((megatron.seq_parallel == "on") == (megatron.tp > 1)).all()
    stated = megatron[megatron.tflops_per_gpu.notna()]
    r = stated.iloc[0]  # Megatron-LM's own count: 72·B·s·L·h²·(1 + s/6h + V/12Lh), no recompute
    b, s, L, h, V = r.gbs, r.seq_len, r.layers, r.hidden, r.vocab
    megatron_flops = 72 * b * s * L * h ** 2 * (1 + s / (6 * h) + V / (12 * L * h))
    assert r.measured_s == pytest.approx(megatron_flops / (r.tflops_per_gpu * 1e12 * r.num_gpus), rel=1e-12)
    titan = rows[rows.set_id == "torchtitan"]
    derived = titan.iter_time_s_derived.notna()
    assert (titan.measured_s[derived] == titan.iter_time_s_derived[derived]).all()
    assert titan.measured_s[~derived].isna().all()  # states neither a time nor a rate
    assert set(ASSUMED) <= set(H100_SETS)


def test_single_node_runs_are_in_the_table_layout(reference_data):
    runs = single_node_runs(reference_data / "e2e", 7)
    table = pd.read_csv(reference_data / "e2e" / "e2e_training_visible.csv", nrows=1)
    assert len(runs) == 7 and set(runs.columns) - {"measured_s"} <= set(table.columns)
    assert (runs.measured_s == runs.iter_time_s).all()


@pytest.mark.parametrize("cell, family", [
    ("Megatron-DeepSpeed (vTrain data/README.md)", "megatron-lm"),  # a fork of Megatron-LM, not of Core
    ("Megatron LM", "megatron-lm"), ("Megatron-LM (2021)", "megatron-lm"), ("Megatron-Core r0.8.0", "megatron-core"),
    ("Megatron-LM via HF Accelerate MegatronLMPlugin", "accelerate"), ("NeMo 2.0", "megatron-core")])
def test_framework_cells_read_as_their_family(cell, family):
    assert framework_family(cell) == family


def test_a_rate_without_a_known_flop_count_is_refused():
    row = pd.Series({"set_id": "somebody2030", "iter_time_s": np.nan, "tflops_per_gpu": 300.0})
    assert "somebody2030" not in FLOP_COUNT
    with pytest.raises(PrismError) as err:
        measured_step_s(row)
    assert err.value.field == "set_id"


def test_a_missing_table_names_the_folder(tmp_path):
    with pytest.raises(PrismError, match="no such table") as err:
        published_runs(tmp_path)
    assert err.value.field == str(tmp_path / "e2e_training_visible.csv")


def test_row_model_fills_blanks_by_family():
    row = pd.Series({"model": "Llama 3.1 8B", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8,
                     "ffn": 14336, "vocab": np.nan, "seq_len": 8192})
    llama = row_model(row)
    assert (llama.vocab_size, llama.activation, llama.num_kv_heads, llama.tied_embeddings) == (128256, "swiglu", 8,
                                                                                             False)
    gpt = row_model(pd.Series(row.to_dict() | {"model": "GPT 1.7B", "kv_heads": np.nan, "ffn": np.nan}))
    assert (gpt.vocab_size, gpt.ffn_hidden_size, gpt.num_kv_heads) == (51200, 4 * 4096, 32)


def _row(reference_data, set_id: str, **cells) -> dict:
    runs = pd.read_csv(reference_data / "e2e" / "e2e_training_visible.csv", dtype=str, keep_default_na=False)
    return runs[runs.set_id == set_id].iloc[-1].to_dict() | cells


def test_blank_cells_take_their_framework_defaults(reference_data):
    blank = {"recompute": "", "seq_parallel": "", "zero_or_distopt": "", "precision": ""}
    titan = row_workload(_row(reference_data, "torchtitan", tp="8", dp="8", **blank), {})  # 64 GPUs
    assert (titan.parallel.recompute, titan.parallel.sequence_parallel, titan.parallel.sharding,
            titan.hardware.train_dtype) == ("per_op", True, "fsdp", "bfloat16")
    assert "recompute=per_op (blank: torchtitan's default)" in titan.assumed
    megatron = row_workload(_row(reference_data, "vtrain_multi", **blank), {})
    assert (megatron.parallel.recompute, megatron.parallel.sequence_parallel, megatron.parallel.sharding) == (
        "none", False, "none")
    assert "seq_parallel=off (blank: Megatron's default)" in megatron.assumed
    accelerate = row_workload(_row(reference_data, "neusight_dist"), {})
    assert accelerate.hardware.train_dtype == "float32" and "precision=fp32 (blank: accelerate's default)" in \
        accelerate.assumed
    toml = row_workload(_row(reference_data, "torchtitan", recompute="toml default"), {})
    assert toml.parallel.recompute == "per_op"


@pytest.mark.parametrize("text, modules", [("mlp", "mlp"), ("['core_attn', 'mlp']", "core_attn,mlp"),
                                           ("moe_act,mlp", "moe_act,mlp"),
                                           ("selective: norm, act", "layernorm,moe_act")])
def test_a_recompute_cell_of_module_names_is_selective_recompute_of_them(reference_data, text, modules):
    """Megatron-Bridge's recipes set ``recompute_modules = ["mlp"]``: a cell that names only
    Megatron-Core's --recompute-modules is selective recompute of those modules."""
    job = row_workload(_row(reference_data, "vtrain_multi", framework="Megatron-Bridge", recompute=text), {})
    assert (job.parallel.recompute, job.parallel.recompute_modules) == ("selective", modules)
    assert f"recompute_modules={modules}" in "; ".join(job.assumed)


@pytest.mark.parametrize("framework, sharding, whose", [
    ("NVIDIA NeMo 25.09", "distributed_optimizer", "NeMo"),  # its recipes' OptimizerConfig
    ("Megatron-Bridge 0.2", "distributed_optimizer", "Megatron-Bridge"),  # its pretraining configs
    ("Megatron-Core r0.8.0", "none", "Megatron"),  # --use-distributed-optimizer is opt-in
])
def test_a_blank_sharding_takes_the_named_framework_s_recipes(reference_data, framework, sharding, whose):
    """NeMo and Megatron-Bridge are Megatron-Core's family, but their pretraining recipes shard the
    optimizer where Megatron-LM's launcher does not: the file the cell names decides."""
    job = row_workload(_row(reference_data, "vtrain_multi", framework=framework, zero_or_distopt=""), {})
    assert job.parallel.sharding == sharding
    assert f"zero_or_distopt={sharding} (blank: {whose}'s default)" in job.assumed
    recompute = row_workload(_row(reference_data, "vtrain_multi", framework=framework, recompute=""), {})
    assert recompute.parallel.recompute == "none" and "recompute=none (blank: Megatron's default)" in recompute.assumed


def test_selective_recompute_is_the_frameworks_own(reference_data):
    """torchtitan's selective checkpointing in its Llama 3 configs is per-op; Megatron's
    recomputes the attention core; a cell naming the per-op policy reads as it anywhere."""
    titan = row_workload(_row(reference_data, "torchtitan", recompute="selective"), {})
    assert titan.parallel.recompute == "per_op" and any("per_op" in note for note in titan.assumed)
    megatron = row_workload(_row(reference_data, "vtrain_multi", recompute="selective"), {})
    assert megatron.parallel.recompute == "selective"
    named = row_workload(_row(reference_data, "vtrain_multi", recompute="per-op SAC"), {})
    assert named.parallel.recompute == "per_op"


@pytest.mark.parametrize("framework, notes, fused", [
    ("Megatron-Core r0.8.0", "", False),  # Megatron-LM's --cross-entropy-loss-fusion is off by default
    ("NVIDIA NeMo 25.09 (Megatron-Core)", "", True),  # NeMo's GPTConfig turns it on
    ("Megatron-Core r0.8.0", "--cross-entropy-loss-fusion", True),
    ("NVIDIA NeMo 25.09 (Megatron-Core)", "no cross entropy fusion", False),
    ("Megatron-Core r0.8.0", "Nemotron-H 8B", False),  # a model's name is not the framework
])
def test_megatrons_loss_is_fused_as_the_row_says_or_its_framework_defaults(reference_data, framework, notes, fused):
    work = row_workload(_row(reference_data, "vtrain_multi", framework=framework, notes=notes), {})
    assert work.parallel.loss_fusion is fused
    assert any("loss fused" in note for note in work.assumed) is fused


def test_interleaving_without_its_size(reference_data):
    """'yes (V not stated)': torchtitan's 2 stages per rank; Megatron-LM has no default."""
    runs = pd.read_csv(reference_data / "e2e" / "e2e_training_visible.csv", dtype=str, keep_default_na=False)
    row = runs[runs.vp.str.startswith("yes")].iloc[0].to_dict()
    job = row_workload(row, {})
    assert (job.parallel.vpp, job.parallel.schedule) == (2, "interleaved")
    with pytest.raises(PrismError, match="^vp=") as err:
        row_workload(row | {"framework": "Megatron-Core r0.8.0"}, {})
    assert err.value.field == "vp"


def test_rows_on_one_hardware_share_it(reference_data):
    hardware: dict = {}
    a, b = (row_workload(_row(reference_data, "vtrain_multi", mbs=m), hardware) for m in ("1", "2"))
    assert a.hardware is b.hardware and a.key != b.key
    assert row_workload(_row(reference_data, "vtrain_multi", mbs="1.0"), hardware).key == a.key

"""Cells read by their plain meaning (issue 52, "read the tables people have"): one table of
(cell, what it reads as) per reader of predictor/data/cells.py and of the runs-table columns."""
import pytest

from predictor.core.errors import PrismError
from predictor.core.framework import value_spellings
from predictor.data import cells
from predictor.data.published import row_precision
from predictor.data.runs_table import RECOMPUTES, SHARDINGS, choice, count, header_columns, switch

COUNTS = [("1,024", 1024), ("2,048", 2048), ("1 024", 1024), ("2k", 2048), ("4K", 4096), ("8K", 8192),
          ("1.5k", 1536), ("12", 12), ("12.0", 12), ("8,192", 8192), ("TP=8", 8), ("tp 8", 8), ("4096 tokens", 4096),
          ("5 (interleaved)", 5), ("8-way", 8), ("1,024 GPUs", 1024), ("4K tokens", 4096)]


@pytest.mark.parametrize("text, want", COUNTS)
def test_counts_with_separators_and_a_binary_k(text, want):
    assert count({"seq_len": text}, "seq_len") == want


@pytest.mark.parametrize("text", ["256K", "1,02", "4KB", "2.5", "k", "64 nodes"])
def test_counts_that_stay_refused(text):
    with pytest.raises(PrismError) as err:
        count({"vocab": text}, "vocab")
    assert str(err.value).startswith("vocab=")


def test_a_dash_is_a_blank_count():
    assert count({"cp": "-"}, "cp") is None and count({"cp": "\u2014"}, "cp") is None
    with pytest.raises(PrismError, match="gbs: blank"):
        count({"gbs": "-"}, "gbs")


SWITCHES = [("on", True), ("off", False), ("yes", True), ("no", False), ("true", True), ("False", False),
            ("enabled", True), ("disabled", False), ("none", False), ("on (TP > 1)", True),
            ("--sequence-parallel", True), ("sequence_parallel: true", True), ("sequence_parallel=False", False),
            ("model.sequence_parallel=True", True), ("1", True), ("0", False)]


@pytest.mark.parametrize("text, want", SWITCHES)
def test_switch_words(text, want):
    assert switch({"seq_parallel": text}, "seq_parallel") is want


def test_a_switch_that_says_nothing_is_refused_naming_its_column():
    with pytest.raises(PrismError) as err:
        switch({"seq_parallel": "sometimes"}, "seq_parallel")
    assert str(err.value).startswith("seq_parallel=") and "\n" not in str(err.value)


RECOMPUTE = [("none (no ACT_CKPT set)", "none"), ("full (uniform, 1 layer)", "full"), ("selective", "selective"),
             ("full (block, 2 layers)", "full"), ("uniform", "full"), ("recompute_granularity=selective", "selective"),
             ("--recompute-activations", "selective"), ("activations_checkpoint_method: block", "full"),
             ("off; activations kept", "none"), ("full AC", "full"), ("attention only", "selective"),
             ("yes", None)]


@pytest.mark.parametrize("text, want", RECOMPUTE)
def test_recompute_cells(text, want):
    if want is None:  # a switch word: published.py reads it as full (test_published_cells)
        with pytest.raises(PrismError):
            choice({"recompute": text}, "recompute", RECOMPUTES, "none", value_spellings("recompute"))
        return
    own = value_spellings("recompute")
    for value, words in cells.PLAIN_VALUES["recompute"].items():
        own[value] = own.get(value, ()) + words
    assert choice({"recompute": text}, "recompute", RECOMPUTES, "none", own)[0] == want


SHARDING = [("distributed_fused_adam", "distributed_optimizer"), ("mcore_distributed_optim", "distributed_optimizer"),
            ("use_distributed_optimizer=True", "distributed_optimizer"), ("use_distributed_optimizer: false", "none"),
            ("--use-distributed-optimizer", "distributed_optimizer"), ("fused_adam", "none"),
            ("stage 3", "zero3"), ("zero_optimization.stage=2", "zero2"), ("stage: 1", "zero1"),
            ("FSDP (FULL_SHARD)", "fsdp"), ("SHARD_GRAD_OP", "zero2"), ("ZeRO stage 1", "zero1")]


@pytest.mark.parametrize("text, want", SHARDING)
def test_sharding_cells_in_the_frameworks_own_words(text, want):
    got, _ = choice({"zero_or_distopt": text}, "zero_or_distopt", SHARDINGS, "none", value_spellings("sharding"))
    assert got == want


PRECISION = [("bf16-mixed", ("bfloat16", "bfloat16")), ("16-mixed", ("float16", "float16")),
             ("precision: 16-mixed", ("float16", "float16")), ("mixed (16-bit)", ("float16", "float16")),
             ("BF16 mixed", ("bfloat16", "bfloat16")), ("FP8 (delayed scaling)", ("bfloat16", "float8")),
             ("fp8 hybrid", ("bfloat16", "float8")), ("fp8: hybrid", ("bfloat16", "float8")),
             ("hybrid", ("bfloat16", "float8")), ("amp_bf16", ("bfloat16", "bfloat16")),
             ("--bf16", ("bfloat16", "bfloat16")),
             ("bf16_with_fp8_delayed_scaling_mixed", ("bfloat16", "float8")), ("32-true", ("float32", "float32")),
             ("fp16 (dynamic loss scaling)", ("float16", "float16"))]


@pytest.mark.parametrize("text, want", PRECISION)
def test_precision_cells(text, want):
    assert row_precision(text, "NeMo") == want


PATTERNS = [("all MoE", 1), ("every layer", 1), ("all layers", 1), ("every 2nd layer MoE", 2), ("every other layer", 2),
            ("alternating dense/MoE", 2), ("every 4th layer", 4), ("every 3 layers", 3), ("1 in 2", 2),
            ("dense only", None), ("", None)]


@pytest.mark.parametrize("text, want", PATTERNS)
def test_layer_patterns_in_words(text, want):
    assert cells.layer_pattern(text) == want


def test_a_header_in_a_frameworks_spelling_fills_the_column():
    spelled = header_columns(["model", "tensor_model_parallel_size", "pipeline_model_parallel_size", "num_layers",
                              "ici_fsdp_parallelism", "--micro-batch-size", "pp"])
    assert spelled == {"tensor_model_parallel_size": "tp", "num_layers": "layers", "ici_fsdp_parallelism": "fsdp",
                       "--micro-batch-size": "mbs"}  # pp is there already: its spelling fills nothing


MTP = [("", 0), ("No MTP layer in this benchmark.", 0), ("mtp_num_layers=0", 0), ("MTP disabled", 0),
       ("with MTP", 1), ("multi-token prediction on", 1), ("MTP=2", 2), ("mtp_num_layers: 2", 2), ("2 MTP layers", 2)]


@pytest.mark.parametrize("text, want", MTP)
def test_multi_token_prediction_in_words(text, want):
    """A row trains the modules its text names (DeepSeek-V3 defines one), none where it names none."""
    from predictor.core.profiles import load_model
    from predictor.data.published import _mtp_layers
    notes = []
    assert _mtp_layers(load_model("deepseek-v3"), text, notes) == want
    assert bool(notes) == bool(text)

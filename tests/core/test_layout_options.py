"""The fourth new-user probe, layouts: context parallelism's 2·cp chunks, options one framework
has and another does not (one reading of torchtitan's selective recompute for predict and
predict-batch), the notes a layout needs (tp across nodes, settings that do nothing, an
interleaved split whose chunks differ while its stages do not)."""
from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

from predictor.app import cli
from predictor.core.errors import PrismError
from predictor.core.layout import (
    framework_layout,
    framework_note,
    idle_note,
    resolve_layout,
    split_note,
    validate_layout,
)
from predictor.core.mesh import tp_span_note
from predictor.core.profiles import load_hardware, load_model
from predictor.core.specs import ParallelConfig
from predictor.data.published import row_workload
from predictor.workload.decompose import decompose

H100 = load_hardware("h100-sxm")
LLAMA = load_model("llama3-8b")


def test_context_parallelism_needs_the_sequence_in_two_chunks_per_rank(capsys):
    # was: seq 8196 at cp=4 was priced, as was a 2-token sequence at cp=2; Megatron-Core cuts the
    # sequence into 2·cp chunks (get_batch_on_this_cp_rank) and cannot run either
    code = cli.main(["predict", "model=llama3-8b", "hardware=h100-sxm", "gpus=64", "parallel.tp=8", "parallel.cp=4",
                     "model.seq_length=8196"])
    err = capsys.readouterr().err
    assert code == 2 and "parallel.cp=4" in err and "2·cp = 8" in err and "model.seq_length" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    with pytest.raises(PrismError, match="pick cp=1") as error:
        validate_layout(LLAMA, ParallelConfig(cp=2, global_batch_size=1), seq=2)
    assert error.value.field == "parallel.cp"
    validate_layout(LLAMA, ParallelConfig(cp=4, global_batch_size=1), seq=8200)  # 8 chunks of 1025 tokens
    validate_layout(LLAMA, ParallelConfig(global_batch_size=1), seq=7)  # no context parallelism: nothing to cut


def test_decompose_checks_the_sequence_it_is_given():
    # was: decompose(seq=...) checked the layout against model.seq_length instead
    with pytest.raises(PrismError) as error:
        decompose(LLAMA, ParallelConfig(cp=2, global_batch_size=4), H100, seq=8190)
    assert error.value.field == "parallel.cp"


def test_torchtitan_s_selective_recompute_reads_alike_in_predict_and_predict_batch(reference_data):
    # was: predict priced framework=torchtitan recompute=selective as Megatron's (0.932 s at tp=8 on
    # 64 H100s) while predict-batch read it as torchtitan's per-op policy (1.068 s)
    given = ParallelConfig(tp=8, recompute="selective")
    assert resolve_layout(given, 64, "torchtitan").recompute == "per_op"
    assert resolve_layout(given, 64, "megatron-core").recompute == "selective"
    assert "per_op" in framework_note(given, "torchtitan") and framework_note(given, "megatron-core") is None
    par = resolve_layout(given, 64)
    calls = [decompose(LLAMA, p, H100, 64, framework="torchtitan").stages[0].backward
             for p in (par, replace(par, recompute="per_op"))]
    assert calls[0] == calls[1]  # decompose reads it as torchtitan does, whoever calls it
    runs = pd.read_csv(reference_data / "e2e" / "e2e_training_visible.csv", dtype=str, keep_default_na=False)
    row = runs[runs.set_id == "torchtitan"].iloc[-1].to_dict() | {"recompute": "selective"}
    job = row_workload(row, {})
    assert job.parallel.recompute == "per_op" and framework_note(given, "torchtitan") in job.assumed


@pytest.mark.parametrize("framework, settings, field", [
    ("megatron-core", {"recompute": "per_op"}, "parallel.recompute"),  # was: priced, a policy only torchtitan has
    ("megatron-lm", {"recompute": "per_op"}, "parallel.recompute"),
    ("torchtitan", {"recompute": "selective", "recompute_modules": "mlp"}, "parallel.recompute_modules"),
    ("deepspeed", {"sharding": "zero3", "pp": 2}, "parallel.sharding"),  # DeepSpeed's PipelineEngine refuses it
    ("deepspeed", {"sharding": "zero2", "pp": 2}, "parallel.sharding"),
])
def test_options_the_framework_does_not_offer_are_refused(framework, settings, field):
    with pytest.raises(PrismError) as error:
        resolve_layout(ParallelConfig(tp=8, **settings), 64, framework)
    assert error.value.field == field
    assert f"framework={framework}" in str(error.value) or "DeepSpeed's pipeline engine" in str(error.value)


def test_shardings_are_the_cost_s_names_and_noted_where_the_framework_has_none():
    # was: sharding=fsdp under framework=megatron-lm went by without a word; the names are the
    # cost's (a published Megatron-LM table ran ZeRO-3 under DeepSpeed), so a note, not an error
    fsdp = ParallelConfig(tp=8, sharding="fsdp")
    assert framework_layout(fsdp, "megatron-lm") == fsdp
    assert "Megatron-LM before Core" in framework_note(fsdp, "megatron-lm")
    assert framework_note(fsdp, "megatron-core") is None and framework_note(fsdp, "torchtitan") is None
    zero3 = ParallelConfig(tp=8, pp=2, sharding="zero3")
    assert framework_layout(zero3, "torchtitan") == zero3  # FSDP2 with pipeline parallelism runs


def test_a_tensor_parallel_group_across_nodes_is_noted():
    # was: predict said nothing at tp=16 on 8-GPU nodes while compare said tp spans nodes
    assert tp_span_note(16, H100) == ("tp=16 spans 2 nodes of 8 GPU(s): tensor-parallel collectives cross the "
                                      "inter-node network")
    assert tp_span_note(8, H100) is None
    assert tp_span_note(16, load_hardware("gb200-nvl72")) is None  # one NVLink domain of 72 GPUs


def test_settings_that_do_nothing_in_the_layout_are_noted():
    # was: overlap_tp_comm at tp=1, overlap_ep_comm and moe_dispatcher=flex at ep=1 went by unnoted
    given = ParallelConfig(overlap_tp_comm=True, sequence_parallel=True)
    note = idle_note(LLAMA, given, resolve_layout(given, 8))
    assert "overlap_tp_comm=true" in note and "sequence_parallel=true" in note and "off at tp=1" in note
    assert idle_note(LLAMA, ParallelConfig(tp=8, overlap_tp_comm=True), ParallelConfig(tp=8, dp=8)) is None
    mixtral = load_model("mixtral-8x7b")
    given = ParallelConfig(tp=8, sequence_parallel=True, overlap_ep_comm=True, moe_dispatcher="flex")
    note = idle_note(mixtral, given, resolve_layout(given, 64))
    assert "overlap_ep_comm=true" in note and "moe_dispatcher=flex" in note and "ep=1" in note
    assert idle_note(mixtral, replace(given, ep=8), replace(resolve_layout(given, 64), ep=8)) is None
    assert "has no experts" in idle_note(LLAMA, given, resolve_layout(given, 64))
    assert idle_note(LLAMA, ParallelConfig(), ParallelConfig()) is None


def test_an_interleaved_split_names_the_chunks_that_differ():
    # was: "the first stages hold one layer more ...; layers per stage 16, 16": the stages are
    # equal, it is each stage's 16 layers over its 3 chunks that are not
    note = split_note(LLAMA, ParallelConfig(tp=8, pp=2, vpp=3, schedule="interleaved"))
    assert "one layer more" not in note and "16 as 6+5+5" in note and "each stage holds 16 layers" in note
    assert "layers per stage 11, 11, 10" in split_note(LLAMA, ParallelConfig(pp=3))
    assert "embedding" in split_note(load_model("gpt3-13b"), ParallelConfig(pp=2, vpp=3, schedule="interleaved"))
    assert split_note(LLAMA, ParallelConfig(pp=2, vpp=2, schedule="interleaved")) is None

"""The published-run tables people have (issue 52): tests/data/published_cells.csv holds rows
in the cells NeMo, Megatron-Bridge, MaxText, DeepSpeed and paper authors write. Each row reads
as specs, or is refused in one line naming its column for what cannot be read (an
architecture PRISM does not model, a GPU with no profile)."""
import csv
import re
from pathlib import Path

import pytest

from predictor.core.errors import PrismError
from predictor.core.profiles import group_options
from predictor.data.published import in_table_terms, row_workload

TABLE = Path(__file__).with_name("published_cells.csv")
ROWS = list(csv.DictReader(TABLE.open(encoding="utf-8")))
#: model -> the column its refusal names (none of these can be read as a job PRISM prices).
REFUSED = {"Nemotron-H 8B": "model", "Jamba 1.5 Large": "model", "Qwen3-Next-80B-A3B": "model"}
B300 = "b300" in group_options("hardware")


def _read(row):
    try:
        return row_workload(row, {}), None
    except PrismError as exc:
        return None, in_table_terms(exc)


@pytest.mark.parametrize("i", range(len(ROWS)), ids=[f"{i + 2}:{r['model']}" for i, r in enumerate(ROWS)])
def test_each_row_reads_or_names_the_column_it_cannot_read(i):
    row = ROWS[i]
    job, error = _read(row)
    if row["model"] in REFUSED:
        assert error is not None and error.field == REFUSED[row["model"]] and "\n" not in str(error)
        assert "not model" in str(error)
    elif re.search(r"(?<![a-z0-9])b300", row["gpu"], re.IGNORECASE) and not B300:  # b300.yaml: another branch
        assert error is not None and error.field == "gpu"
        assert "no hardware profile matches" in str(error)
    else:
        assert error is None, str(error)


def _assumed(model, **cells):
    row = next(r for r in ROWS if r["model"] == model and all(r[k] == v for k, v in cells.items()))
    job, error = _read(row)
    assert error is None, str(error)
    return job, "; ".join(job.assumed)


def test_a_blank_sequence_parallel_cell_takes_the_only_value_megatron_core_allows():
    job, assumed = _assumed("DeepSeek-V2-Lite")  # tp=2, ep=8, seq_parallel blank
    assert job.parallel.sequence_parallel
    assert "seq_parallel: blank, read as on (Megatron-Core requires it with ep and tp>1)" in assumed


def test_nemos_distributed_optimizer_is_read():
    for model, optimizer in (("Llama 3 70B", "distributed_fused_adam"), ("Llama 3 8B", "mcore_distributed_optim")):
        job, assumed = _assumed(model, zero_or_distopt=optimizer)
        assert job.parallel.sharding == "distributed_optimizer" and optimizer in assumed


def test_a_model_named_without_its_family_comes_from_the_registry_and_the_rows_figures_rule():
    job, assumed = _assumed("Mixtral 8x7B", framework="MaxText")
    assert job.model.num_layers == 32 and job.model.num_experts == 8 and job.model.seq_length == 4096
    job, assumed = _assumed("BLOOM")  # its layers, hidden, heads and vocab stated, the rest from conf/model
    assert (job.model.num_layers, job.model.hidden_size, job.model.vocab_size) == (70, 14336, 250880)
    assert "conf/model bloom-176b" in assumed


def test_maxtexts_fsdp_degree_is_sharded_data_parallelism():
    job, assumed = _assumed("Llama 2 70B")  # dp=1, fsdp=256 on 256 GPUs
    assert job.parallel.dp == 256 and job.parallel.sharding == "fsdp" and "fsdp=256" in assumed
    job, _ = _assumed("Llama 2 7B", framework="MaxText")  # dp=1 and 'FSDP=8' in the sharding cell
    assert job.parallel.dp == 8 and job.parallel.sharding == "fsdp"


def test_gb200_and_gb300_cells_that_name_the_rack():
    job, _ = _assumed("Kimi-K2")
    assert job.hardware.name.startswith("gb200-nvl72")
    job, _ = _assumed("DeepSeek-V3", gpu="GB300 NVL72")
    assert job.hardware.name.startswith("gb300-nvl72")


def test_a_table_headed_in_nemos_spelling_reads_as_ours():
    row = dict(next(r for r in ROWS if r["model"] == "GPT-3 175B"))
    spelled = {"tp": "tensor_model_parallel_size", "pp": "pipeline_model_parallel_size", "mbs": "micro_batch_size",
               "gbs": "global_batch_size", "layers": "num_layers"}
    renamed = {spelled.get(k, k): v for k, v in row.items()}
    assert row_workload(renamed, {}).key == row_workload(row, {}).key


def test_reach_on_the_table():
    read = sum(_read(r)[1] is None for r in ROWS)
    assert read >= len(ROWS) - len(REFUSED) - (0 if B300 else 2)


def test_an_auto_degree_takes_the_gpus_the_others_leave():
    row = dict(next(r for r in ROWS if r["model"] == "Llama 2 70B"))  # dp=1, fsdp=256, 256 GPUs
    job = row_workload({**row, "fsdp": "-1"}, {})  # MaxText's ici_fsdp_parallelism: -1
    assert job.parallel.dp == 256 and job.parallel.sharding == "fsdp"
    job = row_workload({**row, "fsdp": "", "dp": "auto"}, {})
    assert job.parallel.dp == 256 and "dp 'auto' read as 256" in "; ".join(job.assumed)


def test_a_maxtext_row_takes_maxtexts_blank_defaults():
    row = dict(next(r for r in ROWS if r["model"] == "Llama 2 70B"))
    job = row_workload({**row, "dp": "256", "fsdp": "", "recompute": "", "zero_or_distopt": ""}, {})
    assumed = "; ".join(job.assumed)
    assert job.parallel.sharding == "fsdp" and job.parallel.recompute == "full"
    assert "MaxText's default" in assumed and "none PRISM knows" not in assumed

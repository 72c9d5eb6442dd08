"""A table that gives the global batch another way (issue 52, "read the tables people have"):
papers write the sequences each data-parallel rank takes ("Batch size/DP") or the tokens a
step takes ("Tokens/Batch", "Global batch size (tokens)"); the reader works gbs out and says so."""
import pytest

from predictor.core.errors import PrismError
from predictor.data.published import row_workload
from predictor.data.runs_table import header_columns, missing_columns, with_columns


def _job(**cells):
    row = {"model": "Llama 3 70B", "gpu": "H100", "gpus": "512", "tp": "8", "pp": "4", **cells}
    return row_workload(with_columns({k.lower(): v for k, v in row.items()}), {})


def test_the_headers_name_the_columns_they_give():
    got = header_columns(["batch size/dp", "tokens/batch", "global batch size (tokens)", "batch size (sequences)"])
    # two headers that would fill the same column fill none: which one a row means is not guessed
    assert got == {"batch size/dp": "batch_per_dp", "batch size (sequences)": "gbs"}
    assert header_columns(["global batch size (tokens)"]) == {"global batch size (tokens)": "tokens_per_step"}
    assert header_columns(["global batch size"]) == {"global batch size": "gbs"}


def test_a_table_with_a_batch_of_any_kind_is_not_refused_for_gbs():
    base = ["model", "gpu", "num_gpus", "tp", "pp"]
    assert missing_columns(base) == ["gbs"]
    assert missing_columns([*base, "batch size/dp"]) == [] and missing_columns([*base, "tokens/batch"]) == []


def test_batch_per_dp_times_the_data_parallel_ranks():
    job = _job(**{"Batch size/DP": "16"})
    assert job.parallel.dp == 16 and job.parallel.global_batch_size == 256
    assert any("gbs=256 (blank: batch_per_dp=16 x dp=16)" in n for n in job.assumed)


@pytest.mark.parametrize("tokens, seq, gbs", [("16M", "8192", 2048), ("4,194,304", "4096", 1024),
                                              ("4M tokens", "4096", 1024), ("2.5M", "2048", 1280),
                                              ("2.048M", "2000", 1024)])
def test_tokens_per_step_over_the_sequence_length(tokens, seq, gbs):
    """A binary M where that makes whole sequences (16M of 8,192 is 2,048), else decimal (2.048M
    of 2,000 is 1,024: 2.048·2^20 is not a whole number of them)."""
    job = _job(**{"Tokens/Batch": tokens, "Seq. Len.": seq})
    assert job.parallel.global_batch_size == gbs and job.model.seq_length == int(seq)
    assert any(f"gbs={gbs} (blank: tokens_per_step" in n for n in job.assumed)


@pytest.mark.parametrize("tokens", ["1000", "0", "-4M", "many", "4M sequences", "1e6"])
def test_a_token_count_that_is_no_whole_number_of_sequences_is_refused_naming_it(tokens):
    """Not a count of tokens, or none that makes whole sequences (0 is no batch, not the default)."""
    with pytest.raises(PrismError) as err:
        _job(**{"Tokens/Batch": tokens, "Seq. Len.": "4096"})
    assert err.value.field == "tokens_per_step" and "4096-token sequences" in str(err.value)


def test_the_gbs_column_rules_where_both_are_given():
    job = _job(**{"GBS": "128", "Tokens/Batch": "16M", "Seq. Len.": "8192"})
    assert job.parallel.global_batch_size == 128


@pytest.mark.parametrize("cells", [{}, {"Batch size/DP": "\u2014"}, {"GBS": "-", "Tokens/Batch": "n/a"}])
def test_no_batch_at_all_is_refused_naming_gbs(cells):
    with pytest.raises(PrismError) as err:
        _job(**cells)
    assert err.value.field == "gbs" and "batch_per_dp" in str(err.value)

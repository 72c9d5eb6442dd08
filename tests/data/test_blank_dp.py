"""A blank data-parallel cell takes the only degree that makes the row's GPUs, and says so."""

import pandas as pd
import pytest

from predictor.core.errors import PrismError
from predictor.data.published import row_workload


def _vtrain_row(reference_data, **cells) -> dict:
    runs = pd.read_csv(reference_data / "e2e" / "e2e_training_visible.csv", dtype=str, keep_default_na=False)
    return runs[runs.set_id == "vtrain_multi"].iloc[-1].to_dict() | cells


@pytest.mark.parametrize("cell", ["", "-", "\u2014", "n/a"])
def test_a_blank_dp_is_num_gpus_over_the_model_parallel_degrees(reference_data, cell):
    """Blank, a dash or n/a alike (a dash once left dp unset and the reader failed)."""
    row = _vtrain_row(reference_data)
    stated = row_workload(row, {})
    blank = row_workload(row | {"dp": cell}, {})
    gpus, tp, pp = (int(float(row[c])) for c in ("num_gpus", "tp", "pp"))
    assert blank.parallel.dp == stated.parallel.dp == gpus // (tp * pp)
    read = f"dp: blank, read as {blank.parallel.dp} (num_gpus / tp·pp·cp"
    assert any(note.startswith(read) for note in blank.assumed)


def test_a_blank_dp_that_no_degree_can_fill_names_dp(reference_data):
    row = _vtrain_row(reference_data)
    with pytest.raises(PrismError, match=r"dp: blank, and num_gpus=\d+ is not a multiple of tp·pp·cp") as caught:
        row_workload(row | {"dp": "", "num_gpus": str(int(float(row["tp"])) * int(float(row["pp"])) + 1)}, {})
    assert caught.value.field == "dp"

"""Measurement files of another writer: each damage is one error naming the measured file's
field or layout, never a pandas traceback or a wrong answer."""

import json

import numpy as np
import pandas as pd
import pytest

from predictor.core.errors import PrismError
from predictor.core.profiles import REPO_ROOT, load_hardware
from predictor.data.measurements import measured_workloads, read_measurements


@pytest.fixture
def measured(tmp_path):
    """Two layouts of a shipped measurement file, and where to write a damaged copy."""
    frame = pd.read_parquet(REPO_ROOT / "measurements" / "local-cpu-suite-C.parquet")
    return frame[frame.layout_id.isin(frame.layout_id.unique()[:2])].reset_index(drop=True), tmp_path / "m.parquet"


@pytest.mark.parametrize("damage, says", [
    (lambda f: f.assign(step_time_s=f.step_time_s.astype(str)), "'step_time_s' holds"),  # was a pandas TypeError
    (lambda f: f.assign(step_time_s=np.where(f.index < 3, np.inf, f.step_time_s)), "non-positive or infinite"),
    (lambda f: f.assign(hardware=None), "'hardware' has"),  # was a TypeError joining the hardware names
    (lambda f: f.assign(layout_id=None), "'layout_id' has"),  # was a ZeroDivisionError drawing no layout
    (lambda f: f.assign(step=np.where(f.index == 0, np.nan, f.step)), "'step' has 1 empty"),  # a step dropped
])
def test_a_measurement_file_of_another_writer_is_refused(measured, damage, says):
    frame, path = measured
    damage(frame).to_parquet(path)
    with pytest.raises(PrismError, match=says) as exc:
        read_measurements(path)
    assert exc.value.field == "measured"


def test_a_measured_layout_the_specs_refuse_is_named_with_its_layout(measured):
    frame, path = measured
    par = json.loads(frame.parallel_json[0]) | {"tp": 0}
    frame.assign(parallel_json=json.dumps(par)).to_parquet(path)
    with pytest.raises(PrismError, match=r"measured: layout 'tiny .*': parallel.tp=0"):  # was "parallel.tp=0" alone
        measured_workloads(read_measurements(path), load_hardware("local-cpu"))

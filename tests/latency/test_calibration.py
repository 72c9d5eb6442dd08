"""In-situ calibration: fitted on measured steps of this CPU, stored with the models."""
import shutil

import numpy as np
import pandas as pd
import pytest

from predictor.analyses.calibrate import cross_validate, fit_calibration
from predictor.analyses.validate import validate
from predictor.core.errors import PrismError
from predictor.core.profiles import load_hardware
from predictor.data.measurements import layout_configs, read_measurements, step_times
from predictor.engine.compose import compose
from predictor.latency.artifacts import ModelSet, models_dir
from predictor.latency.calibration import Calibration
from predictor.workload.decompose import decompose
from tests.conftest import ROOT

MEASURED = ROOT / "measurements" / "local-cpu-suite.parquet"


def test_apply_scales_compute_adds_overheads_and_leaves_collectives():
    cal = Calibration(compute_scale=1.5, op_overhead_us=10.0, tp_overhead_us=100.0)
    q = np.array([[100.0, 200.0]])
    np.testing.assert_allclose(cal.apply(q, False, tp=1), [[160.0, 310.0]])
    np.testing.assert_allclose(cal.apply(q, False, tp=2), [[260.0, 410.0]])
    np.testing.assert_allclose(cal.apply(q, True, tp=2), q)


@pytest.fixture(scope="module")
def uncalibrated(tmp_path_factory):
    hw = load_hardware("local-cpu")
    directory = tmp_path_factory.mktemp("models") / hw.name
    shutil.copytree(models_dir() / hw.name, directory)
    models = ModelSet.load(directory, hw)
    models.manifest.pop("calibration", None)
    return hw, directory, models


def test_fit_reduces_the_error_on_the_layouts_it_saw_and_is_stored(uncalibrated):
    hw, directory, models = uncalibrated
    frame = read_measurements(MEASURED)
    some = frame[frame.layout_id.isin(step_times(frame).layout_id.unique()[:5])]
    before = validate(some, hw, models, draws=200).table().median_ape
    cal = fit_calibration(some, hw, models, draws=50)
    after = validate(some, hw, models, draws=200, calibrations=dict.fromkeys(some.layout_id, cal)).table().median_ape
    assert cal.layouts == 5 and np.sqrt(np.mean(np.log1p(after) ** 2)) < np.sqrt(np.mean(np.log1p(before) ** 2))
    assert cal.unfitted == ""  # the fifth layout runs tp=2: every number is fitted
    models.save_calibration(directory, cal)
    assert ModelSet.load(directory, hw).calibration == cal
    models.save_calibration(directory, None)  # as a rerun of the suite's validate stage does first
    assert ModelSet.load(directory, hw).calibration is None


def test_calibration_needs_three_layouts(uncalibrated):
    hw, _, models = uncalibrated
    frame = read_measurements(MEASURED)
    one = frame[frame.layout_id == frame.layout_id.iloc[0]]
    with pytest.raises(PrismError, match="needs at least 3 measured layouts, and prism calibrate.* 4"):
        fit_calibration(one, hw, models)


def _copies(frame, layouts, times):
    """Rows of ``layouts`` repeated ``times`` times, each copy under a layout_id of its own."""
    rows = frame[frame.layout_id.isin(layouts)]
    return pd.concat([rows.assign(layout_id=rows.layout_id + f" copy{i}") for i in range(times)], ignore_index=True)


def test_copies_of_one_layout_under_new_ids_are_refused_and_nothing_is_stored(uncalibrated, capsys):
    """Two layouts copied four times each were fitted as 8 layouts, past the minimum of 3."""
    from predictor.app.cli import main
    hw, directory, models = uncalibrated
    frame = read_measurements(MEASURED)
    dp1, dp2 = "tiny seq128 dp1 tp1 pp1 mbs1 gbs4 rc=none 1f1b", "tiny seq128 dp2 tp1 pp1 mbs1 gbs8 rc=none 1f1b"
    copies = _copies(frame, [dp1, dp2], 4)
    for fit in (fit_calibration, cross_validate):
        with pytest.raises(PrismError, match=f"layout '{dp1} copy0' is copied as '{dp1} copy1', .*'{dp2} copy3'"
                                             f".*drop the copies' rows") as exc:
            fit(copies, hw, models)
        assert exc.value.field == "measured"
    path = directory.parent / "copies.parquet"
    copies.to_parquet(path)
    before = (directory / "manifest.json").read_bytes()
    assert main(["calibrate", f"measured={path}", "hardware=local-cpu", f"models_dir={directory.parent}"]) == 2
    err = capsys.readouterr().err
    assert "is copied as" in err and "Traceback" not in err
    assert (directory / "manifest.json").read_bytes() == before


def test_the_tp_overhead_is_not_fitted_without_a_tp_layout_and_says_why(uncalibrated):
    """Fitted on layouts of tp=1 only, tp_overhead_us stayed at the fit's start (5 us) as if measured."""
    hw, directory, models = uncalibrated
    frame = read_measurements(MEASURED)
    no_tp = [lid for lid in step_times(frame).layout_id.unique() if " tp1 " in lid][:3]
    cal = fit_calibration(frame[frame.layout_id.isin(no_tp)], hw, models, draws=50)
    assert cal.layouts == 3 and cal.tp_overhead_us == 0.0 and cal.compute_scale != 1.0
    assert "tp_overhead_us: no measured layout has tp>1" in cal.unfitted
    models.save_calibration(directory, cal)
    assert ModelSet.load(directory, hw).calibration == cal
    models.save_calibration(directory, None)


def test_steps_no_calibration_explains_are_refused_and_nothing_is_stored(uncalibrated):
    hw, directory, models = uncalibrated
    frame = read_measurements(MEASURED)
    some = frame[frame.layout_id.isin(step_times(frame).layout_id.unique()[:4])].copy()
    some["step_time_s"] *= 1000  # milliseconds written as seconds
    before = (directory / "manifest.json").read_bytes()
    with pytest.raises(PrismError, match="no calibration explains these steps.*step_time_s is in seconds"):
        fit_calibration(some, hw, models, draws=50)
    assert (directory / "manifest.json").read_bytes() == before


def test_the_stored_calibration_is_used_by_default(uncalibrated):
    hw, directory, models = uncalibrated
    models.save_calibration(directory, Calibration(1.3, 50.0, 500.0))
    models = ModelSet.load(directory, hw)
    frame = read_measurements(MEASURED)
    model, par = layout_configs(frame, frame.layout_id.iloc[0])
    work = decompose(model, par, hw, par.dp * par.tp * par.pp)
    stored = compose(work, models, draws=100).draws
    explicit = compose(work, models, draws=100, calibration=models.calibration).draws
    plain = compose(work, models, draws=100, calibration=Calibration()).draws
    np.testing.assert_array_equal(stored, explicit)
    assert not np.array_equal(stored, plain)


def test_calibrate_names_the_models_it_would_change_and_leaves_the_shipped_set(capsys):
    from predictor.app.cli import main
    manifest = models_dir() / "local-cpu" / "manifest.json"
    before = manifest.read_bytes()
    assert main(["calibrate", f"measured={MEASURED}", "hardware=local-cpu"]) == 2
    err = capsys.readouterr().err
    assert "models_dir: unset" in err and "models_dir=runs/models" in err and "Traceback" not in err
    assert manifest.read_bytes() == before


def test_the_fit_s_tolerance_predicts_as_the_exact_fit_does(uncalibrated):
    from predictor.analyses.calibrate import _fit, _workloads
    hw, _, models = uncalibrated
    frame = read_measurements(MEASURED)
    _, works, medians = _workloads(frame[frame.layout_id.isin(step_times(frame).layout_id.unique()[:5])], hw)
    loose, exact = _fit(works, medians, models, draws=50), _fit(works, medians, models, draws=50, tol=1e-8)
    for work in works:
        a, b = (np.median(compose(work, models, draws=50, seed=0, calibration=c).draws) for c in (loose, exact))
        assert abs(a / b - 1) < 0.005


def test_a_calibration_is_not_stored_with_models_replaced_while_it_was_fitted(tmp_path):
    """A prism train into the same folder during a prism calibrate got the old set's fit."""
    import json

    from predictor.core.profiles import REPO_ROOT
    from predictor.latency.artifacts import MANIFEST, ModelSet
    from predictor.latency.calibration import Calibration
    directory = tmp_path / "local-cpu"
    shutil.copytree(REPO_ROOT / "models" / "local-cpu", directory)
    models = ModelSet.load(directory, load_hardware("local-cpu"))
    models.save_calibration(directory, Calibration(1.1, 2.0, 30.0, layouts=4))  # the set it was fitted to
    manifest = json.loads((directory / MANIFEST).read_text())
    manifest.pop("calibration")
    (directory / MANIFEST).write_text(json.dumps(manifest | {"created": "2026-11-28T17:32:00+00:00"}))
    with pytest.raises(PrismError, match="its models were replaced while the calibration was fitted"):
        models.save_calibration(directory, Calibration(1.2, 2.0, 30.0, layouts=4))
    assert "calibration" not in json.loads((directory / MANIFEST).read_text())

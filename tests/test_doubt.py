"""Predictive uncertainty: the doubt model (predictor.latency.doubt), its features and
leave-one-source-out check (predictor.analyses.doubt), and its place in the reports."""
import numpy as np
import pandas as pd
import pytest

from predictor.analyses.doubt import Errors, check, features, shipped_model
from predictor.analyses.predict import predict
from predictor.core.errors import PrismError
from predictor.core.profiles import load_hardware, load_model
from predictor.core.specs import ParallelConfig
from predictor.engine.compose import compose
from predictor.engine.draws import cdf_at, inverse_cdf
from predictor.latency.doubt import (
    FEATURES,
    FRAMEWORKS,
    DoubtModel,
    conformal_offsets_by_source,
    source_reach,
    widen,
)
from predictor.latency.regressor import DEFAULT_QUANTILES
from predictor.workload.decompose import decompose

LEVELS = np.asarray(DEFAULT_QUANTILES)


def _synthetic(n_per_source=(400, 60, 60, 60, 60), seed=0):
    """Errors whose spread grows with the first feature, from sources of unequal size."""
    rng = np.random.default_rng(seed)
    X, y, sources = [], [], []
    for s, n in enumerate(n_per_source):
        x = rng.uniform(0, 1, size=(n, len(FEATURES)))
        x[:, FEATURES.index("framework")] = 0
        X.append(x)
        y.append(rng.normal(0, 0.05 + 0.3 * x[:, 0]))
        sources += [f"s{s}"] * n
    return np.vstack(X), np.concatenate(y), np.array(sources)


def test_intervals_hold_on_sources_left_out():
    X, y, sources = _synthetic()
    table = pd.DataFrame({"source": sources, "tier": "measured samples", "predicted_s": 1.0,
                          "measured_s": np.exp(y), "p5_s": 0.99, "p95_s": 1.01})
    scores = check(Errors(table, X, {})).set_index("group")
    assert 0.7 <= scores.loc["all", "cover80"] <= 0.9
    assert 0.82 <= scores.loc["all", "cover90"] <= 0.97
    assert scores.loc["all", "cover90_variability_band"] < 0.2  # the variability band alone is not the doubt


def test_every_source_weighs_the_same_in_the_calibration():
    """One large source with small errors must not shrink the interval the others need."""
    y = np.concatenate([np.zeros(1000), np.full(10, 0.5), np.full(10, -0.5), np.full(10, 0.5)])
    sources = np.array(["big"] * 1000 + ["a"] * 10 + ["b"] * 10 + ["c"] * 10)
    offsets = conformal_offsets_by_source(np.zeros((len(y), len(LEVELS))), y, sources, LEVELS)
    assert offsets[-1] == pytest.approx(0.5) and offsets[0] == pytest.approx(-0.5)


def test_fit_save_load_predicts_alike_and_flags_extrapolation(tmp_path):
    X, y, sources = _synthetic(seed=1)
    model = DoubtModel().fit(X, y, sources)
    q = model.predict(X[:20])
    assert (np.diff(q, axis=1) >= 0).all() and np.allclose(q[:, 3], 0)  # centred on the composed median
    loaded = DoubtModel.load(model.save(tmp_path / "doubt", {"note": "test"}))
    assert np.allclose(loaded.predict(X[:20]), q)
    far = X[:2].copy()
    far[0, 0] = 5.0  # outside the training range
    far[1, FEATURES.index("framework")] = FRAMEWORKS.index("torchtitan")  # never seen
    assert [bool(n) for n in loaded.extrapolating(far)] == [True, True]
    wide = loaded.predict(far)
    assert (wide[:, -1] - wide[:, 3] >= loaded.reach_[-1] - 1e-9).all()
    assert (wide[:, 0] - wide[:, 3] <= loaded.reach_[0] + 1e-9).all()


def test_a_corrupt_artifact_is_refused_with_its_path(tmp_path):
    X, y, sources = _synthetic(seed=2)
    path = DoubtModel().fit(X, y, sources).save(tmp_path / "doubt")
    (path / "doubt.ubj.gz").write_bytes(b"not a booster")
    with pytest.raises(PrismError) as err:
        DoubtModel.load(path)
    assert "doubt.ubj.gz" in str(err.value)


def test_too_few_sources_name_the_field():
    X, y, _ = _synthetic(n_per_source=(50, 50))
    with pytest.raises(PrismError) as err:
        DoubtModel().fit(X, y, np.array(["a"] * 50 + ["b"] * 50))
    assert err.value.field == "sources"


def test_an_extrapolating_query_reaches_as_far_as_an_unseen_source():
    residual = np.concatenate([np.full(10, -0.2), np.full(1000, 0.05), np.full(10, 0.6)])
    sources = np.array(["a"] * 10 + ["b"] * 1000 + ["c"] * 10)
    reach = source_reach(residual, sources, LEVELS)
    # each source weighs the same: the 1,000 runs of b do not make a's and c's errors rare
    assert reach[0] == pytest.approx(-0.2) and reach[-1] == pytest.approx(0.6)
    q = np.tile(np.linspace(-0.1, 0.1, len(LEVELS)), (2, 1))
    out = widen(q, LEVELS, [True, False], reach)
    assert out[0, 0] == pytest.approx(-0.2) and out[0, -1] == pytest.approx(0.6)
    assert (np.diff(out[0]) >= 0).all()
    assert np.allclose(out[1], q[1])


def test_cdf_at_inverts_the_draws():
    q = np.exp(np.array([[-0.4, -0.3, -0.1, 0.0, 0.1, 0.35, 0.5]]))
    u = np.array([[0.01, 0.07, 0.3, 0.5, 0.8, 0.97]])
    x = inverse_cdf(q, LEVELS, u)[0]
    assert np.allclose(cdf_at(np.repeat(q, len(x), 0), LEVELS, x), u[0], atol=1e-6)


def test_features_of_a_prediction_are_finite():
    hw = load_hardware("h100-sxm")
    work = decompose(load_model("llama3-8b"), ParallelConfig(tp=8, dp=2), hw)
    dist = compose(work, None, draws=64)
    x = features(work, dist, "spec-only prior", "torchtitan")
    assert x.shape == (len(FEATURES),) and np.isfinite(x).all()
    assert x[FEATURES.index("prior_share")] == pytest.approx(1.0)  # no models: every call on a prior


def test_predict_reports_variability_and_doubt_apart():
    assert shipped_model() is not None, "models/doubt ships with the project (benchmarks/bench_doubt.py --save)"
    p = predict(load_model("gpt3-13b"), load_hardware("a100-sxm4-80gb"), ParallelConfig(tp=8), gpus=64,
                draws=300, confidence=0.9)
    lo80, hi80 = p.predictive["interval_s"]["80%"]
    assert lo80 < p.step_time_s["p50"] < hi80
    assert p.predictive["median_step_s"]["p50"] == pytest.approx(p.step_time_s["p50"], rel=0.02)
    # doubt is wider than one run's jitter, and time to train carries both
    assert hi80 / lo80 > p.step_time_s["p95"] / p.step_time_s["p5"]
    assert p.confidence["step_time_s"] > p.step_time_s["p90"]
    with pytest.raises(PrismError) as err:
        predict(load_model("gpt3-13b"), load_hardware("a100-sxm4-80gb"), ParallelConfig(tp=8), gpus=64,
                framework="jax")
    assert err.value.field == "framework"

"""Predictive uncertainty: the doubt model (predictor.latency.doubt), its features and
leave-one-source-out check (predictor.analyses.doubt), and its place in the reports."""
from dataclasses import replace

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
    calibrated,
    conformal_offsets_by_source,
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


def _table(sources, y):
    """An :class:`Errors` table of runs predicted at 1 s with a step-time band of +-1%."""
    band = {f"p{round(a * 100)}_s": 1 + 0.02 * (a - 0.5) for a in LEVELS}
    return pd.DataFrame({"source": sources, "tier": "measured samples", "predicted_s": 1.0,
                         "measured_s": np.exp(y), **band})


def test_intervals_hold_on_sources_left_out():
    X, y, sources = _synthetic()
    table = _table(sources, y)
    scores = check(Errors(table, X, {})).set_index("group")
    assert 0.7 <= scores.loc["all", "cover80"] <= 0.9
    assert 0.82 <= scores.loc["all", "cover90"] <= 0.97
    assert scores.loc["all", "band_cover90"] < 0.2  # the variability band alone is not the doubt


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
    assert (np.diff(q, axis=1) >= 0).all()
    assert (q[:, :3] <= 0).all() and (q[:, 4:] >= 0).all()  # every interval holds the composed median
    loaded = DoubtModel.load(model.save(tmp_path / "doubt", {"note": "test"}))
    assert np.allclose(loaded.predict(X[:20]), q)
    far = X[:2].copy()
    far[0, 0] = 5.0  # outside the training range
    far[1, FEATURES.index("framework")] = FRAMEWORKS.index("torchtitan")  # never seen
    assert [bool(n) for n in loaded.extrapolating(far)] == [True, True]
    assert [bool(n) for n in loaded.extrapolating(X[:2])] == [False, False]
    # out of a feature's range: the calibration, made on such queries, stands; a framework
    # no source used: the interval reaches at least as far as every source's runs landed
    q_far, q_near = loaded.predict(far), loaded.predict(X[:2])
    assert np.allclose(q_far[0], calibrated(loaded.regressor_.predict(far[:1]), loaded.offsets_)[0])
    assert (q_far[1, -1] >= loaded.reach_[-1] - 1e-9) and (q_far[1, 0] <= loaded.reach_[0] + 1e-9)
    assert q_far[1, -1] - q_far[1, 0] >= q_near[1, -1] - q_near[1, 0]


def test_a_corrupt_artifact_is_refused_with_its_path(tmp_path):
    X, y, sources = _synthetic(seed=2)
    path = DoubtModel().fit(X, y, sources).save(tmp_path / "doubt")
    (path / "doubt.ubj.gz").write_bytes(b"not a booster")
    with pytest.raises(PrismError) as err:
        DoubtModel.load(path)
    assert "doubt.ubj.gz" in str(err.value)


def test_runs_like_this_match_on_the_most_alike_features_that_several_sources_share(tmp_path):
    """"Runs like this": the runs sharing the query's device kind, tier, framework and
    precision where three sources or more have some, else fewer of those features; what they
    measured against PRISM, each source weighing the same; the same after a save and load,
    and a changed runs file refused, naming it."""
    X, y, sources = _synthetic(seed=3)
    tier, fp8, gpu = (FEATURES.index(k) for k in ("tier", "gemm_precision", "gpu"))
    X[:, [tier, fp8, gpu]] = 0.0
    X[sources == "s1", fp8] = 1.0  # one source of fp8 runs only
    y[sources == "s1"] = 0.4  # measured 49% slower than predicted, every run
    model = DoubtModel().fit(X, y, sources)
    plain = model.alike(X[sources == "s2"][0])
    assert plain["matched_on"] == {"gpu": "a CPU", "tier": "measured samples", "framework": FRAMEWORKS[0],
                                   "gemm_precision": "16/32-bit GEMMs"}
    assert (plain["sources"], plain["runs"]) == (4, 580)
    assert -0.5 < plain["off_by"][0] < 0 < plain["off_by"][1] < 0.5  # s1's +49% is not among them
    fp8_query = model.alike(X[sources == "s1"][0])  # one source has fp8 runs: the match drops precision
    assert "gemm_precision" not in fp8_query["matched_on"] and fp8_query["sources"] == 5
    model.save(tmp_path / "doubt")
    loaded = DoubtModel.load(model.save(tmp_path / "doubt"))  # a refit replaces the set, its runs file too
    again = loaded.alike(X[sources == "s2"][0])  # the runs file keeps five decimals of each log error
    assert again["off_by"] == pytest.approx(plain["off_by"], abs=1e-4)
    assert {k: v for k, v in again.items() if k != "off_by"} == {k: v for k, v in plain.items() if k != "off_by"}
    runs = tmp_path / "doubt" / "runs.csv"
    runs.write_text(runs.read_text().replace("s2,", "s9,"))
    with pytest.raises(PrismError) as err:
        DoubtModel.load(tmp_path / "doubt")
    assert "runs.csv" in str(err.value)


def test_the_band_says_what_it_rests_on_in_words():
    from predictor.app.render import format_predictive
    predictive = {"median_step_s": {"p50": 1.0}, "interval_s": {"90%": [0.8, 1.3]}, "extrapolating": [],
                  "learned_from": "100 measured runs of 5 sources",
                  "alike": {"matched_on": {"gpu": "a GPU", "tier": "microbenchmarks"}, "sources": 4, "runs": 122,
                            "off_by": [-0.21, 0.41]}}
    text = format_predictive(predictive)
    assert "runs like this (a GPU, microbenchmarks: 4 sources, 122 runs) measured -21% to +41%" in text


def test_a_machines_suite_runs_weigh_together_as_one_source():
    from predictor.latency.doubt import source_family, source_weights
    assert source_family("local-cpu-suite-JJ") == "local-cpu-suite" == source_family("local-cpu-suite-A")
    assert source_family("vtrain_multi") == "vtrain_multi" and source_family("-suite-x") == "-suite-x"
    sources = np.array(["vtrain"] * 10 + ["local-cpu-suite-A"] * 4 + ["local-cpu-suite-B"] * 6 + ["neusight"] * 2)
    w = source_weights(sources)
    totals = {name: w[sources == name].sum() for name in np.unique(sources)}
    assert totals["vtrain"] == pytest.approx(totals["neusight"])  # a source weighs the same, whatever its rows
    assert totals["local-cpu-suite-A"] == pytest.approx(totals["local-cpu-suite-B"]) == pytest.approx(
        totals["vtrain"] / 2)  # two runs of one machine share one source's weight


def test_too_few_sources_name_the_field():
    X, y, _ = _synthetic(n_per_source=(50, 50))
    with pytest.raises(PrismError) as err:
        DoubtModel().fit(X, y, np.array(["a"] * 50 + ["b"] * 50))
    assert err.value.field == "sources"


def test_a_shared_bias_leans_the_interval_and_the_prediction_stays_inside():
    """Runs of every source landed ~25% above the composed median: a source left out gets
    an interval leaning up that still holds the prediction, whose median stays the composed one."""
    X, y, sources = _synthetic(seed=3)
    y = 0.25 + 0.3 * y
    table = _table(sources, y)
    scores = check(Errors(table, X, {})).set_index("group")
    assert 0.7 <= scores.loc["sources, each weighing the same", "cover80"] <= 0.95
    q = DoubtModel().fit(X, y, sources).predict(X[:50])
    assert (q[:, 3] == 0).all()  # the median is the composed median
    assert np.median(q[:, 4]) == pytest.approx(0.25, abs=0.1)  # the interval above it leans up
    assert (q[:, 0] <= 0).all()  # and the 90% interval still holds the prediction


def test_calibrated_moves_by_the_offsets_then_holds_zero_at_the_median():
    q = np.array([[0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6]])
    out = calibrated(q, np.array([-0.05, -0.03, -0.01, 0, 0.01, 0.03, 0.05]))
    assert np.allclose(out, [[0.0, 0.0, 0.0, 0.0, 0.41, 0.53, 0.65]])


@pytest.mark.parametrize("top", [0.5, 3.0])  # the outermost pair's slope kept, or the span's taken
def test_cdf_at_inverts_the_draws(top):
    q = np.exp(np.array([[-0.4, -0.3, -0.1, 0.0, 0.1, 0.35, top]]))
    u = np.array([[0.01, 0.07, 0.3, 0.5, 0.8, 0.97, 0.999]])
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
    for lo, hi in p.predictive["interval_s"].values():  # every interval holds the composed median
        assert lo <= p.step_time_s["p50"] * 1.02 and hi >= p.step_time_s["p50"] * 0.98
    assert lo80 <= p.predictive["median_step_s"]["p50"] <= hi80
    # doubt is wider than one run's jitter, and time to train carries both
    assert hi80 / lo80 > p.step_time_s["p95"] / p.step_time_s["p5"]
    assert p.confidence["step_time_s"] > p.step_time_s["p90"]
    with pytest.raises(PrismError) as err:
        predict(load_model("gpt3-13b"), load_hardware("a100-sxm4-80gb"), ParallelConfig(tp=8), gpus=64,
                framework="jax")
    assert err.value.field == "framework"


def test_this_machines_suite_runs_are_sources_of_their_own(tmp_path):
    """A suite's measured layouts, predicted from the models shipped here, round-trip through
    their CSV; the suites kept in measurements/ are sources with the CPU's device feature."""
    from predictor.analyses.doubt import machine_errors, measured_errors, read_errors, write_errors
    from predictor.core.profiles import REPO_ROOT
    from predictor.data.measurements import read_measurements
    from predictor.latency.artifacts import ModelSet

    hw = load_hardware("local-cpu")
    errors = measured_errors(read_measurements(REPO_ROOT / "measurements" / "local-cpu-suite.parquet"),
                             ModelSet.load(REPO_ROOT / "models" / "local-cpu", hw), hw, "here", draws=64)
    assert len(errors.table) >= 4 and np.isfinite(errors.X).all() and np.isfinite(errors.y).all()
    assert (errors.X[:, FEATURES.index("gpu")] == 0).all()
    back = read_errors(write_errors(errors, tmp_path / "rows.csv"))
    assert np.allclose(back.X, errors.X) and np.allclose(back.y, errors.y)
    kept = machine_errors()
    assert kept is not None and kept.table.source.str.startswith("local-cpu-suite-").all()
    assert kept.table.groupby("source").size().min() == 16
    (tmp_path / "bad-doubt.csv").write_text("source,tier\nx,measured samples\n")
    with pytest.raises(PrismError) as err:
        machine_errors(tmp_path)
    assert "x_tier" in str(err.value)


def test_a_gemm_precision_no_source_trained_in_is_a_kind_of_run_and_widens():
    """Issue 53: extrapolation to an unseen precision widens by the stated rule. The shipped
    model's runs are bf16/fp16/fp32 and per-tensor fp8; blockwise fp8 on an H100, a GPU
    generation it has seen, is extrapolating on ``gemm_precision`` and reaches as far as every
    source's runs landed, where per-tensor fp8 on the same job keeps its learned band."""
    hw = load_hardware("h100-sxm")
    model, layout = load_model("llama3-8b"), ParallelConfig(dp=8, global_batch_size=64)
    seen, unseen = (predict(model, replace(hw, gemm_dtype=dtype), layout, 8, draws=200).predictive
                    for dtype in ("float8", "float8_blockwise"))
    assert "gemm_precision" not in seen["extrapolating"] and "gemm_precision" in unseen["extrapolating"]
    reach = shipped_model().reach_
    low, high = (v / unseen["median_step_s"]["p50"] for v in unseen["interval_s"]["90%"])
    assert np.log(high) >= reach[-1] - 1e-6 and np.log(low) <= reach[0] + 1e-6


def test_every_low_gemm_precision_has_its_own_code():
    """A GEMM precision under two bytes an element that the error model's feature has no code for
    would fail loudly (gemm_precision), never be read as a 16-bit run."""
    from predictor.core.ops import DTYPE_BYTES
    from predictor.core.precision import GEMM_DTYPES
    from predictor.engine.doubt import gemm_precision
    from predictor.latency.doubt import GEMM_PRECISION_WORDS, GEMM_PRECISIONS

    hw = load_hardware("b200")
    low = [d for d in GEMM_DTYPES if DTYPE_BYTES[d] < 2]
    assert set(low) == set(GEMM_PRECISIONS[1:]) and len(GEMM_PRECISION_WORDS) == len(GEMM_PRECISIONS)
    assert [gemm_precision(replace(hw, gemm_dtype=d)) for d in low] == [GEMM_PRECISIONS.index(d) for d in low]
    assert gemm_precision(replace(hw, gemm_dtype=None)) == gemm_precision(replace(hw, gemm_dtype="bfloat16")) == 0

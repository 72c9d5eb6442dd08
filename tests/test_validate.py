"""`prism validate`: the scores, and the verb on a measurement file."""
import numpy as np
import pytest

from predictor.validate import score


def test_a_distribution_scored_against_itself_is_perfect():
    rng = np.random.default_rng(0)
    draws = np.exp(rng.normal(np.log(0.1), 0.05, 20000))
    s = score("x", draws, draws[:4000])
    assert s.median_ape < 0.005 and s.p95_ape < 0.01 and s.ks < 0.02
    assert s.coverage_80 == pytest.approx(0.8, abs=0.02)
    assert s.p95_p50_pred == pytest.approx(s.p95_p50_meas, rel=0.01)


def test_a_shifted_prediction_shows_in_every_score():
    rng = np.random.default_rng(1)
    measured = np.exp(rng.normal(np.log(0.1), 0.02, 50))
    s = score("x", measured.mean() * 1.2 * np.exp(rng.normal(0, 0.02, 4000)), measured)
    assert s.median_ape == pytest.approx(0.2, abs=0.02)
    assert s.ks > 0.9 and s.coverage_80 < 0.05

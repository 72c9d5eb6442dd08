"""The proper scores of predictor.latency.scores against hand-computed values."""
import numpy as np
import pytest

from predictor.latency.scores import (
    crps_from_quantiles,
    interval_score,
    level_weights,
    pinball_loss,
    relative_crps,
    relative_interval_score,
    relative_width,
)

LEVELS = (0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95)


def test_interval_score_inside_is_the_width():
    assert interval_score(8.0, 12.0, 10.0, 0.1) == pytest.approx(4.0)


def test_interval_score_below_and_above():
    # x = 6 below l = 8: 4 + 2/0.1 * 2 = 44; x = 13 above u = 12 at 80%: 4 + 2/0.2 * 1 = 14
    assert interval_score(8.0, 12.0, 6.0, 0.1) == pytest.approx(44.0)
    assert interval_score(8.0, 12.0, 13.0, 0.2) == pytest.approx(14.0)
    # at 50%: 4 + 2/0.5 * 3 = 16
    assert interval_score(8.0, 12.0, 15.0, 0.5) == pytest.approx(16.0)


def test_interval_score_vectorised_and_relative():
    got = relative_interval_score([8.0, 8.0], [12.0, 12.0], [10.0, 5.0], 0.1)
    # 4/10; (4 + 20*3)/5 = 12.8
    np.testing.assert_allclose(got, [0.4, 12.8])


def test_interval_score_rejects_bad_alpha():
    with pytest.raises(ValueError):
        interval_score(1, 2, 1.5, 0.0)
    with pytest.raises(ValueError):
        interval_score(1, 2, 1.5, 1.0)


def test_pinball_loss():
    assert pinball_loss(10.0, 12.0, 0.9) == pytest.approx(1.8)   # 0.9 * 2
    assert pinball_loss(10.0, 8.0, 0.9) == pytest.approx(0.2)    # 0.1 * 2
    assert pinball_loss(10.0, 10.0, 0.3) == pytest.approx(0.0)


def test_level_weights():
    np.testing.assert_allclose(level_weights(LEVELS), [0.075, 0.1, 0.2, 0.25, 0.2, 0.1, 0.075])
    np.testing.assert_allclose(level_weights([0.5]), [1.0])
    with pytest.raises(ValueError):
        level_weights([0.5, 0.25])


def test_crps_of_a_point_forecast_is_its_absolute_error():
    assert crps_from_quantiles(LEVELS, np.full(7, 10.0), 13.0) == pytest.approx(3.0)
    assert relative_crps(LEVELS, np.full(7, 10.0), 8.0) == pytest.approx(0.25)


def test_crps_by_hand_three_levels():
    # levels 0.25/0.5/0.75 weigh 0.375/0.25/0.375; quantiles 9/10/11; x = 12:
    # pinball 0.25*3=0.75, 0.5*2=1.0, 0.75*1=0.75 -> 2*(0.375*0.75 + 0.25*1 + 0.375*0.75) = 1.625
    assert crps_from_quantiles([0.25, 0.5, 0.75], [9.0, 10.0, 11.0], 12.0) == pytest.approx(1.625)
    # x = 10: pinball 0.25*1=0.25, 0, (1-0.75)*1=0.25 -> 2*(0.375*0.25*2) = 0.375
    assert crps_from_quantiles([0.25, 0.5, 0.75], [9.0, 10.0, 11.0], 10.0) == pytest.approx(0.375)


def test_crps_rows_and_approximates_the_normal_closed_form():
    from scipy.stats import norm
    levels = np.arange(1, 1000) / 1000
    q = norm.ppf(levels)
    x = 0.7  # CRPS(N(0,1), x) = x(2Phi(x)-1) + 2phi(x) - 1/sqrt(pi)
    exact = x * (2 * norm.cdf(x) - 1) + 2 * norm.pdf(x) - 1 / np.sqrt(np.pi)
    assert crps_from_quantiles(levels, q, x) == pytest.approx(exact, rel=0.01)
    got = crps_from_quantiles(LEVELS, np.tile(np.arange(7.0), (2, 1)), [3.0, 3.0])
    assert got.shape == (2,) and got[0] == pytest.approx(got[1])


def test_relative_width():
    np.testing.assert_allclose(relative_width([8.0, 1.0], [12.0, 3.0], [10.0, 2.0]), [0.4, 1.0])

"""Proper scores of a predictive distribution of a run's median step against the measured
step, each relative to the measured step (divided by it, so runs of 0.5 s and of 30 s weigh
the same). Coverage alone rewards an interval as wide as it likes; these punish width and
misses together, and a lower score is a better forecast.

- :func:`interval_score`: the interval score of a central (1 - alpha) interval
  (Gneiting & Raftery 2007, JASA 102:359, eq. 43):
  ``IS_alpha(l, u; x) = (u - l) + 2/alpha (l - x) 1{x < l} + 2/alpha (x - u) 1{x > u}``.
- :func:`crps_from_quantiles`: the continuous ranked probability score of a distribution
  given by its quantiles, through its quantile (pinball) decomposition
  ``CRPS(F, x) = 2 * integral_0^1 rho_tau(x - F^-1(tau)) dtau`` (Gneiting & Ranjan 2011;
  Laio & Tamea 2007), the integral approximated by the midpoint rule on the stated levels
  (:func:`level_weights`): each level weighs the share of (0, 1) nearer to it than to its
  neighbours, the tails beyond the outer levels weighing with them.
- :func:`relative_width`: a central interval's width over the median.

All are pure functions of arrays (numpy broadcasting), no model or table read.
"""
from __future__ import annotations

import numpy as np


def interval_score(lower, upper, x, alpha: float):
    """Interval score of the central ``1 - alpha`` interval [``lower``, ``upper``] for the
    outcome ``x`` (Gneiting & Raftery 2007, eq. 43), in ``x``'s units."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: {alpha}; the interval's miss rate, between 0 and 1 (0.1 for a 90% interval)")
    lower, upper, x = (np.asarray(a, float) for a in (lower, upper, x))
    return ((upper - lower) + 2.0 / alpha * np.maximum(lower - x, 0.0)
            + 2.0 / alpha * np.maximum(x - upper, 0.0))


def relative_interval_score(lower, upper, measured, alpha: float):
    """:func:`interval_score` over the ``measured`` step (dimensionless)."""
    return interval_score(lower, upper, measured, alpha) / np.asarray(measured, float)


def pinball_loss(q, x, tau: float):
    """Quantile (pinball) loss of the ``tau`` quantile ``q`` for the outcome ``x``:
    ``tau (x - q)`` above it, ``(1 - tau) (q - x)`` below."""
    d = np.asarray(x, float) - np.asarray(q, float)
    return np.maximum(tau * d, (tau - 1.0) * d)


def level_weights(levels) -> np.ndarray:
    """Midpoint-rule weights of quantile ``levels`` (increasing, in (0, 1)) on (0, 1):
    level i weighs from the midpoint with its lower neighbour (0 for the first) to the
    midpoint with its upper one (1 for the last). They sum to 1."""
    levels = np.asarray(levels, float)
    if levels.ndim != 1 or len(levels) == 0 or np.any(np.diff(levels) <= 0) or levels[0] <= 0 or levels[-1] >= 1:
        raise ValueError(f"levels: {levels.tolist()}; increasing quantile levels between 0 and 1")
    edges = np.concatenate([[0.0], (levels[1:] + levels[:-1]) / 2, [1.0]])
    return np.diff(edges)


def crps_from_quantiles(levels, quantiles, x, weights=None):
    """CRPS of the distribution whose ``levels`` quantiles are ``quantiles`` (..., k) for
    the outcome ``x`` (...): ``2 * sum_i w_i rho_{tau_i}(x - q_i)``, ``w`` the
    :func:`level_weights` unless given. In ``x``'s units; a point forecast (every quantile
    equal) scores its absolute error."""
    levels = np.asarray(levels, float)
    w = level_weights(levels) if weights is None else np.asarray(weights, float)
    q = np.asarray(quantiles, float)
    x = np.asarray(x, float)[..., None]
    return 2.0 * np.sum(w * pinball_loss(q, x, levels), axis=-1)


def relative_crps(levels, quantiles, measured, weights=None):
    """:func:`crps_from_quantiles` over the ``measured`` step (dimensionless)."""
    return crps_from_quantiles(levels, quantiles, measured, weights) / np.asarray(measured, float)


def relative_width(lower, upper, median):
    """Width of [``lower``, ``upper``] over ``median``."""
    return (np.asarray(upper, float) - np.asarray(lower, float)) / np.asarray(median, float)

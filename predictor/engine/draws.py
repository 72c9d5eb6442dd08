"""The composer's random draws: operator residuals from their quantiles, and the
variability factors that scale whole stages (docs/method.md, Composer step 2).

Per GPU, a persistent spatial factor times a per-step temporal factor, both lognormal
with median 1, is lognormal with sigma ``hypot(spatial_cv, temporal_cv)``; a stage runs
at the pace of its slowest GPU, the largest of N such factors, drawn directly as the
order statistic ``F^-1(u^(1/N))`` (David & Nagaraja, *Order Statistics*, 3rd ed., §2.1:
the maximum of N iid variables has CDF ``F^N``), whatever N is. Every collective of a
step shares one lognormal communication regime (congestion is correlated).

:class:`KeyedStreams` gives each named thing (an operator call, a stage position) its own
stream of uniforms, fixed by the seed and the thing alone: the search screens its layouts
in several processes and still draws every call alike in every layout.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from predictor.core.normal import ndtr, ndtri
from predictor.core.specs import VariabilitySpec


@dataclass(frozen=True)
class Spread:
    """Lognormal sigmas of the variability factors, a held component at zero."""

    temporal: float
    spatial: float
    regime: float

    @classmethod
    def of(cls, variability: VariabilitySpec, hold=()) -> Spread:
        """``variability``'s sigmas, those named in ``hold`` (temporal, spatial, regime) at zero."""
        sigma = {"temporal": variability.temporal_cv, "spatial": variability.spatial_cv,
                 "regime": variability.comm_regime_cv}
        return cls(**{k: 0.0 if k in hold else v for k, v in sigma.items()})

    @property
    def gpu(self) -> float:
        """Sigma of one GPU's compute factor: spatial times temporal."""
        return float(np.hypot(self.temporal, self.spatial))

    def regime_factor(self, rng: np.random.Generator, draws: int) -> np.ndarray:
        """(draws,) communication regimes, one per step, shared by every collective."""
        return np.exp(self.regime * rng.standard_normal(draws))


def inverse_cdf(q: np.ndarray, levels: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Draws from quantiles ``q`` (n, k) at ``levels`` for uniforms ``u`` (n, S): piecewise
    linear in log latency, tails extended in z-space (:func:`tail_slopes`).

    Every row shares ``levels``, so each draw's segment is found once for all rows (a tail
    starts from the outermost quantile); no loop over rows: the composer draws thousands of
    calls per prediction."""
    logq = np.log(q)
    z_levels = ndtri(levels)
    z = ndtri(np.clip(u, 1e-4, 1 - 1e-4))
    seg = np.clip(np.searchsorted(z_levels, z, side="right") - 1, 0, len(z_levels) - 2)
    rows = np.arange(len(q))[:, None]
    lo, hi = logq[rows, seg], logq[rows, seg + 1]
    slope = (hi - lo) / (z_levels[seg + 1] - z_levels[seg])
    inner = lo + slope * (z - z_levels[seg])
    low, high = tail_slopes(logq, z_levels)
    below = logq[:, :1] + low[:, None] * (z - z_levels[0])
    above = logq[:, -1:] + high[:, None] * (z - z_levels[-1])
    return np.exp(np.where(z < z_levels[0], below, np.where(z > z_levels[-1], above, inner)))


def tail_slopes(logq: np.ndarray, z_levels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n,) slopes of log latency against z below the lowest level and above the highest: the
    outermost pair's, but no steeper than the whole fitted span's. The outermost quantiles
    rest on the fewest samples; one stalled call among a shape's repeats (a pre-empted core:
    milliseconds against a median of hundreds of microseconds) makes the top pair
    steep, and extended at that slope the tail's mean alone put the traced steps' operators
    at 65 ms where their rows summed to 38. A lognormal's slopes are all its sigma, unchanged."""
    span = (logq[:, -1] - logq[:, 0]) / (z_levels[-1] - z_levels[0])
    low = (logq[:, 1] - logq[:, 0]) / (z_levels[1] - z_levels[0])
    high = (logq[:, -1] - logq[:, -2]) / (z_levels[-1] - z_levels[-2])
    return np.minimum(low, span), np.minimum(high, span)


#: Gauss-Hermite nodes and weights (probabilists'): E[g(Z)] for Z ~ N(0, 1) as a weighted sum.
_HERMITE_Z, _HERMITE_W = np.polynomial.hermite_e.hermegauss(64)


def quantile_mean(q: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """(n,) the mean of each row's distribution as :func:`inverse_cdf` draws it: E[F^-1(Phi(Z))]
    by 64-point Gauss-Hermite quadrature over z (log latency is piecewise linear in z)."""
    u = np.broadcast_to(ndtr(_HERMITE_Z), (len(q), len(_HERMITE_Z)))
    return inverse_cdf(q, levels, u) @ (_HERMITE_W / np.sqrt(2 * np.pi))


def cdf_at(q: np.ndarray, levels: np.ndarray, x: np.ndarray) -> np.ndarray:
    """P(X <= x) of each row's distribution given by quantiles ``q`` (n, k) at ``levels``,
    for values ``x`` (n,): the inverse of :func:`inverse_cdf` (piecewise linear in log
    value against z, tails extended with :func:`tail_slopes`)."""
    logq, logx, z_levels = np.log(q), np.log(np.asarray(x, float)), ndtri(levels)
    low, high = tail_slopes(logq, z_levels)
    out = np.empty(len(q))
    for i in range(len(q)):
        if logx[i] < logq[i, 0]:
            z = z_levels[0] + (logx[i] - logq[i, 0]) / max(low[i], 1e-12)
        elif logx[i] > logq[i, -1]:
            z = z_levels[-1] + (logx[i] - logq[i, -1]) / max(high[i], 1e-12)
        else:
            z = np.interp(logx[i], logq[i], z_levels)
        out[i] = ndtr(z)
    return out


def max_of_lognormals(sigma: float, n: int, u: np.ndarray) -> np.ndarray:
    """The largest of ``n`` iid lognormal(0, sigma) factors, drawn as F^-1(u^(1/n))
    (zero for ``n = 0``: no GPU to wait for)."""
    if n == 0:
        return np.zeros_like(u)
    if sigma <= 0:
        return np.ones_like(u)
    return np.exp(sigma * ndtri(np.clip(u, 1e-12, 1 - 1e-12) ** (1.0 / n)))


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's output function (Steele, Lea & Flood 2014, "Fast splittable
    pseudorandom number generators", OOPSLA): a bijection of uint64 that scrambles every bit."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def stable_key(thing) -> int:
    """A 64-bit key of ``thing``'s repr, the same in every process (Python's own hash of a
    string is salted per process)."""
    return int.from_bytes(hashlib.blake2b(repr(thing).encode(), digest_size=8).digest(), "little")


@dataclass(frozen=True)
class KeyedStreams:
    """Uniforms per named thing that depend on ``seed`` and the thing only, not on what
    else is drawn or in which process: SplitMix64 streams started at each key."""

    seed: int

    def uniform(self, things: list, draws: int) -> np.ndarray:
        """(len(things), draws) uniforms in (0, 1), one stream per thing."""
        with np.errstate(over="ignore"):  # uint64 arithmetic wraps, as SplitMix64 means it to
            keys = np.array([stable_key(t) for t in things], dtype=np.uint64).reshape(-1, 1)
            start = _mix(keys ^ _mix(np.array([self.seed], dtype=np.uint64)))
            x = _mix(start + np.arange(1, draws + 1, dtype=np.uint64) * _GOLDEN)
        return ((x >> np.uint64(11)).astype(float) + 0.5) * 2.0 ** -53

    def generator(self, name: str) -> np.random.Generator:
        """A numpy generator of its own for ``name`` (draws of one shape, e.g. per step)."""
        return np.random.default_rng([self.seed, stable_key(name)])

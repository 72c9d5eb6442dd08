"""Multi-quantile gradient-boosted trees with conformal calibration.

Two boosters: a *center*, the median, fitted with squared error and then refined by
absolute-error rounds (the pinball loss's sign-only gradient converges far more slowly,
and the median carries the accuracy); and a *spread* predicting several quantiles of
the residual at once (``reg:quantileerror`` with a vector ``quantile_alpha``), shifted
so that its median sits on the center. Each predicted row is sorted so quantiles never
cross. Interval widths are then calibrated on held-out groups with conformalized
quantile regression (Romano, Patterson & Candès 2019, arXiv 1905.03222): for each
symmetric pair (q, 1-q) with nominal coverage c, the conformity score of a held-out
point is ``max(lo - y, y - hi)`` and both ends move out (or in) by its ``c(1 + 1/n)``
quantile. The boosters keep the fit on the other groups (split conformal).
"""
from __future__ import annotations

import sys
from importlib import import_module

import numpy as np

from predictor.core.choices import Learner, choice, values
from predictor.core.errors import PrismError


def _import_xgboost():
    """xgboost, imported without its scikit-learn API unless scikit-learn is loaded already.

    Where scikit-learn is installed, xgboost imports it (and with it scipy.stats and
    pandas: half a second, more than a whole ``prism predict`` takes otherwise) only to
    offer ``XGBRegressor`` and its kin, which PRISM does not use. Marked absent while
    xgboost imports, it is skipped (xgboost's ``compat`` imports it inside ``try/except
    ImportError``); scikit-learn itself stays importable, and is imported where it is
    used (:meth:`QuantileXGBRegressor.fit`). Import xgboost through this module.
    """
    if "sklearn" in sys.modules or "xgboost" in sys.modules:
        return import_module("xgboost")
    sys.modules["sklearn"] = None  # "not installed", for the import below only
    try:
        return import_module("xgboost")
    finally:
        del sys.modules["sklearn"]


xgb = _import_xgboost()

DEFAULT_QUANTILES = (0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95)
#: The learners ``regressor.name`` picks among: :class:`QuantileXGBRegressor` is the one PRISM trains.
NAMES = values(Learner)
#: What each setting of :class:`QuantileXGBRegressor` (``regressor.params``) must be.
PARAMS = {
    "n_estimators": ("an integer >= 1", lambda v: _integer(v) and v >= 1),
    "max_depth": ("an integer 1..32", lambda v: _integer(v) and 1 <= v <= 32),
    "learning_rate": ("a number in (0, 1]", lambda v: _number(v) and 0 < v <= 1),
    "min_child_weight": ("a number >= 0", lambda v: _number(v) and v >= 0),
    "subsample": ("a number in (0, 1]", lambda v: _number(v) and 0 < v <= 1),
    "multi_strategy": ("multi_output_tree or one_output_per_tree",
                       lambda v: v in ("multi_output_tree", "one_output_per_tree")),
    "median_rounds": ("an integer >= 0", lambda v: _integer(v) and v >= 0),
    "spread_estimators": ("an integer >= 1", lambda v: _integer(v) and v >= 1),
    "spread_max_depth": ("an integer 1..32", lambda v: _integer(v) and 1 <= v <= 32),
    "calibration_fraction": ("a share in [0, 0.5]", lambda v: _number(v) and 0 <= v <= 0.5),
    "random_state": ("an integer", lambda v: _integer(v)),
    "n_jobs": ("an integer >= 1", lambda v: _integer(v) and v >= 1),
}


def _integer(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _number(v) -> bool:
    return isinstance(v, (int, float, np.number)) and not isinstance(v, bool) and bool(np.isfinite(v))


def valid_levels(quantiles) -> bool:
    """Whether ``quantiles`` are increasing levels in (0, 1) that hold every level of
    :data:`DEFAULT_QUANTILES` (those the composer draws from)."""
    q = list(quantiles) if isinstance(quantiles, (list, tuple)) else None
    return (bool(q) and all(_number(a) and 0 < a < 1 for a in q) and q == sorted(set(q))
            and set(DEFAULT_QUANTILES) <= set(q))


def check_settings(name, quantiles, params: dict) -> None:
    """One :class:`PrismError` naming ``regressor.name``, ``regressor.quantiles`` or
    ``regressor.params.<key>`` unless the learner can be built from them. The composer draws
    from the quantile levels of :data:`DEFAULT_QUANTILES`, so a model set must predict at least those."""
    # another learner's name would train XGBoost all the same, and say nothing
    choice(Learner, name, "regressor.name", "not a learner of PRISM; choose {or_options} (the one "
           "predictor.latency.regressor implements)", quoted=False)
    if not valid_levels(quantiles):
        raise PrismError(f"regressor.quantiles={quantiles}: must be increasing levels in (0, 1) that include "
                         f"{list(DEFAULT_QUANTILES)} (the levels predictions draw from)", field="regressor.quantiles")
    for key, value in params.items():
        if key not in PARAMS:
            raise PrismError(f"regressor.params.{key}: no such setting; choose from {', '.join(PARAMS)}",
                             field=f"regressor.params.{key}")
        what, ok = PARAMS[key]
        if not ok(value):
            raise PrismError(f"regressor.params.{key}={value!r}: must be {what}", field=f"regressor.params.{key}")
_MIN_CALIBRATION_GROUPS = 5


class QuantileXGBRegressor:
    """Quantiles of ``y`` given ``X``, non-crossing and conformally calibrated.

    Parameters
    ----------
    quantiles : increasing levels in (0, 1), symmetric around 0.5.
    n_estimators, max_depth, learning_rate, min_child_weight, subsample : XGBoost's.
    multi_strategy : ``one_output_per_tree`` (a tree per quantile and round) or
        ``multi_output_tree`` (one tree with a leaf vector: ~k times smaller artifacts).
    median_rounds : absolute-error rounds after the center's squared-error ones (robust
        to heavy-tailed noise such as a shared network's).
    spread_estimators, spread_max_depth : rounds and depth of the residual-quantile
        booster (the spread is smoother than the center, and conformal calibration
        corrects its width).
    calibration_fraction : share of groups held out to calibrate interval widths.
    random_state, n_jobs : seed and threads.

    Attributes
    ----------
    center_ : xgboost.Booster, the conditional median of ``y``.
    booster_ : xgboost.Booster, quantiles of ``y - center_(X)``.
    offsets_ : ndarray (n_quantiles,), conformal shift added to each quantile.
    n_calibration_ : groups used for calibration (0 when fewer than 5 would be held out).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(500, 2)); y = X[:, 0] + rng.normal(0, 0.1, 500)
    >>> q = QuantileXGBRegressor(n_estimators=50).fit(X, y).predict(X)
    >>> q.shape, bool((np.diff(q, axis=1) >= 0).all())
    ((500, 7), True)
    """

    def __init__(self, quantiles=DEFAULT_QUANTILES, n_estimators=150, max_depth=5,
                 learning_rate=0.1, min_child_weight=1.0, subsample=1.0,
                 multi_strategy="multi_output_tree", median_rounds=100, spread_estimators=50,
                 spread_max_depth=4, calibration_fraction=0.2, random_state=0, n_jobs=1):
        self.quantiles = quantiles
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.min_child_weight = min_child_weight
        self.subsample = subsample
        self.multi_strategy = multi_strategy
        self.median_rounds = median_rounds
        self.spread_estimators = spread_estimators
        self.spread_max_depth = spread_max_depth
        self.calibration_fraction = calibration_fraction
        self.random_state = random_state
        self.n_jobs = n_jobs

    def _train(self, X, y, quantiles: bool) -> xgb.Booster:
        params = {"tree_method": "hist", "max_depth": self.max_depth, "eta": self.learning_rate,
                  "min_child_weight": self.min_child_weight, "subsample": self.subsample,
                  "seed": self.random_state, "nthread": self.n_jobs, "objective": "reg:squarederror"}
        data = xgb.DMatrix(X, label=y, nthread=self.n_jobs)
        if quantiles:
            params.update(objective="reg:quantileerror", quantile_alpha=np.asarray(self.quantiles),
                          multi_strategy=self.multi_strategy, max_depth=self.spread_max_depth)
            return xgb.train(params, data, num_boost_round=self.spread_estimators)
        booster = xgb.train(params, data, num_boost_round=self.n_estimators)
        if self.median_rounds:  # refine toward the median: robust to heavy-tailed noise
            booster = xgb.train({**params, "objective": "reg:absoluteerror"}, data,
                                num_boost_round=self.median_rounds, xgb_model=booster)
        return booster

    def _fit_boosters(self, X, y) -> None:
        self.center_ = self._train(X, y, quantiles=False)
        self.booster_ = self._train(X, y - self._center(X), quantiles=True)

    def _center(self, X) -> np.ndarray:
        return self.center_.predict(xgb.DMatrix(X, nthread=self.n_jobs))

    def fit(self, X, y, groups=None):
        """Fit on rows ``X``/``y``; rows sharing a group (a shape's repeats) stay together."""
        X, y = np.asarray(X, dtype=float), np.asarray(y, dtype=float)
        groups = np.arange(len(y)) if groups is None else np.asarray(groups)
        levels = np.asarray(self.quantiles)
        self.offsets_ = np.zeros(len(levels))
        self.n_calibration_ = 0
        n_groups = len(np.unique(groups))
        if self.calibration_fraction > 0 and n_groups * self.calibration_fraction >= _MIN_CALIBRATION_GROUPS:
            from sklearn.model_selection import GroupShuffleSplit  # only to train: slow to import

            split = GroupShuffleSplit(n_splits=1, test_size=self.calibration_fraction,
                                      random_state=self.random_state)
            fit_idx, cal_idx = next(split.split(X, y, groups))
            self._fit_boosters(X[fit_idx], y[fit_idx])
            self.offsets_ = conformal_offsets(self._raw(X[cal_idx]), y[cal_idx], levels)
            self.n_calibration_ = len(np.unique(groups[cal_idx]))
        else:
            self._fit_boosters(X, y)
        return self

    def _raw(self, X) -> np.ndarray:
        X = np.asarray(X, dtype=float)
        spread = np.sort(self.booster_.predict(xgb.DMatrix(X, nthread=self.n_jobs)).reshape(len(X), -1), axis=1)
        # the center is the median; the spread booster only shapes the quantiles around it
        mid = len(self.quantiles) // 2
        return self._center(X)[:, None] + spread - spread[:, mid:mid + 1]

    def predict(self, X) -> np.ndarray:
        """Calibrated quantiles, shape (n_rows, n_quantiles), non-decreasing along axis 1."""
        return np.sort(self._raw(X) + self.offsets_, axis=1)


def conformal_offsets(pred: np.ndarray, y: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """CQR shifts per quantile from held-out predictions ``pred`` (n, q) and truths ``y``."""
    offsets = np.zeros(len(levels))
    n = len(y)
    for lo in range(len(levels) // 2):
        hi = len(levels) - 1 - lo
        coverage = levels[hi] - levels[lo]
        scores = np.maximum(pred[:, lo] - y, y - pred[:, hi])
        rank = min(np.ceil((n + 1) * coverage) / n, 1.0)
        q = float(np.quantile(scores, rank, method="higher"))
        offsets[lo], offsets[hi] = -q, q
    return offsets

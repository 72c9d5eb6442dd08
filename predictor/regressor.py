"""Multi-quantile gradient-boosted trees with conformal calibration.

One XGBoost model predicts several quantiles at once (``reg:quantileerror`` with a
vector ``quantile_alpha``); each predicted row is sorted so quantiles never cross.
Interval widths are then calibrated on held-out groups with conformalized quantile
regression (Romano, Patterson & Candès 2019, arXiv 1905.03222): for each symmetric
pair (q, 1-q) with nominal coverage c, the conformity score of a held-out point is
``max(lo - y, y - hi)`` and both ends move out (or in) by its ``c(1 + 1/n)`` quantile.
The booster is then refit on all rows and keeps those offsets.
"""
from __future__ import annotations

import numpy as np
import xgboost as xgb
from sklearn.model_selection import GroupShuffleSplit

DEFAULT_QUANTILES = (0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95)
_MIN_CALIBRATION_GROUPS = 10


class QuantileXGBRegressor:
    """Quantiles of ``y`` given ``X``, non-crossing and conformally calibrated.

    Parameters
    ----------
    quantiles : increasing levels in (0, 1), symmetric around 0.5.
    n_estimators, max_depth, learning_rate, min_child_weight, subsample : XGBoost's.
    multi_strategy : ``one_output_per_tree`` (a tree per quantile and round) or
        ``multi_output_tree`` (one tree with a leaf vector: ~k times smaller artifacts).
    calibration_fraction : share of groups held out to calibrate interval widths.
    random_state, n_jobs : seed and threads.

    Attributes
    ----------
    booster_ : xgboost.Booster fitted on all rows.
    offsets_ : ndarray (n_quantiles,), conformal shift added to each quantile.
    n_calibration_ : groups used for calibration (0 when too few to calibrate).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(500, 2)); y = X[:, 0] + rng.normal(0, 0.1, 500)
    >>> q = QuantileXGBRegressor(n_estimators=50).fit(X, y).predict(X)
    >>> q.shape, bool((np.diff(q, axis=1) >= 0).all())
    ((500, 7), True)
    """

    def __init__(self, quantiles=DEFAULT_QUANTILES, n_estimators=300, max_depth=6,
                 learning_rate=0.05, min_child_weight=1.0, subsample=1.0,
                 multi_strategy="one_output_per_tree", calibration_fraction=0.2, refit=False,
                 random_state=0, n_jobs=1):
        self.quantiles = quantiles
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.min_child_weight = min_child_weight
        self.subsample = subsample
        self.multi_strategy = multi_strategy
        self.calibration_fraction = calibration_fraction
        self.refit = refit
        self.random_state = random_state
        self.n_jobs = n_jobs

    def _params(self) -> dict:
        return {"objective": "reg:quantileerror", "quantile_alpha": np.asarray(self.quantiles),
                "tree_method": "hist", "max_depth": self.max_depth, "eta": self.learning_rate,
                "min_child_weight": self.min_child_weight, "subsample": self.subsample,
                "multi_strategy": self.multi_strategy,
                "seed": self.random_state, "nthread": self.n_jobs}

    def _train(self, X, y) -> xgb.Booster:
        return xgb.train(self._params(), xgb.DMatrix(X, label=y), num_boost_round=self.n_estimators)

    def fit(self, X, y, groups=None):
        """Fit on rows ``X``/``y``; rows sharing a group (a shape's repeats) stay together."""
        X, y = np.asarray(X, dtype=float), np.asarray(y, dtype=float)
        groups = np.arange(len(y)) if groups is None else np.asarray(groups)
        levels = np.asarray(self.quantiles)
        self.offsets_ = np.zeros(len(levels))
        self.n_calibration_ = 0
        n_groups = len(np.unique(groups))
        if self.calibration_fraction > 0 and n_groups * self.calibration_fraction >= _MIN_CALIBRATION_GROUPS:
            split = GroupShuffleSplit(n_splits=1, test_size=self.calibration_fraction,
                                      random_state=self.random_state)
            fit_idx, cal_idx = next(split.split(X, y, groups))
            self.booster_ = self._train(X[fit_idx], y[fit_idx])
            self.offsets_ = conformal_offsets(self._raw(X[cal_idx]), y[cal_idx], levels)
            self.n_calibration_ = len(np.unique(groups[cal_idx]))
            if not self.refit:
                return self
        self.booster_ = self._train(X, y)
        return self

    def _raw(self, X) -> np.ndarray:
        pred = self.booster_.predict(xgb.DMatrix(np.asarray(X, dtype=float)))
        return np.sort(pred.reshape(len(X), -1), axis=1)

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

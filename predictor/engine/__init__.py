"""The one composition implementation: operator quantiles -> draws -> per-stage sums ->
pipeline schedule -> step-time distribution. Every analysis calls it.

``draws`` (residuals by inverse CDF, variability factors) and ``stages`` (the stage
arithmetic, for one layout or thousands) are shared by ``compose`` (one layout, the
exact schedule walk of ``schedule``) and ``screen`` (every layout of a search at once,
the walk shortened by a closed form)."""

from predictor.core.lazy_modules import defer_unused as _defer_unused

_defer_unused()  # before xgboost and scipy.sparse load (predictor.core.lazy_modules)

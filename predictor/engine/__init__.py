"""The one composition implementation: operator quantiles -> draws -> per-stage sums ->
pipeline schedule -> step-time distribution. Every analysis calls it.

``draws`` (residuals by inverse CDF, variability factors) and ``stages`` (the stage
arithmetic, for one layout or thousands) are shared by ``compose`` (one layout, the
exact schedule walk of ``schedule``) and ``screen`` (every layout of a search at once,
the walk shortened by a closed form). ``predictor`` holds the :class:`Predictor` every verb
and predict-batch run through: a :class:`~predictor.core.job.Job` in, its workload, step
distribution and report out, with the models and caches jobs share; ``report`` is what
``prism predict`` reports of a job and ``doubt`` the predictive uncertainty of its median
step."""

from predictor.core.lazy_modules import defer_unused as _defer_unused

_defer_unused()  # before xgboost and scipy.sparse load (predictor.core.lazy_modules)

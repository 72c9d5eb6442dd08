"""The one composition implementation: operator quantiles -> draws -> per-stage sums ->
pipeline schedule -> step-time distribution. Every analysis calls it."""

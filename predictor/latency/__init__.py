"""How long one operator call takes, as quantiles: features from the shape and the
roofline floor, the quantile learners, the trained artifacts with their manifest, the
:class:`~predictor.latency.pricer.Pricer` (the trained model or a prior, then the named
adjustments of :mod:`predictor.latency.adjustments`, each one file), and the in-situ
calibration value."""

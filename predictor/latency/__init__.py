"""How long one operator call takes, as quantiles: features from the shape and the
roofline floor, the quantile learners, the trained artifacts with their manifest, the
priors where no model exists, and the in-situ calibration value."""

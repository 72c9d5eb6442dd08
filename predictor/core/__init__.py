"""Values and rules: the specs of a model, a hardware profile and a parallel layout, the
mesh that owns every group's size, rank order and topology, the operator registry, and
the one error type. Imports nothing else of predictor."""

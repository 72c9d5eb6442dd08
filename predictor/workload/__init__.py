"""A training step as operator calls, memory and FLOPs (imports only :mod:`predictor.core`).
The decomposition is the one source of the shapes a step runs: the composer's calls and
the sampler's targets."""

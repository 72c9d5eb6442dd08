"""PRISM's CPU-only side: it reads samples and model artifacts, never torch.

Verbs are plain functions (``predictor.summary.summarize``, ...) and CLI commands
(``prism <verb> key=value ...``, see ``predictor.cli``).
"""
__version__ = "0.1.0"

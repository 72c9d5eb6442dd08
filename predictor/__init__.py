"""PRISM's CPU-only side: it reads samples and model artifacts, never torch.

Verbs are plain functions (``predictor.data.summary.summarize``, ...) and CLI commands
(``prism <verb> key=value ...``, see ``predictor.app.cli``).
"""
__version__ = "0.1.0"

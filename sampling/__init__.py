"""The measuring side of PRISM (needs torch: ``pip install -e '.[sampling]'``).

It times operators on real hardware and writes every repeat to the sample store
(:mod:`predictor.data.store`). Nothing in :mod:`predictor` imports this package.
"""

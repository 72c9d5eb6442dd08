"""The verbs as Python functions: typed requests in, typed results out (dataclasses and
DataFrames); no Hydra, no printing. The app layer renders them."""

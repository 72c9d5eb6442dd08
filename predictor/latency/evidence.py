"""What a call's latency quantiles rest on (README "Evidence tiers"): a trained model or a prior.

Each call's :class:`Evidence` says which as a field, so that the composer can treat a
prior's error as systematic (one draw shared by every call on a prior) without reading
the display text.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Source(Enum):
    """Where a call's latency quantiles come from."""

    MODEL = "model"  # a trained quantile model of samples or microbenchmarks
    NETWORK_PRIOR = "network prior"  # a collective without a model of this network
    ROOFLINE_PRIOR = "roofline prior"  # a compute op without a model
    HOST_PRIOR = "host prior"  # a host op without samples of this host: the profile's cited host costs


@dataclass(frozen=True)
class Evidence:
    """What one call's quantiles rest on: ``source``, and ``text`` as reports show it
    (``models/<hardware>``, ``network prior (<network>)``, ``roofline prior``)."""

    source: Source
    text: str

    @property
    def prior(self) -> bool:
        """A prior's error is systematic: wrong alike for every call that rests on it."""
        return self.source is not Source.MODEL

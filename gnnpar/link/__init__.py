"""Link prediction: counter-based negative sampling (optionally strict) and OGB ranking metrics."""

from gnnpar.link.metrics import ranking_metrics, shared_negative_hits
from gnnpar.link.negative import DistNegativeSampler, negative_destinations

__all__ = [
    "DistNegativeSampler",
    "negative_destinations",
    "ranking_metrics",
    "shared_negative_hits",
]

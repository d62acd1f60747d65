"""Link prediction: edge-seeded distributed loading, negatives, predictors and metrics."""

from gnnpar.link.evaluate import embeddings, link_metrics, split_scores
from gnnpar.link.metrics import ranking_metrics, shared_negative_hits
from gnnpar.link.model import LinkDecoder, LinkPredictor
from gnnpar.loading.link import DistLinkNeighborLoader
from gnnpar.sampling.negative import DistNegativeSampler, negative_destinations

__all__ = [
    "DistLinkNeighborLoader",
    "DistNegativeSampler",
    "LinkDecoder",
    "LinkPredictor",
    "embeddings",
    "link_metrics",
    "negative_destinations",
    "ranking_metrics",
    "shared_negative_hits",
    "split_scores",
]

"""What a rank holds: its part of the graph, the feature rows, the learnt embeddings.

- :mod:`~gnnpar.storage.graph` — :class:`DistGraph`, the part and the partition book on
  the rank's device;
- :mod:`~gnnpar.storage.features` — :class:`DistFeatureStore`, rows by global id from
  their owners (placed by :mod:`gnnpar.device`: device, pinned or host);
- :mod:`~gnnpar.storage.embedding` — :class:`DistEmbedding` and its sparse optimisers,
  learnable rows sharded by owner.
"""

from gnnpar.storage.embedding import DistEmbedding, SparseAdagrad, SparseAdam
from gnnpar.storage.features import DistFeatureStore
from gnnpar.storage.graph import DistGraph

__all__ = ["DistEmbedding", "DistFeatureStore", "DistGraph", "SparseAdagrad", "SparseAdam"]

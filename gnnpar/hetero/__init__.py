"""Typed (heterogeneous) graphs at train time: sampling, batches, embeddings, the model.

- :class:`DistHeteroNeighborSampler` — fan-outs per relation, one exchange per hop;
- :class:`DistHeteroNeighborLoader` — PyG ``HeteroData`` minibatches
  (:class:`~gnnpar.storage.typed.TypedFeatureStore` holds every featured type's rows);
- :class:`DistEmbedding` with :class:`SparseAdam` / :class:`SparseAdagrad` — learnable
  rows of featureless nodes, sharded by owner, updated where touched;
- :class:`HeteroSAGE` — relation-wise GraphSAGE (``to_hetero``'s), trimmed per hop.
"""

from gnnpar.hetero.model import HeteroSAGE
from gnnpar.loading.typed import DistHeteroNeighborLoader
from gnnpar.sampling.typed import DistHeteroNeighborSampler
from gnnpar.storage.embedding import DistEmbedding, SparseAdagrad, SparseAdam

__all__ = [
    "DistEmbedding",
    "DistHeteroNeighborLoader",
    "DistHeteroNeighborSampler",
    "HeteroSAGE",
    "SparseAdagrad",
    "SparseAdam",
]

"""The models: what each task trains, each in one module.

- :mod:`~gnnpar.models.node` — :func:`~gnnpar.models.node.build_model` (PyG's GraphSAGE,
  GCN and GAT) and :class:`~gnnpar.models.node.SampledGNN`, which runs them on sampled
  batches trimmed hop by hop;
- :mod:`~gnnpar.models.typed` — :class:`~gnnpar.models.typed.TypedSAGE`, relation-wise
  GraphSAGE on typed batches;
- :mod:`~gnnpar.models.link` — :class:`~gnnpar.models.link.LinkDecoder` and
  :class:`~gnnpar.models.link.LinkPredictor`, pair scorers for link prediction.

The layers that run a model across ranks live in :mod:`gnnpar.nn`.  Import each name
from its module; this package re-exports nothing.
"""

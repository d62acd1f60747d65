"""What a rank holds: its part of the graph, the feature rows, the learnt embeddings.

- :mod:`~gnnpar.storage.graph` — :class:`DistGraph`, the part and the partition book on
  the rank's device;
- :mod:`~gnnpar.storage.features` — :class:`DistFeatureStore`, rows by global id from
  their owners, composed of a placement of the owned rows and a cache of remote ones;
- :mod:`~gnnpar.storage.typed` — :class:`~gnnpar.storage.typed.TypedFeatureStore`, the rows
  of every node type of a typed graph in one store keyed by type (one exchange and one
  cache for all types);
- :mod:`~gnnpar.storage.placement` — :class:`LocalRows`, the contract of a placement of
  this part's rows, and its placements (device, pinned, pinned-host, host);
- :mod:`~gnnpar.storage.cache` — :class:`~gnnpar.storage.cache.RowCache`, the feature
  store's cache of remote rows;
- :mod:`~gnnpar.storage.embedding` — :class:`DistEmbedding` and its sparse optimisers,
  learnable rows sharded by owner.
"""

"""Distributed loaders: PyG minibatches seeded by nodes, by edges, or by typed nodes.

- :mod:`~gnnpar.loading.schedule` — :class:`~gnnpar.loading.schedule.SeedSchedule`, the
  seeds of each step and the position, which every loader holds;
- :mod:`~gnnpar.loading.node` — :class:`DistNeighborLoader` (``Data`` batches);
- :mod:`~gnnpar.loading.link` — :class:`DistLinkNeighborLoader` (edge-seeded, with
  negatives);
- :mod:`~gnnpar.loading.typed` — :class:`DistTypedNeighborLoader` (``HeteroData``).

Each takes a sampler of :mod:`gnnpar.sampling`, gathers rows from :mod:`gnnpar.storage` and
prepares the next batch while the current one trains.
"""

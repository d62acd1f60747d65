"""Model-parallel GNN layers: halo exchange, chunked layer-wise inference, the 3D grid.

:func:`~gnnpar.nn.inference.inference` is the exact full-neighbour forward pass of a PyG
model on the whole partitioned graph (:func:`gnnpar.evaluation.node.accuracy` its
accuracy over all ranks).  :func:`~gnnpar.nn.fused.fuse_aggregation` makes a PyG model's
SAGE and GIN layers aggregate gnnpar's sorted batches by one sparse product forward and
backward.  Import each name from its module; this package re-exports nothing.
"""

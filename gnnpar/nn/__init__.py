"""Model-parallel GNN layers: halo exchange, chunked layer-wise inference, the 3D grid.

``inference(model, graph, features)`` is the exact full-neighbour forward pass of a PyG
model on the whole partitioned graph, ``accuracy(logits, graph, ctx, split)`` its
accuracy over all ranks.  ``fuse_aggregation(model)`` makes a PyG model's SAGE and GIN
layers aggregate gnnpar's sorted batches by one sparse product forward and backward.
"""

from gnnpar.nn.dist_conv import DistConv, HaloGraph, distribute_convs, flush_pipelines
from gnnpar.nn.fused import fuse_aggregation
from gnnpar.nn.halo import HaloExchange, HaloPlan, PipelineState
from gnnpar.nn.inference import accuracy, inference, layerwise_inference

__all__ = [
    "DistConv",
    "HaloExchange",
    "HaloGraph",
    "HaloPlan",
    "PipelineState",
    "accuracy",
    "distribute_convs",
    "flush_pipelines",
    "fuse_aggregation",
    "inference",
    "layerwise_inference",
]

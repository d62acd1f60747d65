"""Model-parallel GNN layers: halo exchange, chunked layer-wise inference, feature parallelism."""

from gnnpar.nn.dist_conv import DistConv, HaloGraph, distribute_convs, flush_pipelines
from gnnpar.nn.feature_parallel import FeatureParallelLinear, column_ranges, shard_columns
from gnnpar.nn.fused import fuse_aggregation
from gnnpar.nn.halo import HaloExchange, HaloPlan, PipelineState
from gnnpar.nn.inference import layerwise_inference

__all__ = [
    "DistConv",
    "FeatureParallelLinear",
    "HaloExchange",
    "HaloGraph",
    "HaloPlan",
    "PipelineState",
    "column_ranges",
    "distribute_convs",
    "flush_pipelines",
    "fuse_aggregation",
    "layerwise_inference",
    "shard_columns",
]

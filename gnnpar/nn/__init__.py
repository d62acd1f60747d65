"""Model-parallel GNN layers: halo exchange for full-graph training, feature parallelism."""

from gnnpar.nn.dist_conv import DistConv, HaloGraph, distribute_convs, flush_pipelines
from gnnpar.nn.feature_parallel import FeatureParallelLinear, column_ranges, shard_columns
from gnnpar.nn.full_graph import NodeData, evaluate, train_epoch
from gnnpar.nn.halo import HaloExchange, HaloPlan, PipelineState
from gnnpar.nn.replicate import all_reduce_gradients, broadcast_parameters

__all__ = [
    "DistConv",
    "FeatureParallelLinear",
    "HaloExchange",
    "HaloGraph",
    "HaloPlan",
    "NodeData",
    "PipelineState",
    "all_reduce_gradients",
    "broadcast_parameters",
    "column_ranges",
    "distribute_convs",
    "evaluate",
    "flush_pipelines",
    "shard_columns",
    "train_epoch",
]

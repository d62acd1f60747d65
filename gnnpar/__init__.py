"""gnnpar: graph neural networks on graphs larger than one GPU, on torch.distributed.

The public API, importable from ``gnnpar`` directly (loaded on first use, so that
``import gnnpar`` and the command lines start fast)::

    import gnnpar

    ctx = gnnpar.init()                                       # torchrun's env, or one process
    graph = gnnpar.DistGraph.load("parts/sbm-2", ctx)         # this rank's part
    peers = gnnpar.peer_parts(graph, ctx)                     # parts of ranks on this machine
    features = gnnpar.DistFeatureStore(graph, ctx, peers=peers)  # rows by owner, by id
    fanouts = gnnpar.Fanouts.for_graph([10, 10], graph, ctx)  # validated, capped
    sampler = gnnpar.DistNeighborSampler(graph, ctx, fanouts, peers=peers)
    loader = gnnpar.DistNeighborLoader(sampler, features, "train", batch_size=1024)
    for batch in loader:                                      # a PyG Data per step
        ...

==================================  ====================================================
name                                what it is
==================================  ====================================================
:func:`init`, :func:`shutdown`      join / leave the process group (:class:`DistContext`)
:class:`DistGraph`                  this rank's part of a partitioned graph
:class:`DistFeatureStore`           per-node arrays sharded by owner, gathered by id
:func:`peer_parts`                  the parts of the ranks on this machine, read in place
:class:`DistNeighborSampler`        multi-hop neighbour sampling across parts
:class:`Fanouts`                    neighbours per hop (and relation), validated and capped
:class:`DistNeighborLoader`         PyG-layout minibatches, in lockstep on every rank
:class:`HaloGraph`, :class:`HaloExchange`  full-graph halo exchange (exact, BNS, stale)
:class:`DistConv`, :func:`distribute_convs`  PyG layers on the partitioned full graph
:class:`CommStats`                  rows and bytes communicated, by kind
:class:`Trainer`, :class:`Config`   the training loop of ``gnnpar-train`` and its settings
:func:`partition_graph`, :func:`load_partition`  the partition stage, split as a
                                    :class:`PartitionConfig` says
:func:`load_predictions`            a run's saved predictions / embeddings, dataset order
:func:`load_dataset`, :class:`GraphDataset`, :func:`from_pyg`  the datasets stage
:class:`DistLinkNeighborLoader`     link prediction: edge-seeded PyG-layout minibatches
:class:`DistNegativeSampler`        link prediction: negatives, strict across parts
:func:`ranking_metrics`             MRR / Hits@K across ranks, as OGB's Evaluator
:class:`TypedGraphDataset`          a typed graph (node and edge types, per-type features)
:class:`DistTypedNeighborLoader`   typed graphs: ``HeteroData`` minibatches, fan-outs per
                                    relation (:class:`DistTypedNeighborSampler`)
:class:`DistEmbedding`              learnable rows of featureless nodes, sharded by owner,
                                    with :class:`SparseAdam` / :class:`SparseAdagrad`
==================================  ====================================================
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from gnnpar.errors import ConfigError, DatasetError, DistributedError, GnnparError, PartitionError
from gnnpar.version import __version__

_LAZY = {  # each name -> the one module that defines it
    "CommStats": "gnnpar.comm",
    "Config": "gnnpar.train.config",
    "DistContext": "gnnpar.distributed",
    "DistConv": "gnnpar.nn.dist_conv",
    "DistEmbedding": "gnnpar.storage.embedding",
    "DistFeatureStore": "gnnpar.storage.features",
    "DistGraph": "gnnpar.storage.graph",
    "DistTypedNeighborLoader": "gnnpar.loading.typed",
    "DistTypedNeighborSampler": "gnnpar.sampling.typed",
    "DistLinkNeighborLoader": "gnnpar.loading.link",
    "DistNegativeSampler": "gnnpar.sampling.negative",
    "DistNeighborLoader": "gnnpar.loading.node",
    "DistNeighborSampler": "gnnpar.sampling.neighbor",
    "Fanouts": "gnnpar.sampling.fanouts",
    "GraphDataset": "gnnpar.datasets.graph",
    "HaloExchange": "gnnpar.nn.halo",
    "HaloGraph": "gnnpar.nn.dist_conv",
    "PartitionConfig": "gnnpar.partition.config",
    "SamplerOutput": "gnnpar.sampling.neighbor",
    "SparseAdagrad": "gnnpar.storage.embedding",
    "SparseAdam": "gnnpar.storage.embedding",
    "Trainer": "gnnpar.train.trainer",
    "TypedGraphDataset": "gnnpar.datasets.typed",
    "distribute_convs": "gnnpar.nn.dist_conv",
    "from_pyg": "gnnpar.datasets.pyg",
    "from_pyg_link": "gnnpar.datasets.pyg",
    "init": "gnnpar.distributed",
    "load_dataset": "gnnpar.datasets.spec",
    "load_partition": "gnnpar.partition.format",
    "load_predictions": "gnnpar.train.predictions",
    "negative_destinations": "gnnpar.sampling.negative",
    "partition_graph": "gnnpar.partition.writer",
    "peer_parts": "gnnpar.storage.peers",
    "ranking_metrics": "gnnpar.evaluation.ranking",
    "shared_negative_hits": "gnnpar.evaluation.ranking",
    "shutdown": "gnnpar.distributed",
}

if TYPE_CHECKING:
    from gnnpar.comm import CommStats
    from gnnpar.datasets.graph import GraphDataset
    from gnnpar.datasets.pyg import from_pyg, from_pyg_link
    from gnnpar.datasets.spec import load_dataset
    from gnnpar.datasets.typed import TypedGraphDataset
    from gnnpar.distributed import DistContext, init, shutdown
    from gnnpar.evaluation.ranking import ranking_metrics, shared_negative_hits
    from gnnpar.loading.link import DistLinkNeighborLoader
    from gnnpar.loading.node import DistNeighborLoader
    from gnnpar.loading.typed import DistTypedNeighborLoader
    from gnnpar.nn.dist_conv import DistConv, HaloGraph, distribute_convs
    from gnnpar.nn.halo import HaloExchange
    from gnnpar.partition.config import PartitionConfig
    from gnnpar.partition.format import load_partition
    from gnnpar.partition.writer import partition_graph
    from gnnpar.sampling.fanouts import Fanouts
    from gnnpar.sampling.negative import DistNegativeSampler, negative_destinations
    from gnnpar.sampling.neighbor import DistNeighborSampler, SamplerOutput
    from gnnpar.sampling.typed import DistTypedNeighborSampler
    from gnnpar.storage.embedding import DistEmbedding, SparseAdagrad, SparseAdam
    from gnnpar.storage.features import DistFeatureStore
    from gnnpar.storage.graph import DistGraph
    from gnnpar.storage.peers import peer_parts
    from gnnpar.train.config import Config
    from gnnpar.train.predictions import load_predictions
    from gnnpar.train.trainer import Trainer


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (PEP 562)."""
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gnnpar' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "CommStats",
    "Config",
    "ConfigError",
    "DatasetError",
    "DistConv",
    "DistContext",
    "DistEmbedding",
    "DistFeatureStore",
    "DistGraph",
    "DistTypedNeighborLoader",
    "DistTypedNeighborSampler",
    "DistLinkNeighborLoader",
    "DistNegativeSampler",
    "DistNeighborLoader",
    "DistNeighborSampler",
    "DistributedError",
    "Fanouts",
    "GnnparError",
    "GraphDataset",
    "HaloExchange",
    "HaloGraph",
    "TypedGraphDataset",
    "PartitionConfig",
    "PartitionError",
    "SamplerOutput",
    "SparseAdagrad",
    "SparseAdam",
    "Trainer",
    "__version__",
    "distribute_convs",
    "from_pyg",
    "from_pyg_link",
    "init",
    "load_dataset",
    "load_partition",
    "load_predictions",
    "negative_destinations",
    "partition_graph",
    "peer_parts",
    "ranking_metrics",
    "shared_negative_hits",
    "shutdown",
]

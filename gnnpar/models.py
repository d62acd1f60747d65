"""The GNNs that the trainer builds: PyG's GraphSAGE, GCN and GAT, unchanged.

They are ``torch_geometric.nn.models`` :class:`~torch_geometric.nn.models.basic_gnn.BasicGNN`
models, so the same module runs in the two ways the trainer needs:

* on sampled minibatches (:func:`forward_batch`), trimming each layer to the nodes and
  edges that later layers still need (PyG's ``trim_to_layer``, driven by the batch's
  ``num_sampled_nodes`` / ``num_sampled_edges``);
* on the whole partitioned graph, after ``gnnpar.nn.distribute_convs`` has wrapped each
  message-passing layer in a halo-exchange ``DistConv``, for exact full-neighbour
  inference.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.nn.models import GAT, GCN, GraphSAGE
from torch_geometric.nn.models.basic_gnn import BasicGNN

from gnnpar.config import ModelConfig
from gnnpar.errors import ConfigError

MODELS: dict[str, type[BasicGNN]] = {"sage": GraphSAGE, "gcn": GCN, "gat": GAT}


def build_model(cfg: ModelConfig, in_channels: int, out_channels: int) -> BasicGNN:
    """The PyG model named by ``cfg`` (initialised from torch's global generator).

    Args:
        cfg: Model section of the configuration.
        in_channels: Feature width.
        out_channels: Number of classes.

    Returns:
        A ``GraphSAGE`` (mean aggregation), ``GCN`` or ``GAT`` (``cfg.heads`` heads,
        concatenated in hidden layers) with ``cfg.layers`` message-passing layers.
    """
    if cfg.name not in MODELS:
        raise ConfigError(f"unknown model {cfg.name!r}.", field="model.name",
                          fix=f"pass --model with one of {', '.join(MODELS)}.")
    kwargs: dict[str, Any] = {"heads": cfg.heads} if cfg.name == "gat" else {}
    return MODELS[cfg.name](in_channels, cfg.hidden, cfg.layers, out_channels,
                            dropout=cfg.dropout, **kwargs)


def forward_batch(model: Any, batch: Data) -> Tensor:
    """Logits of a minibatch's seed nodes, trimming each layer to what is still needed.

    Args:
        model: A :class:`BasicGNN` (possibly wrapped in ``DistributedDataParallel``).
        batch: A ``DistNeighborLoader`` batch (seeds first, nodes and edges hop by hop).

    Returns:
        ``[batch_size, C]`` logits of the seeds.
    """
    out: Tensor = model(batch.x, batch.edge_index,
                        num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                        num_sampled_edges_per_hop=batch.num_sampled_edges)
    return out[: batch.batch_size]

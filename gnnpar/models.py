"""The GNNs that the trainer builds: PyG's GraphSAGE, GCN and GAT, and how batches run them.

The models are ``torch_geometric.nn.models`` :class:`~torch_geometric.nn.models.basic_gnn.BasicGNN`
models, unchanged; the same module runs in the two ways the trainer needs:

* on sampled minibatches through :class:`SampledGNN`, which calls the model's own layers
  (``convs``, ``norms``, ``act``, ``dropout``) hop by hop like PyG's ``trim_to_layer``,
  and in addition has each layer compute only the rows that later layers read: layer
  ``i`` of ``L`` outputs the nodes within ``L - 1 - i`` hops of the seeds, as DGL's
  message-flow graphs do.  (``BasicGNN.forward`` with ``num_sampled_nodes_per_hop``
  trims a layer's *input* only, so the first layer computes, activates and drops out
  rows for every sampled node — with fan-outs ``[15, 10]`` about ten times the rows
  needed.)  ``SAGEConv`` and ``GATConv`` run bipartite (sources: all input rows;
  targets: the first rows); ``GCNConv``, which has no bipartite form, runs on all input
  rows and is cut right after.  The outputs are those of ``BasicGNN.forward`` with
  ``trim_to_layer``, row for row;
* on the whole partitioned graph, after ``gnnpar.nn.distribute_convs`` has wrapped each
  message-passing layer in a halo-exchange ``DistConv``, for exact full-neighbour
  inference (``model(x, edge_index)``).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.nn import GATConv, SAGEConv
from torch_geometric.nn.models import GAT, GCN, GraphSAGE
from torch_geometric.nn.models.basic_gnn import BasicGNN

from gnnpar.config import ModelConfig
from gnnpar.errors import ConfigError

MODELS: dict[str, type[BasicGNN]] = {"sage": GraphSAGE, "gcn": GCN, "gat": GAT}
_BIPARTITE = (SAGEConv, GATConv)


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


class SampledGNN(nn.Module):
    """A :class:`BasicGNN` run on sampled batches, each layer trimmed to what is read next.

    It holds no parameters of its own (the state dict is the model's under ``gnn.``), so
    wrapping it in ``DistributedDataParallel`` synchronises the model's gradients.

    Args:
        gnn: A model from :func:`build_model` (no jumping knowledge, norms without batch
            arguments, activation after the norm).
    """

    def __init__(self, gnn: BasicGNN) -> None:
        super().__init__()
        if gnn.jk_mode is not None or gnn.supports_norm_batch or gnn.act_first:
            raise ConfigError("SampledGNN runs models without jumping knowledge, batch-wise "
                              "norms or act_first.", field="gnn",
                              fix="build the model with gnnpar.models.build_model.")
        self.gnn = gnn

    def forward(self, x: Tensor, edge_index: Tensor, num_sampled_nodes: list[int],
                num_sampled_edges: list[int]) -> Tensor:
        """Logits of the seeds of a batch laid out like PyG's ``NeighborLoader`` output.

        Args:
            x: ``[N, F]`` features: seeds first, then the nodes of each hop.
            edge_index: ``[2, E]`` batch-local edges, hop by hop.
            num_sampled_nodes: ``[L + 1]`` nodes per hop (seeds first).
            num_sampled_edges: ``[L]`` edges per hop.

        Returns:
            ``[num_sampled_nodes[0], C]`` logits of the seeds.
        """
        gnn = self.gnn
        layers = gnn.num_layers
        for i, (conv, norm) in enumerate(zip(gnn.convs, gnn.norms, strict=True)):
            n_dst = sum(num_sampled_nodes[: layers - i])  # within layers-1-i hops
            edges = edge_index[:, : sum(num_sampled_edges[: layers - i])]  # into them
            if isinstance(conv, _BIPARTITE):
                x = conv((x, x[:n_dst]), edges)
            else:
                x = conv(x, edges)[:n_dst]
            if i < layers - 1:
                x = norm(x)
                if gnn.act is not None:
                    x = gnn.act(x)
                x = gnn.dropout(x)
        return x


def forward_batch(model: nn.Module, batch: Data) -> Tensor:
    """Logits ``[batch_size, C]`` of a minibatch's seeds.

    Args:
        model: A :class:`SampledGNN`, possibly wrapped in ``DistributedDataParallel``.
        batch: A ``DistNeighborLoader`` batch.
    """
    out: Tensor = model(batch.x, batch.edge_index, batch.num_sampled_nodes,
                        batch.num_sampled_edges)
    return out[: batch.batch_size]

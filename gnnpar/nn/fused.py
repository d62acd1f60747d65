"""One sparse product per layer for a plain PyG model on gnnpar's batches.

gnnpar's batches carry their edges as a PyG :class:`~torch_geometric.EdgeIndex` sorted by
destination with its sizes (:attr:`gnnpar.sampling.neighbor.SamplerOutput.edge_index`), and
``trim_to_layer`` keeps both.  PyG (2.8) fuses message passing over such an edge index
only in layers that declare it (``GraphConv``); ``SAGEConv`` and ``GINConv`` gather a
message per edge (``x[src]``, ``[E, F]``) and scatter it into the destinations.
:func:`fuse_aggregation` makes those layers of a model compute the same sums and means
as one sparse product, forward and backward (:class:`~gnnpar.nn.sparse.SparseAdjacency`:
torch's row-parallel kernel on a CPU, cuSPARSE on CUDA), without changing the model's
code or parameters::

    model = fuse_aggregation(GraphSAGE(100, 256, num_layers=2, out_channels=16))
    for batch in loader:
        out = model(batch.x, batch.edge_index,
                    num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                    num_sampled_edges_per_hop=batch.num_sampled_edges)

Any other input (a plain edge tensor, a sparse tensor) runs PyG's own path.  ``GCNConv``
is left alone: its fused path takes no edge weights, so it cannot carry the
normalisation (gnnpar's trainer computes GCN with the graph's degrees through the same
sparse product instead: :func:`gnnpar.models.node.global_gcn`).
"""

from __future__ import annotations

import types
from typing import Any

from torch import Tensor, nn
from torch_geometric import EdgeIndex
from torch_geometric.nn import GINConv, SAGEConv
from torch_geometric.nn.conv import MessagePassing

from gnnpar.nn.sage import mean_adjacency
from gnnpar.nn.sparse import SparseAdjacency

FUSED_LAYERS = (SAGEConv, GINConv)
"""Layers :func:`fuse_aggregation` fuses (with a sum or mean aggregation)."""

_AGGRS = ("add", "sum", "mean")


def _aggregate(conv: MessagePassing, edge_index: Any, x: Any) -> Tensor:
    """``conv.message_and_aggregate`` for a destination-sorted :class:`EdgeIndex`."""
    num_src, num_dst = (edge_index.get_sparse_size() if isinstance(edge_index, EdgeIndex)
                        else (None, None))
    if num_src is None or num_dst is None or not edge_index.is_sorted_by_col:
        out: Tensor = type(conv).message_and_aggregate(conv, edge_index, x)
        return out
    h: Tensor = x[0] if isinstance(x, tuple) else x
    edges = edge_index.as_tensor()
    if conv.aggr == "mean":
        adj = mean_adjacency(edges, num_dst, num_src, h.dtype)
    else:
        adj = SparseAdjacency(edges[0], edges[1], h.new_ones(edges.size(1)), num_dst, num_src)
    return adj @ h


def fuse_aggregation(model: nn.Module) -> nn.Module:
    """Have ``model``'s ``SAGEConv`` / ``GINConv`` layers aggregate by one sparse product.

    Applies to layers with a ``"sum"``, ``"add"`` or ``"mean"`` aggregation, when they are
    given a :class:`~torch_geometric.EdgeIndex` sorted by destination with known sizes
    (gnnpar's batches): the same outputs and gradients as PyG's gather and scatter
    (to float rounding), one sparse-dense product each way.

    Args:
        model: Any module; its matching layers are changed in place (the instance's
            ``message_and_aggregate``), nothing else.

    Returns:
        ``model``.
    """
    for conv in model.modules():
        if (isinstance(conv, FUSED_LAYERS) and isinstance(conv.aggr, str)
                and conv.aggr in _AGGRS and conv.fuse):
            conv.SUPPORTS_FUSED_EDGE_INDEX = True  # this layer only
            conv.message_and_aggregate = types.MethodType(_aggregate, conv)
    return model

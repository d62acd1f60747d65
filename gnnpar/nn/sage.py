"""GraphSAGE's mean aggregation as one sparse product, for sampled and full graphs.

PyG's ``SAGEConv`` with mean aggregation gathers a message per edge (``x[src]``,
``[E, F]``) and scatter-averages it; :func:`sage_mean` computes the same layer as one
product with the row-normalised adjacency (:func:`mean_adjacency`, built once per graph)
and one matrix product for both linear maps.  It serves the sampled batches of
:class:`~gnnpar.models.node.SampledGNN` and the halo-exchange layers of
:class:`~gnnpar.nn.dist_conv.DistConv`; on a 100k-node part the full-graph layer no longer holds
an ``[E, hidden]`` message tensor (about 0.5 GB at 500k edges and 256 features).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import SAGEConv
from torch_geometric.nn.aggr import MeanAggregation

from gnnpar.nn.sparse import SparseAdjacency
from gnnpar.ops import count


def is_mean_sage(conv: nn.Module) -> bool:
    """A ``SAGEConv`` that :func:`sage_mean` computes exactly (PyG's default settings)."""
    return (isinstance(conv, SAGEConv) and isinstance(conv.aggr_module, MeanAggregation)
            and conv.root_weight and not conv.project and not conv.normalize)


def mean_adjacency(edge_index: Tensor, num_dst: int, num_src: int,
                   dtype: torch.dtype) -> SparseAdjacency:
    """``A[d, s] = 1 / in-degree(d)`` for each edge ``s -> d``: ``A @ x`` is the mean.

    Args:
        edge_index: ``[2, E]`` (source, destination) edges, destinations sorted, in
            ``[0, num_dst)``.
        num_dst: Rows.
        num_src: Columns (rows of the ``x`` it multiplies).
        dtype: Dtype of the weights.
    """
    src, dst = edge_index[0], edge_index[1]
    inv = count(dst, num_dst).clamp_(min=1).to(dtype).reciprocal_()
    return SparseAdjacency(src, dst, inv.index_select(0, dst), num_dst, num_src)


def sage_mean(conv: SAGEConv, x: Tensor, x_dst: Tensor, mean: SparseAdjacency) -> Tensor:
    """``conv((x, x_dst), edge_index)`` given the mean adjacency of ``edge_index``.

    Args:
        conv: A ``SAGEConv`` for which :func:`is_mean_sage` holds.
        x: ``[N, F]`` source rows.
        x_dst: ``[n_dst, F]`` destination rows (their root term).
        mean: :func:`mean_adjacency` of the edges, ``[n_dst, N]``.

    Returns:
        ``[n_dst, F_out]``, as PyG's ``SAGEConv`` computes it.
    """
    aggregated = mean @ x
    # lin_l(mean) + lin_r(x_dst) as one matrix product (a fifth less time on a CPU).
    weight = torch.cat([conv.lin_l.weight, conv.lin_r.weight], 1)
    out: Tensor = F.linear(torch.cat([aggregated, x_dst], 1), weight, conv.lin_l.bias)
    return out

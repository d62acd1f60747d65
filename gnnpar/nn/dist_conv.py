"""Run PyG ``MessagePassing`` layers on a partitioned full graph, exactly.

A rank holds the rows of its owned nodes.  :class:`DistConv` wraps any PyG layer whose
output at a node depends only on the node's own row and its in-edges (``SAGEConv``,
``GATConv``, ``GraphConv``, ``GINConv``, ...): it extends the owned rows with the halo
rows (:class:`~gnnpar.nn.halo.HaloExchange`), runs the layer on the local graph (the
in-edges of the owned nodes, whose sources are owned or halo nodes) and keeps the owned
rows of the output.  Every owned node has all its in-edges locally, so the result equals
the layer on the whole graph.  Layers that accept ``(x_src, x_dst)`` (``SAGEConv``,
``GraphConv``, ``GINConv``) are called bipartitely, so their destination-side transforms
run on owned rows only.

``GCNConv`` weights each edge by the degrees of its *source* as well: a halo node's degree
is not visible locally, so :meth:`HaloGraph.gcn_adjacency` computes the owned nodes' degrees
with PyG's own self-loop rule and fetches the halo nodes' degrees from their owners once.
(Mean-aggregating ``SAGEConv`` layers likewise run as one product with a cached mean
adjacency, :mod:`gnnpar.nn.sage`, not as per-edge messages.)
(The partition's ``in_degree`` alone is not enough: whether a halo node has a self-loop,
which ``add_self_loops`` replaces, is only known to its owner.)  Its linear map commutes
with the aggregation, so the halo rows are exchanged *after* it (``F_out`` numbers per
row), and the normalised aggregation is one sparse-dense product
(:class:`SparseAdjacency`).  Layers that propagate several hops or read source degrees
in other ways are refused.

Usage (the model's own ``forward`` is unchanged)::

    graph = HaloGraph.build(dist_graph, ctx, stats=stats)
    model = distribute_convs(model, graph)        # wraps every MessagePassing in place
    out = model(x_owned, graph.edge_index)        # [num_owned, C]
    ddp = DistributedDataParallel(model)          # the gradients of the replicas
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.nn import GCNConv, GINConv, GraphConv, MessagePassing, SAGEConv
from torch_geometric.utils import add_remaining_self_loops, scatter

from gnnpar.comm import CommStats
from gnnpar.distributed import DistContext
from gnnpar.errors import ConfigError
from gnnpar.nn.halo import HaloExchange, HaloPlan, PipelineState
from gnnpar.nn.sage import is_mean_sage, sage_adjacency, sage_mean
from gnnpar.nn.sparse import SparseAdjacency
from gnnpar.storage.graph import DistGraph

# Layers taking (x_src, x_dst) and size=: their destination-side transforms (root
# weights, the linear map after aggregation) then run on owned rows only.
_BIPARTITE = (SAGEConv, GraphConv, GINConv)
# Layers that read more than one hop, or source-node degrees computed from edge_index.
_INEXACT = ("ChebConv", "SGConv", "SSGConv", "APPNP", "TAGConv", "ARMAConv", "LGConv",
            "GCN2Conv", "FAConv", "MixHopConv")


def check_conv(conv: Any) -> MessagePassing:
    """``conv`` if a halo exchange makes it exact on a partitioned graph, else raise.

    Raises:
        ConfigError: Not a PyG ``MessagePassing`` layer, a layer that reads more than one
            hop or source degrees computed from ``edge_index``, or not source -> target.
    """
    name = type(conv).__name__
    if not isinstance(conv, MessagePassing):
        raise ConfigError(f"{name} is not a torch_geometric MessagePassing layer.",
                          field="conv", fix="wrap PyG message-passing layers only.")
    if name in _INEXACT:
        raise ConfigError(f"{name} propagates over several hops or reads source degrees, "
                          "so one halo exchange cannot make it exact.", field="conv",
                          fix="use GCNConv, SAGEConv, GATConv, GraphConv or GINConv.")
    if conv.flow != "source_to_target":
        raise ConfigError(f"{name} has flow={conv.flow!r}; the partition stores in-edges.",
                          field="conv.flow", fix="use flow='source_to_target'.")
    return conv


class HaloGraph:
    """This rank's part of the full graph as the halo-exchange layers see it.

    Args:
        exchange: The halo exchange (routing, reducers, byte counters).
        edge_index: int64 ``[2, E]`` in-edges of the owned nodes over local ids:
            sources in ``[0, num_owned + num_halo)``, destinations in ``[0, num_owned)``.

    Example::

        halo = gnnpar.HaloGraph.build(graph, ctx)
        model = gnnpar.distribute_convs(GCN(feat_dim, 64, 2, classes), halo)
        logits = model(x_owned, halo.edge_index)          # equal to GCN on the whole graph
    """

    def __init__(self, exchange: HaloExchange, edge_index: Tensor) -> None:
        self.exchange = exchange
        self.edge_index = edge_index
        self._adj: dict[tuple[Any, ...], SparseAdjacency] = {}

    @classmethod
    def build(cls, graph: DistGraph, ctx: DistContext, *, stats: CommStats | None = None,
              boundary_p: float | None = None, stale: bool = False,
              seed: int = 0) -> HaloGraph:
        """Build the routing table (one collective exchange) and the local edge list.

        Args:
            graph: This rank's part.
            ctx: Distributed context; tensors are placed on ``ctx.device``.
            stats: Byte counters of the halo exchanges.
            boundary_p: BNS-GCN boundary sampling probability (``None``: exact).
            stale: PipeGCN stale halos.
            seed: Seed of the boundary samples.
        """
        plan = HaloPlan.build(graph, ctx, stats, device=ctx.device)
        edge_index = torch.stack(graph.to(ctx.device).owned_edges())
        exchange = HaloExchange(plan, ctx, stats=stats, boundary_p=boundary_p, stale=stale,
                                seed=seed)
        return cls(exchange, edge_index)

    @property
    def num_owned(self) -> int:
        """Nodes this rank owns (rows in and out of every layer)."""
        return self.exchange.plan.num_owned

    @property
    def num_halo(self) -> int:
        """Halo nodes of this rank."""
        return self.exchange.plan.num_halo

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` (draws the boundary sample under BNS)."""
        self.exchange.set_epoch(epoch)

    def gcn_adjacency(self, add_self_loops: bool, improved: bool,
                      dtype: torch.dtype) -> SparseAdjacency:
        """``GCNConv``'s normalised adjacency with global degrees, from local ids to owned rows.

        The first call for a setting is collective (one exchange of the halo degrees);
        later calls return the cached matrix.

        Args:
            add_self_loops: As ``GCNConv(add_self_loops=...)``.
            improved: As ``GCNConv(improved=...)``.
            dtype: Dtype of the weights (that of the features).

        Returns:
            ``[num_owned, num_owned + num_halo]``: the local edges (plus one self-loop per
            owned node when ``add_self_loops``) weighted ``deg^-1/2[src] * w *
            deg^-1/2[dst]``.
        """
        key = (add_self_loops, improved, dtype)
        if key not in self._adj:
            edge_index, weight = self._gcn_norm(add_self_loops, improved, dtype)
            self._adj[key] = SparseAdjacency.from_edges(
                edge_index, weight, self.num_owned, self.num_owned + self.num_halo)
        return self._adj[key]

    def sage_adjacency(self, dtype: torch.dtype) -> SparseAdjacency:
        """:func:`~gnnpar.nn.sage.sage_adjacency` of the owned rows (cached)."""
        key = ("sage", dtype)
        if key not in self._adj:
            self._adj[key] = sage_adjacency(self.edge_index, self.num_owned,
                                            self.num_owned + self.num_halo, dtype)
        return self._adj[key]

    def _gcn_norm(self, add_self_loops: bool, improved: bool,
                  dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """Edges and weights of :meth:`gcn_adjacency` (uncached; collective)."""
        n = self.num_owned
        edge_index, weight = self.edge_index, None
        if add_self_loops:  # PyG's rule: drop existing loops, add one per node
            edge_index, weight = add_remaining_self_loops(
                edge_index, None, 2.0 if improved else 1.0, n)
        if weight is None:
            weight = torch.ones(edge_index.size(1), dtype=dtype, device=edge_index.device)
        weight = weight.to(dtype)
        deg = scatter(weight, edge_index[1], 0, dim_size=n, reduce="sum")
        exchange = self.exchange
        halo_deg = exchange.plan.gather_halo(exchange.ctx, deg, exchange.stats, kind="halo_setup")
        inv = torch.cat([deg, halo_deg]).pow(-0.5)
        inv.masked_fill_(inv == float("inf"), 0.0)
        return edge_index, inv[edge_index[0]] * weight * inv[edge_index[1]]


class DistConv(nn.Module):
    """A PyG ``MessagePassing`` layer run on owned + halo rows of a partitioned graph.

    Weights are those of ``conv``: replicate them on every rank and average their
    gradients, e.g. with ``DistributedDataParallel`` as ``gnnpar-train --mode full`` does.

    Args:
        conv: The layer; its output at a node must depend only on the node's row and its
            in-edges (messages flow source -> target).
        graph: This rank's part (:meth:`HaloGraph.build`).

    Shapes:
        input: ``x [num_owned, F_in]``, ``edge_index`` = ``graph.edge_index``;
        output: ``[num_owned, F_out]``.

    Example::

        halo = gnnpar.HaloGraph.build(graph, ctx)
        conv = gnnpar.DistConv(SAGEConv(feat_dim, 64), halo)
        out = conv(x_owned, halo.edge_index)                 # [num_owned, 64], exact
    """

    def __init__(self, conv: MessagePassing, graph: HaloGraph) -> None:
        super().__init__()
        self.conv = check_conv(conv)
        self.graph = graph
        self.pipeline = PipelineState()

    def forward(self, x: Tensor, edge_index: Tensor, *args: Any, **kwargs: Any) -> Any:
        """Exchange the halo, run the layer locally and keep the owned rows.

        Args:
            x: ``[num_owned, F_in]`` rows of the owned nodes.
            edge_index: Local edges, normally ``graph.edge_index``.
            *args: Further arguments of the wrapped layer.
            **kwargs: Further keyword arguments of the wrapped layer.
        """
        conv = self.conv
        if isinstance(conv, GCNConv):
            return self._gcn(conv, x, edge_index, *args, **kwargs)
        n = self.graph.num_owned
        x_all = self.graph.exchange(x, training=self.training, state=self.pipeline)
        if is_mean_sage(conv) and not args and not kwargs:  # no [E, F] messages
            return sage_mean(conv, x_all, self.graph.sage_adjacency(x_all.dtype))
        if isinstance(conv, _BIPARTITE):  # destination-side work on owned rows only
            return conv((x_all, x), edge_index, *args, size=(x_all.size(0), n), **kwargs)
        out = conv(x_all, edge_index, *args, **kwargs)
        if isinstance(out, tuple):
            return (out[0][:n], *out[1:])
        return out[:n]

    def _gcn(self, conv: GCNConv, x: Tensor, edge_index: Tensor,
             edge_weight: Tensor | None = None) -> Tensor:
        """``GCNConv.forward`` with global degrees, exchanging ``lin(x)``, not ``x``.

        The linear map commutes with the aggregation, so the halo rows are exchanged
        after it: ``F_out`` numbers per row instead of ``F_in``, and no rank transforms
        another rank's rows.
        """
        if conv.normalize and (edge_index is not self.graph.edge_index
                               or edge_weight is not None):
            raise ConfigError("a normalising GCNConv needs graph.edge_index and no edge "
                              "weights: its global normalisation is computed for them.",
                              field="edge_index", fix="call the model with graph.edge_index.")
        h = self.graph.exchange(conv.lin(x), training=self.training, state=self.pipeline)
        if conv.normalize:
            out = self.graph.gcn_adjacency(conv.add_self_loops, conv.improved, x.dtype) @ h
        else:
            out = conv.propagate(edge_index, x=h, edge_weight=edge_weight,
                                 size=(h.size(0), self.graph.num_owned))
        return out + conv.bias if conv.bias is not None else out

    def __repr__(self) -> str:
        return f"DistConv({self.conv})"


def distribute_convs(model: nn.Module, graph: HaloGraph) -> nn.Module:
    """Wrap every ``MessagePassing`` submodule of ``model`` in :class:`DistConv`, in place.

    Args:
        model: Any module (a single layer is wrapped and returned).
        graph: This rank's part.

    Returns:
        ``model`` itself, or the wrapper when ``model`` is a layer.

    Example::

        halo = gnnpar.HaloGraph.build(graph, ctx)
        model = gnnpar.distribute_convs(GraphSAGE(feat_dim, 128, 2, classes), halo)
        out = model(x_owned, halo.edge_index)
    """
    if isinstance(model, MessagePassing):
        return DistConv(model, graph)
    for name, child in list(model.named_children()):
        if isinstance(child, DistConv):
            continue
        setattr(model, name, distribute_convs(child, graph))
    return model


def flush_pipelines(model: nn.Module) -> None:
    """Wait for the stale (PipeGCN) exchanges of ``model``'s layers and reset them.

    Call at the end of training: nothing is left in flight, and the next training step
    is exact again.  (Evaluation is always exact.)
    """
    for module in model.modules():
        if isinstance(module, DistConv):
            module.pipeline.flush()

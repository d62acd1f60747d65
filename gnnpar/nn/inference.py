"""Full-neighbour inference layer by layer, in chunks of destination rows under a budget.

PyG's ``BasicGNN.inference`` pattern on a partitioned graph.  Each layer runs for every
owned node before the next one starts.  Its input rows are extended with the halo rows
once (one exchange per layer, ``F_in`` numbers per row; ``GCNConv`` exchanges
``lin(x)``, ``F_out`` numbers, as :class:`~gnnpar.nn.dist_conv.DistConv` does), and its output is
computed in chunks of consecutive owned nodes, whose in-edges the part's CSC stores
contiguously.  Each chunk's per-edge and per-row tensors are estimated
(:func:`chunk_costs`) and kept within ``budget_bytes``; a node with more in-edges than
that is a chunk by itself.  No tensor over all the part's edges is made, not even an edge
list: each chunk reads its slice of the CSC.  Every owned row equals the layer's on the
whole graph (and ``DistConv``'s), whatever the budget.  This is evaluation, not the hot
path: a chunk may read sizes from the device (the subgraph path's distinct sources).

Per chunk, a layer runs as ``DistConv`` runs it:

* mean ``SAGEConv``: one sparse product with the chunk's rows of the mean adjacency
  (and the root rows); a layer narrower than half its input (a last layer) maps the rows
  first and exchanges and aggregates those (:func:`~gnnpar.nn.sage.projects_first`);
* normalising ``GCNConv``: one sparse product with the chunk's rows of the normalised
  adjacency, with global degrees (the halo nodes' fetched once per inference);
* layers with an ``(x_src, x_dst)`` form (``SAGEConv``, ``GraphConv``, ``GINConv``):
  called bipartitely, sources all local rows, destinations the chunk's;
* any other (``GATConv``, ...): on the chunk's subgraph laid out as a PyG
  ``NeighborLoader`` batch — the chunk's nodes first, then their other in-neighbours —
  keeping the first rows (so self-loops the layer adds are the right ones).

``docs/memory.md`` states what a rank holds during inference.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import torch
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn import GCNConv, MessagePassing, SAGEConv
from torch_geometric.nn.models.basic_gnn import BasicGNN

from gnnpar.comm import CommStats
from gnnpar.distributed import DistContext
from gnnpar.errors import ConfigError
from gnnpar.nn.dist_conv import _BIPARTITE, DistConv, check_conv
from gnnpar.nn.halo import HaloPlan
from gnnpar.nn.sage import (
    is_mean_sage,
    mean_adjacency,
    projects_first,
    sage_adjacency,
    sage_mean,
    sage_mean_projected,
    sage_project,
)
from gnnpar.nn.sparse import SparseAdjacency
from gnnpar.ops import count
from gnnpar.storage.features import DistFeatureStore
from gnnpar.storage.graph import DistGraph

BUDGET_MB = 64.0
"""MiB per chunk of destination rows unless given (``gnnpar-train --eval-budget-mb``):
the chunks' transient rows stay below the rows a training step holds, and their number
(four on a 50k-node part of GraphSAGE 2x256) costs nothing measurable."""
INDEX_BYTES = 48
"""Bytes of bookkeeping per edge of a chunk: sources, destinations, weights, positions."""
SUBGRAPH_INDEX_BYTES = 160
"""The same on a chunk's subgraph: its edge list, relabelled, with the self-loops and
per-head attention terms a layer like ``GATConv`` adds."""


def chunk_costs(conv: MessagePassing, f_in: int, f_out: int,
                elem: int) -> tuple[int, int]:
    """Estimated bytes per in-edge and per destination row of one chunk of ``conv``.

    Per edge, :data:`INDEX_BYTES` (:data:`SUBGRAPH_INDEX_BYTES` on a subgraph) plus the
    rows a layer makes per edge: none for the sparse products (mean ``SAGEConv``,
    normalising ``GCNConv``), a source row for the other bipartite layers (their
    messages), a source row and eight ``F_out`` rows for the others — a subgraph has up
    to a node per edge, whose input row, transformed row, output and bias sum ``GATConv``
    makes, besides its messages, weighted messages and attention terms.  Per row, three
    input and three output rows (aggregate, root term, concatenation, output).  Measured
    on a CPU (``docs/memory.md``), a chunk's peak is 0.3 to 0.8 of the estimate.

    Args:
        conv: The layer.
        f_in: Width of its input rows.
        f_out: Width of its output rows.
        elem: Bytes per number.
    """
    row_bytes = 16 + elem * 3 * (f_in + f_out)
    if is_mean_sage(conv) or (isinstance(conv, GCNConv) and conv.normalize):
        return INDEX_BYTES, row_bytes
    if isinstance(conv, _BIPARTITE):
        return INDEX_BYTES + elem * f_in, row_bytes
    return SUBGRAPH_INDEX_BYTES + elem * (f_in + 8 * f_out), row_bytes


def chunk_bounds(indptr: Tensor, edge_bytes: int, row_bytes: int, budget: int) -> list[int]:
    """Bounds ``0 = b_0 < b_1 < ... = n`` of chunks of consecutive rows of a CSC.

    Chunk ``[b_i, b_i+1)`` costs ``edges * edge_bytes + rows * row_bytes``; each one is the
    longest run of rows from its start that costs at most ``budget`` (at least one row).

    Args:
        indptr: ``[n + 1]`` CSC row pointer of the rows to split (on the CPU).
        edge_bytes: Cost of an edge.
        row_bytes: Cost of a row.
        budget: Most bytes per chunk.
    """
    n = indptr.numel() - 1
    cost = indptr * edge_bytes + torch.arange(n + 1) * row_bytes
    bounds = [0]
    while bounds[-1] < n:
        lo = bounds[-1]
        hi = int(torch.searchsorted(cost, cost[lo] + budget, right=True)) - 1
        bounds.append(max(hi, lo + 1))
    return bounds


def _out_width(conv: MessagePassing, f_in: int) -> int:
    """Width of ``conv``'s messages, ``heads * out_channels`` (``f_in`` if not stated)."""
    return int(getattr(conv, "out_channels", f_in)) * int(getattr(conv, "heads", 1))


class _Chunks:
    """The owned rows of a part in chunks, and each chunk's in-edges from the CSC."""

    def __init__(self, graph: DistGraph, device: torch.device) -> None:
        self.graph = graph.to(device)
        self.num_owned = graph.num_owned
        self.indptr = graph.indptr[: graph.num_owned + 1].cpu()

    def bounds(self, edge_bytes: int, row_bytes: int, budget: int) -> list[int]:
        """Chunk bounds for these costs (:func:`chunk_bounds`)."""
        return chunk_bounds(self.indptr, edge_bytes, row_bytes, budget)

    def edges(self, lo: int, hi: int) -> tuple[Tensor, Tensor]:
        """Sources (local ids) and destinations (``0 .. hi - lo - 1``) of rows ``lo..hi``."""
        e0, e1 = int(self.indptr[lo]), int(self.indptr[hi])
        g = self.graph
        deg = g.indptr[lo + 1:hi + 1] - g.indptr[lo:hi]
        dst = torch.repeat_interleave(torch.arange(hi - lo, device=deg.device), deg,
                                      output_size=e1 - e0)
        return g.indices[e0:e1], dst


class _Layerwise:
    """One inference pass: the chunks, the halo plan, the GCN degrees already fetched."""

    def __init__(self, graph: DistGraph, ctx: DistContext, budget: int,
                 stats: CommStats | None, plan: HaloPlan | None = None) -> None:
        self.ctx = ctx
        self.budget = budget
        self.stats = stats
        self.chunks = _Chunks(graph, ctx.device)
        self.plan = plan or HaloPlan.build(graph, ctx, stats, device=ctx.device)
        self._inv_sqrt: dict[tuple[bool, torch.dtype], Tensor] = {}

    def with_halo(self, rows: Tensor) -> Tensor:
        """``[num_owned + num_halo, F]``: ``rows`` of the owned nodes, then the halo's."""
        plan = self.plan
        out = rows.new_empty((plan.num_owned + plan.num_halo, *rows.shape[1:]))
        out[:plan.num_owned] = rows
        plan.gather_halo(self.ctx, rows, self.stats, kind="halo", out=out[plan.num_owned:])
        return out

    def local_rows(self, conv: MessagePassing, x: Tensor) -> Tensor:
        """``conv``'s input rows of every local node (collective: one halo exchange).

        ``x`` itself, or its linear maps where they are narrower: ``lin(x)`` for
        ``GCNConv``, both maps of a mean ``SAGEConv`` narrower than half its input
        (:func:`~gnnpar.nn.sage.projects_first`); extended with the halo rows.
        """
        if isinstance(conv, GCNConv):
            return self.with_halo(conv.lin(x))
        if projects_first(conv, x.size(1)):
            return self.with_halo(sage_project(cast(SAGEConv, conv), x))
        return self.with_halo(x)

    def layer(self, conv: MessagePassing, x_all: Tensor, f_in: int) -> Tensor:
        """``conv`` on every owned row, chunk by chunk, from :meth:`local_rows`."""
        projected = projects_first(conv, f_in)
        if projected:  # x_all holds both linear maps of every row
            f_in = x_all.size(1)
        f_out = x_all.size(1) if isinstance(conv, GCNConv) else _out_width(conv, f_in)
        costs = chunk_costs(conv, f_in, f_out, max(4, x_all.element_size()))
        bounds = self.chunks.bounds(*costs, self.budget)
        if len(bounds) <= 2:  # one chunk (or no owned node): its rows are the output
            return self._chunk(conv, x_all, 0, self.chunks.num_owned, projected)
        out: Tensor | None = None
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            rows = self._chunk(conv, x_all, lo, hi, projected)
            if out is None:
                out = rows.new_empty((self.chunks.num_owned, *rows.shape[1:]))
            out[lo:hi] = rows
        assert out is not None  # noqa: S101 - several chunks
        return out

    def _chunk(self, conv: MessagePassing, x_all: Tensor, lo: int, hi: int,
               projected: bool) -> Tensor:
        """Rows ``lo..hi`` of ``conv``'s output from its local input rows ``x_all``.

        ``projected``: ``x_all`` holds both linear maps of each row (:meth:`local_rows`).
        """
        src, dst = self.chunks.edges(lo, hi)
        n_all, rows = x_all.size(0), hi - lo
        if isinstance(conv, GCNConv):
            return self._gcn(conv, x_all, src, dst, lo, hi)
        if projected:
            mean = mean_adjacency(torch.stack([src, dst]), rows, n_all, x_all.dtype)
            return sage_mean_projected(cast(SAGEConv, conv), x_all, mean, lo)
        if is_mean_sage(conv):
            adj = sage_adjacency(torch.stack([src, dst]), rows, n_all, x_all.dtype, lo)
            return sage_mean(conv, x_all, adj)
        if isinstance(conv, _BIPARTITE):
            out: Tensor = conv((x_all, x_all[lo:hi]), torch.stack([src, dst]),
                               size=(n_all, rows))
            return out
        inside = (src >= lo) & (src < hi)
        others = torch.unique(src[~inside])
        n_id = torch.cat([torch.arange(lo, hi, device=src.device), others])
        local = torch.where(inside, src - lo, rows + torch.searchsorted(others, src))
        res = conv(x_all.index_select(0, n_id), torch.stack([local, dst]))
        sub: Tensor = res[0] if isinstance(res, tuple) else res
        return sub[:rows]

    def _gcn(self, conv: GCNConv, h_all: Tensor, src: Tensor, dst: Tensor, lo: int,
             hi: int) -> Tensor:
        """Rows ``lo..hi`` of a ``GCNConv`` given ``lin(x)`` of every local row."""
        if conv.normalize:
            loops = conv.add_self_loops
            inv = self.inv_sqrt_degree(loops, h_all.dtype)
            keep = src != dst + lo if loops else torch.ones_like(src, dtype=torch.bool)
            s, d = src[keep], dst[keep]
            weight = inv.index_select(0, s) * inv.index_select(0, d + lo)
            out = SparseAdjacency(s, d, weight, hi - lo, h_all.size(0)) @ h_all
            if loops:  # PyG's rule: existing self-loops are replaced by one of weight 1
                # (also with improved=True: without edge weights PyG fills with ones)
                out = out + h_all[lo:hi] * inv[lo:hi].square().unsqueeze(-1)
        else:
            out = conv.propagate(torch.stack([src, dst]), x=h_all, edge_weight=None,
                                 size=(h_all.size(0), hi - lo))
        return out + conv.bias if conv.bias is not None else out

    def inv_sqrt_degree(self, add_self_loops: bool, dtype: torch.dtype) -> Tensor:
        """``deg^-1/2`` of every local node as ``GCNConv`` normalises (collective once).

        ``deg`` counts in-edges (without self-loops, plus one, with ``add_self_loops``),
        as :meth:`~gnnpar.nn.dist_conv.HaloGraph.gcn_adjacency` does; the halo nodes' come from
        their owners.  Computed in at least float32 (a bfloat16 degree above 256 would be
        rounded).
        """
        dtype = torch.promote_types(dtype, torch.float32)
        key = (add_self_loops, dtype)
        if key not in self._inv_sqrt:
            chunks = self.chunks
            deg = (chunks.indptr[1:] - chunks.indptr[:-1]).to(self.ctx.device, dtype)
            if add_self_loops:
                bounds = chunks.bounds(INDEX_BYTES, 16, self.budget)
                for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
                    src, dst = chunks.edges(lo, hi)
                    deg[lo:hi] += 1 - count(dst[src == dst + lo], hi - lo, dtype)
            halo = self.plan.gather_halo(self.ctx, deg, self.stats, kind="halo_setup")
            inv = torch.cat([deg, halo]).pow(-0.5)
            self._inv_sqrt[key] = inv.masked_fill_(inv == float("inf"), 0.0)
        return self._inv_sqrt[key]


def _plain(conv: nn.Module) -> MessagePassing:
    """The PyG layer itself (unwrapped from a :class:`DistConv`), checked."""
    return check_conv(conv.conv if isinstance(conv, DistConv) else conv)


@torch.no_grad()
def layerwise_inference(gnn: BasicGNN, graph: DistGraph, ctx: DistContext, x: Tensor,
                        budget_bytes: int, stats: CommStats | None = None,
                        plan: HaloPlan | None = None,
                        emit: Callable[[int, Tensor], None] | None = None) -> Tensor:
    """``gnn(x, edge_index)`` on the whole partitioned graph, in eval mode (collective).

    Layer by layer like ``BasicGNN.inference``, each layer in chunks of owned rows of at
    most ``budget_bytes`` (see the module docstring); one halo exchange per layer.

    Args:
        gnn: A PyG ``BasicGNN`` (no jumping knowledge, norms without batch arguments,
            activation after the norm); its layers may be wrapped in ``DistConv``.
        graph: This rank's part.
        ctx: Distributed context.
        x: ``[num_owned, F]`` input rows of the owned nodes, e.g. the memory-mapped
            features (read once, into the first layer's local rows).
        budget_bytes: Most bytes per chunk (:func:`chunk_costs`).
        stats: Byte counters (kinds ``halo`` and ``halo_setup``).
        plan: This part's halo routing, if already built (else built here: one exchange).
        emit: Called as ``emit(layer, rows)`` with every layer's output rows
            ``[num_owned, F]`` (after its norm and activation; ``layer`` from 1), e.g. to
            write embeddings as they are made.

    Returns:
        ``[num_owned, C]``: equal to ``gnn`` on the whole graph, on every owned row.
    """
    if gnn.jk_mode is not None or gnn.supports_norm_batch or gnn.act_first:
        raise ConfigError("layer-wise inference runs models without jumping knowledge, "
                          "batch-wise norms or act_first.", field="gnn",
                          fix="build the model with gnnpar.models.node.build_model.")
    if budget_bytes < 1:
        raise ConfigError(f"budget_bytes={budget_bytes}; need at least 1.",
                          field="budget_bytes", fix="pass e.g. 64 * 2**20.")
    was_training = gnn.training
    gnn.eval()
    run = _Layerwise(graph, ctx, budget_bytes, stats, plan)
    for i, (layer, norm) in enumerate(zip(gnn.convs, gnn.norms, strict=True)):
        conv, f_in = _plain(layer), x.size(1)
        x_all = run.local_rows(conv, x)
        del x  # only the local rows are read from here on
        x = run.layer(conv, x_all, f_in)
        del x_all
        if i < gnn.num_layers - 1:
            x = norm(x)
            if isinstance(gnn.act, nn.ReLU):
                x = x.relu_()  # in place: the layer's rows are this pass's own
            elif gnn.act is not None:
                x = gnn.act(x)
        if emit is not None:
            emit(i + 1, x)
    gnn.train(was_training)
    return x


def inference(model: nn.Module, graph: DistGraph, features: DistFeatureStore,
              budget_mb: float = BUDGET_MB, stats: CommStats | None = None) -> Tensor:
    """Exact full-neighbour outputs of every owned node: the model on the whole graph.

    PyG's ``model.inference(x_all, subgraph_loader)`` for a partitioned graph (collective:
    every rank calls it): layer by layer, every in-neighbour of every node, in chunks
    under ``budget_mb`` (:func:`layerwise_inference`).

    Args:
        model: A PyG ``BasicGNN`` (``GraphSAGE``, ``GCN``, ``GAT``, ...), possibly in
            ``DistributedDataParallel``; run in eval mode (dropout off).
        graph: This rank's part.
        features: The feature store: the input rows (its ``x``) and the context.
        budget_mb: MiB per chunk of destination nodes.
        stats: Byte counters (kinds ``halo``, ``halo_setup``).

    Returns:
        ``[num_owned, C]`` (rows in local id order: ``graph.part.orig_ids`` names their
        dataset ids).

    Example::

        logits = inference(model, graph, features)
        acc = accuracy(logits, graph, features.ctx, "test")  # gnnpar.evaluation.node
    """
    gnn = model.module if isinstance(model, DistributedDataParallel) else model
    if not isinstance(gnn, BasicGNN):
        raise ConfigError(f"inference runs PyG BasicGNN models, not {type(gnn).__name__}.",
                          field="model", fix="pass a torch_geometric.nn.models model "
                          "(GraphSAGE, GCN, GAT, ...), or call layerwise_inference.")
    x = features.owned_rows("x", torch.arange(graph.num_owned, device=features.device)
                            + graph.first_gid)
    return layerwise_inference(gnn, graph, features.ctx, x.float(), int(budget_mb * 2**20),
                               stats)

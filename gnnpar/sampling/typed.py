"""Typed neighbour sampling: fan-outs per relation, one exchange per hop for all types.

:class:`DistTypedNeighborSampler` samples a typed partition (:mod:`~gnnpar.partition.typed`)
with the homogeneous sampler's exchange (:class:`~gnnpar.sampling.exchange.HopExchange`)
and keys, and returns its own output, :class:`TypedSamplerOutput`, the batch split by
type.  Nodes keep their global ids, and a hop samples, for every frontier node of type
``t``, up to ``fanouts[r][hop]`` in-edges of each relation ``r`` whose destination type
is ``t``.  A frontier node's sampled row is laid out
per destination type — each relation into ``t`` owns a fixed run of columns — so one
fixed-width row serves every relation, and the hop's requests and replies for all types
travel in the same three collectives as a homogeneous hop (never one exchange per type).

Each node's in-edges are stored sorted by relation, so relation ``r``'s in-edges of a node
are a sub-range of its row, found by a vectorised binary search on the part's ``etype``
(``ceil(log2(max degree + 1))`` whole-tensor steps), then sampled by
:func:`~gnnpar.sampling.kernels.sample_in_ranges` exactly as a homogeneous row is: uniformly
without replacement (all of them when there are at most ``fanout``; a relation whose
largest in-degree is at most its fan-out skips the draws), with the same counter-based
keys, salted by the relation.  The frontier is grouped by node type (the exchange's
groups), so a relation costs work on the rows of its destination type only; the sizes of
the groups travel in the hop's count exchange, and the new nodes per type and the edges
per relation are read with the hop's sizes: a typed hop reads the host exactly as often
as a homogeneous one (twice).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from itertools import accumulate

import numpy as np
import torch
from torch import Tensor

from gnnpar.comm import CommStats
from gnnpar.distributed import DistContext
from gnnpar.errors import ConfigError
from gnnpar.keys import C1, mix, signed
from gnnpar.ops import count
from gnnpar.sampling.exchange import HopExchange, hop_keys
from gnnpar.sampling.fanouts import Fanouts
from gnnpar.sampling.kernels import relabel, sample_in_ranges, source_ids
from gnnpar.storage.graph import DistGraph


def lower_bound(values: Tensor, lo: Tensor, hi: Tensor, target: int, steps: int) -> Tensor:
    """First position in each sorted range ``values[lo:hi]`` holding ``>= target``.

    ``steps`` rounds of a vectorised binary search (enough for ranges of ``2**steps - 1``).
    """
    last = max(values.numel() - 1, 0)
    for _ in range(steps):
        active = lo < hi
        mid = (lo + hi) // 2
        right = active & (values.index_select(0, mid.clamp(max=last)) < target)
        lo = torch.where(right, mid + 1, lo)
        hi = torch.where(active & ~right, mid, hi)
    return lo


def _prefix(sizes: list[int]) -> list[int]:
    """Start of each block of consecutive blocks of these sizes."""
    return list(accumulate(sizes[:-1], initial=0))


@dataclass
class TypedSamplerOutput:
    """One sampled typed computation graph, split by type (PyG's ``HeteroData`` layout).

    Attributes:
        node: ``[N]`` global ids of the batch's nodes of all types, seeds first, then hop
            by hop (within a hop, this rank's own first).
        batch_size: Number of seeds (the first ``batch_size`` entries of ``node``).
        gids: Per node type, its nodes' global ids in batch order (a node's type-local
            id is its position here).
        node_counts: ``[T][L + 1]`` nodes of each type added by each hop, seeds first.
        owned_counts: ``[T][L + 1]`` how many of them, at the start of each hop's run,
            this rank owns (``None`` when the seeds' owners are not known).
        edge_index: Per relation, ``[2, E_r]`` type-local edges (source, destination) in
            batch order: hop by hop, destinations ascending within a hop.
        edge_counts: ``[R][L]`` edges of each relation sampled at each hop.
    """

    node: Tensor
    batch_size: int
    gids: list[Tensor]
    node_counts: list[list[int]]
    owned_counts: list[list[int]] | None
    edge_index: list[Tensor]
    edge_counts: list[list[int]]


class DistTypedNeighborSampler:
    """Multi-hop sampling of a typed graph with fan-outs per relation (collective).

    Args:
        graph: This rank's part of a typed partition.
        ctx: Distributed context.
        fanouts: Per relation and hop (:meth:`Fanouts.for_graph
            <gnnpar.sampling.fanouts.Fanouts.for_graph>` on this graph).
        replace: Sample with replacement.
        seed: Seed of the counter-based keys.
        stats: Byte counters (kind ``"sample"``).
        device: Where the adjacency and kernels live (default ``ctx.device``).

    Attributes:
        layout: The graph's types.
        fanouts: ``[R][L]`` fan-outs per relation and hop.

    Example::

        fanouts = Fanouts.for_graph({"cites": [5, 5], "writes": [10, 5], ...}, graph, ctx)
        sampler = DistTypedNeighborSampler(graph, ctx, fanouts)
        out = sampler.sample(seeds, batch_key=0)   # out.edge_index[r]: relation r's edges
    """

    def __init__(self, graph: DistGraph, ctx: DistContext, fanouts: Fanouts,
                 replace: bool = False, seed: int = 0, stats: CommStats | None = None,
                 device: torch.device | None = None) -> None:
        book = graph.meta.types
        if book is None or graph.etype is None:
            raise ConfigError("the partition is of a homogeneous graph.", field="graph",
                              fix="use DistNeighborSampler, or partition a typed graph.")
        self.layout = book.layout
        if len(fanouts.per_relation) != len(self.layout.edge_types):
            raise ConfigError(f"{len(fanouts.per_relation)} relations have fan-outs, the "
                              f"graph has {len(self.layout.edge_types)}.", field="fanouts",
                              fix="build them with Fanouts.for_graph on this graph.")
        self.fanouts = fanouts
        self.ctx = ctx
        self.replace = bool(replace)
        self.seed = int(seed)
        self.stats = stats
        self.device = torch.device(device) if device is not None else ctx.device
        self.graph = graph.to(self.device)  # one copy per device, shared by all samplers
        self.exchange = HopExchange(self.graph, ctx, stats, self.device)
        self.graph.local_gids  # noqa: B018 - made now, on the compute stream, not in a batch
        assert self.graph.etype is not None
        self._etype = self.graph.etype
        dst = self.layout.dst_types()
        self._into = [[r for r in range(len(dst)) if dst[r] == t]  # ascending relation ids
                      for t in range(len(self.layout.node_types))]
        rows = np.diff(graph.part.indptr)
        self._steps = int(rows.max()).bit_length() + 1 if rows.size else 1
        self._max_degree = graph.relation_max_degrees
        self.num_types = len(self.layout.node_types)
        self._offset, self._col_rel, self._widths = self._layout_columns()

    def _layout_columns(self) -> tuple[list[list[int]], list[Tensor], list[int]]:
        """Per hop: each relation's first column, each column's relation per type, width."""
        lay, fan = self.layout, self.fanouts.per_relation
        dst, num_types = lay.dst_types(), len(lay.node_types)
        offsets_by_hop: list[list[int]] = []
        col_rels: list[Tensor] = []
        widths = []
        for hop in range(self.fanouts.num_hops):
            used = [0] * num_types
            offsets = []
            for r, f in enumerate(fan):
                offsets.append(used[dst[r]])
                used[dst[r]] += f[hop]
            width = max(1, *used)
            col_rel = torch.full((num_types, width), -1, dtype=torch.int64)
            for r, f in enumerate(fan):
                col_rel[dst[r], offsets[r]:offsets[r] + f[hop]] = r
            offsets_by_hop.append(offsets)
            col_rels.append(col_rel.to(self.device))
            widths.append(width)
        return offsets_by_hop, col_rels, widths

    def _group(self, gids: Tensor) -> Tensor:
        """Node type of each global id: the frontier is grouped by type."""
        return self.graph.node_type(gids)

    def _relation_counts(self, frontier: Tensor, table: Tensor, hop: int) -> Tensor:
        """``[R]`` edges of each relation among the entries a hop's table kept."""
        rel = self._col_rel[hop].index_select(0, self.graph.node_type(frontier))
        rel = rel[:, :table.shape[1]]
        return torch.zeros(len(self.layout.edge_types), dtype=torch.int64,
                           device=table.device).index_add_(
            0, rel.clamp(min=0).reshape(-1), (table >= 0).long().reshape(-1))

    def _sample_rows(self, hop: int, local: Tensor, keys: Tensor,
                     group_sizes: list[int]) -> Tensor:
        """``[n, width]`` sampled global ids of rows ``local``, each relation in its columns."""
        g = self.graph
        return source_ids(self._positions(local, keys, hop, group_sizes), g.indices,
                          g.local_gids)

    def _positions(self, local: Tensor, keys: Tensor, hop: int,
                   group_sizes: list[int]) -> Tensor:
        """``[n, width]`` positions: each relation's sampled in-edges in its columns.

        The rows come grouped by node type (``group_sizes`` of each, known on the host
        from the hop's count exchange), and each type's rows are split into its
        relations' ranges by ``R_t - 1`` binary searches (a row's in-edges start with its
        first relation's and end with its last's), so a relation's work is over the rows
        of its destination type only.
        """
        g, dev = self.graph, self.device
        n = local.numel()
        pos = torch.full((n, self._widths[hop]), -1, dtype=torch.int64, device=dev)
        if n == 0 or self._etype.numel() == 0:
            return pos
        first = 0
        for t, size in enumerate(group_sizes):
            rels = self._into[t]
            a, first = first, first + size
            if size == 0 or not rels:
                continue
            at = local[a:first]
            lo = g.indptr.index_select(0, at)
            end = g.indptr.index_select(0, at + 1)
            row_keys = keys[a:first]
            for i, r in enumerate(rels):
                hi = end if i + 1 == len(rels) else lower_bound(
                    self._etype, lo, end, rels[i + 1], self._steps)
                k = self.fanouts.per_relation[r][hop]
                if k:
                    col = self._offset[hop][r]
                    pos[a:first, col:col + k] = sample_in_ranges(
                        lo, hi - lo, mix(row_keys ^ signed((r + 1) * C1)), k, self.replace,
                        self._max_degree[r])
                lo = hi
        return pos

    def _edge_types(self, frontier: Tensor, pos: Tensor, hop: int) -> Tensor:
        """Relation of each kept entry: its column's, for its destination's type."""
        width = self._widths[hop]
        dst_type = self.graph.node_type(frontier).index_select(0, pos // width)
        return self._col_rel[hop][dst_type, pos % width]

    def sample(self, seeds: Tensor, batch_key: int,
               num_owned_seeds: int | None = None) -> TypedSamplerOutput:
        """Sample the typed computation graph of ``seeds`` (collective).

        Arguments as :meth:`DistNeighborSampler.sample
        <gnnpar.sampling.neighbor.DistNeighborSampler.sample>`'s.  The seeds' types, the
        new nodes per type and the edges per relation are read with each hop's sizes: a
        typed hop reads the host as often as a homogeneous one.
        """
        seeds = seeds.to(self.device, torch.int64)
        node = seeds
        n_ids = self.graph.meta.num_nodes
        types = self.num_types
        n_own_seeds = seeds.numel() if num_owned_seeds is None else num_owned_seeds
        rows, cols, etypes = [], [], []
        group_counts: list[list[int]] = []
        group_owned: list[list[int]] = []
        relation_counts: list[list[int]] = []
        frontier_start = 0
        for hop, width in enumerate(self._widths):
            frontier = node[frontier_start:]
            table = self.exchange.run(
                frontier, width, hop_keys(self.seed, batch_key, hop, self.exchange.ranks),
                partial(self._sample_rows, hop), self._group, types)
            extra = self._relation_counts(frontier, table, hop)
            if hop == 0:  # the seeds' types, read with the first hop's sizes
                group = self._group(seeds)
                extra = torch.cat([count(group, types), count(group[:n_own_seeds], types),
                                   extra])
            out = relabel(table, node, self.graph.is_owned(table) & (table >= 0), n_ids,
                          self._group, types, extra)
            rest = out.extra
            if hop == 0:
                group_counts.append(rest[:types])
                group_owned.append(rest[types:2 * types])
                rest = rest[2 * types:]
            group_counts.append(out.group_new)
            group_owned.append(out.group_owned)
            relation_counts.append(rest)
            cols.append(frontier_start + out.pos // width)
            rows.append(out.src)
            etypes.append(self._edge_types(frontier, out.pos, hop))
            frontier_start = node.numel()
            node = torch.cat([node, out.new])
        hops = len(self._widths)
        node_counts = [[group_counts[h][t] for h in range(hops + 1)] for t in range(types)]
        owned_counts = ([[group_owned[h][t] for h in range(hops + 1)] for t in range(types)]
                        if num_owned_seeds is not None else None)
        edge_counts = [[relation_counts[h][r] for h in range(hops)]
                       for r in range(len(self.layout.edge_types))]
        gids, edge_index = _split_by_type(node, self._group(node), torch.cat(rows),
                                          torch.cat(cols), torch.cat(etypes), node_counts,
                                          edge_counts)
        return TypedSamplerOutput(node=node, batch_size=seeds.numel(), gids=gids,
                                  node_counts=node_counts, owned_counts=owned_counts,
                                  edge_index=edge_index, edge_counts=edge_counts)


def _split_by_type(node: Tensor, ntype: Tensor, row: Tensor, col: Tensor, etype: Tensor,
                   node_counts: list[list[int]], edge_counts: list[list[int]]
                   ) -> tuple[list[Tensor], list[Tensor]]:
    """Each type's global ids in batch order, and each relation's type-local edges.

    On the device, with the sizes known on the host (no read of its own).  Within a hop
    this rank's own nodes come first (the sampler's order), so they do within each type
    too: per type and hop, its own nodes are a leading run.
    """
    order = torch.argsort(ntype, stable=True)
    sizes = [sum(c) for c in node_counts]
    per_type = count(ntype, len(node_counts))
    starts = torch.cumsum(per_type, 0) - per_type
    within = torch.empty_like(order).index_copy_(  # a node's rank among its type's
        0, order, torch.arange(node.numel(), device=node.device)
        - starts.index_select(0, ntype.index_select(0, order)))
    gids = [node.index_select(0, order[a:a + n])
            for a, n in zip(_prefix(sizes), sizes, strict=True)]
    e_order = torch.argsort(etype, stable=True)  # each relation's, in order
    e_sizes = [sum(c) for c in edge_counts]
    src = within.index_select(0, row.index_select(0, e_order))
    dst = within.index_select(0, col.index_select(0, e_order))
    return gids, list(torch.split(torch.stack([src, dst]), e_sizes, dim=1))

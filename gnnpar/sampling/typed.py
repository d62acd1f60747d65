"""Typed neighbour sampling: fan-outs per relation, one exchange per hop for all types.

:class:`DistHeteroNeighborSampler` is :class:`~gnnpar.sampling.neighbor.DistNeighborSampler` on a
typed partition (:mod:`~gnnpar.partition.typed`): nodes keep their global ids, and a hop
samples, for every frontier node of type ``t``, up to ``fanouts[r][hop]`` in-edges of each
relation ``r`` whose destination type is ``t``.  A frontier node's sampled row is laid out
per destination type — each relation into ``t`` owns a fixed run of columns — so one
fixed-width row serves every relation, and the hop's requests and replies for all types
travel in the same three collectives as a homogeneous hop (never one exchange per type).

Each node's in-edges are stored sorted by relation, so relation ``r``'s in-edges of a node
are a sub-range of its row, found by a vectorised binary search on the part's ``etype``
(``ceil(log2(max degree + 1))`` whole-tensor steps), then sampled by
:func:`~gnnpar.sampling.kernels.sample_in_ranges` exactly as a homogeneous row is: uniformly
without replacement (all of them when there are at most ``fanout``; a relation whose
largest in-degree is at most its fan-out skips the draws), with the same counter-based
keys, salted by the relation.  The frontier is grouped by node type (the sampler's
groups, :attr:`~gnnpar.sampling.neighbor.DistNeighborSampler.num_groups`), so a relation costs
work on the rows of its destination type only; the sizes of the groups travel in the
hop's count exchange, and the new nodes per type and the edges per relation are read
with the hop's sizes: a typed hop reads the host exactly as often as a homogeneous one
(twice).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from gnnpar.comm import CommStats
from gnnpar.distributed import DistContext
from gnnpar.errors import ConfigError
from gnnpar.keys import C1, mix, signed
from gnnpar.sampling.kernels import sample_in_ranges
from gnnpar.sampling.neighbor import DistNeighborSampler, check_fanouts
from gnnpar.storage.graph import DistGraph
from gnnpar.typed import EdgeType, relation_key
from gnnpar.typed import TypedLayout as HeteroLayout

RelationFanouts = Sequence[int] | Mapping[EdgeType | str, Sequence[int]]
"""One list of fan-outs per hop for every relation, or a list per relation (keyed by
``(src, rel, dst)``, ``"src__rel__dst"`` or, when unique, the relation's name)."""


def resolve_relation(key: EdgeType | str, layout: HeteroLayout) -> EdgeType:
    """The relation ``key`` names: ``(src, rel, dst)``, ``"src__rel__dst"`` or a unique name."""
    rels = list(layout.edge_types)
    if isinstance(key, tuple) and key in rels:
        return rels[rels.index(key)]
    by_name = [r for r in rels if relation_key(r) == key or r[1] == key]
    if len(by_name) != 1:
        raise ConfigError(f"{key!r} names {len(by_name)} relations of the graph, not one.",
                          field="fanouts", fix="name a relation as src__rel__dst, one of "
                          f"{', '.join(map(relation_key, rels))}.")
    return by_name[0]


def check_relation_fanouts(fanouts: RelationFanouts, layout: HeteroLayout) -> list[list[int]]:
    """Fan-outs ``[R][L]`` per relation and hop; raise :class:`ConfigError` naming the fix.

    A list applies to every relation; a mapping must give every relation a list of the
    same length (``0`` skips a relation at that hop).
    """
    rels = list(layout.edge_types)
    if not isinstance(fanouts, Mapping):
        hops = check_fanouts(list(fanouts))
        return [list(hops) for _ in rels]
    given: dict[EdgeType, list[int]] = {}
    for key, value in fanouts.items():
        rel = resolve_relation(key, layout)
        hops = list(value)
        if not hops or any(isinstance(k, bool) or not isinstance(k, int) or k < 0
                           for k in hops):
            raise ConfigError(f"relation {relation_key(rel)} has fan-outs {value!r}.",
                              field="fanouts", fix="give ints >= 0 per hop, e.g. [10, 5].")
        given[rel] = hops
    missing = [relation_key(r) for r in rels if r not in given]
    if missing:
        raise ConfigError(f"no fan-outs for {', '.join(missing)}.", field="fanouts",
                          fix="give every relation its fan-outs (0 to skip it), or one "
                          "list for all.")
    depth = {len(v) for v in given.values()}
    if len(depth) != 1:
        raise ConfigError(f"relations have fan-out lists of lengths {sorted(depth)}.",
                          field="fanouts", fix="give every relation one fan-out per hop.")
    return [given[r] for r in rels]


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


class DistHeteroNeighborSampler(DistNeighborSampler):
    """Multi-hop sampling of a typed graph with fan-outs per relation (collective).

    Args:
        graph: This rank's part of a typed partition.
        ctx: Distributed context.
        fanouts: Per hop, for every relation, or per relation (:data:`RelationFanouts`).
        replace: Sample with replacement.
        seed: Seed of the counter-based keys.
        stats: Byte counters (kind ``"sample"``).
        device: Where the adjacency and kernels live (default ``ctx.device``).

    Attributes:
        layout: The graph's types.
        relation_fanouts: ``[R][L]`` fan-outs per relation and hop.

    Example::

        sampler = DistHeteroNeighborSampler(graph, ctx, {"cites": [5, 5], "writes": [10, 5], ...})
        out = sampler.sample(seeds, batch_key=0)   # out.edge_type: relation of each edge
    """

    def __init__(self, graph: DistGraph, ctx: DistContext, fanouts: RelationFanouts,
                 replace: bool = False, seed: int = 0, stats: CommStats | None = None,
                 device: torch.device | None = None) -> None:
        book = graph.meta.types
        if book is None or graph.etype is None:
            raise ConfigError("the partition is of a homogeneous graph.", field="graph",
                              fix="use DistNeighborSampler, or partition a typed graph.")
        self.layout = book.layout
        self.relation_fanouts = check_relation_fanouts(fanouts, self.layout)
        self.device = torch.device(device) if device is not None else ctx.device
        super().__init__(graph, ctx, self._layout_columns(), replace, seed, stats, device)
        assert self.graph.etype is not None
        self._etype = self.graph.etype
        dst = self.layout.dst_types()
        self._into = [[r for r in range(len(dst)) if dst[r] == t]  # ascending relation ids
                      for t in range(len(self.layout.node_types))]
        rows = np.diff(graph.part.indptr)
        self._steps = int(rows.max()).bit_length() + 1 if rows.size else 1
        self._max_degree = graph.relation_max_degrees
        self.num_groups = len(self.layout.node_types)

    def _layout_columns(self) -> list[int]:
        """Set each hop's column runs per relation; return each hop's row width."""
        lay, fan = self.layout, self.relation_fanouts
        dst, num_types = lay.dst_types(), len(lay.node_types)
        self._offset: list[list[int]] = []
        self._col_rel: list[Tensor] = []
        widths = []
        for hop in range(len(fan[0]) if fan else 0):
            used = [0] * num_types
            offsets = []
            for r, f in enumerate(fan):
                offsets.append(used[dst[r]])
                used[dst[r]] += f[hop]
            width = max(1, *used)
            col_rel = torch.full((num_types, width), -1, dtype=torch.int64)
            for r, f in enumerate(fan):
                col_rel[dst[r], offsets[r]:offsets[r] + f[hop]] = r
            self._offset.append(offsets)
            self._col_rel.append(col_rel.to(self.device))
            widths.append(width)
        return widths

    def cap_fanouts(self, max_in_degree: int) -> None:
        """Narrow every relation's fan-outs to the graph's largest in-degree (same samples)."""
        if not self.replace:
            cap = max(1, int(max_in_degree))
            self.relation_fanouts = [[min(k, cap) for k in f] for f in self.relation_fanouts]
            self.fanouts = self._layout_columns()

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

    def _positions(self, local: Tensor, gids: Tensor, keys: Tensor, hop: int,
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
        pos = torch.full((n, self.fanouts[hop]), -1, dtype=torch.int64, device=dev)
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
                k = self.relation_fanouts[r][hop]
                if k:
                    col = self._offset[hop][r]
                    pos[a:first, col:col + k] = sample_in_ranges(
                        lo, hi - lo, mix(row_keys ^ signed((r + 1) * C1)), k, self.replace,
                        self._max_degree[r])
                lo = hi
        return pos

    def _edge_types(self, frontier: Tensor, pos: Tensor, hop: int) -> Tensor:
        """Relation of each kept entry: its column's, for its destination's type."""
        width = self.fanouts[hop]
        dst_type = self.graph.node_type(frontier).index_select(0, pos // width)
        return self._col_rel[hop][dst_type, pos % width]

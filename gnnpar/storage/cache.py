"""The feature store's cache of remote rows: which halo nodes, where each sits, their rows.

:class:`RowCache` holds the rows of the halo nodes that most owned nodes point to (the
in-edges stored in this rank's part: how often a one-hop sample can reach them), then,
with ``halo_hops > 1``, those that most stored halo nodes point to, up to a row count.
It is chosen once from the part's adjacency, on its device, and filled once by the
feature store's exchange (:meth:`gnnpar.storage.features.DistFeatureStore.fill_cache`);
lookups are one ``searchsorted`` on the device.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gnnpar.storage.graph import DistGraph


def _halo_scores(g: DistGraph) -> Tensor:
    """``[num_halo]`` how often each halo node is referenced (higher: more).

    By the in-edges of owned nodes it starts first, then by those of stored halo nodes
    (``halo_hops > 1``).
    """

    def refs(src: Tensor) -> Tensor:
        return torch.bincount(src[src >= g.num_owned] - g.num_owned, minlength=g.num_halo)

    n_owned_edges = int(g.indptr[g.num_owned])
    one_hop, deeper = refs(g.indices[:n_owned_edges]), refs(g.indices[n_owned_edges:])
    return one_hop * (int(deeper.max()) + 1) + deeper


def most_referenced_halo(graph: DistGraph, capacity: int,
                         types: tuple[int, ...] | None = None) -> Tensor:
    """Up to ``capacity`` halo ids, sorted, of the most referenced halo nodes.

    Ranked by the in-edges of owned nodes they start, then by those of stored halo nodes
    (``halo_hops > 1``); with ``types``, only halo nodes of those node types.
    """
    g = graph
    if capacity == 0 or g.num_halo == 0:
        return g.halo_gids[:0].clone()
    score = _halo_scores(g)
    if types is not None:  # only the held types' rows
        held = torch.isin(g.node_type(g.halo_gids),
                          torch.tensor(types, device=g.halo_gids.device))
        score = torch.where(held, score, -1)
        capacity = min(capacity, int(held.sum()))
    top = torch.argsort(score, descending=True, stable=True)[:capacity]
    return torch.sort(g.halo_gids[top]).values


def most_referenced_within(graph: DistGraph, budget_bytes: int,
                           row_bytes: list[int]) -> Tensor:
    """Sorted halo ids of the most referenced halo nodes whose rows fit ``budget_bytes``.

    Ranked as :func:`most_referenced_halo`, over the node types of a typed graph at once:
    ``row_bytes[t]`` is the size of a row of type ``t`` (0: no rows), so one budget
    serves every type, spent on the most referenced rows whatever their type.
    """
    g = graph
    if budget_bytes == 0 or g.num_halo == 0:
        return g.halo_gids[:0].clone()
    size = torch.tensor(row_bytes, device=g.halo_gids.device).index_select(
        0, g.node_type(g.halo_gids))
    score = torch.where(size > 0, _halo_scores(g), -1)
    top = torch.argsort(score, descending=True, stable=True)
    top = top[: int((score >= 0).sum())]
    fits = int((torch.cumsum(size.index_select(0, top), 0) <= budget_bytes).sum())
    return torch.sort(g.halo_gids[top[:fits]]).values


class RowCache:
    """Rows of chosen remote nodes, held on the compute device.

    Args:
        gids: ``[C]`` sorted global ids whose rows it holds (:func:`most_referenced_halo`).
        rows: Their rows, if already known (else :meth:`fill` brings them).

    Attributes:
        gids: ``[C]`` the ids.
        rows: ``{name: [C, ...]}`` their rows in ``gids`` order, ``None`` until
            :meth:`fill`.
    """

    def __init__(self, gids: Tensor, rows: dict[str, Tensor] | None = None) -> None:
        self.gids = gids
        self.rows = rows

    @property
    def filled(self) -> bool:
        """Whether :meth:`fill` has run."""
        return self.rows is not None

    def fill(self, rows: dict[str, Tensor]) -> None:
        """Hold ``rows`` (``[C, ...]`` each, in :attr:`gids` order; stored contiguous)."""
        self.rows = {n: r.contiguous() for n, r in rows.items()}

    def lookup(self, gids: Tensor) -> tuple[Tensor, Tensor]:
        """Whether each id's row is cached, and its slot (valid where cached); no host read."""
        cached = self.gids
        if cached.numel() == 0:
            return (torch.zeros(gids.numel(), dtype=torch.bool, device=gids.device),
                    torch.zeros_like(gids))
        slot = torch.searchsorted(cached, gids).clamp_(max=cached.numel() - 1)
        return cached[slot] == gids, slot

    def take(self, name: str, slots: Tensor) -> Tensor:
        """Rows of array ``name`` at cache ``slots`` (after :meth:`fill`)."""
        assert self.rows is not None, "the cache is read before it is filled"
        return self.rows[name].index_select(0, slots)

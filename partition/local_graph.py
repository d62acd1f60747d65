"""Renumbering into contiguous per-part id ranges, and one part's local graph with its halo.

After :func:`renumber`, part ``k`` owns the new global ids ``offsets[k] .. offsets[k+1]``,
its nodes kept in original-id order.  :func:`build_local_graph` then assembles what one
part stores (see :mod:`gnnpar.partition.format`): the in-edges of its owned nodes over
local ids, the halo, and the in-edges of halo nodes closer than ``halo_hops``.

Hops count along message direction: a node is ``h`` hops from the part when a path of
``h`` edges leads from it to an owned node.  The halo is every node within ``halo_hops``
hops that the part does not own; halo nodes within ``halo_hops - 1`` hops keep their full
in-edge list (``adj_complete``), so a ``halo_hops``-layer sampler or aggregation needs no
remote adjacency.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gnnpar.datasets.graph import unique_sorted
from gnnpar.partition.adjacency import InEdges, take_rows


@dataclass(frozen=True)
class Renumbering:
    """Map between original ids and new global ids.

    Attributes:
        offsets: int64 ``[K + 1]`` partition book.
        new_of_old: int64 ``[N]`` new global id of every original id.
        old_of_new: int64 ``[N]`` original id of every new global id.
    """

    offsets: np.ndarray
    new_of_old: np.ndarray
    old_of_new: np.ndarray

    @property
    def num_parts(self) -> int:
        """Number of parts ``K``."""
        return len(self.offsets) - 1

    def owned(self, part: int) -> np.ndarray:
        """Original ids of the nodes ``part`` owns, in local-id order (ascending)."""
        return self.old_of_new[self.offsets[part]:self.offsets[part + 1]]


def renumber(part: np.ndarray, num_parts: int) -> Renumbering:
    """Number nodes part by part, in original-id order within each part.

    Args:
        part: int64 ``[N]`` part of every node, in ``[0, K)``.
        num_parts: ``K``.
    """
    offsets = np.zeros(num_parts + 1, dtype=np.int64)
    np.cumsum(np.bincount(part, minlength=num_parts), out=offsets[1:])
    # A stable sort by part keeps original-id order within each part; 16-bit keys sort
    # by radix in linear time.
    key = part.astype(np.uint16) if num_parts <= np.iinfo(np.uint16).max else part
    old_of_new = np.argsort(key, kind="stable").astype(np.int64, copy=False)
    new_of_old = np.empty_like(old_of_new)
    new_of_old[old_of_new] = np.arange(len(part), dtype=np.int64)
    return Renumbering(offsets, new_of_old, old_of_new)


@dataclass(frozen=True)
class LocalGraph:
    """One part's adjacency over local ids (owned first, then halo).

    Attributes:
        halo_gids: int64 ``[n_halo]`` sorted new global ids of halo nodes.
        indptr: int64 ``[n_owned + n_halo + 1]`` in-edge CSC over local ids.
        indices: int64 ``[nnz]`` source local ids.
        e_id: int64 ``[nnz]`` the dataset edge id of each in-edge.
        adj_complete: bool ``[n_owned + n_halo]`` whether a node's in-edges are all stored.
        cut_edges: In-edges of owned nodes whose source another part owns.
        owned_edges: In-edges of owned nodes.
    """

    halo_gids: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    e_id: np.ndarray
    adj_complete: np.ndarray
    cut_edges: int
    owned_edges: int


def build_local_graph(in_edges: InEdges, ren: Renumbering, part: int,
                      halo_hops: int = 1) -> LocalGraph:
    """Assemble part ``part``'s local CSC and halo.

    Args:
        in_edges: The source graph grouped by destination (original ids).
        ren: The renumbering.
        part: Part id ``k``.
        halo_hops: Halo depth, ``>= 1``.

    Returns:
        The part's local graph.
    """
    lo, hi = int(ren.offsets[part]), int(ren.offsets[part + 1])
    n_owned, n = hi - lo, len(ren.new_of_old)
    owned_ptr, indices, e_id = _rows_in_new_ids(in_edges, ren, ren.owned(part))
    owned_edges = len(indices)
    # Shift in place: owned sources now hold their local ids; the others (negative or
    # >= n_owned, i.e. huge as unsigned) belong to other parts.
    indices -= lo
    outside = indices.view(np.uint64) >= n_owned
    cut_edges = int(np.count_nonzero(outside))
    frontier = _distinct(indices[outside] + lo, n)
    halo = frontier
    # In-edges of the halo nodes within ``halo_hops - 1`` hops, level by level.
    levels: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    in_halo = np.zeros(n if halo_hops > 1 else 0, dtype=bool)
    if halo_hops > 1:
        in_halo[halo] = True
    for _ in range(halo_hops - 1):
        if not len(frontier):
            break
        ptr, src, ids = _rows_in_new_ids(in_edges, ren, ren.old_of_new[frontier])
        levels.append((frontier, ptr, src, ids))
        reached = _distinct(src[(src < lo) | (src >= hi)], n)
        frontier = reached[~in_halo[reached]]
        in_halo[frontier] = True
        halo = np.flatnonzero(in_halo)
    n_local = n_owned + len(halo)
    complete = np.zeros(n_local, dtype=bool)
    complete[:n_owned] = True
    degree = np.zeros(n_local, dtype=np.int64)
    degree[:n_owned] = np.diff(owned_ptr)
    if levels:
        # Stored rows of complete halo nodes, reordered into local-id order.
        rows = np.concatenate([lv[0] for lv in levels])
        cat_ptr = _concat_csc([lv[1] for lv in levels])
        cat_src = np.concatenate([lv[2] for lv in levels])
        pos = n_owned + np.searchsorted(halo, rows)
        order = np.argsort(pos, kind="stable")
        halo_ptr, halo_src, halo_ids = take_rows(cat_ptr, cat_src, order,
                                                 np.concatenate([lv[3] for lv in levels]))
        assert halo_ids is not None
        complete[pos] = True
        degree[pos[order]] = np.diff(halo_ptr)
        indices = np.concatenate([indices, halo_src - lo])
        e_id = np.concatenate([e_id, halo_ids])
        outside = indices.view(np.uint64) >= n_owned
    indptr = np.zeros(n_local + 1, dtype=np.int64)
    np.cumsum(degree, out=indptr[1:])
    # Halo sources: local id n_owned + rank in ``halo``, through a lookup table over all
    # N ids of which only the pages holding halo ids are ever touched.
    lookup = np.empty(n, dtype=np.int64)
    lookup[halo] = np.arange(n_owned, n_local, dtype=np.int64)
    indices[outside] = lookup[indices[outside] + lo]
    return LocalGraph(halo_gids=halo, indptr=indptr, indices=indices, e_id=e_id,
                      adj_complete=complete,
                      cut_edges=cut_edges, owned_edges=owned_edges)


def _rows_in_new_ids(in_edges: InEdges, ren: Renumbering,
                     nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """In-edges of original ids ``nodes``: pointer, sources (new global ids), edge ids."""
    ptr, src, ids = in_edges.rows(nodes)
    assert ids is not None, "in-edges are grouped with their edge ids"
    return ptr, ren.new_of_old[src], ids


def _concat_csc(ptrs: list[np.ndarray]) -> np.ndarray:
    """Row pointer of the row-wise concatenation of several CSCs."""
    counts = np.concatenate([np.diff(p) for p in ptrs])
    out = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def _distinct(ids: np.ndarray, n: int) -> np.ndarray:
    """Sorted distinct values of ``ids`` in ``[0, n)``: a sort when few, else a bitmap."""
    if len(ids) * 64 < n:
        return unique_sorted(ids)
    mark = np.zeros(n, dtype=bool)
    mark[ids] = True
    return np.flatnonzero(mark)

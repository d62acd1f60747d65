"""The sampler's tensor kernels: which in-edges of each node to keep, how new nodes number.

Pure functions of tensors, with no distributed state;
:class:`~gnnpar.sampling.neighbor.DistNeighborSampler` runs them per hop on the rows it
samples, and :class:`~gnnpar.sampling.typed.DistTypedNeighborSampler` per relation:

* :func:`sample_positions` / :func:`sample_neighbors` / :func:`sample_in_ranges` — up to
  ``k`` in-edges of each node of a CSC graph (or of each range of positions), drawn from
  the node's random key;
* :func:`relabel` — the batch-local numbering of a hop's new nodes, by one stable sort
  of the batch's ids and the sampled ones;
* :func:`edge_keys` — sorted keys of edges, the sampler's ``exclude``.

Each is a fixed sequence of whole-tensor torch operations with no Python loop over nodes
or edges and no data-dependent shape, so it runs unchanged on a GPU without
synchronising (:func:`relabel` reads its sizes in one host read): a node of in-degree
``d <= k`` keeps all its in-edges; one with ``d > k`` keeps ``k`` positions drawn by
Floyd's algorithm (``k`` rounds, each ``O(k)`` comparisons, independent of ``d``); with
replacement, ``k`` positions are drawn directly.  On a CPU (not an accelerator's
stand-in) the positions and the numbering of new nodes run as compiled kernels instead
(:mod:`gnnpar.sampling.compiled`, numba, when installed: one pass per row or entry, the
same values; 2.2x the torch kernels' edges per CPU second on one rank);
``GNNPAR_KERNELS=torch`` keeps the torch ones (:func:`~gnnpar.jit.compiled_kernels`).
``benchmarks/bench_sampling.py`` measures both against DGL's sampler.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from gnnpar.errors import ConfigError
from gnnpar.jit import compiled_kernels
from gnnpar.keys import GOLDEN, MASK62, mix, signed
from gnnpar.ops import count
from gnnpar.sampling import compiled


def source_ids(pos: Tensor, indices: Tensor, gids: Tensor) -> Tensor:
    """``[n, k]`` global ids ``gids[indices[pos]]`` of sampled positions, ``-1`` where none.

    Compiled in one pass on a CPU (:func:`compiled_kernels`).
    """
    if compiled_kernels(pos.device):
        return compiled.gather_sources(pos, indices, gids)
    at = pos.clamp(min=0).view(-1)
    src = indices.index_select(0, at) if indices.numel() else at
    return torch.where(pos >= 0, gids.index_select(0, src).view_as(pos), -1)


def part_source_ids(pos: Tensor, indices: Tensor, first: int, num_owned: int,
                    halo_gids: Tensor) -> Tensor:
    """:func:`source_ids` of a part whose global ids are not laid out in one table.

    Local id ``s`` of the part is global id ``first + s`` when ``s < num_owned``, else
    ``halo_gids[s - num_owned]`` (the layout of :attr:`DistGraph.local_gids`), so a
    co-located peer's part needs no table of its own.
    """
    if compiled_kernels(pos.device):
        return compiled.gather_sources_split(pos, indices, first, num_owned, halo_gids)
    at = pos.clamp(min=0).view(-1)
    src = (indices.index_select(0, at) if indices.numel() else at).view_as(pos)
    halo = (halo_gids.index_select(0, (src - num_owned).clamp(min=0).view(-1)).view_as(pos)
            if halo_gids.numel() else src)
    return torch.where(pos >= 0, torch.where(src < num_owned, src + first, halo), -1)


def sample_neighbors(indptr: Tensor, indices: Tensor, nodes: Tensor, keys: Tensor,
                     fanout: int, replace: bool = False) -> Tensor:
    """Sample up to ``fanout`` in-neighbours of each node of a CSC graph.

    The sources at the positions :func:`sample_positions` draws.

    Args:
        indptr: ``[V + 1]`` CSC row pointer.
        indices: ``[nnz]`` source of each in-edge.
        nodes: ``[n]`` nodes to sample (indices into ``indptr``).
        keys: ``[n]`` int64 random key of each node; equal keys give equal samples.
        fanout: Neighbours per node ``k``.
        replace: Draw with replacement.

    Returns:
        ``[n, k]`` the sampled sources of each node, padded with ``-1``.
    """
    pos = sample_positions(indptr, nodes, keys, fanout, replace)
    if not indices.numel():
        return pos
    nbr = indices.index_select(0, pos.clamp(min=0).view(-1)).view_as(pos)
    return torch.where(pos >= 0, nbr, -1)


def sample_positions(indptr: Tensor, nodes: Tensor, keys: Tensor, fanout: int,
                     replace: bool = False) -> Tensor:
    """Sample up to ``fanout`` in-edges of each node of a CSC graph: their positions.

    Args:
        indptr: ``[V + 1]`` CSC row pointer.
        nodes: ``[n]`` nodes to sample (indices into ``indptr``).
        keys: ``[n]`` int64 random key of each node; equal keys give equal samples.
        fanout: Neighbours per node ``k``.
        replace: Draw with replacement (``k`` draws for every node with an in-edge).

    Returns:
        ``[n, k]`` positions in the CSC's edge arrays of each node's sampled in-edges,
        padded with ``-1``: ``min(k, d)`` of them without replacement (all in-edges when
        ``d <= k``, else a uniform ``k``-subset drawn by Floyd's algorithm), ``k`` with
        replacement (none when ``d = 0``).
    """
    start = indptr.index_select(0, nodes)
    return sample_in_ranges(start, indptr.index_select(0, nodes + 1) - start, keys, fanout,
                            replace)


def sample_in_ranges(start: Tensor, deg: Tensor, keys: Tensor, fanout: int,
                     replace: bool = False, max_degree: int | None = None) -> Tensor:
    """Sample up to ``fanout`` positions of each range ``start .. start + deg``.

    :func:`sample_positions` on ranges given directly (e.g. one relation's in-edges of
    each node, a sub-range of its row).  ``max_degree``, when known on the host and at
    most ``fanout``, skips the draws: every range is kept whole (the same result).

    Returns:
        ``[n, k]`` positions, padded with ``-1``, as :func:`sample_positions`.
    """
    if compiled_kernels(keys.device):
        return compiled.sample_in_ranges(start, deg, keys, fanout, replace)
    dev = keys.device
    n, k = start.numel(), fanout
    slots = torch.arange(k, device=dev)
    draws = mix(keys[:, None] + (slots + 1) * signed(GOLDEN)) & MASK62
    if not replace and max_degree is not None and max_degree <= k:
        return torch.where(slots < deg[:, None], start[:, None] + slots, -1)
    if replace:
        pos = draws % deg.clamp(min=1)[:, None]
        valid = (deg > 0)[:, None].expand(n, k)
    else:
        # Floyd: round j draws r in [0, d - k + j]; a repeat is replaced by d - k + j.
        pick = torch.empty((n, k), dtype=torch.int64, device=dev)
        for j in range(k):
            top = deg - k + j
            r = draws[:, j] % (top.clamp(min=0) + 1)
            seen = (pick[:, :j] == r[:, None]).any(1)
            pick[:, j] = torch.where(seen, top, r)
        pos = torch.where((deg <= k)[:, None], slots, pick)
        valid = slots < deg.clamp(max=k)[:, None]
    return torch.where(valid, start[:, None] + pos, -1)


class Relabelled(NamedTuple):
    """What :func:`relabel` returns.

    Attributes:
        new: The new global ids (this rank's own first, each group in order of first
            appearance).
        src: The batch-local id of each kept entry of ``nbr``.
        pos: The flat positions of the kept entries in ``nbr`` (ascending).
        num_owned: How many of the new nodes are this rank's own (all of them when
            ``owned`` is ``None``).
        group_new: Per group (``groups``), how many of the new nodes are in it.
        group_owned: Per group, how many of those are this rank's own.
        extra: The values of ``extra``, read with the sizes.
    """

    new: Tensor
    src: Tensor
    pos: Tensor
    num_owned: int
    group_new: list[int]
    group_owned: list[int]
    extra: list[int]


def relabel(nbr: Tensor, node: Tensor, owned: Tensor | None = None,
            num_ids: int = 1 << 63, groups: Callable[[Tensor], Tensor | None] | None = None,
            num_groups: int = 0, extra: Tensor | None = None) -> Relabelled:
    """Number the new nodes of ``nbr`` after the batch's nodes ``node``.

    One stable sort of the batch's ids and the sampled ones together: equal ids end up
    side by side, the batch's own copy (if any) first and the sampled ones in order of
    appearance, so the head of each run tells whether the id is new and where it first
    appears.  Memory and work grow with the batch, ``O((B + E) log(B + E))``, not with
    the graph: no table over its ids (a table indexed by global id, besides its 4 bytes
    per graph node, is slower from about 10M nodes on, once it leaves the CPU caches).
    The sizes (kept entries, new nodes, own new nodes, per-group counts, ``extra``) are
    read on the host in **one** read: the only host synchronisation.

    Args:
        nbr: ``[n, k]`` sampled global ids, ``-1`` for no edge.
        node: ``[B]`` distinct global ids already in the batch (batch-local ids
            ``0 .. B - 1``); the new ones are numbered from ``B``.
        owned: ``[n, k]`` whether each id is this rank's own (it then comes first among
            the new nodes); ``None``: first-appearance order only.
        num_ids: Ids are below this (the graph's node count); below ``2**31`` the sort
            and the bookkeeping run on int32, twice as fast on a CPU.
        groups: Maps int64 global ids to a group in ``[0, num_groups)`` (node types):
            the new nodes are also counted per group.
        num_groups: Number of groups.
        extra: int64 device values to read in the same host read (e.g. edges per
            relation).
    """
    if compiled_kernels(nbr.device):
        return _relabel_compiled(nbr, node, owned, groups, num_groups, extra)
    flat = nbr.reshape(-1)
    b, e, dev = node.numel(), flat.numel(), flat.device
    dtype = torch.int32 if num_ids <= 2**31 else torch.int64
    valid = flat >= 0
    ids, at = torch.sort(torch.cat([node, flat]).to(dtype), stable=True)  # -1 sorts first
    head = torch.ones(b + e, dtype=torch.bool, device=dev)  # the first entry of each run
    torch.ne(ids[1:], ids[:-1], out=head[1:])
    new_head = head & (at >= b) & (ids >= 0)  # a run without a batch node: a new id
    own = new_head
    if owned is not None:
        mine = torch.cat([torch.zeros(b, dtype=torch.bool, device=dev),
                          owned.reshape(-1)]).index_select(0, at)
        own = new_head & mine
    sizes = [torch.stack([valid.sum(), new_head.sum(), own.sum()])]
    if groups is not None:
        group = groups(ids.long().clamp(min=0))
        assert group is not None
        for flags in (new_head, own):
            sizes.append(torch.zeros(num_groups, dtype=torch.int64, device=dev).index_add_(
                0, group, flags.long()))
    if extra is not None:
        sizes.append(extra.to(torch.int64))
    read = torch.cat(sizes).tolist()  # the one host read
    n_valid, n_new, n_own = read[:3]
    g = num_groups if groups is not None else 0
    group_new, group_owned, rest = read[3:3 + g], read[3 + g:3 + 2 * g], read[3 + 2 * g:]
    heads = torch.nonzero_static(new_head, size=n_new).squeeze(1)
    first = at.index_select(0, heads) - b  # where each new id first appears in nbr
    if owned is not None:  # own nodes first, first-appearance order within each group
        first += (~mine.index_select(0, heads)) * e
    numbered = heads.index_select(0, torch.argsort(first.to(dtype)))
    # Each run's batch-local id, set at its head (a batch node's is its position in
    # node), then read by every entry of the run and put back in nbr's order.
    lid = at.to(dtype, copy=True)
    lid.index_copy_(0, numbered, torch.arange(b, b + n_new, dtype=dtype, device=dev))
    run = torch.where(head, torch.arange(b + e, dtype=dtype, device=dev), 0).cummax(0).values
    local = torch.empty_like(lid).index_copy_(0, at, lid.index_select(0, run))
    kept = torch.nonzero_static(valid, size=n_valid).squeeze(1)
    new = ids.index_select(0, numbered).long()
    return Relabelled(new, local[b:].index_select(0, kept).long(), kept, int(n_own),
                      group_new, group_owned, rest)


def _relabel_compiled(nbr: Tensor, node: Tensor, owned: Tensor | None,
                      groups: Callable[[Tensor], Tensor | None] | None, num_groups: int,
                      extra: Tensor | None) -> Relabelled:
    """:func:`relabel` by the compiled CPU kernel (the same result)."""
    new, src, pos, n_own = compiled.relabel(nbr, node, owned)
    group_new: list[int] = []
    group_owned: list[int] = []
    if groups is not None:
        group = groups(new)
        assert group is not None
        group_new = count(group, num_groups).tolist()
        group_owned = count(group[:n_own], num_groups).tolist()
    rest = extra.tolist() if extra is not None else []
    return Relabelled(new, src, pos, n_own, group_new, group_owned, rest)


def edge_keys(src: Tensor, dst: Tensor, num_nodes: int, reverse: bool) -> Tensor:
    """Sorted int64 keys ``src * N + dst`` of edges, for the sampler's ``exclude``.

    With ``reverse``, also the keys of ``dst -> src``.
    """
    if num_nodes * num_nodes >= 1 << 63:
        raise ConfigError(f"{num_nodes} nodes overflow int64 edge keys.", field="exclude",
                          fix="exclude='none' (or fewer than 3.03 billion nodes).")
    keys = [src * num_nodes + dst] + ([dst * num_nodes + src] if reverse else [])
    return torch.sort(torch.cat(keys)).values

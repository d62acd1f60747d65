"""Distributed uniform neighbour sampling over in-edges, in lockstep collectives.

:class:`DistNeighborSampler` grows a sampled computation graph hop by hop from a batch of
seed nodes.  Per hop, frontier nodes whose in-edges this rank stores (owned nodes, and
halo nodes with a complete adjacency when the partition has ``halo_hops > 1``) are
sampled locally; the others are sent to their owners in **one** ``all_to_all`` and sampled
there, each rank serving its peers' requests in the same step as its own, and the sampled
neighbours come back in a second exchange (counts, then neighbour ids).  Every rank runs
the same collectives per hop whether or not it has anything to send, so ranks stay in
lockstep: an all-gather of the request counts, then — unless no rank requests anything —
the requests, reply counts and neighbours; rows stored here are sampled while the
requests travel.  New nodes are numbered in first-appearance order by scatters into a
per-sampler table indexed by global id (4 bytes per graph node, reset after each batch),
not by a sort.  The result, :class:`SamplerOutput`, uses PyG's ``NeighborLoader`` layout
(seeds first, then the new nodes of each hop; edges hop by hop), so ``trim_to_layer``
works on it.

Randomness is *counter-based*: the random key of an edge is a hash (SplitMix64) of the
sampler seed, the batch key, the hop, the requesting rank, the destination's global id
and the edge's position in its in-edge list.  Sampling is thus a pure function of those
values — deterministic for a seed and world size, independent of which rank does the work
and of thread timing, and with no generator state to checkpoint: a loader resumes by
replaying its batch keys.

Implementation trade-off (vectorised torch, no compiled extension).  Every kernel is a
fixed sequence of whole-tensor torch operations, with no Python loop over nodes or edges,
so the same code runs on CPU and, unchanged, on a GPU where the sampler's tensors live
there; it needs no dependency beyond torch.  Per node of in-degree ``d`` and fan-out
``k`` without replacement:

* ``d <= k``: all in-edges are taken (no random numbers drawn);
* ``k < d <= hub_factor * k``: random top-k — one int64 key per edge,
  ``(segment << 31) | hash``, one radix ``sort`` for the whole hop, the first ``k`` of each
  segment kept: ``O(sum d)`` work;
* ``d > hub_factor * k`` (hubs): Floyd's algorithm, vectorised across nodes — ``k``
  rounds of ``O(k)`` comparisons per node, independent of ``d``.

With replacement, ``k`` positions per node are drawn directly.  The price of staying in
torch is per-op overhead (tens of operations per hop) and ``O(sum d)`` memory traffic for
mid-degree nodes, where a compiled per-node loop (pyg-lib, DGL, or numba) would do
``O(k)`` work per node; the benefit is one code path for every device, no JIT warm-up
and no extra dependency.  ``benchmarks/bench_sampling.py`` measures the result.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from gnnpar.comm import (
    CommStats,
    all_gather_ints,
    all_to_all_v,
    bucket_by_owner,
    start_all_to_all_v,
)
from gnnpar.distributed import DistContext
from gnnpar.errors import ConfigError
from gnnpar.graph import DistGraph

_MASK31 = (1 << 31) - 1
_MASK62 = (1 << 62) - 1
_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_C1 = 0xBF58476D1CE4E5B9
_C2 = 0x94D049BB133111EB


def _signed(v: int) -> int:
    """Reinterpret a 64-bit unsigned integer as the int64 torch stores."""
    v &= _M64
    return v - (1 << 64) if v >= 1 << 63 else v


def mix_int(*values: int) -> int:
    """SplitMix64 hash of a sequence of Python integers (for batch and hop keys)."""
    z = 0
    for v in values:
        z = (z ^ (v & _M64)) + _GOLDEN & _M64
        z = (z ^ (z >> 30)) * _C1 & _M64
        z = (z ^ (z >> 27)) * _C2 & _M64
        z ^= z >> 31
    return _signed(z)


def mix(z: Tensor) -> Tensor:
    """SplitMix64 finaliser on an int64 tensor (wrapping arithmetic, logical shifts).

    Args:
        z: int64 tensor of any shape.

    Returns:
        int64 tensor of the same shape with well-mixed bits.
    """
    z = z * _signed(_C1)
    z = z ^ ((z >> 30) & ((1 << 34) - 1))
    z = z * _signed(_C2)
    return z ^ ((z >> 31) & ((1 << 33) - 1))


def _cumsum0(x: Tensor) -> Tensor:
    """Exclusive prefix sum with a leading zero: ``[n] -> [n + 1]``."""
    out = x.new_zeros(x.numel() + 1)
    torch.cumsum(x, 0, out=out[1:])
    return out


def _expand(lengths: Tensor) -> tuple[Tensor, Tensor]:
    """Segment id and position within the segment of every element of the segments.

    Returns:
        ``(seg, within)``, both ``[sum(lengths)]``.
    """
    total = int(lengths.sum())
    seg = torch.repeat_interleave(
        torch.arange(lengths.numel(), device=lengths.device), lengths, output_size=total
    )
    within = torch.arange(total, device=lengths.device) - torch.repeat_interleave(
        _cumsum0(lengths)[:-1], lengths, output_size=total)
    return seg, within


def _padded(count: Tensor, nbr: Tensor, width: int) -> Tensor:
    """Segments ``nbr`` of lengths ``count <= width`` as rows of a -1-padded table.

    Shapes:
        count: ``[n]``; nbr: ``[sum(count)]``; returns ``[n, width]``.
    """
    filled = torch.arange(width, device=nbr.device) < count[:, None]
    out = torch.full((count.numel(), width), -1, dtype=nbr.dtype, device=nbr.device)
    return out.masked_scatter_(filled, nbr)


def sample_neighbors(
    indptr: Tensor,
    indices: Tensor,
    nodes: Tensor,
    keys: Tensor,
    fanout: int,
    replace: bool = False,
    hub_factor: int = 4,
) -> tuple[Tensor, Tensor]:
    """Sample up to ``fanout`` in-neighbours of each node of a CSC graph.

    Args:
        indptr: ``[V + 1]`` CSC row pointer.
        indices: ``[nnz]`` source of each in-edge.
        nodes: ``[n]`` nodes to sample (indices into ``indptr``).
        keys: ``[n]`` int64 random key of each node; equal keys give equal samples.
        fanout: Neighbours per node ``k``.
        replace: Draw with replacement (``k`` draws for every node with an in-edge).
        hub_factor: Nodes with more than ``hub_factor * k`` in-edges use Floyd's
            algorithm instead of the sort of random keys.

    Returns:
        ``(count, nbr)``: ``count[i]`` neighbours sampled for ``nodes[i]`` (``min(k, d)``
        without replacement) and the neighbours, grouped by node in input order.

    Shapes:
        count: ``[n]``; nbr: ``[sum(count)]``.
    """
    dev = keys.device
    start = indptr.index_select(0, nodes)
    deg = indptr.index_select(0, nodes + 1) - start
    if replace:
        has = torch.nonzero(deg > 0).squeeze(1)
        draws = torch.arange(fanout, device=dev) * _signed(_GOLDEN)
        pos = (mix(keys.index_select(0, has)[:, None] + draws) & _MASK62) % deg[has, None]
        count = torch.where(deg > 0, fanout, 0)
        return count, indices.index_select(0, (start[has, None] + pos).view(-1))
    count = deg.clamp(max=fanout)
    ptr = _cumsum0(count)
    total = int(ptr[-1])
    # Output slot o of node i reads in-edge start[i] + (o - ptr[i]): right as it stands
    # for nodes with d <= k (all in-edges); the others overwrite their slots below.
    src = torch.repeat_interleave(start - ptr[:-1], count, output_size=total)
    src += torch.arange(total, device=dev)
    slots = torch.arange(fanout, device=dev)
    # Mid-degree nodes: keep the k smallest random keys of each in-edge list (one sort).
    hub = deg > max(hub_factor, 1) * fanout
    sel = torch.nonzero((deg > fanout) & ~hub).squeeze(1)
    if sel.numel():
        d = deg.index_select(0, sel)
        seg, within = _expand(d)
        node_key = torch.repeat_interleave(keys.index_select(0, sel), d, output_size=seg.numel())
        edge_key = mix(node_key + within * _signed(_GOLDEN))
        perm = torch.sort((seg << 31) | ((edge_key >> 33) & _MASK31), stable=True).indices
        # Sorting keeps segments in place, so the first k sorted slots of segment s are
        # its k smallest keys; perm minus the segment start is the in-edge position.
        seg_start = _cumsum0(d)[:-1, None]
        first_k = perm.index_select(0, (seg_start + slots).view(-1)).view(-1, fanout)
        src[(ptr.index_select(0, sel)[:, None] + slots).view(-1)] = (
            start.index_select(0, sel)[:, None] - seg_start + first_k).view(-1)
    # Hubs: Floyd's algorithm, k rounds independent of the degree.
    sel = torch.nonzero(hub).squeeze(1)
    if sel.numel():
        d = deg.index_select(0, sel)
        draws = mix(keys.index_select(0, sel)[:, None] + (slots + 1) * _signed(_GOLDEN)) & _MASK62
        pick = torch.empty((sel.numel(), fanout), dtype=torch.int64, device=dev)
        for j in range(fanout):
            top = d - fanout + j
            r = draws[:, j] % (top + 1)
            seen = (pick[:, :j] == r[:, None]).any(1)
            pick[:, j] = torch.where(seen, top, r)
        src[(ptr.index_select(0, sel)[:, None] + slots).view(-1)] = (
            start.index_select(0, sel)[:, None] + pick).view(-1)
    return count, indices.index_select(0, src)


def relabel(n_id: Tensor, src: Tensor, table: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Append the new nodes of ``src`` to ``n_id`` in first-appearance order.

    Works by scatters into a lookup table indexed by global id (``O(E)``, no sort).

    Args:
        n_id: ``[N]`` distinct global ids already in the batch.
        src: ``[E]`` global ids of sampled neighbours.
        table: int32 or int64 lookup table, longer than the largest id, holding ``i``
            at ``n_id[i]`` and ``-1`` elsewhere; updated in place to map the new nodes
            too (the caller resets it).  Built here when ``None``.

    Returns:
        ``(new, src_local)``: the global ids not yet in ``n_id``, in order of first
        appearance in ``src``, and the batch-local id of every entry of ``src`` (an index
        into ``cat([n_id, new])``).
    """
    n_old, dev = n_id.numel(), n_id.device
    if table is None:
        size = 1 + max(int(n_id.max()) if n_old else 0, int(src.max()) if src.numel() else 0)
        table = torch.full((size,), -1, dtype=torch.int64, device=dev)
        table[n_id] = torch.arange(n_old, device=dev)
    unseen = torch.nonzero(table.index_select(0, src) < 0).squeeze(1)
    cand = src.index_select(0, unseen)
    # First appearance of each unseen id: the smallest position that scatters to it.
    table.index_fill_(0, cand, src.numel())
    table.scatter_reduce_(0, cand, unseen.to(table.dtype), "amin")
    first = unseen[table.index_select(0, cand) == unseen]
    new = src.index_select(0, first)
    table[new] = torch.arange(n_old, n_old + new.numel(), dtype=table.dtype, device=dev)
    return new, table.index_select(0, src).long()


@dataclass
class SamplerOutput:
    """One sampled computation graph, in PyG ``NeighborLoader`` order.

    Attributes:
        node: ``[N]`` global ids of the batch's nodes: the seeds first, then the nodes
            first reached at hop 1, hop 2, ... (each in order of first appearance).
        row: ``[E]`` batch-local source (sampled neighbour) of each edge.
        col: ``[E]`` batch-local destination (the node whose in-edges were sampled).
        batch_size: Number of seeds (the first ``batch_size`` entries of ``node``).
        num_sampled_nodes: ``[L + 1]`` nodes added by each hop, seeds first.
        num_sampled_edges: ``[L]`` edges sampled at each hop; edges are stored hop by hop,
            so hop ``h``'s edges point into nodes added before hop ``h``.

    Example::

        out = sampler.sample(seeds, batch_key=0)
        x = features.gather(out.node)
        logits = model(x, out.edge_index)[: out.batch_size]
    """

    node: Tensor
    row: Tensor
    col: Tensor
    batch_size: int
    num_sampled_nodes: list[int]
    num_sampled_edges: list[int]

    @property
    def edge_index(self) -> Tensor:
        """``[2, E]`` batch-local edges, source -> destination (``stack([row, col])``)."""
        return torch.stack([self.row, self.col])


def check_fanouts(fanouts: list[int] | tuple[int, ...]) -> list[int]:
    """Validate fan-outs (a non-empty list of positive ints); raise :class:`ConfigError`."""
    if not isinstance(fanouts, (list, tuple)) or not fanouts:
        raise ConfigError(f"got {fanouts!r}; need a non-empty list of neighbours per hop.",
                          field="fanouts", fix="pass e.g. fanouts=[15, 10].")
    for i, k in enumerate(fanouts):
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"hop {i} has fan-out {k!r}; every fan-out must be an int >= 1.",
                              field="fanouts", fix="pass positive integers, e.g. [15, 10].")
    return list(fanouts)


class DistNeighborSampler:
    """Multi-hop uniform in-neighbour sampling across the parts of a :class:`DistGraph`.

    Every method that takes a batch is collective: all ranks of ``ctx`` call it the same
    number of times, in the same order (a rank without seeds passes an empty tensor).
    A sampler works on one batch at a time (its slot table holds the batch's nodes), so
    concurrent threads use one sampler each.

    Args:
        graph: This rank's part.
        ctx: Distributed context (its group carries the exchanges).
        fanouts: Neighbours to sample per hop, e.g. ``[15, 10]``; all ``>= 1``.
        replace: Sample with replacement.
        seed: Seed of the counter-based random keys.
        stats: Counters that the exchanges are added to (kind ``"sample"``).
        device: Where the adjacency and the sampling kernels live (default
            ``ctx.device``).

    Example::

        sampler = gnnpar.DistNeighborSampler(graph, ctx, [15, 10], seed=0)
        seeds = torch.arange(graph.first_gid, graph.first_gid + 64)
        out = sampler.sample(seeds, batch_key=0)       # collective
        out.node, out.edge_index, out.num_sampled_nodes
    """

    def __init__(
        self,
        graph: DistGraph,
        ctx: DistContext,
        fanouts: list[int],
        replace: bool = False,
        seed: int = 0,
        stats: CommStats | None = None,
        device: torch.device | None = None,
    ) -> None:
        self.fanouts = check_fanouts(fanouts)
        self.ctx = ctx
        self.replace = bool(replace)
        self.seed = int(seed)
        self.stats = stats
        self.device = torch.device(device) if device is not None else ctx.device
        self.graph = graph.to(self.device)
        # Global id of every local id: one gather per hop instead of a masked lookup.
        self._gid_of_local = self.graph.local_to_global(
            torch.arange(graph.num_owned + graph.num_halo, device=self.device))
        self._halo_rows = bool(graph.adj_complete[graph.num_owned:].any())
        # Batch-local id of every global id in the current batch, -1 elsewhere: relabel
        # by scatters instead of a sort, for 4 bytes per graph node; reset after each batch.
        n = graph.meta.num_nodes
        self._slot = torch.full((n,), -1, dtype=torch.int32 if n < 2**31 else torch.int64,
                                device=self.device)

    def _sampleable_here(self, gids: Tensor) -> Tensor:
        """Local id of each global id whose in-edges this rank stores, else ``-1``."""
        if not self._halo_rows:  # halo_hops = 1: only owned nodes
            local = gids - self.graph.first_gid
            return torch.where((local >= 0) & (local < self.graph.num_owned), local, -1)
        local = self.graph.global_to_local(gids)
        complete = self.graph.adj_complete[local.clamp(min=0)]
        return torch.where(complete, local, -1)

    def _sample_rows(self, local: Tensor, gids: Tensor, hop_key: Tensor,
                     fanout: int) -> tuple[Tensor, Tensor]:
        """``(count, nbr)`` of rows ``local`` (global ids ``gids``); nbr as global ids."""
        keys = mix(gids * _signed(_C2) + hop_key)
        count, nbr = sample_neighbors(self.graph.indptr, self.graph.indices, local, keys,
                                      fanout, self.replace)
        return count, self._gid_of_local.index_select(0, nbr)

    def _hop(self, frontier: Tensor, fanout: int, hop_keys: Tensor) -> tuple[Tensor, Tensor]:
        """Sample one hop; return ``(count, nbr)`` in frontier order (nbr as global ids).

        Four collectives: all-gather of request counts, requests, reply counts, sampled
        neighbours (only the first when no rank requests anything).  Rows stored here are sampled
        while the requests travel, and put in place while the neighbours travel.
        """
        ctx, world, dev = self.ctx, self.ctx.world_size, self.device
        local = self._sampleable_here(frontier)
        here = torch.nonzero(local >= 0).squeeze(1)
        away = torch.nonzero(local < 0).squeeze(1)
        perm, send_counts = bucket_by_owner(self.graph.owner(frontier[away]), world)
        away = away.index_select(0, perm)
        # Row r: what rank r requests from each rank.  Every rank sees the whole matrix,
        # so all agree to skip the other exchanges when nobody requests anything (e.g.
        # the first hop of seeds that their own rank owns).
        counts = all_gather_ints(ctx, send_counts.tolist())
        if not bool(counts.any()):
            return self._sample_rows(local, frontier, hop_keys[ctx.rank], fanout)
        send_counts, recv_counts = counts[ctx.rank], counts[:, ctx.rank]
        requests = start_all_to_all_v(ctx, frontier.index_select(0, away), send_counts,
                                      recv_counts, stats=self.stats, kind="sample")
        mine = self._sample_rows(local.index_select(0, here), frontier.index_select(0, here),
                                 hop_keys[ctx.rank], fanout)
        recv = requests.wait()
        requester = torch.repeat_interleave(torch.arange(world, device=dev), recv_counts.to(dev),
                                            output_size=recv.numel())
        served, served_nbr = self._sample_rows(recv - self.graph.first_gid, recv,
                                               hop_keys.index_select(0, requester), fanout)
        got = all_to_all_v(ctx, served, recv_counts, send_counts, stats=self.stats,
                           kind="sample")[0]
        served_sizes = _cumsum0(served)[_cumsum0(recv_counts.to(dev))].diff()
        got_sizes = _cumsum0(got)[_cumsum0(send_counts.to(dev))].diff()
        replies = start_all_to_all_v(ctx, served_nbr, served_sizes, got_sizes,
                                     stats=self.stats, kind="sample")
        # Rows go back in frontier order through a [frontier, fanout] table padded with -1.
        table = torch.empty((frontier.numel(), fanout), dtype=torch.int64, device=dev)
        table[here] = _padded(*mine, fanout)
        table[away] = _padded(got, replies.wait(), fanout)
        filled = table >= 0
        return filled.sum(1), table.masked_select(filled)

    def sample(self, seeds: Tensor, batch_key: int) -> SamplerOutput:
        """Sample the computation graph of ``seeds`` (collective).

        Args:
            seeds: ``[B]`` distinct global ids (any rank's; usually this rank's own).
            batch_key: Identifies the batch (e.g. a hash of epoch and step); with the seed
                it determines every random choice.

        Returns:
            The sampled nodes and edges in PyG ``NeighborLoader`` order.
        """
        seeds = seeds.to(self.device, torch.int64)
        node = seeds
        rows, cols = [], []
        num_nodes, num_edges = [seeds.numel()], []
        frontier_start = 0
        slot = self._slot
        slot[seeds] = torch.arange(seeds.numel(), dtype=slot.dtype, device=self.device)
        try:  # on an error, reset the whole slot table (relabel may have left marks)
            for hop, fanout in enumerate(self.fanouts):
                hop_keys = torch.tensor(
                    [mix_int(self.seed, batch_key, hop, r) for r in range(self.ctx.world_size)],
                    dtype=torch.int64, device=self.device,
                )
                frontier = node[frontier_start:]
                count, nbr = self._hop(frontier, fanout, hop_keys)
                new, src = relabel(node, nbr, slot)
                cols.append(frontier_start + torch.repeat_interleave(
                    torch.arange(frontier.numel(), device=self.device), count,
                    output_size=nbr.numel()))
                rows.append(src)
                num_edges.append(nbr.numel())
                num_nodes.append(new.numel())
                frontier_start = node.numel()
                node = torch.cat([node, new])
        except BaseException:
            slot.fill_(-1)
            raise
        slot.index_fill_(0, node, -1)
        return SamplerOutput(
            node=node, row=torch.cat(rows), col=torch.cat(cols), batch_size=seeds.numel(),
            num_sampled_nodes=num_nodes, num_sampled_edges=num_edges,
        )

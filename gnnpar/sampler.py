"""Distributed uniform neighbour sampling over in-edges, in lockstep collectives.

:class:`DistNeighborSampler` grows a sampled computation graph hop by hop from a batch of
seed nodes.  Per hop, frontier nodes whose in-edges this rank stores (owned nodes, and
halo nodes with a complete adjacency when the partition has ``halo_hops > 1``) are
sampled locally; the others are sent to their owners in **one** ``all_to_all`` and sampled
there, each rank serving its peers' requests in the same step as its own, and the sampled
neighbours come back in a second exchange (counts, then neighbour ids).  Every rank runs
the same four collectives per hop whether or not it has anything to send, so ranks stay
in lockstep.  The result, :class:`SamplerOutput`, uses PyG's ``NeighborLoader`` layout
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

from gnnpar.comm import CommStats, all_to_all_v, bucket_by_owner
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
    within = torch.arange(total, device=lengths.device) - _cumsum0(lengths)[:-1][seg]
    return seg, within


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
    start = indptr[nodes]
    deg = indptr[nodes + 1] - start
    if replace:
        has = torch.nonzero(deg > 0).squeeze(1)
        draws = torch.arange(fanout, device=keys.device) * _signed(_GOLDEN)
        pos = (mix(keys[has, None] + draws) & _MASK62) % deg[has, None]
        count = torch.where(deg > 0, fanout, 0)
        return count, indices[start[has, None] + pos].reshape(-1)
    count = deg.clamp(max=fanout)
    ptr = _cumsum0(count)
    total = int(ptr[-1])
    # Output slot o of node i reads in-edge start[i] + (o - ptr[i]): right as it stands
    # for nodes with d <= k (all in-edges); the others overwrite their slots below.
    src = torch.repeat_interleave(start - ptr[:-1], count, output_size=total)
    src += torch.arange(total, device=nodes.device)
    # Mid-degree nodes: keep the k smallest random keys of each in-edge list (one sort).
    hub = deg > max(hub_factor, 1) * fanout
    sel = torch.nonzero((deg > fanout) & ~hub).squeeze(1)
    seg, within = _expand(deg[sel])
    edge_key = (mix(keys[sel][seg] + within * _signed(_GOLDEN)) >> 33) & _MASK31
    perm = torch.sort((seg << 31) | edge_key, stable=True).indices
    # Sorting keeps segments in place, so sorted slot p has rank within[p] in seg[p].
    keep = torch.nonzero(within < fanout).squeeze(1)
    node = sel[seg[keep]]
    src[ptr[node] + within[keep]] = start[node] + within[perm[keep]]
    # Hubs: Floyd's algorithm, k rounds independent of the degree.
    sel = torch.nonzero(hub).squeeze(1)
    if sel.numel():
        d = deg[sel]
        draws = mix(keys[sel, None] + torch.arange(1, fanout + 1, device=keys.device)
                    * _signed(_GOLDEN)) & _MASK62
        pick = torch.empty((sel.numel(), fanout), dtype=torch.int64, device=keys.device)
        for j in range(fanout):
            top = d - fanout + j
            r = draws[:, j] % (top + 1)
            seen = (pick[:, :j] == r[:, None]).any(1)
            pick[:, j] = torch.where(seen, top, r)
        slots = ptr[sel, None] + torch.arange(fanout, device=keys.device)
        src[slots] = start[sel, None] + pick
    return count, indices[src]


def relabel(n_id: Tensor, src: Tensor) -> tuple[Tensor, Tensor]:
    """Append the new nodes of ``src`` to ``n_id`` in first-appearance order.

    Args:
        n_id: ``[N]`` distinct global ids already in the batch.
        src: ``[E]`` global ids of sampled neighbours.

    Returns:
        ``(new, src_local)``: the global ids not yet in ``n_id``, in order of first
        appearance in ``src``, and the batch-local id of every entry of ``src`` (an index
        into ``cat([n_id, new])``).
    """
    n_old, dev = n_id.numel(), n_id.device
    both = torch.cat([n_id, src])
    uniq, inv = torch.unique(both, return_inverse=True)
    first = torch.full_like(uniq, both.numel()).scatter_reduce_(
        0, inv, torch.arange(both.numel(), device=dev), "amin")
    # New nodes ordered by first appearance: a scatter over positions instead of a sort.
    new = torch.nonzero(first >= n_old).squeeze(1)
    at = torch.full((src.numel(),), -1, dtype=torch.int64, device=dev)
    at[first[new] - n_old] = new
    new = at[at >= 0]
    local = first  # an old node's first appearance is its position in n_id
    local[new] = n_old + torch.arange(new.numel(), device=dev)
    return uniq[new], local[inv[n_old:]]


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

    Args:
        graph: This rank's part.
        ctx: Distributed context (its group carries the exchanges).
        fanouts: Neighbours to sample per hop, e.g. ``[15, 10]``; all ``>= 1``.
        replace: Sample with replacement.
        seed: Seed of the counter-based random keys.
        stats: Counters that the exchanges are added to (kind ``"sample"``).
        device: Where the adjacency and the sampling kernels live (default
            ``ctx.device``).
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

    def _sampleable_here(self, gids: Tensor) -> Tensor:
        """Local id of each global id whose in-edges this rank stores, else ``-1``."""
        if not self._halo_rows:  # halo_hops = 1: only owned nodes
            local = gids - self.graph.first_gid
            return torch.where((local >= 0) & (local < self.graph.num_owned), local, -1)
        local = self.graph.global_to_local(gids)
        complete = self.graph.adj_complete[local.clamp(min=0)]
        return torch.where(complete, local, -1)

    def _sample_rows(self, local: Tensor, gids: Tensor, requester: Tensor, hop_keys: Tensor,
                     fanout: int) -> tuple[Tensor, Tensor]:
        keys = mix(gids * _signed(_C2) + hop_keys[requester])
        count, nbr = sample_neighbors(self.graph.indptr, self.graph.indices, local, keys,
                                      fanout, self.replace)
        return count, self._gid_of_local[nbr]

    def _hop(self, frontier: Tensor, fanout: int, hop_keys: Tensor) -> tuple[Tensor, Tensor]:
        """Sample one hop; return ``(count, nbr)`` in frontier order (nbr as global ids)."""
        ctx, world = self.ctx, self.ctx.world_size
        local = self._sampleable_here(frontier)
        here = torch.nonzero(local >= 0).squeeze(1)
        away = torch.nonzero(local < 0).squeeze(1)
        perm, send_counts = bucket_by_owner(self.graph.owner(frontier[away]), world)
        away = away[perm]
        recv, recv_counts = all_to_all_v(ctx, frontier[away], send_counts,
                                         stats=self.stats, kind="sample")
        requester = torch.repeat_interleave(
            torch.arange(world, device=self.device), recv_counts.to(self.device)
        )
        rows_local = torch.cat([local[here], recv - self.graph.first_gid])
        rows_gid = torch.cat([frontier[here], recv])
        rows_req = torch.cat([torch.full_like(here, ctx.rank), requester])
        count, nbr = self._sample_rows(rows_local, rows_gid, rows_req, hop_keys, fanout)
        n_here = here.numel()
        e_here = int(count[:n_here].sum())
        served = count[n_here:]
        got_count, _ = all_to_all_v(ctx, served, recv_counts, send_counts,
                                    stats=self.stats, kind="sample")
        served_ptr = _cumsum0(served)[_cumsum0(recv_counts.to(self.device))]
        got_ptr = _cumsum0(got_count)[_cumsum0(send_counts.to(self.device))]
        got_nbr, _ = all_to_all_v(ctx, nbr[e_here:], served_ptr.diff(), got_ptr.diff(),
                                  stats=self.stats, kind="sample")
        # Segments arrive as [here..., away by owner...]; put them back in frontier order.
        order = torch.cat([here, away])
        seg_count = torch.cat([count[:n_here], got_count])
        count_f = torch.empty_like(seg_count)
        count_f[order] = seg_count
        seg, within = _expand(seg_count)
        nbr_f = nbr.new_empty(int(seg_count.sum()))
        nbr_f[_cumsum0(count_f)[order[seg]] + within] = torch.cat([nbr[:e_here], got_nbr])
        return count_f, nbr_f

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
        for hop, fanout in enumerate(self.fanouts):
            hop_keys = torch.tensor(
                [mix_int(self.seed, batch_key, hop, r) for r in range(self.ctx.world_size)],
                dtype=torch.int64, device=self.device,
            )
            frontier = node[frontier_start:]
            count, nbr = self._hop(frontier, fanout, hop_keys)
            new, src = relabel(node, nbr)
            cols.append(frontier_start + torch.repeat_interleave(
                torch.arange(frontier.numel(), device=self.device), count,
                output_size=nbr.numel()))
            rows.append(src)
            num_edges.append(nbr.numel())
            num_nodes.append(new.numel())
            frontier_start = node.numel()
            node = torch.cat([node, new])
        return SamplerOutput(
            node=node, row=torch.cat(rows), col=torch.cat(cols), batch_size=seeds.numel(),
            num_sampled_nodes=num_nodes, num_sampled_edges=num_edges,
        )

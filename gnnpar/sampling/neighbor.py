"""Distributed uniform neighbour sampling over in-edges, in lockstep collectives.

:class:`DistNeighborSampler` grows a sampled computation graph hop by hop from a batch of
seed nodes.  Per hop, frontier nodes whose in-edges this rank stores (owned nodes, and
halo nodes with a complete adjacency when the partition has ``halo_hops > 1``) are
sampled locally; the others are sent to their owners and sampled there, each rank serving
its peers' requests in the same step as its own.  Three collectives per hop, the same on
every rank whether or not it has anything to send, so ranks stay in lockstep: an
all-gather of the request counts (every rank learns every count, so all agree to skip the
rest when nobody requests anything, e.g. the first hop of seeds that their own rank
owns), the requests, and the replies — fixed-width rows of ``fanout`` neighbour ids padded
with ``-1``, whose sizes the requester already knows, so no second count exchange is
needed.  Rows stored here are sampled while the requests travel.  When every rank shares
this machine (``peers``, :mod:`gnnpar.storage.peers`), a hop is local: each frontier node is
sampled here from its owner's part files, with the key its owner would use, and nothing is
exchanged.

Host synchronisation budget (what a CUDA host must wait for): per hop, reading the
gathered request counts (the exchanges' split sizes, per destination and group:
:class:`~gnnpar.sampling.exchange.HopExchange` also serves the typed sampler, whose
frontier is grouped by node type in the same read) and one read of the hop's sizes
(edges kept, new nodes, owned new nodes); nothing else reads the device — edge ids and
edge features are gathered on it.  Data-dependent selections use ``torch.nonzero_static`` with those
host-known sizes.

New nodes are numbered by one stable sort of the batch's ids together with the hop's
sampled ids (:func:`~gnnpar.sampling.kernels.relabel`), so a sampler's memory grows with
its batches, never with the graph's node count: first-appearance order, except that
within each hop this rank's own nodes come first — so the feature store copies their rows
in contiguous runs.  The result, :class:`SamplerOutput`, uses PyG's ``NeighborLoader``
layout (seeds first, then the new nodes of each hop; edges hop by hop, their destinations
ascending), so ``trim_to_layer`` works on it.

Randomness is *counter-based*: the random key of an edge is a hash (SplitMix64) of the
sampler seed, the batch key, the hop, the requesting rank, the destination's global id
and the draw's position.  Sampling is thus a pure function of those values —
deterministic for a seed and world size, the same on CPU and CUDA, independent of which
rank does the work, and with no generator state to checkpoint: a loader resumes by
replaying its batch keys.

The per-hop kernels (drawing the sampled in-edges, numbering the new nodes) are pure
tensor functions in :mod:`gnnpar.sampling.kernels`, with no Python loop over nodes or
edges, so a hop runs unchanged on a GPU; on a CPU they run compiled when numba is
installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor
from torch_geometric import EdgeIndex

from gnnpar.comm import CommStats
from gnnpar.distributed import DistContext
from gnnpar.sampling.exchange import HopExchange, hop_keys
from gnnpar.sampling.fanouts import Fanouts
from gnnpar.sampling.kernels import part_source_ids, relabel, sample_positions, source_ids
from gnnpar.storage.graph import DistGraph
from gnnpar.storage.peers import PeerParts
from gnnpar.storage.placement import place_rows


@dataclass
class SamplerOutput:
    """One sampled computation graph, in PyG ``NeighborLoader`` order.

    Attributes:
        node: ``[N]`` global ids of the batch's nodes: the seeds first, then the nodes
            first reached at hop 1, hop 2, ... (within a hop, this rank's own first).
        row: ``[E]`` batch-local source (sampled neighbour) of each edge.
        col: ``[E]`` batch-local destination (the node whose in-edges were sampled),
            ascending.
        batch_size: Number of seeds (the first ``batch_size`` entries of ``node``).
        num_sampled_nodes: ``[L + 1]`` nodes added by each hop, seeds first.
        num_sampled_edges: ``[L]`` edges sampled at each hop; edges are stored hop by hop,
            so hop ``h``'s edges point into nodes added before hop ``h``.
        num_owned_nodes: ``[L + 1]`` how many of each hop's nodes, at its start, this rank
            owns (the rest are other ranks'), or ``None`` when the seeds' owners are not
            known.
        e_id: ``[E]`` the dataset edge id of each edge (``with_edges``), else ``None``.
        edge_attr: ``[E, D]`` float32 features of each edge (``with_edges`` and a
            partition with edge features), else ``None``.

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
    num_owned_nodes: list[int] | None = None
    e_id: Tensor | None = None
    edge_attr: Tensor | None = None

    @property
    def edge_index(self) -> EdgeIndex:
        """``[2, E]`` batch-local edges, source -> destination (``stack([row, col])``).

        A PyG :class:`~torch_geometric.EdgeIndex` that knows what the sampler guarantees:
        sorted by destination (``sort_order="col"``), ``sparse_size`` ``(N, N)``, so its
        CSC is one pass (no sort), ``trim_to_layer`` keeps both, and a layer that
        aggregates through it (PyG's ``GraphConv``, :func:`gnnpar.nn.fused.fuse_aggregation`)
        runs one sparse product.
        """
        n = self.node.numel()
        return EdgeIndex(torch.stack([self.row, self.col]), sparse_size=(n, n),
                         sort_order="col")


class DistNeighborSampler:
    """Multi-hop uniform in-neighbour sampling across the parts of a :class:`DistGraph`.

    Every method that takes a batch is collective: all ranks of ``ctx`` call it the same
    number of times, in the same order (a rank without seeds passes an empty tensor).
    A sampler holds nothing per batch between calls and nothing that grows with the
    whole graph: the part's adjacency (one copy per device, :meth:`DistGraph.to`) and
    what each batch needs while it is sampled.  Its settings are fixed when it is built.

    Args:
        graph: This rank's part.
        ctx: Distributed context (its group carries the exchanges).
        fanouts: Neighbours to sample per hop (:meth:`Fanouts.for_graph
            <gnnpar.sampling.fanouts.Fanouts.for_graph>`: validated and capped).
        replace: Sample with replacement.
        seed: Seed of the counter-based random keys.
        stats: Counters that the exchanges are added to (kind ``"sample"``).
        device: Where the adjacency and the sampling kernels live (default
            ``ctx.device``).
        with_edges: Also return each sampled edge's id and, if the partition has edge
            features, its features (rows sampled by a peer come back in its reply: 8 bytes
            more per edge, plus ``4 D``).  The edge features are placed like node
            features (:func:`~gnnpar.storage.placement.place_rows`: on the device when they fit
            ``edge_budget_bytes``, else pinned host memory the device reads in place).
        edge_budget_bytes: Device budget of the edge features (default: half the free
            device memory).
        peers: The parts of the other ranks on this machine
            (:func:`~gnnpar.storage.peers.peer_parts`): when they are all of them, each
            hop samples every frontier node here, from its owner's part (the same rows,
            no exchange).  Not with ``with_edges``.  Given on every rank or on none.

    Example::

        fanouts = Fanouts.for_graph([15, 10], graph, ctx)     # collective
        sampler = gnnpar.DistNeighborSampler(graph, ctx, fanouts, seed=0)
        seeds = torch.arange(graph.first_gid, graph.first_gid + 64)
        out = sampler.sample(seeds, batch_key=0)       # collective
        out.node, out.edge_index, out.num_sampled_nodes
    """

    def __init__(
        self,
        graph: DistGraph,
        ctx: DistContext,
        fanouts: Fanouts,
        replace: bool = False,
        seed: int = 0,
        stats: CommStats | None = None,
        device: torch.device | None = None,
        with_edges: bool = False,
        edge_budget_bytes: int | None = None,
        peers: PeerParts | None = None,
    ) -> None:
        self.fanouts = fanouts
        self._hops = fanouts.hops
        self.ctx = ctx
        self.replace = bool(replace)
        self.seed = int(seed)
        self.stats = stats
        self.device = torch.device(device) if device is not None else ctx.device
        self.graph = graph.to(self.device)  # one copy per device, shared by all samplers
        self.with_edges = bool(with_edges)
        self.exchange = HopExchange(self.graph, ctx, stats, self.device,
                                    None if self.with_edges else peers)
        self.edge_dim = graph.meta.edge_dim if self.with_edges else 0
        self.graph.local_gids  # noqa: B018 - made now, on the compute stream, not in a batch
        if self.with_edges:
            self.graph.e_id  # noqa: B018 - read now: a version-2 partition fails here
        self._edge_rows = place_rows({"edge_attr": graph.edge_features()}, self.device,
                                     edge_budget_bytes) if self.edge_dim else None

    def _width(self, fanout: int) -> int:
        """int64 columns of a sampled row: ids, then edge ids and feature words."""
        if not self.with_edges:
            return fanout
        return 2 * fanout + -(-fanout * self.edge_dim // 2)

    def _sample_rows(self, fanout: int, local: Tensor, keys: Tensor,
                     group_sizes: list[int]) -> Tensor:
        """``[n, width]`` sampled rows ``local`` with random keys ``keys``.

        The ``fanout`` sampled global ids, then (``with_edges``) their edge ids and
        features packed as int64 words (:meth:`_unpack`).
        """
        g = self.graph
        pos = sample_positions(g.indptr, local, keys, fanout, self.replace)
        if not self.with_edges:
            return source_ids(pos, g.indices, g.local_gids)
        at = pos.clamp(min=0).view(-1)
        src = g.indices.index_select(0, at) if g.indices.numel() else at
        nbr = torch.where(pos >= 0, g.local_gids.index_select(0, src).view_as(pos), -1)
        if not g.indices.numel():  # a part without in-edges: every position is -1
            at = at[:0]
        eid = g.e_id.index_select(0, at) if at.numel() else torch.zeros_like(pos)
        cols = [nbr, torch.where(pos >= 0, eid.view_as(pos), -1)]
        if self._edge_rows is not None:
            n, width = pos.shape[0], fanout * self.edge_dim
            words = torch.zeros((n, 2 * -(-width // 2)), dtype=torch.float32,
                                device=self.device)
            if at.numel():
                words[:, :width] = self._edge_rows.take("edge_attr", at).reshape(n, width)
            cols.append(words.view(torch.int64))
        return torch.cat(cols, 1)

    def _sample_peer(self, fanout: int, rank: int, local: Tensor, keys: Tensor) -> Tensor:
        """``[n, fanout]`` sampled global ids of co-located ``rank``'s nodes ``local``."""
        adj = self.exchange.peers.adjacency(rank)  # type: ignore[union-attr]
        pos = sample_positions(adj.indptr, local, keys, fanout, self.replace)
        return part_source_ids(pos, adj.indices, adj.first_gid, adj.num_owned, adj.halo_gids)

    def _unpack(self, table: Tensor, fanout: int) -> tuple[Tensor, Tensor | None,
                                                          Tensor | None]:
        """``(ids [n, k], edge ids [n, k] or None, features [n * k, D] or None)``."""
        if not self.with_edges:
            return table, None, None
        k, d = fanout, self.edge_dim
        attr = (table[:, 2 * k:].contiguous().view(torch.float32)[:, :k * d].reshape(-1, d)
                if d else None)
        return table[:, :k], table[:, k:2 * k], attr

    def sample(self, seeds: Tensor, batch_key: int, num_owned_seeds: int | None = None,
               exclude: Tensor | None = None) -> SamplerOutput:
        """Sample the computation graph of ``seeds`` (collective).

        Args:
            seeds: ``[B]`` distinct global ids (any rank's; usually this rank's own).
            batch_key: Identifies the batch (e.g. a hash of epoch and step); with the seed
                it determines every random choice.
            num_owned_seeds: The caller guarantees that the first this many seeds are this
                rank's and the rest are not (then :attr:`SamplerOutput.num_owned_nodes`
                is set).
            exclude: Sorted int64 keys ``src * N + dst`` (``N`` the graph's node count) of
                edges into seeds that must not be message-passing edges of this batch (a
                link batch's targets, whose endpoints are all seeds): sampled in-edges of
                the seeds with those endpoints are dropped before their sources join the
                batch (:func:`~gnnpar.sampling.kernels.edge_keys`).  Only the first hop
                samples a seed's in-edges (every node is expanded once), so only it is
                checked.

        Returns:
            The sampled nodes and edges in PyG ``NeighborLoader`` order.
        """
        seeds = seeds.to(self.device, torch.int64)
        node = seeds
        n_ids = self.graph.meta.num_nodes
        rows, cols, e_ids, attrs = [], [], [], []
        num_nodes, num_edges = [seeds.numel()], []
        owned_counts = [seeds.numel() if num_owned_seeds is None else num_owned_seeds]
        frontier_start = 0
        for hop, fanout in enumerate(self._hops):
            frontier = node[frontier_start:]
            rows_of = self.exchange.run(
                frontier, self._width(fanout),
                hop_keys(self.seed, batch_key, hop, self.exchange.ranks),
                partial(self._sample_rows, fanout), sample_peer=partial(self._sample_peer, fanout))
            table, e_id, attr = self._unpack(rows_of, fanout)
            if hop == 0 and exclude is not None and exclude.numel():
                key = table * n_ids + frontier[:, None]
                at = torch.searchsorted(exclude, key).clamp_(max=exclude.numel() - 1)
                table = torch.where(exclude.index_select(0, at.view(-1)).view_as(key) == key,
                                    -1, table)
            out = relabel(table, node, self.graph.is_owned(table) & (table >= 0), n_ids)
            cols.append(frontier_start + out.pos // fanout)
            rows.append(out.src)
            if e_id is not None:
                e_ids.append(e_id.reshape(-1).index_select(0, out.pos))
            if attr is not None:
                attrs.append(attr.index_select(0, out.pos))
            num_edges.append(out.src.numel())
            num_nodes.append(out.new.numel())
            owned_counts.append(out.num_owned)
            frontier_start = node.numel()
            node = torch.cat([node, out.new])
        return SamplerOutput(
            node=node, row=torch.cat(rows), col=torch.cat(cols), batch_size=seeds.numel(),
            num_sampled_nodes=num_nodes, num_sampled_edges=num_edges,
            num_owned_nodes=owned_counts if num_owned_seeds is not None else None,
            e_id=torch.cat(e_ids) if self.with_edges else None,
            edge_attr=torch.cat(attrs) if attrs else None,
        )

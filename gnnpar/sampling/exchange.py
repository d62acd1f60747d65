"""One hop's exchange: rows are sampled by the rank that stores them, in lockstep.

:class:`HopExchange` is what the homogeneous and the typed samplers share: per hop, the
frontier nodes whose in-edges this rank stores are sampled here, the others are sent to
their owners and sampled there, each rank serving its peers' requests in the same step.
What a sampled row holds is the sampler's (a :data:`RowSampler`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from gnnpar.comm import CommStats, all_gather_counts, start_all_to_all_v
from gnnpar.distributed import DistContext
from gnnpar.keys import C2, mix, mix_int, mix_with, signed
from gnnpar.ops import count
from gnnpar.storage.graph import DistGraph
from gnnpar.storage.peers import PeerParts

RowSampler = Callable[[Tensor, Tensor, list[int]], Tensor]
"""Samples stored rows: ``(local ids [n], random keys [n], group sizes) -> [n, width]``.

The rows come grouped (by node type on a typed graph), ``group sizes`` rows each."""

PeerSampler = Callable[[int, Tensor, Tensor], Tensor]
"""Samples rows a co-located rank owns, from its part's files: ``(rank, its local ids [n],
random keys [n]) -> [n, width]``."""


class HopExchange:
    """One hop's requests and replies: rows are sampled by the rank that stores them.

    Three collectives per hop, the same on every rank: the all-gather of request counts
    (per destination rank and group: every rank learns what every rank samples where,
    in one host read), the requests, the padded replies (only the first when no rank
    requests anything).  Rows stored here are sampled while the requests travel.  What a
    row holds is the caller's :data:`RowSampler`; with ``group`` the frontier is sorted by
    group too, and every rank's rows reach the row sampler grouped.

    When every other rank's part is read here (``peers``), a hop is local: each frontier
    node is sampled from its owner's part with the requester's key, as its owner would
    (the same rows), and nothing is exchanged.

    Args:
        graph: This rank's part, on ``device``.
        ctx: Distributed context (its group carries the exchanges).
        stats: Counters that the exchanges are added to (kind ``"sample"``).
        device: Where the frontier and the rows live.
        peers: The parts of the other ranks on this machine
            (:func:`~gnnpar.storage.peers.peer_parts`), used when they are all of them
            (:attr:`~gnnpar.storage.peers.PeerParts.covers_all`); given on every rank or
            on none.
    """

    def __init__(self, graph: DistGraph, ctx: DistContext, stats: CommStats | None,
                 device: torch.device, peers: PeerParts | None = None) -> None:
        self.graph, self.ctx, self.stats, self.device = graph, ctx, stats, device
        self.peers = peers if peers is not None and peers.covers_all else None
        self._halo_rows = bool(np.any(graph.part.adj_complete[graph.num_owned:]))
        self.ranks = torch.arange(ctx.world_size, device=device)

    def sampleable_here(self, gids: Tensor) -> Tensor:
        """Local id of each global id whose in-edges this rank stores, else ``-1``."""
        if not self._halo_rows:  # halo_hops = 1: only owned nodes
            local = gids - self.graph.first_gid
            return torch.where((local >= 0) & (local < self.graph.num_owned), local, -1)
        local = self.graph.global_to_local(gids)
        complete = self.graph.adj_complete[local.clamp(min=0)]
        return torch.where(complete, local, -1)

    def run(self, frontier: Tensor, width: int, hop_keys: Tensor, sample_rows: RowSampler,
            group: Callable[[Tensor], Tensor] | None = None, num_groups: int = 1,
            sample_peer: PeerSampler | None = None) -> Tensor:
        """``[len(frontier), width]`` rows of the frontier, ids ``-1``-padded (collective).

        Args:
            frontier: ``[n]`` global ids to sample.
            width: int64 columns of a row.
            hop_keys: ``[world]`` the hop's random key of each requesting rank.
            sample_rows: Samples rows stored here.
            group: Group of each global id (``None``: one group).
            num_groups: Number of groups.
            sample_peer: Samples rows of co-located ranks (with ``peers``, one group):
                then the hop is local.
        """
        if self.peers is not None and sample_peer is not None and group is None:
            return self._run_here(frontier, width, hop_keys, sample_rows, sample_peer)
        ctx, world, rank = self.ctx, self.ctx.world_size, self.ctx.rank
        n, groups = frontier.numel(), num_groups
        local = self.sampleable_here(frontier)
        dest = torch.where(local < 0, self.graph.owner(frontier), world)
        key = dest if group is None else dest * groups + group(frontier)
        order = torch.argsort(key, stable=True)  # requests by owner (and group), then ours
        counts_dev, counts = all_gather_counts(ctx, count(key, (world + 1) * groups))
        # counts[r][d * groups + g]: rank r's frontier nodes of group g sampled by rank d
        # (d = world: by r itself).
        per = [[sum(row[d * groups:(d + 1) * groups]) for d in range(world + 1)]
               for row in counts]
        send_counts, recv_counts = per[rank][:world], [per[r][rank] for r in range(world)]
        n_away = sum(send_counts)
        away, here = order[:n_away], order[n_away:]
        table = torch.full((n, width), -1, dtype=torch.int64, device=self.device)
        here_ids = frontier.index_select(0, here)
        here_rows = (local.index_select(0, here), _row_keys(here_ids, hop_keys[rank]),
                     counts[rank][world * groups:])
        if not any(sum(p[:world]) for p in per):
            table[here] = sample_rows(*here_rows)
            return table
        requests = start_all_to_all_v(ctx, frontier.index_select(0, away), send_counts,
                                      recv_counts, stats=self.stats, kind="sample")
        table[here] = sample_rows(*here_rows)
        recv = requests.wait()
        asked = counts_dev[:, rank * groups:(rank + 1) * groups].sum(1)
        requester = torch.repeat_interleave(self.ranks, asked, output_size=recv.numel())
        served_sizes = [sum(row[rank * groups + g] for row in counts) for g in range(groups)]
        keys = hop_keys.index_select(0, requester)
        if group is None:
            served = sample_rows(recv - self.graph.first_gid, _row_keys(recv, keys),
                                 served_sizes)
        else:  # arrived by requester, then group: sample them by group
            by_group = torch.argsort(group(recv), stable=True)
            ids = recv.index_select(0, by_group)
            rows = sample_rows(ids - self.graph.first_gid,
                               _row_keys(ids, keys.index_select(0, by_group)), served_sizes)
            served = torch.empty_like(rows).index_copy_(0, by_group, rows)
        replies = start_all_to_all_v(ctx, served, recv_counts, send_counts, stats=self.stats,
                                     kind="sample")
        table[away] = replies.wait()
        return table

    def _run_here(self, frontier: Tensor, width: int, hop_keys: Tensor,
                  sample_rows: RowSampler, sample_peer: PeerSampler) -> Tensor:
        """:meth:`run` when every rank's part is read here: no collective.

        Rows stored here are sampled as :meth:`run` samples them; every other node from
        its owner's part, with this rank's key, as its owner would serve it.
        """
        world, rank, peers = self.ctx.world_size, self.ctx.rank, self.peers
        assert peers is not None
        local = self.sampleable_here(frontier)
        owner = torch.where(local >= 0, world, self.graph.owner(frontier))
        order = torch.argsort(owner, stable=True)  # by owner, then the rows stored here
        sizes = count(owner, world + 1).tolist()  # a CPU rank: no device wait
        table = torch.full((frontier.numel(), width), -1, dtype=torch.int64,
                           device=self.device)
        lo = 0
        for r, size in enumerate(sizes):
            rows, lo = order[lo:lo + size], lo + size
            if not size:
                continue
            ids = frontier.index_select(0, rows)
            keys = _row_keys(ids, hop_keys[rank])
            if r == world:
                table[rows] = sample_rows(local.index_select(0, rows), keys, [size])
            else:
                table[rows] = sample_peer(r, ids - peers.offsets[r], keys)
        return table


def _row_keys(gids: Tensor, hop_key: Tensor) -> Tensor:
    """The random key of each row: its global id mixed with its requester's hop key."""
    return mix(gids * signed(C2) + hop_key)


def hop_keys(seed: int, batch_key: int, hop: int, ranks: Tensor) -> Tensor:
    """``[world]`` each requesting rank's random key of one hop of one batch."""
    return mix_with(mix_int(seed, batch_key, hop), ranks)

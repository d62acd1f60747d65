"""Negative sampling for link prediction: counter-based, resumable, optionally strict.

A negative's node id is a pure function of ``(seed, batch key, stream, round, position)``:
the SplitMix64 hash of :mod:`gnnpar.keys` (``mix_int`` for the prefix, ``mix_with`` for the
positions), reduced modulo the graph's node count.  There is no generator state, so
a loader resumes by replaying its batch keys, and the draws are the same on CPU and CUDA.
Ids are uniform over *all* global node ids ``[0, num_nodes)`` — every rank's, not only
the caller's (the modulo bias is below ``num_nodes / 2**62``).

:func:`negative_destinations` is the plain draw.  :class:`DistNegativeSampler` lays the
draws out as PyG's ``LinkNeighborLoader`` does (``binary``: the positives, then
``B * num_neg`` random pairs, labels 1 then 0; ``triplet``: ``num_neg`` random
destinations per positive) and, in strict mode, rejects negatives that are true edges.

Strict mode.  An edge ``(s, d)`` is stored as an in-edge of ``d`` in the part that owns
``d``, so each round sends the pending candidate pairs to ``owner(d)`` and gets one byte
back per pair: whether the pair is a stored edge, looked up by binary search in a sorted
key ``row * num_nodes + src`` over this part's owned in-edges (built once, 8 bytes per
owned in-edge; CSC rows are not sorted).  Rejected candidates — stored edges, self-loops
``s == d`` (PyG's ``negative_sampling`` never returns those either) and, in triplet mode,
the positive's own destination — are redrawn with the next round's counter: the whole
pair in binary mode (uniform over non-edges), the destination in triplet mode (uniform
over the non-neighbours of the source).  Per round, three collectives on every rank, in
lockstep whether or not it has anything to send: an all-gather of the per-owner counts
(one host synchronisation; a round in which nothing is pending on any rank stops every
rank at once), the request pairs (16 bytes each) and the replies (1 byte each), both
counted in ``stats`` under ``"negative"``.  After ``rounds`` checks (3, as PyG's
``negative_sampling`` tries 3 times) the candidates still rejected are returned as they
are, with label 0: about ``p ** rounds`` of them for a graph in which a random pair is an
edge with probability ``p``; :attr:`DistNegativeSampler.unresolved` counts them.  Edges
count in their stored direction (an undirected graph stores both), and only edges of the
partitioned graph are rejected: supervision edges left out of it are not.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gnnpar.comm import CommStats, all_gather_counts, start_all_to_all_v
from gnnpar.distributed import DistContext
from gnnpar.errors import ConfigError
from gnnpar.keys import MASK62, mix_int, mix_with
from gnnpar.ops import count
from gnnpar.storage.graph import DistGraph

_SRC, _DST = 1, 2  # key streams of negative sources and destinations


def _draw(seed: int, batch_key: int, stream: int, rnd: int, n: int, num_nodes: int,
          device: torch.device) -> Tensor:
    """``[n]`` ids in ``[0, num_nodes)``: each position hashed with the key prefix."""
    key = mix_int(seed, batch_key, stream, rnd)
    return (mix_with(key, torch.arange(n, device=device)) & MASK62) % num_nodes


def _check_num_neg(num_neg: int) -> None:
    if isinstance(num_neg, bool) or not isinstance(num_neg, int) or num_neg < 1:
        raise ConfigError(f"got num_neg={num_neg!r}; need an int >= 1 negatives per positive.",
                          field="num_neg", fix="pass e.g. num_neg=1.")


def negative_destinations(src: Tensor, num_neg: int, num_nodes: int, seed: int,
                          batch_key: int) -> Tensor:
    """Uniform random destinations, ``num_neg`` per source (no collective, no host sync).

    Only ``src``'s length and device matter: entry ``[i, j]`` depends on ``(seed,
    batch_key, i * num_neg + j)`` alone.  Ranks that share batch keys should fold their
    rank into ``batch_key`` (``mix_int(key, rank)``, as :class:`DistNegativeSampler`
    does) to draw different negatives.

    Args:
        src: ``[B]`` source node ids.
        num_neg: Negatives per source ``k >= 1``.
        num_nodes: Number of global node ids ``N``.
        seed: Seed of the counter-based keys.
        batch_key: Identifies the batch (e.g. a hash of epoch and step).

    Returns:
        int64 ``[B, k]`` global ids uniform over ``[0, N)``, on ``src.device``.
    """
    _check_num_neg(num_neg)
    n = src.numel()
    return _draw(seed, batch_key, _DST, 0, n * num_neg, num_nodes, src.device).view(n, num_neg)


class DistNegativeSampler:
    """Negative edges for the positives of a batch, in PyG ``LinkNeighborLoader`` layout.

    With ``strict`` every method is collective: all ranks call it the same number of
    times, in the same order (a rank without positives passes empty tensors).  Without
    it nothing is communicated.  Draws depend on ``(seed, batch_key, ctx.rank,
    position)`` (and, for strict redraws, on the edges), so ranks given the same batch
    keys draw different negatives.

    Args:
        graph: This rank's part (its owned in-edges answer the strict lookups).
        ctx: Distributed context.
        seed: Seed of the counter-based keys.
        strict: Reject negatives that are stored edges or self-loops (see the module
            docstring).
        stats: Counters that strict-mode exchanges are added to (kind ``"negative"``).
        rounds: Strict checks per batch, ``>= 1``, the same on every rank.

    Attributes:
        unresolved: int64 device scalar: this rank's negatives of the last call still
            rejected after ``rounds`` checks (returned as they are; 0 without ``strict``).

    Example::

        neg = DistNegativeSampler(graph, ctx, seed=0, strict=True)
        edge_label_index, edge_label = neg.binary(pos_edges, num_neg=1, batch_key=step)
    """

    def __init__(self, graph: DistGraph, ctx: DistContext, seed: int, strict: bool,
                 stats: CommStats | None = None, rounds: int = 3) -> None:
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            raise ConfigError(f"got rounds={rounds!r}; need an int >= 1.", field="rounds",
                              fix="pass e.g. rounds=3.")
        self.ctx = ctx
        self.seed = int(seed)
        self.strict = bool(strict)
        self.stats = stats
        self.rounds = rounds
        self.graph = graph.to(ctx.device)
        self.num_nodes = int(graph.meta.num_nodes)
        self.unresolved = torch.zeros((), dtype=torch.int64, device=ctx.device)
        self._edge_keys = self._owned_edge_keys() if self.strict else None

    def _owned_edge_keys(self) -> Tensor:
        """Sorted ``row * N + src_gid`` of every in-edge of an owned node."""
        g, n = self.graph, self.num_nodes
        if g.num_owned * n >= 1 << 63:
            raise ConfigError(f"{g.num_owned} owned nodes x {n} nodes overflow int64 keys.",
                              field="strict", fix="use more parts, or strict=False.")
        src, rows = g.owned_edges()
        return torch.sort(rows * n + g.local_gids.index_select(0, src)).values

    def _stored(self, pairs: Tensor) -> Tensor:
        """Whether each ``[m, 2]`` (src, dst) pair, dst owned here, is a stored edge."""
        keys = self._edge_keys
        assert keys is not None
        if keys.numel() == 0:
            return torch.zeros(pairs.shape[0], dtype=torch.bool, device=pairs.device)
        key = (pairs[:, 1] - self.graph.first_gid) * self.num_nodes + pairs[:, 0]
        pos = torch.searchsorted(keys, key).clamp_(max=keys.numel() - 1)
        return keys.index_select(0, pos) == key

    def _check(self, src: Tensor, dst: Tensor, pending: Tensor) -> Tensor | None:
        """Which ``pending`` pairs are stored edges (collective); ``None``: none pend anywhere.

        Three collectives: the all-gather of per-owner counts, the pairs, the replies;
        only the first when no rank has anything pending.
        """
        ctx, world = self.ctx, self.ctx.world_size
        owner = torch.where(pending, self.graph.owner(dst), world)
        _, counts = all_gather_counts(ctx, count(owner, world + 1)[:world])
        if not any(map(any, counts)):
            return None
        send_counts, recv_counts = counts[ctx.rank], [row[ctx.rank] for row in counts]
        order = torch.argsort(owner, stable=True)[:sum(send_counts)]  # grouped by owner
        pairs = torch.stack([src.index_select(0, order), dst.index_select(0, order)], 1)
        asked = start_all_to_all_v(ctx, pairs, send_counts, recv_counts, stats=self.stats,
                                   kind="negative").wait()
        answers = self._stored(asked).to(torch.uint8)
        replies = start_all_to_all_v(ctx, answers, recv_counts, send_counts, stats=self.stats,
                                     kind="negative").wait()
        return torch.zeros_like(pending).index_copy_(0, order, replies.bool())

    def _sample(self, src: Tensor | None, n: int, batch_key: int,
                avoid: Tensor | None) -> tuple[Tensor, Tensor]:
        """``n`` negative (src, dst) pairs; ``src=None`` draws the sources too.

        In strict mode rejected pairs are redrawn, round by round, until none is pending
        on any rank or ``rounds`` checks have run; ``avoid`` are destinations to reject.
        """
        key, dev = mix_int(batch_key, self.ctx.rank), self.ctx.device

        def draw(rnd: int) -> tuple[Tensor, Tensor]:
            d = _draw(self.seed, key, _DST, rnd, n, self.num_nodes, dev)
            s = _draw(self.seed, key, _SRC, rnd, n, self.num_nodes, dev) if src is None else src
            return s, d

        s, d = draw(0)
        if not self.strict:
            return s, d
        pending = torch.ones(n, dtype=torch.bool, device=dev)
        for rnd in range(self.rounds):
            if rnd > 0:
                s_new, d_new = draw(rnd)
                s, d = torch.where(pending, s_new, s), torch.where(pending, d_new, d)
            stored = self._check(s, d, pending)
            if stored is None:
                break
            bad = stored | (s == d)
            if avoid is not None:
                bad |= d == avoid
            pending &= bad
        self.unresolved = pending.sum()
        return s, d

    def binary(self, edge_label_index: Tensor, num_neg: int,
               batch_key: int) -> tuple[Tensor, Tensor]:
        """The positives followed by ``B * num_neg`` random pairs, labelled 1 then 0.

        PyG's ``binary`` layout (``NegativeSampling("binary", amount=num_neg)``): both
        endpoints of a negative are uniform over all nodes, independent of the positives.

        Args:
            edge_label_index: ``[2, B]`` positive (src, dst) global ids.
            num_neg: Negatives per positive ``k >= 1``.
            batch_key: Identifies the batch; with the seed and rank it fixes every draw.

        Returns:
            ``(edge_label_index, edge_label)``: int64 ``[2, B * (1 + k)]`` global ids
            (the input first) and float32 ``[B * (1 + k)]`` (``B`` ones, then zeros).
        """
        _check_num_neg(num_neg)
        dev = self.ctx.device
        pos = edge_label_index.to(dev, torch.int64)
        b = pos.shape[1]
        s, d = self._sample(None, b * num_neg, batch_key, None)
        label = torch.zeros(b * (1 + num_neg), dtype=torch.float32, device=dev)
        label[:b] = 1.0
        return torch.cat([pos, torch.stack([s, d])], 1), label

    def triplet(self, src_index: Tensor, dst_pos_index: Tensor, num_neg: int,
                batch_key: int) -> Tensor:
        """``num_neg`` random destinations per positive (PyG's ``triplet`` layout).

        Args:
            src_index: ``[B]`` positive sources (global ids).
            dst_pos_index: ``[B]`` positive destinations; strict mode never returns one
                as a negative of its own positive.
            num_neg: Negatives per positive ``k >= 1``.
            batch_key: Identifies the batch; with the seed and rank it fixes every draw.

        Returns:
            ``dst_neg_index``: int64 ``[B, k]`` global ids; without ``strict`` it equals
            ``negative_destinations(src_index, k, N, seed, mix_int(batch_key, rank))``.
        """
        _check_num_neg(num_neg)
        dev = self.ctx.device
        src = src_index.to(dev, torch.int64).repeat_interleave(num_neg)
        avoid = (dst_pos_index.to(dev, torch.int64).repeat_interleave(num_neg)
                 if self.strict else None)
        _, d = self._sample(src, src.numel(), batch_key, avoid)
        return d.view(-1, num_neg)

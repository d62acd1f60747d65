"""``TypedFeatureStore``: the feature rows of every node type of a typed graph, one store.

GraphBolt's shape: one store keyed by node type.  Each rank holds the rows of the nodes
it owns of every featured type (one array per type, named by the type, in one placement,
:func:`~gnnpar.storage.placement.place_rows`); a row is found from its global id and its
type (``gid`` minus the first global id of that type's owned run), with no id remapping.
A sampled typed batch's rows of all types travel in **one** round trip, as a
:class:`~gnnpar.storage.features.DistFeatureStore` batch's do: the ids of all types go out
in one ``all_to_all`` (grouped by owner, then type, with the counts per owner and type in
one count exchange: the gather's only host read), and the rows come back in a second, one
flat buffer whose per-type segments the counts size.  One cache of remote rows serves
every type: the most referenced halo nodes of any featured type whose rows fit
``cache_bytes`` (:func:`~gnnpar.storage.cache.most_referenced_within`), filled by one
exchange on the first gather.

Counters (kinds of :class:`~gnnpar.comm.CommStats`): ``"feature_ids"`` for requested ids,
``"feature"`` for fetched rows, ``"cache_fill"`` for the rows of the cache fill.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

import torch
from torch import Tensor

from gnnpar.comm import CommStats, PendingExchange, exchange_counts, start_all_to_all_v
from gnnpar.distributed import DistContext
from gnnpar.errors import ConfigError
from gnnpar.ops import count
from gnnpar.storage.cache import RowCache, most_referenced_within
from gnnpar.storage.features import owned_runs
from gnnpar.storage.graph import DistGraph
from gnnpar.storage.placement import place_rows


@dataclass
class _Request:
    """Remote ids of several types in flight: what puts their rows in place on arrival.

    Attributes:
        pending: The rows' exchange.
        misses: Positions (in the ids of all types, type by type) of the ids fetched,
            by owner then type.
        sent: ``[world * T]`` ids fetched from each owner of each type.
        starts: Per featured type, where its ids start among those of all types.
        hit: Whether each id's row is cached; ``slot``: its cache slot.
    """

    pending: PendingExchange
    misses: Tensor
    sent: list[int]
    starts: dict[int, int]
    hit: Tensor
    slot: Tensor


@dataclass
class PendingTypedGather:
    """A typed gather whose remote rows are in flight; :meth:`finish` puts them in place."""

    store: TypedFeatureStore
    out: dict[int, Tensor]
    rem_pos: dict[int, Tensor]
    request: _Request

    def finish(self) -> dict[int, Tensor]:
        """Wait for the remote rows; ``{type: rows}`` of every requested id, in order."""
        for t, (pos, rows) in self.store._arrived(self.request).items():
            self.out[t].index_copy_(0, self.rem_pos[t].index_select(0, pos), rows)
        return self.out


class TypedFeatureStore:
    """Feature rows of every featured node type, each held by the rank that owns the node.

    Args:
        graph: This rank's part of a typed partition.
        ctx: Distributed context (its group carries the exchanges).
        cache_bytes: Budget of the one cache of remote rows (all types); 0 disables it.
            Must be the same on every rank.
        device_budget_bytes: On an accelerator, the owned rows go to the device when they
            take at most this many bytes (default: half the free device memory), else to
            pinned host memory (:func:`~gnnpar.storage.placement.place_rows`).
        stats: Counters that the exchanges are added to.

    Attributes:
        types: The featured node types (index in the layout), ascending.
        names: Each featured type's name (its array's key).
        placement: Where the owned rows live (:mod:`gnnpar.storage.placement`).

    Example::

        store = TypedFeatureStore(graph, ctx, cache_bytes=2**20)
        rows = store.start_gather(out.gids, out.owned_counts, out.node_counts).finish()
        rows[t]          # [n_t, F_t] rows of type t's batch nodes
    """

    def __init__(self, graph: DistGraph, ctx: DistContext, cache_bytes: int = 0,
                 device_budget_bytes: int | None = None,
                 stats: CommStats | None = None) -> None:
        book = graph.meta.types
        if book is None:
            raise ConfigError("the partition is of a homogeneous graph.", field="graph",
                              fix="use DistFeatureStore, or partition a typed graph.")
        if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, int) or cache_bytes < 0:
            raise ConfigError(f"got {cache_bytes!r}; the cache budget is a byte count >= 0.",
                              field="cache_bytes", fix="pass 0 (no cache) or a positive int.")
        lay = book.layout
        self.ctx, self.stats, self.device = ctx, stats, ctx.device
        self.graph = graph.to(self.device)
        self.num_types = len(lay.node_types)
        self.types = tuple(t for t, width in enumerate(lay.feat_dims) if width)
        self.names = {t: lay.node_types[t] for t in self.types}
        self._rows = place_rows({self.names[t]: graph.type_features(t) for t in self.types},
                                self.device, device_budget_bytes)
        self.placement = self._rows.placement
        arrays = self._rows.arrays
        self._width = {t: int(arrays[self.names[t]].shape[1]) for t in self.types}
        self._dtype = (arrays[self.names[self.types[0]]].dtype if self.types
                       else torch.float32)
        starts = book.part_bounds(graph.rank)
        self._first = {t: graph.first_gid + int(starts[t]) for t in self.types}
        row_bytes = [self._width.get(t, 0) * arrays[self.names[t]].element_size()
                     if t in self._width else 0 for t in range(self.num_types)]
        gids = most_referenced_within(self.graph, cache_bytes, row_bytes)
        # Each cached id's position among the cached ids of its type (its row there).
        ctype = self.graph.node_type(gids)
        order = torch.argsort(ctype, stable=True)
        per_type = count(ctype, self.num_types)
        self._cache_sizes: list[int] = per_type.tolist()  # once, at construction
        first = torch.cumsum(per_type, 0) - per_type
        self._within = torch.empty_like(order).index_copy_(
            0, order, torch.arange(gids.numel(), device=gids.device)
            - first.index_select(0, ctype.index_select(0, order)))
        self._cache_by_type = {t: gids.index_select(0, order[a:a + n])
                               for t, a, n in zip(range(self.num_types),
                                                  _prefix(self._cache_sizes),
                                                  self._cache_sizes, strict=True)
                               if t in self._width}
        self._cache = RowCache(gids, None if cache_bytes else {
            name: arrays[name][:0] for name in self.names.values()})

    @property
    def cache_gids(self) -> Tensor:
        """``[C]`` sorted global ids whose rows the cache holds (all types)."""
        return self._cache.gids

    def fill_cache(self) -> None:
        """Fetch the rows of :attr:`cache_gids` (collective; run by the first gather)."""
        request = self._request(self._cache_by_type, "cache_fill", cached=False)
        self._cache.fill({self.names[t]: torch.empty_like(rows).index_copy_(0, pos, rows)
                          for t, (pos, rows) in self._arrived(request).items()})

    def start_gather(self, gids: list[Tensor], owned_counts: list[list[int]],
                     block_sizes: list[list[int]]) -> PendingTypedGather:
        """Rows of a sampled typed batch's nodes of every featured type (collective).

        Remote rows of all types are requested in one exchange; owned and cached rows are
        copied while they travel, and :meth:`PendingTypedGather.finish` waits for the
        rest.  The only host read is the exchange's counts.

        Args:
            gids: Per node type, its batch nodes' global ids, in blocks (hops), each
                block's own nodes first (:class:`~gnnpar.sampling.typed.TypedSamplerOutput`).
            owned_counts: ``[T][L + 1]`` per type and block, its own leading ids.
            block_sizes: ``[T][L + 1]`` per type and block, its length.
        """
        if not self._cache.filled:
            self.fill_cache()
        dev = self.device
        out, rem_pos, runs, remote = {}, {}, {}, {}
        for t in self.types:
            ids = gids[t].to(dev, torch.int64)
            out[t] = torch.empty((ids.numel(), self._width[t]), dtype=self._dtype, device=dev)
            runs[t], rem_pos[t] = owned_runs(owned_counts[t], block_sizes[t], dev)
            remote[t] = ids.index_select(0, rem_pos[t])
            for lo, hi in runs[t]:
                self._rows.take(self.names[t], ids[lo:hi] - self._first[t], out=out[t][lo:hi])
        request = self._request(remote, "feature", cached=True)
        for t in self.types:  # cached rows while the remote ones travel
            if self._cache_sizes[t] and remote[t].numel():
                at = slice(request.starts[t], request.starts[t] + remote[t].numel())
                hit = request.hit[at]
                slot = torch.where(hit, self._within.index_select(0, request.slot[at]), 0)
                rows = self._cache.take(self.names[t], slot)
                pos = rem_pos[t]
                out[t].index_copy_(0, pos, torch.where(hit[:, None], rows,
                                                       out[t].index_select(0, pos)))
        return PendingTypedGather(self, out, rem_pos, request)

    def _request(self, remote: dict[int, Tensor], kind: str, cached: bool) -> _Request:
        """Send the remote ids of every type (not cached ones) and serve the peers'."""
        ctx, world, num = self.ctx, self.ctx.world_size, self.num_types
        sizes = [remote[t].numel() for t in self.types]
        starts = dict(zip(self.types, _prefix(sizes), strict=True))
        ids = (torch.cat([remote[t] for t in self.types]) if self.types
               else torch.zeros(0, dtype=torch.int64, device=self.device))
        rtype = torch.cat([torch.full((n,), t, dtype=torch.int64, device=self.device)
                           for t, n in zip(self.types, sizes, strict=True)]
                          ) if self.types else ids
        if cached:
            hit, slot = self._cache.lookup(ids)
        else:
            hit, slot = torch.zeros_like(ids, dtype=torch.bool), torch.zeros_like(ids)
        key = torch.where(hit, world * num, self.graph.owner(ids) * num + rtype)
        order = torch.argsort(key, stable=True)  # misses by owner, then type; hits last
        sent, got = exchange_counts(ctx, count(key, world * num + 1)[:world * num])
        send = [sum(sent[d * num:(d + 1) * num]) for d in range(world)]
        recv = [sum(got[s * num:(s + 1) * num]) for s in range(world)]
        misses = order[:sum(send)]
        asked = start_all_to_all_v(ctx, ids.index_select(0, misses), send, recv,
                                   stats=self.stats, kind="feature_ids").wait()
        served = self._serve(asked, got)
        width = [self._width.get(t, 0) for t in range(num)]
        elems = [[c * width[i % num] for i, c in enumerate(counts[r * num:(r + 1) * num])]
                 for counts in (got, sent) for r in range(world)]
        pending = start_all_to_all_v(ctx, served, [sum(e) for e in elems[:world]],
                                     [sum(e) for e in elems[world:]], stats=self.stats,
                                     kind=kind)
        return _Request(pending, misses, sent, starts, hit, slot)

    def _serve(self, asked: Tensor, got: list[int]) -> Tensor:
        """One flat buffer of the rows peers asked for, by peer then type."""
        world, num, dev = self.ctx.world_size, self.num_types, self.device
        at = list(accumulate(got, initial=0))  # segment (peer s, type t) is s * num + t
        pieces: dict[tuple[int, int], Tensor] = {}
        for t in self.types:
            segs = [(at[s * num + t], got[s * num + t]) for s in range(world)]
            pos = torch.cat([torch.arange(a, a + n, device=dev) for a, n in segs])
            rows = self._rows.take(self.names[t], asked.index_select(0, pos) - self._first[t])
            for s, first in zip(range(world), _prefix([n for _, n in segs]), strict=True):
                pieces[s, t] = rows[first:first + segs[s][1]].reshape(-1)
        flat = [pieces[s, t] for s in range(world) for t in self.types]
        return torch.cat(flat) if flat else torch.zeros(0, dtype=self._dtype, device=dev)

    def _arrived(self, request: _Request) -> dict[int, tuple[Tensor, Tensor]]:
        """Wait for the rows; per type, their positions in its remote ids and the rows."""
        flat = request.pending.wait()
        world, num, sent = self.ctx.world_size, self.num_types, request.sent
        at = list(accumulate(sent, initial=0))  # the misses' segment (owner d, type t)
        width = [self._width.get(t, 0) for t in range(num)]
        offsets = list(accumulate((c * width[i % num] for i, c in enumerate(sent)),
                                  initial=0))
        result = {}
        for t in self.types:
            segs = [d * num + t for d in range(world)]
            rows = torch.cat([flat[offsets[i]:offsets[i + 1]].view(-1, width[t])
                              for i in segs])
            pos = torch.cat([request.misses[at[i]:at[i + 1]] for i in segs])
            result[t] = (pos - request.starts[t], rows)
        return result


def _prefix(sizes: list[int]) -> list[int]:
    """Start of each block of consecutive blocks of these sizes."""
    return list(accumulate(sizes, initial=0))[:-1]

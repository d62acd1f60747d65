"""``DistFeatureStore``: per-node arrays (features, labels) sharded by owner, gathered by id.

Each rank holds the rows of the nodes it owns in one placement
(:mod:`gnnpar.storage.placement`): on its device when they fit a memory budget, else in
pinned host memory that the device reads in place; on a CPU-only rank they stay
memory-mapped from the partition, so the page cache, not the process, holds them.  Every
lookup (owners, cache slots, rows) runs on the device, on the device's copy of the
partition book.  :meth:`gather_many` returns the rows of any global ids in request order:
owned rows are read locally, rows cached from an earlier fill are read from the cache
(:mod:`gnnpar.storage.cache`), and the rest are fetched from their owners in **one**
round trip — the distinct ids go out in one ``all_to_all``, the rows come back in a
second, all requested arrays packed into one byte row so that features and labels share
the trip (and are unpacked as views, without a copy).  Every rank serves its peers'
requests in the same collective, so every gather is collective: all ranks call it
equally often, with the same ``names``.

Ranks on one machine read each other's rows from the partition's files instead
(``peers``, :mod:`gnnpar.storage.peers`): only rows of ranks on other machines travel,
and when every rank shares the machine a gather is local, with no collective.

The optional cache holds the rows of the most referenced halo nodes, as many as
``cache_bytes`` allows (0: no cache, no exchange); it is filled by one exchange,
:meth:`fill_cache`, on the first gather.

Counters (kinds of :class:`~gnnpar.comm.CommStats`): ``"feature_ids"`` for requested ids,
``"feature"`` for fetched rows, ``"cache_fill"`` for the rows of the cache fill.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from gnnpar.comm import CommStats, PendingExchange, exchange_counts, start_all_to_all_v
from gnnpar.distributed import DistContext
from gnnpar.errors import ConfigError
from gnnpar.ops import count, from_mmap
from gnnpar.storage.cache import RowCache, most_referenced_halo
from gnnpar.storage.graph import DistGraph
from gnnpar.storage.peers import PeerParts
from gnnpar.storage.placement import place_rows


def _row_layout(arrays: dict[str, Tensor]) -> tuple[dict[str, tuple[int, int]], int]:
    """Byte offset and width of each array in a packed row, and the row width.

    Arrays go widest element first and the row is padded to a multiple of 8 bytes, so
    every array's columns of a packed ``[n, width]`` ``uint8`` tensor can be viewed in
    its own dtype without a copy.
    """
    layout, offset = {}, 0
    for name, a in sorted(arrays.items(), key=lambda kv: -kv[1].element_size()):
        width = a.element_size() * int(np.prod(a.shape[1:]))
        layout[name] = (offset, width)
        offset += width
    return layout, -(-offset // 8) * 8


def _unpack(packed: Tensor, layout: dict[str, tuple[int, int]],
            protos: dict[str, Tensor]) -> dict[str, Tensor]:
    """Views of each array's rows inside a packed ``uint8`` tensor (no copy)."""
    return {name: packed[:, off:off + width].view(protos[name].dtype).reshape(
        packed.shape[0], *protos[name].shape[1:]) for name, (off, width) in layout.items()}


def _place(out: Tensor, rem_pos: Tensor, which: Tensor, inverse: Tensor | None,
           rows: Tensor, num_remote: int) -> None:
    """Write ``rows``, those of remote ids ``which`` (indices into the remote list), in place.

    Distinct ids (``inverse is None``): remote id ``i`` sits at ``rem_pos[i]``.  Repeated
    ids: the remote list is the distinct ids, and every request of an id gets its row.
    """
    if inverse is None:
        out.index_copy_(0, rem_pos.index_select(0, which), rows)
        return
    row_of = torch.full((num_remote,), -1, dtype=torch.int64, device=out.device)
    row_of[which] = torch.arange(which.numel(), device=out.device)
    take = row_of.index_select(0, inverse)
    sel = torch.nonzero(take >= 0).squeeze(1)
    out.index_copy_(0, rem_pos.index_select(0, sel), rows.index_select(0, take[sel]))


def owned_runs(owned_counts: list[int], block_sizes: list[int], device: torch.device
               ) -> tuple[list[tuple[int, int]], Tensor]:
    """The owned runs ``(lo, hi)`` of a sampled batch's blocks, and its remote positions."""
    runs, remote, lo = [], [], 0
    for own, size in zip(owned_counts, block_sizes, strict=True):
        if own:
            runs.append((lo, lo + own))
        if size > own:
            remote.append(torch.arange(lo + own, lo + size, device=device))
        lo += size
    rem = torch.cat(remote) if remote else torch.zeros(0, dtype=torch.int64, device=device)
    return runs, rem


@dataclass
class PendingGather:
    """A gather whose remote rows are in flight; :meth:`finish` puts them in place."""

    store: DistFeatureStore
    out: dict[str, Tensor]
    names: tuple[str, ...]
    pending: PendingExchange
    rem_pos: Tensor
    misses: Tensor
    inverse: Tensor | None
    num_remote: int

    def finish(self) -> dict[str, Tensor]:
        """Wait for the remote rows; ``{name: rows}`` of every requested id, in order."""
        arrived = self.store._arrived(self.pending.wait(), self.names)
        for n in self.names:
            _place(self.out[n], self.rem_pos, self.misses, self.inverse, arrived[n],
                   self.num_remote)
        return self.out


class DistFeatureStore:
    """Features and labels of all nodes, each row held by the rank that owns the node.

    It composes a placement of the owned rows (a
    :class:`~gnnpar.storage.placement.LocalRows`) and a cache of remote rows (a
    :class:`~gnnpar.storage.cache.RowCache`), and adds the collective gather that serves
    every rank's requests.

    Args:
        graph: This rank's part.
        ctx: Distributed context (its group carries the exchanges).
        device: Where gathered rows are returned (default ``ctx.device``).
        cache_bytes: Budget of the cache of remote rows (``x`` and ``y`` together);
            0 disables it.  Must be the same on every rank.
        device_budget_bytes: On an accelerator, the owned rows go to the device when they
            take at most this many bytes (default: half the free device memory), else
            to pinned host memory read by the device in place.  Ignored on the CPU.
        stats: Counters that the exchanges are added to.
        arrays: Per-node arrays of the owned nodes by name, ``[num_owned, ...]`` each
            (default: ``x``, the part's features, and ``y``, its labels).  Must name the
            same arrays, of the same dtypes and widths, on every rank.
        types: Typed graphs: the arrays hold rows of the owned nodes of these node types
            only, in local-id order (the learnt rows of the featureless types,
            :class:`~gnnpar.storage.embedding.DistEmbedding`; the features of every type
            are a :class:`~gnnpar.storage.typed.TypedFeatureStore`'s); every gathered id
            must be of one of them.
        kind: Counter kind of gathered rows (and ``{kind}_ids`` of their requests).
        peers: The parts of the other ranks on this machine
            (:func:`~gnnpar.storage.peers.peer_parts`, for these ``arrays``): their rows
            are read in place, not exchanged, and a gather exchanges nothing when every
            rank is here.  Given on every rank or on none.

    Attributes:
        placement: Where owned rows live (:mod:`gnnpar.storage.placement`):
            ``"device"``, ``"pinned"``, ``"host"`` (a CPU rank: the memory maps) or
            ``"pinned-host"`` (pinned rows the device could not map: gathered on the host,
            one host read of the indices per gather).
        row_bytes: Bytes of one node's ``x`` and ``y`` packed for the wire (padded to a
            multiple of 8); the cache holds ``cache_bytes // row_bytes`` rows.

    Example::

        features = gnnpar.DistFeatureStore(graph, ctx, cache_bytes=64 * 2**20)
        rows = features.gather_many(torch.tensor([0, 5, 17]))   # collective, every rank
        rows["x"].shape, rows["y"].shape                       # ([3, F], [3])
    """

    def __init__(
        self,
        graph: DistGraph,
        ctx: DistContext,
        device: torch.device | str | None = None,
        cache_bytes: int = 0,
        device_budget_bytes: int | None = None,
        stats: CommStats | None = None,
        arrays: Mapping[str, np.ndarray | Tensor] | None = None,
        types: tuple[int, ...] | None = None,
        kind: str = "feature",
        peers: PeerParts | None = None,
    ) -> None:
        if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, int) or cache_bytes < 0:
            raise ConfigError(f"got {cache_bytes!r}; the cache budget is a byte count >= 0.",
                              field="cache_bytes", fix="pass 0 (no cache) or a positive int.")
        self.ctx = ctx
        self.peers = peers
        self.device = torch.device(device) if device is not None else ctx.device
        self.graph = graph.to(self.device)  # the partition book where the ids are
        self.stats = stats
        if arrays is None:
            arrays = {"x": graph.features(), "y": graph.part.label}
        self.types = types
        self.kind = kind
        self._shift, num_rows = self._row_shift(types)
        self._bounds = None if types is None else self.graph.type_bounds
        for name, a in arrays.items():
            if len(a) != num_rows:
                raise ConfigError(f"array {name!r} has {len(a)} rows, this rank owns "
                                  f"{num_rows} nodes{' of these types' if types else ''}.",
                                  field="arrays", fix="pass one row per owned node.")
        self._rows = place_rows(
            {n: a if isinstance(a, Tensor) else from_mmap(a) for n, a in arrays.items()},
            self.device, device_budget_bytes)
        self.placement, self._owned = self._rows.placement, self._rows.arrays
        self.row_bytes = _row_layout(self._owned)[1]
        gids = most_referenced_halo(self.graph, cache_bytes // max(self.row_bytes, 1), types)
        # No cache (the same budget on every rank): nothing to fill, no exchange.
        self._cache = RowCache(gids, None if cache_bytes else {
            n: a[:0] for n, a in self._owned.items()})

    def _row_shift(self, types: tuple[int, ...] | None) -> tuple[Tensor | None, int]:
        """Per node type, what to subtract from a local id for its row; the row count.

        ``None`` (all owned nodes, row = local id) without ``types``; else the types not
        held get a shift that sends their rows out of range.
        """
        g = self.graph
        if types is None:
            return None, g.num_owned
        book = g.meta.types
        if book is None:
            raise ConfigError("types= needs a typed partition.", field="types",
                              fix="drop types=, or partition a typed graph.")
        counts = book.counts[g.rank]
        shift, held = [], 0
        for t, start in enumerate(book.part_bounds(g.rank)[:-1].tolist()):
            shift.append(start - held if t in types else 1 << 62)
            held += counts[t] if t in types else 0
        return torch.tensor(shift, device=self.device), held

    def rows_of(self, gids: Tensor) -> Tensor:
        """Row of each owned global id in the held arrays (local, not collective)."""
        local = gids - self.graph.first_gid
        if self._shift is None or self._bounds is None:
            return local
        seg = torch.searchsorted(self._bounds, gids, right=True) - 1
        return local - self._shift.index_select(0, seg - self.graph.rank * self._shift.numel())

    @property
    def cache_gids(self) -> Tensor:
        """``[C]`` sorted global ids whose rows the cache holds."""
        return self._cache.gids

    def array(self, name: str) -> Tensor:
        """The held rows of array ``name`` (the store's own tensor: writes show in gathers)."""
        return self._owned[name]

    @property
    def names(self) -> tuple[str, ...]:
        """Names of the arrays held (by default ``("x", "y")``)."""
        return tuple(self._owned)

    def owned_rows(self, name: str, gids: Tensor) -> Tensor:
        """Rows of array ``name`` for global ids this rank owns (local, not collective)."""
        return self._rows.take(name, self.rows_of(gids.to(self.device)))

    def _serve(self, ids: Tensor, names: tuple[str, ...]) -> Tensor:
        """The rows peers asked for: one array as it is, several packed into byte rows."""
        local = self.rows_of(ids)
        if len(names) == 1:
            return self._rows.take(names[0], local)
        layout, width = _row_layout({n: self._owned[n] for n in names})
        served = torch.empty((local.numel(), width), dtype=torch.uint8, device=self.device)
        for n, view in _unpack(served, layout, self._owned).items():
            view[:] = self._rows.take(n, local)
        return served

    def _arrived(self, rows: Tensor, names: tuple[str, ...]) -> dict[str, Tensor]:
        if len(names) == 1:
            return {names[0]: rows}
        return _unpack(rows, _row_layout({n: self._owned[n] for n in names})[0], self._owned)

    def _exchange(self, ids: Tensor, send_counts: list[int], recv_counts: list[int],
                  names: tuple[str, ...], kind: str) -> PendingExchange:
        """Send ``ids`` (grouped by owner), serve the peers' requests, start the rows back."""
        req = start_all_to_all_v(self.ctx, ids, send_counts, recv_counts, stats=self.stats,
                                 kind=f"{self.kind}_ids").wait()
        return start_all_to_all_v(self.ctx, self._serve(req, names), recv_counts,
                                  send_counts, stats=self.stats, kind=kind)

    def fill_cache(self) -> None:
        """Fetch the rows of :attr:`cache_gids` (collective; run by the first gather)."""
        ids = self.cache_gids
        send = count(self.graph.owner(ids), self.ctx.world_size)
        send_counts, recv_counts = exchange_counts(self.ctx, send)
        rows = self._exchange(ids, send_counts, recv_counts, self.names, "cache_fill").wait()
        self._cache.fill(self._arrived(rows, self.names))

    def gather_many(self, gids: Tensor, names: tuple[str, ...] = ("x", "y"),
                    owned_counts: list[int] | None = None,
                    block_sizes: list[int] | None = None) -> dict[str, Tensor]:
        """Rows of ``gids`` of each array in ``names``, in request order (collective).

        Remote rows are requested first; owned and cached rows are copied while they
        travel.  Two ways to call it:

        * any ids (repeats allowed): a remote id is fetched once;
        * a sampled batch's distinct ids laid out in blocks, each block's own nodes first
          (:class:`~gnnpar.sampling.neighbor.SamplerOutput`, ``owned_counts = num_owned_nodes``,
          ``block_sizes = num_sampled_nodes``): owned rows are copied run by run, and the
          only host synchronisation is reading the exchanged request counts.

        Args:
            gids: ``[n]`` global node ids.
            names: Arrays to gather, a subset of :attr:`names`; the same on every rank.
            owned_counts: Per block, how many of its leading ids this rank owns.
            block_sizes: Per block, its length (the blocks tile ``gids``).

        Returns:
            ``{name: rows}`` on :attr:`device`.

        Shapes:
            gids: ``[n]``; ``x``: ``[n, F]``; ``y``: ``[n]``.
        """
        return self.start_gather(gids, names, owned_counts, block_sizes).finish()

    def start_gather(self, gids: Tensor, names: tuple[str, ...] = ("x", "y"),
                     owned_counts: list[int] | None = None,
                     block_sizes: list[int] | None = None) -> PendingGather:
        """:meth:`gather_many` up to the arrival of the remote rows (collective).

        The ids and the owned and cached rows are handled here; the remote rows are in
        flight when it returns, so the caller can work (train on the previous batch) on
        this thread until :meth:`PendingGather.finish`.  Arguments as :meth:`gather_many`.
        """
        for n in names:
            if n not in self._owned:
                raise ConfigError(f"no array {n!r}; the store holds {self.names}.",
                                  field="names", fix=f"ask for some of {self.names}.")
        if not self._cache.filled:
            self.fill_cache()
        g, ctx, dev = self.graph, self.ctx, self.device
        gids = gids.to(dev, torch.int64)
        out = {n: torch.empty((gids.numel(), *self._owned[n].shape[1:]),
                              dtype=self._owned[n].dtype, device=dev) for n in names}
        slices: list[tuple[int, int]] = []
        own_pos: Tensor | None = None
        inverse: Tensor | None = None
        if owned_counts is not None and block_sizes is not None:
            slices, rem_pos = owned_runs(owned_counts, block_sizes, dev)
            remote = gids.index_select(0, rem_pos)
        else:
            owned = g.is_owned(gids)
            rem_pos = torch.nonzero(~owned).squeeze(1)
            own_pos = torch.nonzero(owned).squeeze(1)
            remote, inverse = torch.unique(gids.index_select(0, rem_pos), return_inverse=True)
        hit, slot = self._cache.lookup(remote)
        world, peers = ctx.world_size, self.peers
        # Key of each remote id: its owner (fetched), world (cached), world + 1 + owner
        # (read from a co-located peer's part).
        owner = g.owner(remote)
        key = torch.where(hit, world, owner if peers is None else torch.where(
            peers.here.index_select(0, owner), world + 1 + owner, owner))
        order = torch.argsort(key, stable=True)  # misses grouped by owner, then the rest
        per_key = count(key, world + 1 if peers is None else 2 * world + 1)
        if peers is not None and peers.covers_all:  # nothing crosses a process boundary
            send_counts = recv_counts = [0] * world
            pending = PendingExchange(self._serve(remote[:0], names), recv_counts)
        else:
            send_counts, recv_counts = exchange_counts(ctx, per_key[:world])
            pending = self._exchange(remote.index_select(0, order[:sum(send_counts)]),
                                     send_counts, recv_counts, names, self.kind)
        misses, hits = order[:sum(send_counts)], order[sum(send_counts):]
        if peers is not None:  # a CPU rank: the counts of the local keys are on the host
            ends = torch.cumsum(per_key[world:], 0).tolist()
            read = {r: hits[ends[r]:ends[r + 1]] for r in peers.ranks}
            hits = hits[:ends[0]]
        for n in names:  # owned, cached and co-located rows while the remote ones travel
            for lo, hi in slices:
                self._rows.take(n, self.rows_of(gids[lo:hi]), out=out[n][lo:hi])
            if own_pos is not None:
                out[n].index_copy_(0, own_pos, self._rows.take(
                    n, self.rows_of(gids.index_select(0, own_pos))))
            if hits.numel():
                rows = self._cache.take(n, slot.index_select(0, hits))
                _place(out[n], rem_pos, hits, inverse, rows, remote.numel())
            if peers is not None:
                for r, which in read.items():
                    rows = peers.take(r, n, remote.index_select(0, which))
                    _place(out[n], rem_pos, which, inverse, rows, remote.numel())
        return PendingGather(self, out, names, pending, rem_pos, misses, inverse,
                             remote.numel())

    def gather(self, gids: Tensor) -> Tensor:
        """Feature rows ``[n, F]`` of ``gids`` in request order (collective)."""
        return self.gather_many(gids, ("x",))["x"]

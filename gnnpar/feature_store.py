"""``DistFeatureStore``: per-node arrays (features, labels) sharded by owner, gathered by id.

Each rank holds the rows of the nodes it owns — on its device when they fit a memory
budget, else in (pinned, for a GPU) CPU memory; on a CPU-only rank they stay memory-mapped
from the partition, so the page cache, not the process, holds them.  :meth:`gather_many`
returns the rows of any global ids in request order: owned rows are read locally, rows
cached from an earlier fill are read from the cache, and the rest are fetched from their
owners in **one** round trip — the distinct ids go out in one ``all_to_all``, the rows
come back in a second, all requested arrays packed into one byte row so that features and
labels share the trip (and are unpacked as views, without a copy).  Every rank serves its
peers' requests in the same collective, so every gather is collective: all ranks call it
equally often, with the same ``names``.

The optional cache holds the rows of the halo nodes that most owned nodes point to (the
in-edges stored in this rank's part: how often a one-hop sample can reach them), then,
with ``halo_hops > 1``, those that most stored halo nodes point to, as many as
``cache_bytes`` allows (0: no cache, no exchange); it is filled by one exchange,
:meth:`fill_cache`, on the first gather.

Counters (kinds of :class:`~gnnpar.comm.CommStats`): ``"feature_ids"`` for requested ids,
``"feature"`` for fetched rows, ``"cache_fill"`` for the rows of the cache fill.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import numpy as np
import torch
from torch import Tensor

from gnnpar.comm import CommStats, PendingExchange, all_to_all_v, start_all_to_all_v
from gnnpar.distributed import DistContext
from gnnpar.errors import ConfigError
from gnnpar.graph import DistGraph

ARRAYS = {"x": "feat", "y": "label"}
"""Default arrays: store name -> the :class:`~gnnpar.partition.format.Partition` array."""


def _from_mmap(a: np.ndarray) -> Tensor:
    """A tensor over a read-only memory map, without copying (never written to)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(a)


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


class DistFeatureStore:
    """Features and labels of all nodes, each row held by the rank that owns the node.

    Args:
        graph: This rank's part.
        ctx: Distributed context (its group carries the exchanges).
        device: Where gathered rows are returned (default ``ctx.device``).
        cache_bytes: Budget of the cache of remote rows (``x`` and ``y`` together);
            0 disables it.  Must be the same on every rank.
        device_budget_bytes: On a CUDA device, the owned rows go to the device when they
            take at most this many bytes (default: half the free device memory), else
            to pinned CPU memory.  Ignored on CPU.
        stats: Counters that the exchanges are added to.
        arrays: Per-node arrays of the owned nodes by name, ``[num_owned, ...]`` each
            (default: ``x``, the part's features, and ``y``, its labels).  Must name the
            same arrays, of the same dtypes and widths, on every rank.

    Attributes:
        placement: Where owned rows live: ``"device"``, ``"pinned"`` or ``"mmap"``.
        row_bytes: Bytes of one node's ``x`` and ``y`` packed for the wire (padded to a
            multiple of 8); the cache holds ``cache_bytes // row_bytes`` rows.
        cache_gids: ``[C]`` sorted global ids whose rows the cache holds.

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
    ) -> None:
        if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, int) or cache_bytes < 0:
            raise ConfigError(f"got {cache_bytes!r}; the cache budget is a byte count >= 0.",
                              field="cache_bytes", fix="pass 0 (no cache) or a positive int.")
        self.graph = graph
        self.ctx = ctx
        self.device = torch.device(device) if device is not None else ctx.device
        self.stats = stats
        if arrays is None:
            arrays = {name: getattr(graph.part, src) for name, src in ARRAYS.items()}
        for name, a in arrays.items():
            if len(a) != graph.num_owned:
                raise ConfigError(f"array {name!r} has {len(a)} rows, this rank owns "
                                  f"{graph.num_owned} nodes.", field="arrays",
                                  fix="pass one row per owned node.")
        self.placement, self._owned = self._place(dict(arrays), device_budget_bytes)
        self.row_bytes = _row_layout(self._owned)[1]
        self.cache_gids = self._choose_cache(cache_bytes // max(self.row_bytes, 1))
        # No cache (the same budget on every rank): nothing to fill, no exchange.
        self._cache: dict[str, Tensor] | None = None if cache_bytes else {
            n: a[:0] for n, a in self._owned.items()}

    def _place(self, arrays: dict[str, np.ndarray | Tensor],
               budget: int | None) -> tuple[str, dict[str, Tensor]]:
        owned = {name: a if isinstance(a, Tensor) else _from_mmap(a)
                 for name, a in arrays.items()}
        if self.device.type != "cuda":
            return "mmap", owned
        nbytes = sum(a.numel() * a.element_size() for a in owned.values())
        if budget is None:
            budget = torch.cuda.mem_get_info(self.device)[0] // 2
        if nbytes <= budget:
            return "device", {k: v.to(self.device) for k, v in owned.items()}
        return "pinned", {k: v.pin_memory() for k, v in owned.items()}

    def _choose_cache(self, capacity: int) -> Tensor:
        """Up to ``capacity`` halo ids, most referenced first.

        Ranked by the in-edges of owned nodes they start, then by those of stored halo
        nodes (``halo_hops > 1``).
        """
        g = self.graph
        if capacity == 0 or g.num_halo == 0:
            return g.halo_gids[:0].clone()

        def refs(src: Tensor) -> Tensor:
            return torch.bincount(src[src >= g.num_owned] - g.num_owned, minlength=g.num_halo)

        n_owned_edges = int(g.indptr[g.num_owned])
        one_hop, deeper = refs(g.indices[:n_owned_edges]), refs(g.indices[n_owned_edges:])
        score = one_hop * (int(deeper.max()) + 1) + deeper
        top = torch.argsort(score, descending=True, stable=True)[:capacity]
        return torch.sort(g.halo_gids[top]).values

    @property
    def names(self) -> tuple[str, ...]:
        """Names of the arrays held (by default ``("x", "y")``)."""
        return tuple(self._owned)

    def _local_rows(self, name: str, local: Tensor) -> Tensor:
        a = self._owned[name]
        return a.index_select(0, local.to(a.device)).to(self.device, non_blocking=True)

    def _request(self, gids: Tensor, names: tuple[str, ...], kind: str) -> PendingExchange:
        """Ask the owners for the rows of remote ``gids``; serve the peers' requests.

        ``gids`` are distinct and ascending, hence already grouped by owner (parts own
        contiguous id ranges), so the rows arrive in the order of ``gids``.

        Returns:
            The exchange of packed rows in flight.
        """
        ctx, g = self.ctx, self.graph
        counts = torch.bincount(g.owner(gids), minlength=ctx.world_size)
        req, req_counts = all_to_all_v(ctx, gids.to(ctx.device), counts,
                                       stats=self.stats, kind="feature_ids")
        local = req.cpu() - g.first_gid
        layout, width = _row_layout({n: self._owned[n] for n in names})
        served = torch.empty((local.numel(), width), dtype=torch.uint8, device=ctx.device)
        for n, view in _unpack(served, layout, self._owned).items():
            view[:] = self._local_rows(n, local).to(ctx.device)
        return start_all_to_all_v(ctx, served, req_counts, counts, stats=self.stats, kind=kind)

    def _receive(self, pending: PendingExchange, names: tuple[str, ...]) -> dict[str, Tensor]:
        """Wait for the rows of :meth:`_request`: a view of each array's rows."""
        layout, _ = _row_layout({n: self._owned[n] for n in names})
        return _unpack(pending.wait().to(self.device), layout, self._owned)

    def _lookup_cache(self, gids: Tensor) -> tuple[Tensor, Tensor]:
        """Whether each id's row is cached, and its cache slot (valid where cached)."""
        cached = self.cache_gids
        if cached.numel() == 0:
            return torch.zeros(gids.numel(), dtype=torch.bool), torch.zeros_like(gids)
        slot = torch.searchsorted(cached, gids).clamp_(max=cached.numel() - 1)
        return cached[slot] == gids, slot

    def fill_cache(self) -> None:
        """Fetch the rows of :attr:`cache_gids` (collective; run by the first gather)."""
        rows = self._receive(self._request(self.cache_gids, self.names, "cache_fill"),
                             self.names)
        self._cache = {n: rows[n].contiguous() for n in self.names}

    def gather_many(self, gids: Tensor, names: tuple[str, ...] = ("x", "y")) -> dict[str, Tensor]:
        """Rows of ``gids`` of each array in ``names``, in request order (collective).

        Remote rows are requested first; owned and cached rows are copied while they
        travel.

        Args:
            gids: ``[n]`` global node ids (repeats allowed; a remote id is fetched once).
            names: Arrays to gather, a subset of :attr:`names`; the same on every rank.

        Returns:
            ``{name: rows}`` on :attr:`device`.

        Shapes:
            gids: ``[n]``; ``x``: ``[n, F]``; ``y``: ``[n]``.
        """
        for n in names:
            if n not in self._owned:
                raise ConfigError(f"no array {n!r}; the store holds {self.names}.",
                                  field="names", fix=f"ask for some of {self.names}.")
        if self._cache is None:
            self.fill_cache()
        assert self._cache is not None
        g = self.graph
        gids = gids.cpu().to(torch.int64)
        owned = g.is_owned(gids)
        remote = torch.nonzero(~owned).squeeze(1)
        hit, slot = self._lookup_cache(gids[remote])
        miss = remote[~hit]
        want, inv = torch.unique(gids[miss], return_inverse=True)  # sorted: see _request
        pending = self._request(want, names, "feature")
        out = {n: torch.empty((gids.numel(), *self._owned[n].shape[1:]),
                              dtype=self._owned[n].dtype, device=self.device) for n in names}
        pos = torch.nonzero(owned).squeeze(1)
        cached, slot = remote[hit].to(self.device), slot[hit].to(self.device)
        for n in names:
            out[n][pos.to(self.device)] = self._local_rows(n, gids[pos] - g.first_gid)
            out[n][cached] = self._cache[n][slot]
        rows = self._receive(pending, names)
        where = inv.to(self.device)
        for n in names:
            out[n][miss.to(self.device)] = rows[n][where]
        return out

    def gather(self, gids: Tensor) -> Tensor:
        """Feature rows ``[n, F]`` of ``gids`` in request order (collective)."""
        return self.gather_many(gids, ("x",))["x"]

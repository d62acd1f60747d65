"""The parts of the ranks on this machine, read in place from the partition's files.

Ranks on one machine share its page cache.  A CPU rank can therefore read what a peer on
the same machine owns -- its feature rows, its adjacency -- straight from that peer's
part files (memory-mapped, read-only), as DistDGL's trainers read their machine's
partition from shared memory, instead of asking the peer in a collective: no request,
no reply, no wait for the peer, and no second copy (the pages are the machine's).

* :class:`~gnnpar.storage.features.DistFeatureStore` reads co-located peers' rows here
  and exchanges only those of ranks on other machines; when every rank shares the
  machine a gather needs no collective at all.
* :class:`~gnnpar.sampling.neighbor.DistNeighborSampler`, when every rank shares the
  machine, samples every frontier node here, from its owner's adjacency, with the keys
  its owner would use (sampling is a pure function of the ids and keys, not of who
  samples): the same batches, and no collective per hop.

Only arrays a part stores are read this way (:data:`STORED_ARRAYS`: the features and the
labels), only CPU ranks read them (an accelerator's rows live in its own memory, and its
peers are reached through NCCL), and only from a partition directory every rank names
alike (:attr:`~gnnpar.storage.graph.DistGraph.part_dir`).  A peer counts as co-located
when its host name is this rank's and its part directory is the very one this rank sees
(the same device and inode), so machines that share a host name, or hold copies of the
partition, exchange as before.  Each rank verifies its own part when it loads it; a
peer's files are checked for dtype and shape here.
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from gnnpar.artifacts.arrays import load_npy, release
from gnnpar.comm import all_gather_ints, colocated_ranks
from gnnpar.device import accelerated
from gnnpar.distributed import DistContext
from gnnpar.errors import PartitionError
from gnnpar.ops import from_mmap
from gnnpar.partition.format import (
    FEATURE_DTYPES,
    PART_DTYPES,
    PartitionMeta,
    part_dir_name,
)
from gnnpar.storage.graph import DistGraph, stored_features

STORED_ARRAYS = ("x", "y")
"""Arrays of a feature store that a part stores: ``x`` (``feat.npy``), ``y`` (``label.npy``)."""


class PeerAdjacency(NamedTuple):
    """A co-located part's CSC of in-edges over its local ids (memory-mapped, no copy)."""

    indptr: Tensor
    """int64 ``[n_local + 1]`` row pointer."""
    indices: Tensor
    """int64 ``[nnz]`` source local id of each in-edge."""
    first_gid: int
    """Global id of the part's first owned node (owned local id ``s`` is ``first_gid + s``)."""
    num_owned: int
    """Owned nodes of the part (local ids from ``num_owned`` on are its halo)."""
    halo_gids: Tensor
    """int64 ``[n_halo]`` global id of each halo node."""


class PeerParts:
    """What co-located ranks' parts hold, by rank: owned rows and adjacency (read-only).

    Args:
        part_dir: The partition directory.
        meta: Its metadata.
        ranks: The other ranks on this machine.
        names: The arrays whose rows :meth:`take` reads (of :data:`STORED_ARRAYS`).
        world_size: Ranks in the group.
        covers_all: Every rank reads every other rank's part: nothing needs exchanging.
            The same on every rank (a rank that skips a collective its peers run would
            hang them): :func:`peer_parts` agrees on it.

    Attributes:
        here: bool ``[world_size]``: whether each rank's part is read here.
    """

    def __init__(self, part_dir: Path, meta: PartitionMeta, ranks: list[int],
                 names: tuple[str, ...], world_size: int, covers_all: bool = False) -> None:
        self.part_dir, self.meta = part_dir, meta
        self.offsets = torch.tensor(meta.offsets, dtype=torch.int64)
        self.here = torch.zeros(world_size, dtype=torch.bool)
        self.here[ranks] = True
        self.covers_all = covers_all
        self._maps: list[np.ndarray] = []
        self._rows = {r: self._row_maps(r, names) for r in ranks}
        self._adjacency: dict[int, PeerAdjacency] = {}

    @property
    def ranks(self) -> list[int]:
        """The co-located ranks whose parts are read here, ascending."""
        return sorted(self._rows)

    def take(self, rank: int, name: str, gids: Tensor) -> Tensor:
        """Rows of array ``name`` of ``gids``, all owned by co-located ``rank``."""
        return self._rows[rank][name].index_select(0, gids - self.offsets[rank])

    def adjacency(self, rank: int) -> PeerAdjacency:
        """Co-located ``rank``'s adjacency (mapped on first use)."""
        if rank not in self._adjacency:
            sizes = self.meta.parts[rank] if self.meta.parts else None  # version 1: none
            indptr, indices, halo = (self._map(rank, name, None if sizes is None else (
                sum(sizes[k] for k in keys) + extra,)) for name, keys, extra in (
                    ("indptr", ("num_owned", "num_halo"), 1), ("indices", ("num_edges",), 0),
                    ("halo_gids", ("num_halo",), 0)))
            first, last = int(self.offsets[rank]), int(self.offsets[rank + 1])
            self._adjacency[rank] = PeerAdjacency(from_mmap(indptr), from_mmap(indices), first,
                                                  last - first, from_mmap(halo))
        return self._adjacency[rank]

    def release(self) -> None:
        """Drop the pages read so far from this process's RSS (they stay in the page cache).

        Read pages of a memory map count in the reader's resident memory; a trainer
        releases them before its final full-neighbour inference, which reads no peer's.
        """
        for m in self._maps:
            release(m)

    def _row_maps(self, rank: int, names: tuple[str, ...]) -> dict[str, Tensor]:
        n = int(self.offsets[rank + 1] - self.offsets[rank])
        rows = {}
        if "x" in names:
            feat = self._map(rank, "feat", (n, self.meta.feat_dim))
            rows["x"] = stored_features(feat, self.meta.feature_dtype)
        if "y" in names:
            rows["y"] = from_mmap(self._map(rank, "label", (n,)))
        return rows

    def _map(self, rank: int, name: str, shape: tuple[int, ...] | None) -> np.ndarray:
        """Part ``rank``'s ``name.npy``, memory-mapped, dtype (and shape) checked."""
        dtype = FEATURE_DTYPES[self.meta.feature_dtype] if name == "feat" else PART_DTYPES[name]
        a = load_npy(self.part_dir / part_dir_name(rank) / f"{name}.npy", True, PartitionError,
                     dtype=dtype, shape=shape, field=name)
        self._maps.append(a)
        return a


def peer_parts(graph: DistGraph, ctx: DistContext,
               names: tuple[str, ...] = STORED_ARRAYS) -> PeerParts | None:
    """The parts of the other ranks on this machine (collective).

    ``None`` (everything remote is exchanged) on an accelerator, without a partition
    directory, for an array a part does not store (:data:`STORED_ARRAYS`), or when no
    other rank shares the machine and the directory.  The ranks agree, in two
    all-gathers, on whether to read peers at all (directory, device kind) and on
    :attr:`PeerParts.covers_all`.

    Args:
        graph: This rank's part (:meth:`DistGraph.load`, which records the directory).
        ctx: Distributed context.
        names: The arrays of the feature store the peers' rows are read for.
    """
    usable = (graph.part_dir is not None and not accelerated(ctx.device)
              and set(names) <= set(STORED_ARRAYS))
    where = Path(os.path.realpath(graph.part_dir)) if graph.part_dir is not None else Path()
    votes = all_gather_ints(ctx, [int(usable), zlib.crc32(str(where).encode()),
                                  *(_identity(where, ctx.rank) if usable else (0, 0))])
    same = colocated_ranks(ctx)
    if not bool((votes[:, :2] == votes[0, :2]).all()) or not usable:
        return None
    # A rank on the same host whose part directory is the one this rank sees.
    ranks = [r for r in same if r != ctx.rank
             and _identity(where, r) == tuple(votes[r, 2:].tolist())]
    covers = all_gather_ints(ctx, [int(len(ranks) == ctx.world_size - 1)])
    if not ranks:
        return None
    return PeerParts(where, graph.meta, ranks, names, ctx.world_size,
                     covers_all=bool((covers == 1).all()))


def _identity(part_dir: Path, rank: int) -> tuple[int, int]:
    """Device and inode of part ``rank``'s directory (``(0, 0)`` if it is not there)."""
    try:
        st = os.stat(part_dir / part_dir_name(rank))
    except OSError:
        return 0, 0
    return st.st_dev & (2**62 - 1), st.st_ino & (2**62 - 1)

"""Feature rows of the ranks on this machine, read in place from their parts' files.

Ranks on one machine share its page cache.  A CPU rank can therefore read the rows a
peer on the same machine owns straight from that peer's part files (memory-mapped,
read-only), as DistDGL's trainers read their machine's partition from shared memory,
instead of asking the peer for them in a collective: no request, no reply, no wait for
the peer, and no second copy (the pages are the machine's).  Rows of ranks on other
machines are still exchanged (:class:`~gnnpar.storage.features.DistFeatureStore`), and
when every rank shares the machine a gather needs no collective at all.

Only arrays a part stores are read this way (:data:`PART_ARRAYS`: the features and the
labels); only CPU ranks read them (an accelerator's rows live in its own memory, and its
peers are reached through NCCL), and only from a partition directory every rank names
alike (:attr:`~gnnpar.storage.graph.DistGraph.part_dir`).  Each rank verifies its own
part when it loads it; a peer's files are only checked for dtype and shape here.
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from gnnpar.artifacts.arrays import load_npy, release
from gnnpar.comm import all_gather_ints, colocated_ranks
from gnnpar.device import accelerated
from gnnpar.distributed import DistContext
from gnnpar.errors import PartitionError
from gnnpar.ops import from_mmap
from gnnpar.partition.format import FEATURE_DTYPES, PART_DTYPES, PartitionMeta, part_dir_name
from gnnpar.storage.graph import DistGraph, stored_features

PART_ARRAYS = ("x", "y")
"""Arrays of a feature store that a part stores: ``x`` (``feat.npy``), ``y`` (``label.npy``)."""


class PeerRows:
    """The owned rows of co-located ranks' parts, by rank and array name (read-only).

    Args:
        arrays: ``{rank: {name: [num_owned(rank), ...]}}`` of every other rank on this
            machine (over its part's memory maps).
        offsets: The partition book (:attr:`DistGraph.offsets`), on the CPU.
        world_size: Ranks in the group.
        maps: The memory maps under ``arrays`` (what :meth:`release` releases).

    Attributes:
        here: bool ``[world_size]``: whether each rank's rows are read here.
        covers_all: Every other rank's rows are here: a gather exchanges nothing.
    """

    def __init__(self, arrays: dict[int, dict[str, Tensor]], offsets: Tensor,
                 world_size: int, maps: list[np.ndarray] | None = None) -> None:
        self.arrays, self.offsets = arrays, offsets
        self.here = torch.zeros(world_size, dtype=torch.bool)
        self.here[list(arrays)] = True
        self.covers_all = len(arrays) == world_size - 1
        self._maps = list(maps or [])

    def release(self) -> None:
        """Drop the pages read so far from this process's RSS (they stay in the page cache).

        Read pages of a memory map count in the reader's resident memory; a trainer
        releases them before its final full-neighbour inference, which reads no peer row.
        """
        for m in self._maps:
            release(m)

    def take(self, rank: int, name: str, gids: Tensor) -> Tensor:
        """Rows of array ``name`` of ``gids``, all owned by co-located ``rank``."""
        return self.arrays[rank][name].index_select(0, gids - self.offsets[rank])


def peer_rows(graph: DistGraph, ctx: DistContext, names: tuple[str, ...]) -> PeerRows | None:
    """The rows of ``names`` of the other ranks on this machine (collective).

    ``None`` (every remote row is exchanged) on an accelerator, without a partition
    directory, for an array a part does not store (:data:`PART_ARRAYS`), or when no
    other rank shares the machine.  Every rank takes the same decision: the ranks agree
    on the directory and the device kind in one all-gather.
    """
    usable = (graph.part_dir is not None and not accelerated(ctx.device)
              and set(names) <= set(PART_ARRAYS))
    where = os.path.realpath(graph.part_dir) if graph.part_dir is not None else ""
    votes = all_gather_ints(ctx, [int(usable), zlib.crc32(where.encode())])
    same = colocated_ranks(ctx)
    if len(same) == 1 or not bool((votes == votes[0]).all()) or not usable:
        return None
    maps = {r: part_maps(Path(where), graph.meta, r, names) for r in same if r != ctx.rank}
    return PeerRows({r: as_rows(m, graph.meta) for r, m in maps.items()}, graph.offsets.cpu(),
                    ctx.world_size, [a for m in maps.values() for a in m.values()])


def part_maps(part_dir: Path, meta: PartitionMeta, rank: int,
              names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Arrays ``names`` of part ``rank``, memory-mapped, dtype and shape checked."""
    d = part_dir / part_dir_name(rank)
    n = int(meta.offsets[rank + 1] - meta.offsets[rank])
    files = {"x": ("feat", FEATURE_DTYPES[meta.feature_dtype], (n, meta.feat_dim)),
             "y": ("label", PART_DTYPES["label"], (n,))}
    return {name: load_npy(d / f"{files[name][0]}.npy", True, PartitionError,
                           dtype=files[name][1], shape=files[name][2], field=files[name][0])
            for name in names}


def as_rows(maps: dict[str, np.ndarray], meta: PartitionMeta) -> dict[str, Tensor]:
    """Tensors over :func:`part_maps`' arrays (no copy)."""
    return {name: stored_features(a, meta.feature_dtype) if name == "x" else from_mmap(a)
            for name, a in maps.items()}

"""``DistGraph``: this rank's part of a partitioned graph, with the partition book.

Adjacency (CSC of in-edges over local ids), halo ids, degrees, the partition book and
the type bounds of a typed graph are read onto the rank's device (:func:`DistGraph.load`
puts them on ``ctx.device``, copied from the memory maps in chunks, so a GPU rank keeps
no host copy): they are what sampling and halo exchange touch on every step, and every
lookup (:meth:`DistGraph.owner`, :meth:`DistGraph.node_type`, ...) takes and returns
tensors on that device.  Features, labels and splits stay memory-mapped in
:attr:`DistGraph.part` until a feature store places them.  Nothing here grows with the
whole graph's node count: every tensor is over this part's owned and halo nodes or its
edges (``docs/memory.md``), and :meth:`DistGraph.to` keeps one copy per device, however
many samplers and loaders ask.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np
import torch

from gnnpar.comm import all_reduce_sum
from gnnpar.device import load_rows
from gnnpar.distributed import DistContext, check_world_matches_parts
from gnnpar.errors import PartitionError
from gnnpar.ops import from_mmap
from gnnpar.partition.format import META_FILE, Partition, PartitionMeta, load_partition

SPLITS = ("train", "val", "test")
"""Node splits of a partition, each stored per part as ``part-K/{split}_idx.npy``."""


def stored_features(feat: np.ndarray, feature_dtype: str) -> torch.Tensor:
    """A part's features as a tensor over the memory map (no copy; read-only).

    ``bf16`` files hold bfloat16's raw bits, which numpy has no type for.
    """
    x = from_mmap(feat)
    return x.view(torch.bfloat16) if feature_dtype == "bf16" else x


@dataclass(frozen=True)
class DistGraph:
    """One part of a partitioned graph plus the partition book.

    Attributes:
        part: The part's (memory-mapped) arrays and the partition metadata.
        offsets: int64 ``[K+1]`` partition book: rank ``k`` owns global ids
            ``offsets[k] .. offsets[k+1]``.
        indptr: int64 ``[n_owned + n_halo + 1]`` CSC row pointer over local ids.
        indices: int64 ``[nnz]`` source local id of each in-edge.
        halo_gids: int64 ``[n_halo]`` sorted global ids of halo nodes.
        in_degree: int64 ``[n_owned + n_halo]`` global in-degrees.
        adj_complete: bool ``[n_owned + n_halo]`` whether a node's in-edges are all stored.
        etype: Typed graphs: int16 ``[nnz]`` relation of each in-edge (each row's in-edges
            sorted by relation), else ``None``.
        type_bounds: Typed graphs: int64 ``[K * T + 1]`` global-id boundaries of every
            part's node types (:meth:`~gnnpar.partition.typed.TypeBook.bounds`), else
            ``None``.
        part_dir: The partition directory the part was read from (:meth:`load`), where
            ranks on the same machine find each other's parts; ``None`` when unknown.

    Example::

        ctx = gnnpar.init()
        graph = gnnpar.DistGraph.load("parts/sbm-2", ctx)   # part ctx.rank, checksums verified
        graph.num_owned, graph.num_halo, graph.owner(torch.tensor([0, 20000]))
    """

    part: Partition
    offsets: torch.Tensor
    indptr: torch.Tensor
    indices: torch.Tensor
    halo_gids: torch.Tensor
    in_degree: torch.Tensor
    adj_complete: torch.Tensor
    etype: torch.Tensor | None = None
    type_bounds: torch.Tensor | None = None
    part_dir: str | None = None
    _copies: dict[torch.device, DistGraph] = field(default_factory=dict, repr=False,
                                                   compare=False)

    @classmethod
    def load(cls, part_dir: str | os.PathLike[str], ctx: DistContext,
             verify: bool = True) -> DistGraph:
        """Load the part of rank ``ctx.rank`` onto ``ctx.device`` after checking the world size.

        Args:
            part_dir: Partition directory (``meta.json`` + ``part-K/``).
            ctx: Distributed context; the world size must equal the number of parts.
            verify: Check this part's checksums against ``meta.json``.
        """
        meta = PartitionMeta.load(part_dir)
        check_world_matches_parts(ctx, meta.num_parts, os.fspath(part_dir))
        graph = cls.from_partition(load_partition(part_dir, ctx.rank, mmap=True,
                                                  verify=verify), ctx.device)
        return replace(graph, part_dir=os.fspath(part_dir))

    @classmethod
    def from_partition(cls, part: Partition,
                       device: torch.device | str = "cpu") -> DistGraph:
        """Wrap an already loaded part, its adjacency and book read onto ``device``."""
        dev = torch.device(device)
        types = part.meta.types
        return cls(
            etype=None if part.etype is None else load_rows(part.etype, dev, torch.int16),
            type_bounds=None if types is None else load_rows(
                types.bounds(part.meta.offsets), dev, torch.int64),
            part=part,
            offsets=load_rows(np.asarray(part.meta.offsets), dev, torch.int64),
            indptr=load_rows(part.indptr, dev, torch.int64),
            indices=load_rows(part.indices, dev, torch.int64),
            halo_gids=load_rows(part.halo_gids, dev, torch.int64),
            in_degree=load_rows(part.in_degree, dev, torch.int64),
            adj_complete=load_rows(part.adj_complete, dev, torch.bool),
        )

    def to(self, device: torch.device | str) -> DistGraph:
        """This part with its adjacency, halo ids and partition book on ``device``.

        One copy per device: ``self`` when the tensors are there already, else the copy
        made by the first call for that device (from this part or any of its copies), so
        that the samplers and loaders of a process share one adjacency.
        """
        dev = torch.device(device)
        if dev.type == "cuda" and dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        if self.indptr.device == dev:
            return self
        copies = self._copies
        copies.setdefault(self.indptr.device, self)
        if dev not in copies:
            copies[dev] = replace(self, _copies=copies, **{
                name: getattr(self, name).to(dev) for name in (
                    "offsets", "indptr", "indices", "halo_gids", "in_degree", "adj_complete",
                    "etype", "type_bounds") if getattr(self, name) is not None})
        return copies[dev]

    @cached_property
    def e_id(self) -> torch.Tensor:
        """int64 ``[nnz]`` dataset edge id of each stored in-edge, on this copy's device.

        Read on first use (8 bytes per stored edge); a version 1 or 2 partition has none
        and raises :class:`~gnnpar.errors.PartitionError` with the fix.
        """
        return load_rows(self.part.edge_ids(), self.indptr.device, torch.int64)

    @cached_property
    def relation_max_degrees(self) -> list[int]:
        """Typed graphs: the most stored in-edges of each relation into one node.

        Computed once per part on the host, from the memory maps (one pass over the CSC in
        chunks of at most 4M entries).
        """
        if self.part.etype is None or self.meta.types is None:
            raise PartitionError("the partition is of a homogeneous graph; it has no "
                                 "relations.", path=META_FILE, field="hetero",
                                 fix="partition a typed graph (TypedGraphDataset).")
        r = self.meta.types.num_relations
        best = torch.zeros(r, dtype=torch.int64)
        ptr = from_mmap(self.part.indptr).to(torch.int64)
        etype = from_mmap(self.part.etype)
        rows, chunk, start = ptr.numel() - 1, 1 << 22, 0
        while start < rows:
            stop = int(torch.searchsorted(ptr, ptr[start] + chunk, right=True)) - 1
            stop = min(rows, start + max(1, chunk // r), max(stop, start + 1))
            lo, hi = int(ptr[start]), int(ptr[stop])
            row = torch.repeat_interleave(torch.arange(stop - start),
                                          ptr[start:stop + 1].diff(), output_size=hi - lo)
            counts = torch.bincount(row * r + etype[lo:hi].to(torch.int64),
                                    minlength=(stop - start) * r)
            best = torch.maximum(best, counts.view(-1, r).max(0).values)
            start = stop
        return [int(v) for v in best.tolist()]

    def edge_features(self) -> torch.Tensor:
        """float32 ``[nnz, edge_dim]`` edge features in stored order (host memory map, no copy).

        Place them with :func:`gnnpar.storage.placement.place_rows` to read them on the device.
        """
        return from_mmap(self.part.edge_attr)

    def owned_edges(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(src, dst)`` local ids of the stored in-edges of owned nodes, in CSC order.

        On this copy's device, with no host read (the edge count comes from the map).
        """
        n = self.num_owned
        nnz = int(self.part.indptr[n])
        dst = torch.repeat_interleave(torch.arange(n, device=self.indptr.device),
                                      self.indptr[1:n + 1] - self.indptr[:n], output_size=nnz)
        return self.indices[:nnz], dst

    @cached_property
    def local_gids(self) -> torch.Tensor:
        """int64 ``[n_owned + n_halo]`` global id of every local id (built once per copy)."""
        first = self.first_gid
        owned = torch.arange(first, first + self.num_owned, device=self.indptr.device)
        return torch.cat([owned, self.halo_gids])

    def features(self) -> torch.Tensor:
        """``[num_owned, F]`` features in their stored dtype, over the memory map (no copy).

        ``float32``, ``float16`` or ``bfloat16``, as the partition's ``feature_dtype`` says;
        read-only: never write to it.
        """
        return stored_features(self.part.feat, self.meta.feature_dtype)

    def type_features(self, node_type: int) -> torch.Tensor:
        """Typed graphs: ``[n, F_t]`` features of the owned nodes of one type (no copy).

        Rows in local-id order, in the stored dtype, as :meth:`features`.
        """
        return stored_features(self.part.type_feat[node_type], self.meta.feature_dtype)

    @property
    def meta(self) -> PartitionMeta:
        """Metadata of the whole partition."""
        return self.part.meta

    @property
    def rank(self) -> int:
        """Part id (= owning rank)."""
        return int(self.part.part_id)

    @property
    def num_owned(self) -> int:
        """Nodes owned by this rank."""
        return int(self.part.num_owned)

    @property
    def num_halo(self) -> int:
        """Halo nodes of this rank."""
        return int(self.part.num_halo)

    @property
    def first_gid(self) -> int:
        """Global id of this rank's first owned node."""
        return int(self.meta.offsets[self.rank])

    def node_type(self, gids: torch.Tensor) -> torch.Tensor:
        """Node type index of each global id of a typed graph (one ``searchsorted``)."""
        if self.type_bounds is None:
            raise PartitionError("the partition is of a homogeneous graph; it has no node "
                                 "types.", path=META_FILE, field="hetero",
                                 fix="partition a typed graph (TypedGraphDataset).")
        num_types = (self.type_bounds.numel() - 1) // self.meta.num_parts
        seg = torch.searchsorted(self.type_bounds, gids, right=True) - 1
        return torch.remainder(seg, num_types)

    def owner(self, gids: torch.Tensor) -> torch.Tensor:
        """Owning rank of each global id."""
        return torch.searchsorted(self.offsets, gids, right=True) - 1

    def is_owned(self, gids: torch.Tensor) -> torch.Tensor:
        """Whether each global id is owned by this rank."""
        return (gids >= self.first_gid) & (gids < self.first_gid + self.num_owned)

    def local_to_global(self, local: torch.Tensor) -> torch.Tensor:
        """Global ids of local ids (owned first, then halo)."""
        return self.local_gids.index_select(0, local)

    def global_to_local(self, gids: torch.Tensor) -> torch.Tensor:
        """Local ids of global ids: owned, then halo; ``-1`` for ids this part lacks.

        Two lookups on the device (a range test, a binary search of the halo ids); no
        host synchronisation.
        """
        owned = self.is_owned(gids)
        out = torch.where(owned, gids - self.first_gid, -1)
        if self.num_halo:
            pos = torch.searchsorted(self.halo_gids, gids).clamp_(max=self.num_halo - 1)
            hit = (self.halo_gids.index_select(0, pos) == gids) & ~owned
            out = torch.where(hit, pos + self.num_owned, out)
        return out


def global_split_sizes(graph: DistGraph, ctx: DistContext, task: str = "node") -> dict[str, int]:
    """Number of nodes (``task="link"``: supervision edges) of each split over all parts.

    Collective: one all-reduce.

    Args:
        graph: This rank's part.
        ctx: Distributed context.
        task: ``"node"`` (``part-K/{split}_idx.npy``) or ``"link"``
            (``part-K/{split}_edges.npy``).

    Returns:
        ``{"train", "val", "test"} -> `` global size; ``train`` is never 0.

    Raises:
        PartitionError: No part has a training node (supervision edge).
    """
    suffix, what, fix = (("edges", "training supervision edges", "partition a dataset with a "
                          "link split (--task link --split 0.85,0.05,0.1, or an ogbl-* "
                          "dataset).") if task == "link" else
                         ("idx", "training nodes", "give the dataset a non-empty train split."))
    local = torch.tensor([len(getattr(graph.part, f"{s}_{suffix}")) for s in SPLITS],
                         device=ctx.device)
    sizes = dict(zip(SPLITS, all_reduce_sum(ctx, local).cpu().tolist(), strict=True))
    if sizes["train"] == 0:
        raise PartitionError(f"the partition has no {what}.", path=f"part-*/train_{suffix}.npy",
                             field=f"train_{suffix}", fix=fix)
    return sizes

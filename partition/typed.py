"""Typed partitions (format version 4 on): node and edge types, per part and per type.

A typed graph (:class:`~gnnpar.datasets.typed.TypedGraphDataset`) is partitioned as its
homogeneous view (:meth:`~gnnpar.datasets.typed.TypedGraphDataset.to_homogeneous`): node
type ``t`` holds dataset ids ``node_offsets[t] .. node_offsets[t+1]`` and relation ``r``
dataset edge ids ``edge_offsets[r] .. edge_offsets[r+1]``, as DistDGL does.  Because the
renumbering keeps dataset-id order within a part, part ``k``'s owned range is sorted by
type: its nodes of type ``t`` are the contiguous local ids ``bounds[t] .. bounds[t+1]``
with ``bounds = [0, cumsum(counts[k])]``.  The partition book therefore stays offsets-based
and is per type: the ``K * T + 1`` sorted global-id boundaries of :meth:`TypeBook.bounds`
give any node's owner *and* type with one ``searchsorted``.

Per part, beside the homogeneous files:

- ``etype.npy`` int16 ``[nnz]``: the relation of each stored in-edge. Within each
  destination the in-edges are sorted by relation, so relation ``r``'s CSC is a
  contiguous sub-range of every row, found by binary search (GraphBolt's fused CSC);
- ``feat_{t}.npy``: the features of the owned nodes of type ``t`` (types with features
  only), rows in local order, in the partition's ``feature_dtype``;
- labels and splits as in a homogeneous part, over the target type (other types'
  labels are ``-1``); ``feat.npy`` has no columns.

``meta.json``'s ``hetero`` holds the layout and, per part, the owned nodes of each type,
the stored in-edges of each relation and the halo nodes each relation reaches
(``gnnpar-partition info`` prints them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from gnnpar.errors import DatasetError, PartitionError
from gnnpar.typed import TypedLayout

ETYPE_DTYPE = np.int16
MAX_RELATIONS = int(np.iinfo(ETYPE_DTYPE).max)


def type_feat_name(t: int) -> str:
    """The part file (without ``.npy``) of node type ``t``'s features."""
    return f"feat_{t}"


@dataclass(frozen=True)
class TypeBook:
    """The types of a typed partition: layout, and per part per type figures.

    Attributes:
        layout: Node and edge types, target, dataset id ranges, feature widths.
        counts: ``[K][T]`` owned nodes of each type per part.
        edges: ``[K][R]`` stored in-edges of each relation per part.
        halo: ``[K][R]`` halo nodes that are sources of a stored in-edge of each relation.
    """

    layout: TypedLayout
    counts: tuple[tuple[int, ...], ...]
    edges: tuple[tuple[int, ...], ...]
    halo: tuple[tuple[int, ...], ...]

    @property
    def num_types(self) -> int:
        """Node types ``T``."""
        return len(self.layout.node_types)

    @property
    def num_relations(self) -> int:
        """Edge types ``R``."""
        return len(self.layout.edge_types)

    def part_bounds(self, part: int) -> np.ndarray:
        """int64 ``[T + 1]`` local-id boundaries of each type in ``part``'s owned range."""
        return np.concatenate([[0], np.cumsum(self.counts[part])]).astype(np.int64)

    def bounds(self, offsets: tuple[int, ...]) -> np.ndarray:
        """int64 ``[K * T + 1]`` global-id bounds: segment ``k * T + t`` is part k, type t."""
        starts = [offsets[k] + self.part_bounds(k)[:-1] for k in range(len(self.counts))]
        return np.concatenate([*starts, [offsets[-1]]]).astype(np.int64)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``meta.json``'s ``hetero``)."""
        return {**self.layout.to_dict(), "counts": [list(c) for c in self.counts],
                "edges": [list(e) for e in self.edges], "halo": [list(h) for h in self.halo]}

    @classmethod
    def from_dict(cls, d: dict[str, Any], num_parts: int, part_sizes: list[int],
                  path: str | os.PathLike[str]) -> TypeBook:
        """Parse ``meta.json``'s ``hetero``; raise :class:`PartitionError` naming the field."""
        fix = "re-create the partition with gnnpar-partition ... --overwrite."
        try:
            layout = TypedLayout.from_dict(d, path)
        except DatasetError as exc:
            raise PartitionError(exc.message, path=path, field=f"hetero.{exc.field}",
                                 fix=fix) from None
        t, r = len(layout.node_types), len(layout.edge_types)
        tables = {}
        for key, width in (("counts", t), ("edges", r), ("halo", r)):
            v = d.get(key)
            if (not isinstance(v, list) or len(v) != num_parts or not all(
                    isinstance(row, list) and len(row) == width and all(
                        isinstance(x, int) and not isinstance(x, bool) and x >= 0
                        for x in row) for row in v)):
                raise PartitionError(f"must be {num_parts} lists of {width} counts >= 0.",
                                     path=path, field=f"hetero.{key}", fix=fix)
            tables[key] = tuple(tuple(row) for row in v)
        for k, (row, size) in enumerate(zip(tables["counts"], part_sizes, strict=True)):
            if sum(row) != size:
                raise PartitionError(f"part {k}'s type counts {list(row)} do not sum to its "
                                     f"{size} owned nodes.", path=path, field="hetero.counts",
                                     fix=fix)
        per_type = [sum(col) for col in zip(*tables["counts"], strict=True)] or [0] * t
        sizes = np.diff(np.asarray(layout.node_offsets)).tolist()
        if per_type != sizes:
            i = next(j for j, (a, b) in enumerate(zip(per_type, sizes, strict=True)) if a != b)
            raise PartitionError(f"gives node type {layout.node_types[i]!r} {sizes[i]} ids "
                                 f"({layout.node_offsets[i]}..{layout.node_offsets[i + 1]}), "
                                 f"but the parts own {per_type[i]} nodes of it "
                                 "(hetero.counts).", path=path, field="hetero.node_offsets",
                                 fix=fix)
        if r > MAX_RELATIONS:
            raise PartitionError(f"{r} relations exceed {MAX_RELATIONS}.", path=path,
                                 field="hetero.edge_types", fix="merge relations.")
        return cls(layout, tables["counts"], tables["edges"], tables["halo"])

    def format(self) -> str:
        """Owned nodes per type and part, then stored in-edges / halo per relation and part."""
        lay = self.layout
        k = len(self.counts)
        width = max(10, *(len(t) + 2 for t in lay.node_types),
                    *(len(f"{e:,} / {h:,}") + 2 for row_e, row_h in zip(
                        self.edges, self.halo, strict=True)
                      for e, h in zip(row_e, row_h, strict=True)))
        lines = [f"target type {lay.target!r}; feature widths " + ", ".join(
                     f"{n} {f}" for n, f in zip(lay.node_types, lay.feat_dims, strict=True)),
                 "owned nodes per type:",
                 "part".rjust(8) + "".join(t.rjust(width) for t in lay.node_types)]
        lines += [str(p).rjust(8) + "".join(f"{v:,}".rjust(width) for v in row)
                  for p, row in enumerate(self.counts)]
        per_type = np.asarray(self.counts, dtype=np.float64)
        lines.append("max/mean".rjust(8) + "".join(
            f"{mx / mu:.3f}".rjust(width) for mx, mu in zip(per_type.max(0), per_type.mean(0),
                                                              strict=True)))
        names = ["-".join(r) for r in lay.edge_types]
        first = max(len(n) for n in names) + 2
        lines += ["stored in-edges / halo sources per relation:",
                  "relation".ljust(first) + "".join(f"part {p}".rjust(width) for p in range(k))]
        lines += [name.ljust(first) + "".join(
            f"{self.edges[p][r]:,} / {self.halo[p][r]:,}".rjust(width) for p in range(k))
            for r, name in enumerate(names)]
        return "\n".join(lines)

def sort_by_relation(indptr: np.ndarray, indices: np.ndarray, e_id: np.ndarray,
                     edge_offsets: tuple[int, ...]
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row's in-edges sorted by relation (stable), and the relation of each.

    Args:
        indptr: int64 ``[V + 1]`` CSC row pointer.
        indices: ``[nnz]`` source local ids.
        e_id: ``[nnz]`` dataset edge ids (relation ``r`` holds ``edge_offsets[r] ..``).
        edge_offsets: ``R + 1`` dataset edge-id boundaries of the relations.

    Returns:
        ``(indices, e_id, etype)`` reordered; ``etype`` int16.
    """
    etype = (np.searchsorted(np.asarray(edge_offsets), e_id, side="right") - 1).astype(
        ETYPE_DTYPE)
    row = np.repeat(np.arange(len(indptr) - 1, dtype=np.int64), np.diff(indptr))
    order = np.lexsort((etype, row))  # stable: within a relation, the stored order stays
    return indices[order], e_id[order], etype[order]


def check_typed_part(d: Any, book: TypeBook, part: int, offsets: tuple[int, ...],
                     indptr: np.ndarray, indices: np.ndarray, halo_gids: np.ndarray,
                     e_id: np.ndarray, etype: np.ndarray, label: np.ndarray,
                     type_feat: dict[int, np.ndarray], splits: dict[str, np.ndarray]) -> None:
    """Check one typed part: relations, their order and endpoint types, typed features.

    ``splits`` (``{"train_idx": local ids, ...}``) must hold nodes of the target type.

    Raises:
        PartitionError: Naming the file and the field.
    """
    fix = "re-create the partition with gnnpar-partition ... --overwrite."
    lay = book.layout
    nnz = len(indices)
    if etype.dtype != ETYPE_DTYPE or etype.shape != (nnz,):
        raise PartitionError(f"has dtype {etype.dtype} and shape {etype.shape}, expected "
                             f"int16 ({nnz},).", path=d / "etype.npy", field="etype", fix=fix)
    want = np.searchsorted(np.asarray(lay.edge_offsets), e_id, side="right") - 1
    if nnz and not np.array_equal(want, etype):
        raise PartitionError("disagrees with e_id.npy and meta.json's hetero.edge_offsets.",
                             path=d / "etype.npy", field="etype", fix=fix)
    row = np.repeat(np.arange(len(indptr) - 1, dtype=np.int64), np.diff(indptr))
    if nnz > 1 and (np.diff(row * (book.num_relations + 1) + etype) < 0).any():
        raise PartitionError("is not sorted by relation within each destination's in-edges.",
                             path=d / "etype.npy", field="etype", fix=fix)
    bounds = book.bounds(offsets)
    n_owned = sum(book.counts[part])
    gids = np.concatenate([offsets[part] + np.arange(n_owned), np.asarray(halo_gids)])
    ntype = (np.searchsorted(bounds, gids, side="right") - 1) % book.num_types
    src_t, dst_t = np.asarray(lay.src_types()), np.asarray(lay.dst_types())
    if nnz:
        bad = (ntype[indices] != src_t[etype]) | (ntype[row] != dst_t[etype])
        if bad.any():
            i = int(np.argmax(bad))
            raise PartitionError(f"in-edge {i} of relation {lay.edge_types[int(etype[i])]} "
                                 "joins nodes of other types.", path=d / "indices.npy",
                                 field="indices", fix=fix)
    tgt = lay.type_index(lay.target)
    pb = book.part_bounds(part)
    lab = np.asarray(label)
    if (lab[: pb[tgt]] != -1).any() or (lab[pb[tgt + 1]:] != -1).any():
        raise PartitionError(f"labels a node outside the target type {lay.target!r}.",
                             path=d / "label.npy", field="label", fix=fix)
    for name, idx in splits.items():
        if len(idx) and (int(idx[0]) < pb[tgt] or int(idx[-1]) >= pb[tgt + 1]):
            raise PartitionError(f"holds a node of another type than the target "
                                 f"{lay.target!r} (local ids {pb[tgt]}..{pb[tgt + 1]}).",
                                 path=d / f"{name}.npy", field=name, fix=fix)
    for t, width in enumerate(lay.feat_dims):
        if width == 0:
            continue
        f = type_feat[t]
        if f.shape != (book.counts[part][t], width):
            raise PartitionError(f"has shape {f.shape}, expected ({book.counts[part][t]}, "
                                 f"{width}).", path=d / f"{type_feat_name(t)}.npy",
                                 field=type_feat_name(t), fix=fix)

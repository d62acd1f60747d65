"""``verify_partition``: check a partition directory against every invariant of its format.

Every readable format version (:data:`~gnnpar.partition.format.READABLE_VERSIONS`, 1 to
5) is checked against the invariants it has: version 3's edge ids, edge features and link
supervision, and version 4's types (:mod:`~gnnpar.partition.typed`), where it stores them.

Without the source dataset it checks what the directory alone determines: checksums,
dtypes and shapes, offsets, that the parts own every node exactly once, that every
local CSC is well formed, that the halo of each part is exactly the set of nodes within
``halo_hops`` hops (along in-edges) of its owned nodes, that halo nodes within
``halo_hops - 1`` hops carry their full in-edge list, and that every in-degree matches
the edges stored.  With the dataset it also checks that features, labels, splits and
the multiset of edges round-trip exactly through ``orig_ids``.

The checks rebuild the whole graph as a ``scipy.sparse`` matrix from the owned rows of
all parts; they share no code with the writer.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from gnnpar.datasets.graph import SPLITS, GraphDataset
from gnnpar.datasets.typed import TypedGraphDataset
from gnnpar.errors import PartitionError
from gnnpar.partition.format import (
    Partition,
    PartitionMeta,
    load_partition,
    part_dir_name,
    store_features,
)
from gnnpar.partition.typed import type_feat_name

_FIX = "re-create the partition with gnnpar-partition ... --overwrite."
_ROWS = 1 << 16  # feature rows compared at a time


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify_partition` checked (it raises on the first failure).

    Attributes:
        out_dir: The partition directory.
        num_parts: Parts.
        num_nodes: Nodes.
        num_edges: Edges.
        files: Array files whose sha256 matched.
        checks: Names of the invariants that hold.
    """

    out_dir: str
    num_parts: int
    num_nodes: int
    num_edges: int
    files: int
    checks: tuple[str, ...]

    def __str__(self) -> str:
        return (f"{self.out_dir}: OK ({self.num_parts} parts, {self.num_nodes:,} nodes, "
                f"{self.num_edges:,} edges; {self.files} checksums; "
                f"{len(self.checks)} invariants: {', '.join(self.checks)})")


def _fail(path: Path | str, field: str, message: str) -> PartitionError:
    return PartitionError(message, path=path, field=field, fix=_FIX)


def verify_partition(out_dir: str | os.PathLike[str],
                     dataset: GraphDataset | TypedGraphDataset | None = None) -> VerifyReport:
    """Check a partition directory; raise :class:`PartitionError` at the first violation.

    A typed partition's parts are also checked type by type (relations sorted and
    consistent with the edge ids, endpoint types, typed feature shapes: see
    :func:`~gnnpar.partition.typed.check_typed_part`); with its dataset, the layout and
    every type's features round-trip too.

    Args:
        out_dir: Directory written by ``partition_graph``.
        dataset: The source dataset, to check the round trip of every value.

    Returns:
        The report of what was checked.
    """
    out = Path(out_dir)
    typed = dataset if isinstance(dataset, TypedGraphDataset) else None
    # The dataset in homogeneous ids: a typed one's homogeneous view.
    plain = dataset.to_homogeneous() if isinstance(dataset, TypedGraphDataset) else dataset
    meta = PartitionMeta.load(out)  # the schema, its digest, a checksum for every file
    # Every part's checksums, dtypes, shapes, ranges and finite features (as training
    # loads it), then what only the whole partition shows.
    parts = [load_partition(out, k, mmap=True) for k in range(meta.num_parts)]
    old_of_new = np.concatenate([np.asarray(p.orig_ids) for p in parts])
    if not np.array_equal(np.bincount(old_of_new, minlength=meta.num_nodes),
                          np.ones(meta.num_nodes, dtype=np.int64)):
        raise _fail(out, "orig_ids", "the parts do not own every original node exactly once.")
    graph = _global_graph(out, parts, meta)
    for p in parts:
        _check_halo(out / part_dir_name(p.part_id), p, graph)
    checks = ["checksums", "dtypes and shapes", "offsets and sizes", "ownership coverage",
              "local CSC", "in-degrees", f"halo = nodes within {meta.halo_hops} hop(s)",
              "complete halo rows"]
    if meta.has_edge_ids:
        _check_edge_ids(out, parts, meta.num_edges)
        checks.append("edge ids a permutation")
    if meta.types is not None:
        checks += ["relations sorted and consistent with edge ids", "endpoint types",
                   "typed feature shapes"]
    if (typed is None) != (meta.types is None) and plain is not None:
        raise _fail(out / "meta.json", "hetero", "the partition is "
                    f"{'typed' if meta.types else 'homogeneous'} and the dataset is not.")
    if typed is not None:
        _check_typed_round_trip(out, parts, meta, typed)
        checks += ["node and edge types", "typed features"]
    if plain is not None:
        _check_round_trip(out, parts, meta, old_of_new, graph, plain)
        checks += ["features", "labels", "splits", "edges"]
        if meta.has_edge_ids:
            _check_edge_round_trip(out, parts, old_of_new, plain)
            checks += ["edge ids", "edge features", "link supervision"]
    return VerifyReport(os.fspath(out), meta.num_parts, meta.num_nodes, meta.num_edges,
                        len(meta.files), tuple(checks))


def _global_graph(out: Path, parts: list[Partition], meta: PartitionMeta) -> sp.csr_matrix:
    """The whole graph in new ids (rows = destinations, values = multiplicities).

    Also checks that the owned in-degrees equal the stored owned rows and that the parts
    store ``num_edges`` edges in all.
    """
    dst, src = [], []
    for p in parts:
        indptr = np.asarray(p.indptr)[: p.num_owned + 1]
        counts = np.diff(indptr)
        if not np.array_equal(counts, np.asarray(p.in_degree)[: p.num_owned]):
            raise _fail(out / part_dir_name(p.part_id) / "in_degree.npy",
                        "in_degree", "differs from the number of stored in-edges of an "
                        "owned node.")
        dst.append(np.repeat(np.arange(p.first_gid, p.first_gid + p.num_owned), counts))
        src.append(p.local_to_global(np.asarray(p.indices)[: indptr[-1]]))
    d, s = np.concatenate(dst), np.concatenate(src)
    if len(d) != meta.num_edges:
        raise _fail(out / "meta.json", "num_edges", f"says {meta.num_edges} edges; the parts store "
                    f"{len(d)} in-edges of owned nodes.")
    n = meta.num_nodes
    return sp.csr_matrix((np.ones(len(d), dtype=np.int64), (d, s)), shape=(n, n))


def _check_edge_ids(out: Path, parts: list[Partition], num_edges: int) -> None:
    """The owned in-edges of all parts hold every edge id ``0 .. num_edges - 1`` once."""
    seen = np.zeros(num_edges, dtype=np.int64)
    for p in parts:
        seen += np.bincount(np.asarray(p.edge_ids())[: int(p.indptr[p.num_owned])],
                            minlength=num_edges)
    if not (seen == 1).all():
        bad = int(np.flatnonzero(seen != 1)[0])
        raise _fail(out, "e_id", f"the owned in-edges do not hold every edge id exactly once "
                    f"(edge id {bad} is held {int(seen[bad])} times): e_id.npy must be a "
                    "permutation of the stored edges.")


def _check_halo(d: Path, p: Partition, graph: sp.csr_matrix) -> None:
    """Halo membership, complete halo rows and halo in-degrees of one part."""
    meta = p.meta
    hops = meta.halo_hops
    n = meta.num_nodes
    dist = np.full(n, -1, dtype=np.int64)
    frontier = np.arange(p.first_gid, p.first_gid + p.num_owned)
    dist[frontier] = 0
    for h in range(1, hops + 1):
        reached = graph[frontier].indices
        frontier = np.flatnonzero(np.bincount(reached[dist[reached] < 0], minlength=n))
        dist[frontier] = h
    halo = np.flatnonzero(dist > 0)
    if not np.array_equal(halo, np.asarray(p.halo_gids)):
        raise _fail(d / "halo_gids.npy", "halo_gids", f"holds {p.num_halo} nodes; the nodes "
                    f"within {hops} hop(s) of the owned ones are {len(halo)}.")
    complete = np.asarray(p.adj_complete)[p.num_owned:]
    if not np.array_equal(complete, (dist[halo] < hops)):
        raise _fail(d / "adj_complete.npy", "adj_complete", f"must be True exactly for halo "
                    f"nodes within {hops - 1} hop(s).")
    degree = np.asarray(graph.sum(axis=1)).ravel()  # multiplicities count
    if not np.array_equal(np.asarray(p.in_degree)[p.num_owned:], degree[halo]):
        raise _fail(d / "in_degree.npy", "in_degree", "differs from the global in-degree of "
                    "a halo node.")
    rows = halo[complete]
    if len(rows):
        indptr = np.asarray(p.indptr)[p.num_owned:]
        counts = np.diff(indptr)[complete]
        starts = indptr[:-1][complete]
        pos = np.repeat(starts - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
        pos += np.arange(len(pos))
        stored = sp.csr_matrix((np.ones(len(pos), dtype=np.int64),
                                (np.repeat(np.arange(len(rows)), counts),
                                 p.local_to_global(np.asarray(p.indices)[pos]))),
                               shape=(len(rows), n))
        if (stored != graph[rows]).nnz:
            raise _fail(d / "indices.npy", "indices", "the in-edges stored for a complete "
                        "halo node differ from the owner's.")


def _check_round_trip(out: Path, parts: list[Partition], meta: PartitionMeta,
                      old_of_new: np.ndarray, graph: sp.csr_matrix,
                      ds: GraphDataset) -> None:
    """Features, labels, splits and edges equal the source's through ``orig_ids``."""
    for field in ("num_nodes", "num_edges", "feat_dim", "num_classes"):
        if getattr(meta, field) != getattr(ds, field):
            raise _fail(out / "meta.json", field, f"is {getattr(meta, field)}, the dataset "
                        f"has {getattr(ds, field)}: this partition is of another graph.")
    for p in parts:
        d = out / part_dir_name(p.part_id)
        orig = np.asarray(p.orig_ids)
        for start in range(0, len(orig), _ROWS):
            rows = orig[start:start + _ROWS]
            want = store_features(np.zeros((len(rows), 0), np.float32) if ds.x is None
                                  else ds.x[rows], meta.feature_dtype)
            got = np.asarray(p.feat[start:start + _ROWS])
            if want.tobytes() != got.tobytes():
                raise _fail(d / "feat.npy", "feat", f"row {start} onwards differs from the "
                            "dataset's features.")
        want_y = (np.full(len(orig), -1, np.int64) if ds.y is None
                  else np.asarray(ds.y)[orig])
        if not np.array_equal(want_y, np.asarray(p.label)):
            raise _fail(d / "label.npy", "label", "differs from the dataset's labels.")
    for split in SPLITS:
        got = np.sort(np.concatenate([np.asarray(p.orig_ids)[np.asarray(getattr(p, split))]
                                      for p in parts]))
        if not np.array_equal(got, np.sort(np.asarray(getattr(ds, split)))):
            raise _fail(out, split, "the split differs from the dataset's.")
    coo = graph.tocoo()
    n = meta.num_nodes
    relabelled = sp.csr_matrix((coo.data, (old_of_new[coo.row], old_of_new[coo.col])),
                               shape=(n, n))
    source = sp.csr_matrix((np.ones(ds.num_edges, dtype=np.int64),
                            (np.asarray(ds.dst), np.asarray(ds.src))), shape=(n, n))
    if (relabelled != source).nnz:
        raise _fail(out, "indices", "the edges stored differ from the dataset's (as a "
                    "multiset of (source, destination) pairs through orig_ids).")


def _check_typed_round_trip(out: Path, parts: list[Partition], meta: PartitionMeta,
                            ds: TypedGraphDataset) -> None:
    """The layout is the dataset's and every type's features round-trip through ``orig_ids``."""
    assert meta.types is not None
    if meta.types.layout != ds.layout():
        raise _fail(out / "meta.json", "hetero", "the node and edge types differ from the "
                    "dataset's: this partition is of another graph.")
    lay = meta.types.layout
    for p in parts:
        bounds = meta.types.part_bounds(p.part_id)
        orig = np.asarray(p.orig_ids)
        for t, name in enumerate(lay.node_types):
            if not lay.feat_dims[t]:
                continue
            rows = orig[bounds[t]:bounds[t + 1]] - lay.node_offsets[t]
            want = store_features(np.asarray(ds.x[name])[rows], meta.feature_dtype)
            if want.tobytes() != np.asarray(p.type_feat[t]).tobytes():
                raise _fail(out / part_dir_name(p.part_id) / f"{type_feat_name(t)}.npy",
                            type_feat_name(t), f"differs from the dataset's {name!r} "
                            "features.")


def _check_edge_round_trip(out: Path, parts: list[Partition], old_of_new: np.ndarray,
                           ds: GraphDataset) -> None:
    """Edge ids, edge features and supervision rows equal the dataset's.

    Each stored in-edge is the dataset's edge ``e_id`` (endpoints and features; that the
    owned in-edges hold every edge id once is :func:`_check_edge_ids`'), and the
    supervision rows are the dataset's.
    """
    for p in parts:
        d = out / part_dir_name(p.part_id)
        e_id = np.asarray(p.edge_ids())
        indptr = np.asarray(p.indptr)
        dst_local = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
        src = old_of_new[p.local_to_global(np.asarray(p.indices))]
        dst = old_of_new[p.local_to_global(dst_local)]
        if not (np.array_equal(np.asarray(ds.src)[e_id], src)
                and np.array_equal(np.asarray(ds.dst)[e_id], dst)):
            raise _fail(d / "e_id.npy", "e_id", "an in-edge's id names a dataset edge with "
                        "other endpoints.")
        want = (np.zeros((len(e_id), 0), np.float32) if ds.edge_attr is None
                else np.asarray(ds.edge_attr, dtype=np.float32)[e_id])
        if want.tobytes() != np.asarray(p.edge_attr).tobytes():
            raise _fail(d / "edge_attr.npy", "edge_attr", "differs from the dataset's "
                        "features of the same edge ids.")
    for name in ("train_edges", "val_edges", "test_edges", "val_neg", "test_neg"):
        got = np.concatenate([old_of_new[np.asarray(getattr(p, name))] for p in parts])
        want = np.asarray(getattr(ds, name))
        if name.endswith("_neg") and ds.neg_kind == "per_edge":  # rows follow their edges
            pos = np.concatenate([old_of_new[np.asarray(getattr(p, name[:-4] + "_edges"))]
                                  for p in parts])
            ref = np.asarray(getattr(ds, name[:-4] + "_edges"))
            got, want = np.concatenate([pos, got], 1), np.concatenate([ref, want], 1)
        if len(got) != len(want) or not np.array_equal(
                got[np.lexsort(got.T[::-1])], want[np.lexsort(want.T[::-1])]):
            raise _fail(out, name, "differs from the dataset's (as a multiset of rows "
                        "through orig_ids).")

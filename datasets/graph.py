"""``GraphDataset``: the one in-memory / on-disk form every input is turned into.

A homogeneous graph for node property prediction: ``num_nodes``, edges as int64
``src``/``dst`` arrays in message direction (source -> destination), float32 features
``x`` ``[N, F]`` (possibly a read-only memory map), int64 labels ``y`` (-1 = unlabelled)
and three disjoint split index arrays; optionally float32 edge features ``edge_attr``
``[E, D]`` (row ``i`` is edge ``i``'s: an edge's id is its position in ``src``/``dst``) and
link-prediction supervision edges and negatives (:mod:`gnnpar.datasets.link_split`).

On disk a dataset is a directory of ``.npy`` files plus ``dataset.json``::

    DIR/
      dataset.json     format, version, name, num_nodes, num_edges, feat_dim, num_classes
      src.npy dst.npy  int64 [E]
      x.npy            float32 [N, F]      (absent when the graph has no features)
      y.npy            int64 [N]           (absent when the graph has no labels)
      train_idx.npy val_idx.npy test_idx.npy   int64
      edge_attr.npy    float32 [E, D]      (version 2; absent without edge features)
      train_edges.npy val_edges.npy test_edges.npy   int64 [M, 2]   (version 2)
      val_neg.npy test_neg.npy   int64 [M, C] or [M', 2] as dataset.json's neg_kind says

Loading memory-maps every array (``mmap_mode="r"``) and never unpickles. A typed graph
(:class:`~gnnpar.datasets.typed.TypedGraphDataset`) is saved in the same format with
``"kind": "hetero"`` (version 3); :meth:`GraphDataset.load` refuses it, naming the loader
to use (absent ``kind`` means homogeneous).

Splits: :meth:`GraphDataset.random_split` draws a seeded random split of the labelled
nodes, with the sizes of :func:`~gnnpar.datasets.splits.split_sizes`;
:meth:`GraphDataset.require_node_task` is the check a trainer runs before anything else
(labels and a training split are present).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gnnpar.artifacts.arrays import copy_rows, load_npy, save_npy
from gnnpar.artifacts.checks import check_files, list_files
from gnnpar.artifacts.directory import atomic_directory
from gnnpar.artifacts.documents import check_json_digest, read_json
from gnnpar.artifacts.files import write_digested_json
from gnnpar.artifacts.kinds import DATASET
from gnnpar.datasets.link_split import (
    EDGE_SPLITS,
    LINK_FIX,
    NEG_SPLITS,
    check_link_fields,
    empty_pairs,
    random_link_split,
)
from gnnpar.datasets.splits import check_split_fractions, split_sizes
from gnnpar.errors import DatasetError
from gnnpar.sizes import NODE_BYTES, check_fits

if TYPE_CHECKING:
    from torch_geometric.data import Data

    from gnnpar.datasets.typed import TypedGraphDataset

FORMAT = "gnnpar-dataset"
FORMAT_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
"""Version 2 added edge features and link supervision (absent from version 1 files);
version 3 the size and SHA-256 of every array (``files``) and the file's own digest."""
META_FILE = "dataset.json"
KIND_LOADERS = {"homogeneous": "GraphDataset.load", "hetero": "TypedGraphDataset.load"}
"""``dataset.json``'s ``kind`` (absent: homogeneous) -> the class method that reads it."""
SPLITS = ("train_idx", "val_idx", "test_idx")
FEW_CLASSES = 1 << 10
"""Labels below this are accepted on any graph (more classes than nodes is fine on a small
one); above it, a label must be below the node count (a label of 10^9 is a typo that
would size the output layer)."""
_CHUNK_ROWS = 1 << 16
LABELS_FIX = "pass --labels FILE (one integer class per node; -1 = unlabelled)"
TRAIN_SPLIT_FIX = (
    "pass --split 0.6,0.2,0.2 (a random split of the labelled nodes, seeded by --split-seed) "
    "or --split TRAIN,VAL,TEST (files of node ids, .npy or one id per line); in Python: "
    "GraphDataset.random_split, e.g. dataset.random_split((0.6, 0.2, 0.2), seed=0).")


def unique_sorted(a: np.ndarray) -> np.ndarray:
    """Sorted distinct values of a 1-D array.

    Sort-based: numpy 2.4's hash-based ``np.unique`` is ~100x slower on large int64 arrays
    (30 s instead of 0.2 s for 5M values).
    """
    s = np.sort(a)
    keep = np.ones(len(s), dtype=bool)
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def _min_max(a: np.ndarray, chunk: int = 1 << 22) -> tuple[int, int]:
    """``(min, max)`` of a non-empty 1-D array, read in chunks (maps released after each)."""
    lo, hi = None, None
    for start in range(0, len(a), chunk):
        block = copy_rows(a, start, start + chunk)
        b_lo, b_hi = int(block.min()), int(block.max())
        lo = b_lo if lo is None else min(lo, b_lo)
        hi = b_hi if hi is None else max(hi, b_hi)
    assert lo is not None and hi is not None
    return lo, hi


def symmetrise(num_nodes: int, src: np.ndarray, dst: np.ndarray,
               remove_self_loops: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Every edge in both directions, without duplicates, sorted by ``(dst, src)``.

    Args:
        num_nodes: ``N``; ids are in ``[0, N)``.
        src: ``[E]`` integer source ids.
        dst: ``[E]`` integer destination ids.
        remove_self_loops: Also drop edges ``v -> v``.

    Returns:
        ``(src, dst)``, int64 ``[E']``.

    Shapes:
        ``E' <= 2 * E``.
    """
    s = np.concatenate([src, dst]).astype(np.int64, copy=False)
    d = np.concatenate([dst, src]).astype(np.int64, copy=False)
    if remove_self_loops:
        keep = s != d
        s, d = s[keep], d[keep]
    key = unique_sorted(d * num_nodes + s)
    return key % num_nodes, key // num_nodes


def check_edges(
    src: np.ndarray, dst: np.ndarray, num_src: int, num_dst: int,
    where: str | os.PathLike[str], fields: tuple[str, str] = ("src", "dst"),
) -> None:
    """Check one edge list: 1-D integer arrays of one length, ids in range.

    Shared by :meth:`GraphDataset.validate` and the typed dataset's per-relation checks.

    Args:
        src: Source ids, in ``[0, num_src)``.
        dst: Destination ids, in ``[0, num_dst)``.
        num_src: Number of nodes sources are drawn from.
        num_dst: Number of nodes destinations are drawn from.
        where: File, directory or dataset named in errors.
        fields: The field names of ``src`` and ``dst`` in errors.

    Raises:
        DatasetError: Naming the field of the first bad array.
    """
    arrays = dict(zip(fields, (src, dst), strict=True))
    for fld, a in arrays.items():
        if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
            raise DatasetError(f"must be a 1-D integer array, got {a.dtype} {a.shape}.",
                               path=where, field=fld, fix="pass int64 node ids.")
    if len(src) != len(dst):
        raise DatasetError(f"has {len(dst)} entries but {fields[0]} has {len(src)}.",
                           path=where, field=fields[1],
                           fix="give one source and one destination per edge.")
    for (fld, a), n in zip(arrays.items(), (num_src, num_dst), strict=True):
        if len(a):
            lo, hi = _min_max(a)
            if lo < 0 or hi >= n:
                bad = lo if lo < 0 else hi
                raise DatasetError(f"node id {bad} is outside [0, {n}).", path=where,
                                   field=fld, fix=f"use ids 0..{n - 1} or raise num_nodes.")


def check_features(x: np.ndarray, num_rows: int, where: str | os.PathLike[str],
                   fld: str = "x") -> None:
    """Check node features: float ``[num_rows, F]``, finite (read in chunks of rows).

    Raises:
        DatasetError: Naming ``fld``.
    """
    if x.ndim != 2 or x.shape[0] != num_rows:
        raise DatasetError(f"has shape {tuple(x.shape)}, expected ({num_rows}, F).",
                           path=where, field=fld, fix="give one feature row per node.")
    if not np.issubdtype(x.dtype, np.floating):
        raise DatasetError(f"has dtype {x.dtype}, expected a float type.", path=where,
                           field=fld, fix="convert features to float32.")
    for start in range(0, num_rows, _CHUNK_ROWS):
        block = copy_rows(x, start, start + _CHUNK_ROWS)
        if not np.isfinite(block).all():
            row = start + int(np.argwhere(~np.isfinite(block))[0, 0])
            raise DatasetError(f"row {row} holds NaN or inf.", path=where, field=fld,
                               fix="impute or drop non-finite feature values.")


def write_sealed(directory: Path, doc: dict[str, Any]) -> None:
    """Write ``dataset.json`` last: ``doc``, every array's size and SHA-256, its digest."""
    write_digested_json(directory / META_FILE, atomic=False, doc={
        **doc, "files": list_files(directory, META_FILE)})


def check_sealed(directory: Path, meta: dict[str, Any], digested_from: int,
                 verify: bool) -> None:
    """Check a dataset directory against its ``dataset.json`` (versions that list files).

    Args:
        directory: The dataset directory.
        meta: Its parsed ``dataset.json``.
        digested_from: The first version of this kind that carries digests.
        verify: Also recompute every array's SHA-256 (what ``validate`` asks for).

    Raises:
        DatasetError: The document or an array was changed after it was written.
    """
    if int(meta.get("format_version", 0)) < digested_from:
        return
    fix = "re-save the dataset (a file was changed, replaced or truncated)."
    check_json_digest(meta, directory / META_FILE, DatasetError, fix)
    if verify:
        check_files(directory, meta.get("files"), directory / META_FILE, DatasetError, fix)


def check_kind(meta: dict[str, Any], kind: str, path: str | os.PathLike[str]) -> None:
    """Raise unless ``dataset.json``'s ``kind`` (absent: ``"homogeneous"``) is ``kind``.

    The error names the loader of the kind found (``load_dataset`` reads every kind).
    """
    found = meta.get("kind", "homogeneous")
    if found == kind:
        return
    loader = KIND_LOADERS.get(found) if isinstance(found, str) else None
    raise DatasetError(
        f"holds a dataset of kind {found!r}, and {KIND_LOADERS[kind]} reads kind {kind!r}.",
        path=path, field="kind",
        fix=(f"read it with {loader} or gnnpar.load_dataset (which reads every kind)."
             if loader else "re-save the dataset with this gnnpar version."))


def check_counts(meta: dict[str, Any], keys: Sequence[str],
                 path: str | os.PathLike[str]) -> None:
    """Raise unless each of ``keys`` present in ``dataset.json`` is a count (an int >= 0).

    A count may also be a ``{name: count}`` dict or a list of counts (typed graphs);
    ``num_classes`` may be null.
    """
    for key in keys:
        value = meta.get(key)
        if value is None and key != "num_nodes":
            continue
        items = (value.values() if isinstance(value, dict)
                 else value if isinstance(value, list) else [value])
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in items):
            raise DatasetError(f"is {value!r:.60}, expected a count (an integer >= 0).",
                               path=path, field=key,
                               fix="re-save the dataset with gnnpar; never edit "
                               "dataset.json by hand.")


def _empty_idx() -> np.ndarray:
    return np.zeros(0, dtype=np.int64)


@dataclass
class GraphDataset:
    """A graph with node features, labels and train/val/test splits.

    Attributes:
        num_nodes: Number of nodes ``N``; ids are ``0 .. N-1``.
        src: int64 ``[E]`` source of each edge (message direction).
        dst: int64 ``[E]`` destination of each edge.
        x: float32 ``[N, F]`` node features, or ``None``.
        y: int64 ``[N]`` class labels, ``-1`` for unlabelled nodes, or ``None``.
        train_idx: int64 training node ids.
        val_idx: int64 validation node ids.
        test_idx: int64 test node ids.
        name: A name for logs and records.
        num_classes: Number of classes; by default ``max(y) + 1``.
        edge_attr: float32 ``[E, D]`` edge features (row = edge id), or ``None``.
        train_edges, val_edges, test_edges: int64 ``[M, 2]`` link supervision edges.
        val_neg, test_neg: Fixed evaluation negatives, as ``neg_kind`` says.
        neg_kind: ``"per_edge"`` (``[M, C]`` candidates per positive) or ``"shared"``
            (``[M', 2]`` pairs); see :mod:`gnnpar.datasets.link_split`.

    Example::

        ds = gnnpar.load_dataset("edges.csv", features="x.npy", labels="y.csv",
                                 split=(0.6, 0.2, 0.2))
        ds.summary()["num_nodes"], ds.save("data/mygraph")
    """

    num_nodes: int
    src: np.ndarray
    dst: np.ndarray
    x: np.ndarray | None = None
    y: np.ndarray | None = None
    train_idx: np.ndarray = field(default_factory=_empty_idx)
    val_idx: np.ndarray = field(default_factory=_empty_idx)
    test_idx: np.ndarray = field(default_factory=_empty_idx)
    name: str = "graph"
    num_classes: int | None = None
    edge_attr: np.ndarray | None = None
    train_edges: np.ndarray = field(default_factory=empty_pairs)
    val_edges: np.ndarray = field(default_factory=empty_pairs)
    test_edges: np.ndarray = field(default_factory=empty_pairs)
    val_neg: np.ndarray = field(default_factory=empty_pairs)
    test_neg: np.ndarray = field(default_factory=empty_pairs)
    neg_kind: str = "per_edge"

    def __post_init__(self) -> None:
        self.num_nodes = int(self.num_nodes)
        if self.num_classes is None and self.y is not None and len(self.y):
            self.num_classes = int(np.max(self.y)) + 1
        self.num_classes = int(self.num_classes or 0)

    # ------------------------------------------------------------------ properties
    @property
    def num_edges(self) -> int:
        """Number of directed edges ``E``."""
        return int(len(self.src))

    @property
    def feat_dim(self) -> int:
        """Feature width ``F`` (0 without features)."""
        return 0 if self.x is None else int(self.x.shape[1])

    @property
    def edge_dim(self) -> int:
        """Edge feature width ``D`` (0 without edge features)."""
        return 0 if self.edge_attr is None else int(self.edge_attr.shape[1])

    @property
    def has_link_task(self) -> bool:
        """Whether the dataset has training supervision edges."""
        return len(self.train_edges) > 0

    def in_degree(self) -> np.ndarray:
        """int64 ``[N]`` number of in-edges of each node."""
        return np.bincount(np.asarray(self.dst), minlength=self.num_nodes).astype(np.int64)

    def csc(self) -> tuple[np.ndarray, np.ndarray]:
        """In-edge CSC: ``(indptr [N+1], indices [E])``, sources grouped by destination.

        Within one destination, edges keep their input order (stable sort).
        """
        order = np.argsort(np.asarray(self.dst), kind="stable")
        indptr = np.zeros(self.num_nodes + 1, dtype=np.int64)
        np.cumsum(self.in_degree(), out=indptr[1:])
        return indptr, np.asarray(self.src)[order].astype(np.int64, copy=False)

    # ------------------------------------------------------------------ validation
    def validate(self, path: str | os.PathLike[str] | None = None) -> GraphDataset:
        """Check every invariant; raise :class:`DatasetError` naming the field and the fix.

        Args:
            path: File or directory the data came from, named in errors.

        Returns:
            ``self``, so that loaders can ``return GraphDataset(...).validate(path)``.
        """
        n = self.num_nodes
        where = path if path is not None else self.name

        def fail(fld: str, msg: str, fix: str) -> DatasetError:
            return DatasetError(msg, path=where, field=fld, fix=fix)

        if n < 1:
            raise fail("num_nodes", f"must be >= 1, got {n}.", "give a graph with nodes.")
        check_fits(n, NODE_BYTES, what=f"{n:,} nodes (the given count, else the largest "
                   "node id + 1)", field="num_nodes", path=where, error=DatasetError,
                   fix="number the nodes 0..N-1 without gaps (ids are positions, not names).")
        check_edges(self.src, self.dst, n, n, where)
        if self.x is not None:
            check_features(self.x, n, where)
        if self.y is not None:
            if self.y.ndim != 1 or self.y.shape[0] != n:
                raise fail("y", f"has shape {tuple(self.y.shape)}, expected ({n},).",
                           "give one label per node (-1 for unlabelled).")
            if len(self.y) and int(np.min(self.y)) < -1:
                raise fail("y", f"holds label {int(np.min(self.y))} < -1.",
                           "use -1 for unlabelled nodes and 0..C-1 for classes.")
            if len(self.y) and int(np.max(self.y)) >= max(self.num_classes or 0, 1):
                raise fail("y", f"holds label {int(np.max(self.y))} >= num_classes "
                           f"{self.num_classes}.", "raise num_classes or fix the labels.")
            if len(self.y) and int(np.max(self.y)) >= max(n, FEW_CLASSES):
                raise fail("y", f"holds label {int(np.max(self.y)):,}, which implies more "
                           f"classes than the {n:,} nodes: most could never be seen, and "
                           "the model's output layer would be that wide.",
                           "number the classes 0..C-1 (C = the number of distinct labels).")
        check_link_fields(self, where)
        return self.validate_splits(path)

    def validate_splits(self, path: str | os.PathLike[str] | None = None) -> GraphDataset:
        """Check only the split invariants (part of :meth:`validate`).

        For a dataset that was validated and then given new splits: each split is 1-D
        integer ids in ``[0, N)``, without repeats, disjoint from the others, and labelled
        (``y >= 0``) where ``y`` is present.

        Args:
            path: File or directory the splits came from, named in errors.

        Returns:
            ``self``.
        """
        n = self.num_nodes
        where = path if path is not None else self.name

        def fail(fld: str, msg: str, fix: str) -> DatasetError:
            return DatasetError(msg, path=where, field=fld, fix=fix)

        seen = np.zeros(n, dtype=np.int8)
        for fld in SPLITS:
            idx = getattr(self, fld)
            if idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer):
                raise fail(fld, f"must be a 1-D integer array, got {idx.dtype} {idx.shape}.",
                           "pass int64 node ids.")
            if len(idx) == 0:
                continue
            if int(idx.min()) < 0 or int(idx.max()) >= n:
                raise fail(fld, f"holds ids outside [0, {n}).", f"use ids 0..{n - 1}.")
            if len(unique_sorted(idx)) != len(idx):
                raise fail(fld, "holds a node id twice.", "deduplicate the split.")
            if seen[idx].any():
                dup = int(idx[seen[idx] > 0][0])
                raise fail(fld, f"node {dup} is also in an earlier split; splits must be "
                           "disjoint.", "put each node in at most one split.")
            seen[idx] = 1
            if self.y is not None and (np.asarray(self.y)[idx] < 0).any():
                raise fail(fld, "holds unlabelled nodes (y = -1).",
                           "give those nodes labels or drop them from the split.")
        return self

    def require_node_task(self, where: str | os.PathLike[str] | None = None) -> GraphDataset:
        """Check that the dataset can train a node classifier: labels and training nodes.

        The check a trainer runs right after loading, before any partitioning, so that a
        graph without labels or splits fails in one line that says what to pass.

        Args:
            where: The spec, file or object named in errors; default: the dataset's name.

        Returns:
            ``self``.

        Raises:
            DatasetError: No labelled node (field ``y``; fix: ``--labels``), or labels but an empty
                training split (field ``train_idx``; fix: ``--split`` fractions, seeded by
                ``--split-seed``, or ``--split`` files).
        """
        loc = where if where is not None else self.name
        n_lab = 0 if self.y is None else int((np.asarray(self.y) >= 0).sum())
        if n_lab == 0:
            what = "no node labels" if self.y is None else "only unlabelled nodes (y = -1)"
            fix = (f"pass --task link: it has {len(self.train_edges):,} link supervision "
                   "edges" if self.has_link_task else LABELS_FIX)
            raise DatasetError(f"the graph has {what}; node classification needs labels.",
                               path=loc, field="y", fix=fix + ".")
        if len(self.train_idx) == 0:
            raise DatasetError(f"the training split is empty ({n_lab:,} of "
                               f"{self.num_nodes:,} nodes are labelled).", path=loc,
                               field="train_idx", fix=TRAIN_SPLIT_FIX)
        return self

    def require_link_task(self, where: str | os.PathLike[str] | None = None) -> GraphDataset:
        """Check that the dataset can train a link predictor: training supervision edges.

        Raises:
            DatasetError: No training supervision edge (field ``train_edges``).
        """
        if not self.has_link_task:
            raise DatasetError("the graph has no link supervision edges (train_edges is "
                               "empty); link prediction needs them.",
                               path=where if where is not None else self.name,
                               field="train_edges", fix=LINK_FIX)
        return self

    def random_link_split(self, fractions: Sequence[float], seed: int = 0,
                          num_neg: int = 100) -> GraphDataset:
        """A copy with a seeded random link split of the edges.

        See :func:`gnnpar.datasets.link_split.random_link_split`.

        Example::

            ds = gnnpar.load_dataset("edges.csv").random_link_split((0.85, 0.05, 0.1))
        """
        f = check_split_fractions(fractions, self.name)
        return random_link_split(self, f, seed, num_neg)

    # ------------------------------------------------------------------ transforms
    def random_split(self, fractions: Sequence[float], seed: int = 0) -> GraphDataset:
        """A copy whose train/val/test are a seeded random split of the labelled nodes.

        The labelled ids (``y >= 0``, ascending) are shuffled with
        ``np.random.default_rng(seed).permutation``; the first ``n_train`` go to train,
        the next ``n_val`` to val, the next ``n_test`` to test, each returned sorted. Sizes
        are those of :func:`split_sizes` for ``n`` labelled nodes (e.g. ``(0.6, 0.2, 0.2)``
        of 10 gives 6, 2, 2). Any existing split is replaced.

        Args:
            fractions: ``(train, val, test)`` fractions, each in ``[0, 1]``, summing to
                at most 1.
            seed: Seed of the permutation; the same seed gives the same split.

        Returns:
            A new dataset sharing every array with ``self`` except the three splits.

        Raises:
            DatasetError: Bad fractions (field ``split``), or no labelled node (field ``y``).
        """
        f = check_split_fractions(fractions, self.name)
        if self.y is None:
            raise DatasetError("the graph has no labels to split.", path=self.name, field="y",
                               fix=LABELS_FIX + ", then split.")
        labelled = np.flatnonzero(np.asarray(self.y) >= 0).astype(np.int64)
        if len(labelled) == 0:
            raise DatasetError("every node is unlabelled (y = -1); there is nothing to split.",
                               path=self.name, field="y", fix=LABELS_FIX + ".")
        n_train, n_val, n_test = split_sizes(f, len(labelled))
        shuffled = labelled[np.random.default_rng(seed).permutation(len(labelled))]
        cuts = np.cumsum([n_train, n_val, n_test])
        return replace(
            self,
            train_idx=np.sort(shuffled[: cuts[0]]),
            val_idx=np.sort(shuffled[cuts[0] : cuts[1]]),
            test_idx=np.sort(shuffled[cuts[1] : cuts[2]]),
        )

    def to_undirected(self, remove_self_loops: bool = False) -> GraphDataset:
        """Add every reverse edge and drop duplicates (result sorted by ``(dst, src)``).

        Args:
            remove_self_loops: Also drop edges ``v -> v``.
        """
        if self.edge_attr is not None:
            raise DatasetError("cannot symmetrise a graph with edge features (which "
                               "feature would a merged edge keep?).", path=self.name,
                               field="edge_attr", fix="add the reverse edges, with their "
                               "features, before loading, or drop --undirected.")
        src, dst = symmetrise(self.num_nodes, self.src, self.dst, remove_self_loops)
        return replace(self, src=src, dst=dst)

    def to_pyg(self) -> Data:
        """A PyG ``Data`` with ``x``, ``edge_index``, ``y`` and boolean split masks."""
        import torch
        from torch_geometric.data import Data

        data = Data(
            edge_index=torch.from_numpy(np.stack([self.src, self.dst]).astype(np.int64)),
            num_nodes=self.num_nodes,
        )
        if self.x is not None:
            data.x = torch.from_numpy(np.array(self.x, dtype=np.float32))
        if self.y is not None:
            data.y = torch.from_numpy(np.array(self.y, dtype=np.int64))
        if self.edge_attr is not None:
            data.edge_attr = torch.from_numpy(np.array(self.edge_attr, dtype=np.float32))
        for fld, mask in zip(SPLITS, ("train_mask", "val_mask", "test_mask"), strict=True):
            m = torch.zeros(self.num_nodes, dtype=torch.bool)
            m[torch.from_numpy(np.array(getattr(self, fld), dtype=np.int64))] = True
            data[mask] = m
        return data

    def summary(self) -> dict[str, Any]:
        """Sizes and degree statistics, for printing and run records."""
        deg = self.in_degree()
        return {
            "name": self.name,
            "num_nodes": self.num_nodes,
            "num_edges": self.num_edges,
            "feat_dim": self.feat_dim,
            "num_classes": self.num_classes,
            "avg_in_degree": round(float(deg.mean()), 3),
            "max_in_degree": int(deg.max()) if len(deg) else 0,
            "nodes_without_in_edges": int((deg == 0).sum()),
            "self_loops": int((np.asarray(self.src) == np.asarray(self.dst)).sum()),
            "train": int(len(self.train_idx)),
            "val": int(len(self.val_idx)),
            "test": int(len(self.test_idx)),
            "edge_dim": self.edge_dim,
            **{fld: int(len(getattr(self, fld))) for fld in EDGE_SPLITS},
        }

    # ------------------------------------------------------------------ disk
    def save(self, out_dir: str | os.PathLike[str], overwrite: bool = False,
             validate: bool = True) -> Path:
        """Validate, then write to ``out_dir`` atomically (temporary sibling, then rename).

        Args:
            out_dir: Directory to create.
            overwrite: Replace an existing directory (only once the new one is complete).
            validate: Check every invariant first; pass ``False`` only for a dataset
                that was just validated.

        Returns:
            The directory written.
        """
        if validate:
            self.validate()
        out = Path(out_dir)
        with atomic_directory(out, overwrite, DatasetError, kind=DATASET) as tmp:
            save_npy(tmp / "src.npy", np.asarray(self.src, dtype=np.int64))
            save_npy(tmp / "dst.npy", np.asarray(self.dst, dtype=np.int64))
            if self.x is not None:
                save_npy(tmp / "x.npy", np.asarray(self.x, dtype=np.float32))
            if self.y is not None:
                save_npy(tmp / "y.npy", np.asarray(self.y, dtype=np.int64))
            for fld in SPLITS:
                save_npy(tmp / f"{fld}.npy", np.asarray(getattr(self, fld), dtype=np.int64))
            if self.edge_attr is not None:
                save_npy(tmp / "edge_attr.npy", np.asarray(self.edge_attr, dtype=np.float32))
            for fld in (*EDGE_SPLITS, *NEG_SPLITS):
                save_npy(tmp / f"{fld}.npy", np.asarray(getattr(self, fld), dtype=np.int64))
            write_sealed(tmp, {
                "format": FORMAT,
                "format_version": FORMAT_VERSION,
                "name": self.name,
                "num_nodes": self.num_nodes,
                "num_edges": self.num_edges,
                "feat_dim": self.feat_dim,
                "num_classes": self.num_classes,
                "edge_dim": self.edge_dim,
                "neg_kind": self.neg_kind,
                "arrays": sorted(["src", "dst", *SPLITS, *EDGE_SPLITS, *NEG_SPLITS]
                                 + [a for a in ("x", "y", "edge_attr")
                                    if getattr(self, a) is not None]),
            })
        return out

    @classmethod
    def load(cls, path: str | os.PathLike[str], mmap: bool = True,
             validate: bool = True) -> GraphDataset:
        """Read a directory written by :meth:`save`, memory-mapped by default, and validate.

        Args:
            path: Directory holding ``dataset.json``.
            mmap: Memory-map the arrays read-only.
            validate: Check every invariant; pass ``False`` only for a directory this
                process has just written from a validated dataset.
        """
        d = Path(path)
        meta = read_json(d / META_FILE, DatasetError)
        if not isinstance(meta, dict):
            raise DatasetError("must hold a JSON object.", path=d / META_FILE,
                               fix="re-save the dataset with GraphDataset.save.")
        check_kind(meta, "homogeneous", d / META_FILE)
        if meta.get("format") != FORMAT or meta.get("format_version") not in READABLE_VERSIONS:
            raise DatasetError(
                f"format {meta.get('format')!r} version {meta.get('format_version')!r} is not "
                f"{FORMAT!r} version {' or '.join(map(str, READABLE_VERSIONS))}.",
                path=d / "dataset.json",
                field="format_version", fix="re-save the dataset with this gnnpar version.")
        check_sealed(d, meta, 3, validate)
        for key in ("num_nodes", "name"):
            if key not in meta:
                raise DatasetError("field is missing.", path=d / "dataset.json", field=key,
                                   fix="re-save the dataset with GraphDataset.save.")
        check_counts(meta, ("num_nodes", "num_edges", "num_classes"), d / "dataset.json")

        # The arrays it was saved with (older files: x when feat_dim > 0, y with classes).
        saved = set(meta.get("arrays") or [a for a, on in (
            ("x", bool(meta.get("feat_dim"))), ("y", bool(meta.get("num_classes")))) if on])

        def arr(name: str, required: bool) -> np.ndarray | None:
            f = d / f"{name}.npy"
            if not f.exists() and not required and name not in saved:
                return None
            return load_npy(f, mmap, DatasetError)  # names the missing or damaged file

        src, dst = arr("src", True), arr("dst", True)
        assert src is not None and dst is not None
        link = {fld: a for fld in (*EDGE_SPLITS, *NEG_SPLITS)
                if (a := arr(fld, False)) is not None}
        ds = cls(
            num_nodes=meta["num_nodes"], src=src, dst=dst, x=arr("x", False), y=arr("y", False),
            train_idx=arr("train_idx", True), val_idx=arr("val_idx", True),  # type: ignore[arg-type]
            test_idx=arr("test_idx", True), name=meta["name"],  # type: ignore[arg-type]
            num_classes=meta.get("num_classes"), edge_attr=arr("edge_attr", False),
            neg_kind=meta.get("neg_kind", "per_edge"), **link,
        )
        if ds.num_edges != meta.get("num_edges", ds.num_edges):
            raise DatasetError(f"src.npy has {ds.num_edges} edges but dataset.json says "
                               f"{meta['num_edges']}.", path=d, field="num_edges",
                               fix="re-save the dataset; a file was replaced or truncated.")
        return ds.validate(d) if validate else ds


def class_count(dataset: GraphDataset | TypedGraphDataset) -> int:
    """``dataset.num_classes``, which the constructor makes an int (0 without labels).

    Raises:
        DatasetError: It was set to ``None`` after construction.
    """
    if dataset.num_classes is None:
        raise DatasetError(f"is None on dataset {dataset.name!r}; the constructor sets an "
                           "int (max(y) + 1, or 0 without labels).", field="num_classes",
                           fix="set num_classes to the number of classes (0 without labels).")
    return dataset.num_classes

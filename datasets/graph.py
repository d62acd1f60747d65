"""``GraphDataset``: the one in-memory / on-disk form every input is turned into.

A homogeneous graph for node property prediction: ``num_nodes``, edges as int64
``src``/``dst`` arrays in message direction (source -> destination), float32 features
``x`` ``[N, F]`` (possibly a read-only memory map), int64 labels ``y`` (-1 = unlabelled)
and three disjoint split index arrays.

On disk a dataset is a directory of ``.npy`` files plus ``dataset.json``::

    DIR/
      dataset.json     format, version, name, num_nodes, num_edges, feat_dim, num_classes
      src.npy dst.npy  int64 [E]
      x.npy            float32 [N, F]      (absent when the graph has no features)
      y.npy            int64 [N]           (absent when the graph has no labels)
      train_idx.npy val_idx.npy test_idx.npy   int64

Loading memory-maps every array (``mmap_mode="r"``) and never unpickles.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gnnpar.errors import DatasetError
from gnnpar.io import atomic_directory, load_npy, read_json, save_npy, write_json

if TYPE_CHECKING:
    from torch_geometric.data import Data

FORMAT = "gnnpar-dataset"
FORMAT_VERSION = 1
SPLITS = ("train_idx", "val_idx", "test_idx")
_CHUNK_ROWS = 1 << 16


def unique_sorted(a: np.ndarray) -> np.ndarray:
    """Sorted distinct values of a 1-D array.

    Sort-based: numpy 2.4's hash-based ``np.unique`` is ~100x slower on large int64 arrays
    (30 s instead of 0.2 s for 5M values).
    """
    s = np.sort(a)
    keep = np.ones(len(s), dtype=bool)
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


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
        for fld in ("src", "dst"):
            a = getattr(self, fld)
            if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
                raise fail(fld, f"must be a 1-D integer array, got {a.dtype} {a.shape}.",
                           "pass int64 node ids.")
        if len(self.src) != len(self.dst):
            raise fail("dst", f"has {len(self.dst)} entries but src has {len(self.src)}.",
                       "give one source and one destination per edge.")
        for fld in ("src", "dst"):
            a = getattr(self, fld)
            if len(a):
                lo, hi = int(a.min()), int(a.max())
                if lo < 0 or hi >= n:
                    bad = lo if lo < 0 else hi
                    raise fail(fld, f"node id {bad} is outside [0, {n}).",
                               f"use ids 0..{n - 1} or raise num_nodes.")
        if self.x is not None:
            if self.x.ndim != 2 or self.x.shape[0] != n:
                raise fail("x", f"has shape {tuple(self.x.shape)}, expected ({n}, F).",
                           "give one feature row per node.")
            if not np.issubdtype(self.x.dtype, np.floating):
                raise fail("x", f"has dtype {self.x.dtype}, expected a float type.",
                           "convert features to float32.")
            for start in range(0, n, _CHUNK_ROWS):
                block = np.asarray(self.x[start : start + _CHUNK_ROWS])
                if not np.isfinite(block).all():
                    row = start + int(np.argwhere(~np.isfinite(block))[0, 0])
                    raise fail("x", f"row {row} holds NaN or inf.",
                               "impute or drop non-finite feature values.")
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

    # ------------------------------------------------------------------ transforms
    def to_undirected(self, remove_self_loops: bool = False) -> GraphDataset:
        """Add every reverse edge and drop duplicates (result sorted by ``(dst, src)``).

        Args:
            remove_self_loops: Also drop edges ``v -> v``.
        """
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
        with atomic_directory(out, overwrite, DatasetError) as tmp:
            save_npy(tmp / "src.npy", np.asarray(self.src, dtype=np.int64))
            save_npy(tmp / "dst.npy", np.asarray(self.dst, dtype=np.int64))
            if self.x is not None:
                save_npy(tmp / "x.npy", np.asarray(self.x, dtype=np.float32))
            if self.y is not None:
                save_npy(tmp / "y.npy", np.asarray(self.y, dtype=np.int64))
            for fld in SPLITS:
                save_npy(tmp / f"{fld}.npy", np.asarray(getattr(self, fld), dtype=np.int64))
            write_json(tmp / "dataset.json", {
                "format": FORMAT,
                "format_version": FORMAT_VERSION,
                "name": self.name,
                "num_nodes": self.num_nodes,
                "num_edges": self.num_edges,
                "feat_dim": self.feat_dim,
                "num_classes": self.num_classes,
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
        meta = read_json(d / "dataset.json", DatasetError)
        if meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION:
            raise DatasetError(
                f"format {meta.get('format')!r} version {meta.get('format_version')!r} is not "
                f"{FORMAT!r} version {FORMAT_VERSION}.", path=d / "dataset.json",
                field="format_version", fix="re-save the dataset with this gnnpar version.")
        for key in ("num_nodes", "name"):
            if key not in meta:
                raise DatasetError("field is missing.", path=d / "dataset.json", field=key,
                                   fix="re-save the dataset with GraphDataset.save.")

        def arr(name: str, required: bool) -> np.ndarray | None:
            f = d / f"{name}.npy"
            if not f.exists() and not required:
                return None
            return load_npy(f, mmap, DatasetError)

        src, dst = arr("src", True), arr("dst", True)
        assert src is not None and dst is not None
        ds = cls(
            num_nodes=meta["num_nodes"], src=src, dst=dst, x=arr("x", False), y=arr("y", False),
            train_idx=arr("train_idx", True), val_idx=arr("val_idx", True),  # type: ignore[arg-type]
            test_idx=arr("test_idx", True), name=meta["name"],  # type: ignore[arg-type]
            num_classes=meta.get("num_classes"),
        )
        if ds.num_edges != meta.get("num_edges", ds.num_edges):
            raise DatasetError(f"src.npy has {ds.num_edges} edges but dataset.json says "
                               f"{meta['num_edges']}.", path=d, field="num_edges",
                               fix="re-save the dataset; a file was replaced or truncated.")
        return ds.validate(d) if validate else ds

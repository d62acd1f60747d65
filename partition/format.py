"""The partition directory, format version 5: its schema and its reader.

Nodes are renumbered so that part ``k`` owns the contiguous range
``offsets[k] .. offsets[k+1]`` of new global ids; the partition book is ``offsets``.
Edges follow message direction (source -> destination)::

    OUT/
      meta.json          PartitionMeta (below), including the sha256 of every file
      part-K/
        orig_ids.npy     int64 [n_owned]   original dataset id of each owned node
        halo_gids.npy    int64 [n_halo]    new global ids of halo nodes, sorted
        indptr.npy       int64 [n_owned + n_halo + 1]  CSC over local ids
        indices.npy      int64 [nnz]       source local id of each in-edge:
                                           [0, n_owned) owned, [n_owned, n_owned + n_halo) halo
        in_degree.npy    int64 [n_owned + n_halo]  global in-degree (GCN normalisation)
        adj_complete.npy bool  [n_owned + n_halo]  whether the node's full in-edge list is
                                           stored (owned nodes always; halo nodes within
                                           halo_hops - 1 hops of an owned node)
        feat.npy         [n_owned, F]  row order = local id; float32, float16 or the raw
                                           bits of bfloat16 (uint16), as meta.json's
                                           feature_dtype (fp32, fp16, bf16) says
        label.npy        int64 [n_owned]   (-1 = unlabelled)
        train_idx.npy val_idx.npy test_idx.npy   int64 local ids of owned nodes
        e_id.npy         int64 [nnz]       dataset edge id of each in-edge (indices' order)
        edge_attr.npy    float32 [nnz, D]  edge features in indices' order (D = edge_dim,
                                           0 without)
        train_edges.npy val_edges.npy test_edges.npy   int64 [m, 2]  link supervision
                                           edges (src, dst) as new global ids, those whose
                                           *source* this part owns, in dataset order
        val_neg.npy test_neg.npy   int64   their fixed negatives as new global ids:
                                           [m, C] candidate destinations, row i for the
                                           split's edge i (neg_kind "per_edge"), or [m', 2]
                                           negative pairs whose source this part owns
                                           ("shared")
        etype.npy        int16 [nnz]       typed graphs only: relation of each in-edge
                                           (indices' order; each row's in-edges sorted by
                                           relation)
        feat_{t}.npy     [n_owned of type t, F_t]  typed graphs only, one per node type t
                                           with features: its owned rows in local order,
                                           stored as feat.npy (feat.npy has no columns)

Local id ``i < n_owned`` is global id ``offsets[K] + i``; local id ``n_owned + j`` is global
id ``halo_gids[j]``.  With ``halo_hops = 1`` the halo rows of ``indptr`` are empty.

A typed partition's files and ``meta.json``'s ``hetero`` are specified in
:mod:`~gnnpar.partition.typed`.

Every older version is still read (:data:`READABLE_VERSIONS`).  Versions 2 to 4 name the
feature dtype ``feat_dtype`` in ``meta.json`` (version 1 has none: ``fp32``); versions
1 and 2 (no edge ids, edge features or link supervision) read with ``e_id = None``, no
edge features and no supervision edges, and anything that needs edge ids refuses them
with the fix (re-partition).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from gnnpar.artifacts.arrays import load_npy, release
from gnnpar.artifacts.documents import check_json_digest, read_json
from gnnpar.artifacts.files import json_digest, sha256_file
from gnnpar.errors import ConfigError, PartitionError
from gnnpar.partition.typed import ETYPE_DTYPE, TypeBook, check_typed_part, type_feat_name

FORMAT_VERSION = 5
READABLE_VERSIONS = (1, 2, 3, 4, 5)
"""Version 2 added the feature dtype (a version-1 directory reads as ``fp32`` features);
version 3 edge ids, edge features and link supervision (``EDGE_DTYPES``); version 4 typed
graphs (``hetero``, :mod:`~gnnpar.partition.typed`); version 5 renamed ``meta.json``'s
``feat_dtype`` to ``feature_dtype`` (:data:`RENAMED`)."""
RENAMED = {"feature_dtype": (5, "feat_dtype")}
"""``meta.json`` fields renamed: field -> (the version that renamed it, its older name)."""
META_FILE = "meta.json"
FEATURE_DTYPES: dict[str, type[np.generic]] = {
    "fp32": np.float32, "fp16": np.float16, "bf16": np.uint16}
"""How ``feat.npy`` stores each feature dtype (numpy has no bfloat16: its raw 16 bits)."""
_FP16_MAX = float(np.finfo(np.float16).max)
# Every array file of a part and its dtype: the part-file schema (see the module docstring).
PART_DTYPES: dict[str, type[np.generic]] = {
    "orig_ids": np.int64, "halo_gids": np.int64, "indptr": np.int64, "indices": np.int64,
    "in_degree": np.int64, "adj_complete": np.bool_, "feat": np.float32, "label": np.int64,
    "train_idx": np.int64, "val_idx": np.int64, "test_idx": np.int64,
}
EDGE_DTYPES: dict[str, type[np.generic]] = {
    "e_id": np.int64, "edge_attr": np.float32, "train_edges": np.int64,
    "val_edges": np.int64, "test_edges": np.int64, "val_neg": np.int64, "test_neg": np.int64}
"""The part files version 3 added."""
LINK_ARRAYS = ("train_edges", "val_edges", "test_edges", "val_neg", "test_neg")
PART_ARRAYS = (*PART_DTYPES, *EDGE_DTYPES)
_TWO_DIMENSIONAL = ("feat", "edge_attr", *LINK_ARRAYS)
META_TYPES = {
    "format_version": "int", "name": "str", "num_parts": "int", "num_nodes": "int",
    "num_edges": "int", "feat_dim": "int", "num_classes": "int", "offsets": "list[int]",
    "halo_hops": "int", "partitioner": "dict", "quality": "dict", "parts": "list[dict]",
    "files": "dict[str, str]", "feature_dtype": "str", "edge_dim": "int", "neg_kind": "str",
    "hetero": "dict"}
"""The JSON type of every ``meta.json`` field."""


def _stored_name(name: str, version: int) -> str:
    """The key under which a ``meta.json`` of ``version`` stores field ``name``."""
    renamed_in, old = RENAMED.get(name, (0, name))
    return old if version < renamed_in else name


def _has_type(value: Any, kind: str) -> bool:
    """Whether a parsed JSON value is of :data:`META_TYPES`' ``kind`` (no bool for int)."""
    def is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    if kind == "int":
        return is_int(value)
    if kind == "str":
        return isinstance(value, str)
    if kind == "dict":
        return isinstance(value, dict)
    if kind == "list[int]":
        return isinstance(value, list) and all(is_int(v) for v in value)
    if kind == "list[dict]":
        return isinstance(value, list) and all(
            isinstance(v, dict) and all(is_int(x) for x in v.values()) for v in value)
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str)
                                           for k, v in value.items())


def store_features(x: np.ndarray, feature_dtype: str) -> np.ndarray:
    """Finite feature rows as ``feat.npy`` stores them for ``feature_dtype``.

    ``bf16`` is rounded to nearest even and kept as its raw 16 bits; check ``fp16``
    features with :func:`check_feature_range` first.
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    if feature_dtype == "bf16":
        bits = x.view(np.uint32)
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return x.astype(FEATURE_DTYPES[feature_dtype], copy=False)


def check_feature_range(blocks: Iterable[np.ndarray], feature_dtype: str) -> None:
    """Raise :class:`ConfigError` if a feature value does not fit ``feature_dtype``."""
    if feature_dtype != "fp16":
        return
    for block in blocks:
        peak = float(np.abs(block).max()) if block.size else 0.0
        if peak > _FP16_MAX:
            raise ConfigError(f"a feature value of magnitude {peak:.4g} does not fit float16 "
                              "(largest 65504).", field="partition.feature_dtype",
                              fix="pass bf16 (--feature-dtype bf16; float32's range) or scale "
                              "the features.")


def part_dir_name(part: int) -> str:
    """Name of part ``part``'s subdirectory."""
    return f"part-{part}"


@dataclass(frozen=True)
class PartitionMeta:
    """Contents of ``meta.json``.

    Attributes:
        format_version: On-disk format version (:data:`FORMAT_VERSION` when written;
            any of :data:`READABLE_VERSIONS` is read).
        name: Dataset name.
        num_parts: Number of parts ``K``.
        num_nodes: Nodes in the whole graph.
        num_edges: Edges in the whole graph.
        feat_dim: Feature width ``F``.
        feature_dtype: ``fp32``, ``fp16`` or ``bf16`` (``feat.npy`` holds bfloat16's raw
            bits); ``feat_dtype`` in versions 2 to 4.
        num_classes: Number of classes.
        offsets: ``K + 1`` monotone global-id boundaries: part ``k`` owns
            ``offsets[k] .. offsets[k+1]``.
        halo_hops: Depth of the stored halo.
        partitioner: Method and its arguments (``{"method": "metis", ...}``).
        quality: Edge cut, balance and halo figures (see ``partition.quality``).
        parts: Per part: ``num_owned``, ``num_halo``, ``num_edges`` (stored in-edges).
        files: ``relative path -> sha256`` of every array file.
        edge_dim: Edge feature width ``D`` (0 without edge features).
        neg_kind: How ``val_neg`` / ``test_neg`` hold negatives: ``per_edge`` or ``shared``
            (see the module docstring).
        hetero: A typed graph's types (:class:`~gnnpar.partition.typed.TypeBook`'s dict);
            empty for a homogeneous graph.
    """

    format_version: int
    name: str
    num_parts: int
    num_nodes: int
    num_edges: int
    feat_dim: int
    num_classes: int
    offsets: tuple[int, ...]
    halo_hops: int
    partitioner: dict[str, Any]
    quality: dict[str, Any] = field(default_factory=dict)
    parts: tuple[dict[str, int], ...] = ()
    files: dict[str, str] = field(default_factory=dict)
    feature_dtype: str = "fp32"
    edge_dim: int = 0
    neg_kind: str = "per_edge"
    hetero: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any], path: str | os.PathLike[str]) -> PartitionMeta:
        """Build from parsed JSON, raising :class:`PartitionError` naming the bad field.

        Every field must have its JSON type (:data:`META_TYPES`), a version-2 file its
        own digest, and ``files`` a checksum for exactly the files of every part, so that
        neither damage to ``meta.json`` nor a removed checksum goes unnoticed.
        """
        fix = "re-create the partition with gnnpar-partition."
        if not isinstance(d, dict):
            raise PartitionError("expected a JSON object.", path=path, fix=fix)
        version = d.get("format_version")
        if isinstance(version, bool) or version not in READABLE_VERSIONS:
            raise PartitionError(
                f"format_version is {version!r}; this gnnpar reads versions "
                f"{', '.join(map(str, READABLE_VERSIONS))}.",
                path=path, field="format_version",
                fix="re-partition with this gnnpar version (gnnpar-partition ... --overwrite).")
        if version >= 2:
            check_json_digest(d, path, PartitionError)
        kwargs: dict[str, Any] = {}
        for f in fields(cls):
            key = _stored_name(f.name, version)
            if key not in d:
                if f.name == "quality" or (version < 2 and f.name in ("feature_dtype", "parts")) \
                        or (version < 3 and f.name in ("edge_dim", "neg_kind")) \
                        or (version < 4 and f.name == "hetero"):
                    continue  # optional (in older versions)
                raise PartitionError("field is missing.", path=path, field=key, fix=fix)
            value = d[key]
            if not _has_type(value, META_TYPES[f.name]):
                raise PartitionError(f"is {type(value).__name__} {value!r:.60}, expected "
                                     f"{META_TYPES[f.name]}.", path=path, field=key, fix=fix)
            kwargs[f.name] = value
        kwargs["offsets"] = tuple(kwargs["offsets"])
        kwargs["parts"] = tuple(kwargs.get("parts", ()))
        meta = cls(**kwargs)
        if meta.feature_dtype not in FEATURE_DTYPES:
            key = _stored_name("feature_dtype", version)
            raise PartitionError(f"{key} is {meta.feature_dtype!r}, not one of "
                                 f"{', '.join(FEATURE_DTYPES)}.", path=path, field=key,
                                 fix="re-partition with this gnnpar (gnnpar-partition ... "
                                 "--feature-dtype fp32|fp16|bf16 --overwrite).")
        if meta.neg_kind not in ("per_edge", "shared"):
            raise PartitionError(f"neg_kind is {meta.neg_kind!r}.", path=path, field="neg_kind",
                                 fix="use per_edge or shared (re-partition).")
        if meta.num_parts < 1 or min(meta.num_nodes, meta.num_edges, meta.feat_dim,
                                     meta.num_classes, meta.halo_hops - 1, meta.edge_dim) < 0:
            raise PartitionError("num_parts, num_nodes, num_edges, feat_dim, num_classes "
                                 "or halo_hops is out of range.", path=path, field="num_parts",
                                 fix=fix)
        offs = np.asarray(meta.offsets)
        if (len(offs) != meta.num_parts + 1 or offs[0] != 0 or offs[-1] != meta.num_nodes
                or (np.diff(offs) < 0).any()):
            raise PartitionError(
                f"offsets {list(meta.offsets)[:8]}... must be {meta.num_parts + 1} monotone "
                f"values from 0 to num_nodes={meta.num_nodes}.", path=path, field="offsets",
                fix=fix)
        if (meta.parts or version >= 2) and len(meta.parts) != meta.num_parts:
            raise PartitionError(f"has {len(meta.parts)} entries for {meta.num_parts} parts.",
                                 path=path, field="parts", fix=fix)
        if meta.hetero:
            meta.type_book(path)  # parse now: a damaged hetero fails here, naming the file
        expected = {f"{part_dir_name(k)}/{a}.npy" for k in range(meta.num_parts)
                    for a in meta.part_dtypes()}
        if set(meta.files) != expected:
            odd = sorted(set(meta.files) ^ expected)
            what = "listed but not a part file" if odd[0] in meta.files else "missing"
            raise PartitionError(f"must list a checksum for exactly the {len(expected)} part "
                                 f"files; {odd[0]!r} is {what} ({len(odd)} differ).",
                                 path=path, field="files", fix=fix)
        if not all(isinstance(v, str) and len(v) == 64 for v in meta.files.values()):
            raise PartitionError("holds a checksum that is not a SHA-256 hex digest.",
                                 path=path, field="files", fix=fix)
        return meta

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for ``meta.json``, under the current version's field names."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["offsets"] = list(self.offsets)
        d["parts"] = list(self.parts)
        return d

    @classmethod
    def load(cls, out_dir: str | os.PathLike[str]) -> PartitionMeta:
        """Read ``OUT/meta.json``."""
        path = Path(out_dir) / META_FILE
        if not Path(out_dir).is_dir():
            raise PartitionError("partition directory does not exist.", path=out_dir,
                                 fix="create it with `gnnpar-partition DATASET --num-parts K "
                                 f"--out {out_dir}`.")
        return cls.from_dict(read_json(path, PartitionError), path)

    @cached_property
    def types(self) -> TypeBook | None:
        """A typed partition's :class:`~gnnpar.partition.typed.TypeBook`, else ``None``."""
        return self.type_book(META_FILE) if self.hetero else None

    def type_book(self, path: str | os.PathLike[str]) -> TypeBook:
        """Parse ``hetero`` (errors name ``path``)."""
        return TypeBook.from_dict(self.hetero, self.num_parts,
                                  [int(p["num_owned"]) for p in self.parts], path)

    def part_dtypes(self) -> dict[str, type[np.generic]]:
        """Every part file's stored dtype: this version's schema, this partition's features."""
        edge = EDGE_DTYPES if self.format_version >= 3 else {}
        typed: dict[str, type[np.generic]] = {}
        if self.types is not None:
            feat = FEATURE_DTYPES[self.feature_dtype]
            typed = {"etype": ETYPE_DTYPE, **{type_feat_name(t): feat for t, f in enumerate(
                self.types.layout.feat_dims) if f}}
        return {**PART_DTYPES, "feat": FEATURE_DTYPES[self.feature_dtype], **edge, **typed}

    @property
    def has_edge_ids(self) -> bool:
        """Whether the parts store edge ids, edge features and link supervision (v3)."""
        return self.format_version >= 3

    def owner(self, gids: np.ndarray) -> np.ndarray:
        """Part that owns each global id (one ``searchsorted`` on the offsets)."""
        return np.searchsorted(np.asarray(self.offsets), gids, side="right") - 1


@dataclass(frozen=True)
class Partition:
    """One part's arrays (memory-mapped read-only when loaded with ``mmap=True``).

    Attributes:
        meta: The whole partition's metadata.
        part_id: Which part this is.
        orig_ids, halo_gids, indptr, indices, in_degree, adj_complete, feat, label,
        train_idx, val_idx, test_idx: As in the module docstring.
        e_id: As in the module docstring; ``None`` in a version 1 or 2 partition.
        edge_attr, train_edges, val_edges, test_edges, val_neg, test_neg: As in the module
            docstring (empty in a version 1 or 2 partition).
        etype: int16 ``[nnz]`` relation of each in-edge (typed partitions, else ``None``).
        type_feat: Typed partitions: features of the owned nodes of each featured type.
    """

    meta: PartitionMeta
    part_id: int
    orig_ids: np.ndarray
    halo_gids: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    in_degree: np.ndarray
    adj_complete: np.ndarray
    feat: np.ndarray
    label: np.ndarray
    train_idx: np.ndarray
    val_idx: np.ndarray
    test_idx: np.ndarray
    e_id: np.ndarray | None = None
    edge_attr: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    train_edges: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))
    val_edges: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))
    test_edges: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))
    val_neg: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))
    test_neg: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))
    etype: np.ndarray | None = None
    type_feat: dict[int, np.ndarray] = field(default_factory=dict)

    @property
    def num_owned(self) -> int:
        """Nodes this part owns."""
        return int(len(self.orig_ids))

    @property
    def num_halo(self) -> int:
        """Halo nodes (owned by other parts, referenced by this one)."""
        return int(len(self.halo_gids))

    @property
    def first_gid(self) -> int:
        """Global id of local id 0."""
        return int(self.meta.offsets[self.part_id])

    def edge_ids(self) -> np.ndarray:
        """The dataset edge id of each stored in-edge; refuses a version 1 or 2 partition."""
        if self.e_id is None:
            raise PartitionError(
                f"is format version {self.meta.format_version}, which stores no edge ids "
                "(needed for edge features, link prediction and e_id in batches).",
                path=META_FILE, field="format_version",
                fix="re-partition with this gnnpar (gnnpar-partition ... --overwrite).")
        return self.e_id

    def local_to_global(self, local: np.ndarray) -> np.ndarray:
        """Global ids of local ids (owned first, then halo)."""
        local = np.asarray(local, dtype=np.int64)
        out = local + self.first_gid
        halo = local >= self.num_owned
        out[halo] = np.asarray(self.halo_gids)[local[halo] - self.num_owned]
        return out


def _bad(path: Path, field_name: str, message: str) -> PartitionError:
    return PartitionError(message, path=path, field=field_name,
                          fix="re-create the partition with gnnpar-partition ... --overwrite.")


def check_part(d: Path, p: Partition, finite: bool = True) -> None:
    """Dtypes, shapes, id ranges, CSC structure, splits and finite features of one part.

    What a part alone determines, without the other parts (``verify_partition`` checks
    the rest): cheap bounds from ``meta.json``, one pass over each id array and, with
    ``finite``, one pass over the features in blocks and one sort of the edge ids.

    Args:
        d: The part's directory (named in errors).
        p: The loaded part.
        finite: Also check that every feature value is finite and no edge id repeats
            (the checks of :func:`load_partition`'s ``verify``).

    Raises:
        PartitionError: Naming the file and the field.
    """
    meta, k = p.meta, p.part_id
    for name, dtype in meta.part_dtypes().items():
        arr = p.type_feat[int(name[5:])] if name.startswith("feat_") else getattr(p, name)
        ndim = 2 if name in _TWO_DIMENSIONAL or name.startswith("feat_") else 1
        if arr.dtype != dtype or arr.ndim != ndim:
            raise _bad(d / f"{name}.npy", name, f"has dtype {arr.dtype} and {arr.ndim} "
                       f"dimensions, expected {np.dtype(dtype)} with {ndim}.")
    n_owned, n_local = p.num_owned, p.num_owned + p.num_halo
    sizes = {"num_owned": n_owned, "num_halo": p.num_halo, "num_edges": len(p.indices)}
    if meta.has_edge_ids:
        sizes.update({f"num_{name}": len(getattr(p, name)) for name in LINK_ARRAYS[:3]})
    listed = meta.parts[k] if meta.parts else sizes  # version 1 may list none
    if {key: listed.get(key) for key in sizes} != sizes or \
            n_owned != meta.offsets[k + 1] - meta.offsets[k]:
        raise _bad(d.parent / META_FILE, "parts", f"part {k} lists {listed} and owns "
                   f"ids {meta.offsets[k]}..{meta.offsets[k + 1]}; its files hold {sizes}.")
    rows = {"indptr": n_local + 1, "in_degree": n_local, "adj_complete": n_local,
            "feat": n_owned, "label": n_owned}
    for name, want in rows.items():
        if len(getattr(p, name)) != want:
            raise _bad(d / f"{name}.npy", name, f"has {len(getattr(p, name))} rows, "
                       f"expected {want}.")
    if p.feat.shape[1] != meta.feat_dim:
        raise _bad(d / "feat.npy", "feat", f"has {p.feat.shape[1]} columns, meta.json "
                   f"says feat_dim={meta.feat_dim}.")
    orig = np.asarray(p.orig_ids)
    if len(orig) and (int(orig.min()) < 0 or int(orig.max()) >= meta.num_nodes):
        raise _bad(d / "orig_ids.npy", "orig_ids", f"holds ids outside [0, {meta.num_nodes}).")
    indptr = np.asarray(p.indptr)
    if indptr[0] != 0 or (np.diff(indptr) < 0).any() or indptr[-1] != len(p.indices):
        raise _bad(d / "indptr.npy", "indptr", "is not a monotone row pointer from 0 to "
                   "len(indices).")
    if len(p.indices) and (int(np.min(p.indices)) < 0 or int(np.max(p.indices)) >= n_local):
        raise _bad(d / "indices.npy", "indices", f"holds local ids outside [0, {n_local}).")
    halo = np.asarray(p.halo_gids)
    lo, hi = meta.offsets[k], meta.offsets[k + 1]
    if len(halo) and ((np.diff(halo) <= 0).any() or halo[0] < 0
                      or halo[-1] >= meta.num_nodes or ((halo >= lo) & (halo < hi)).any()):
        raise _bad(d / "halo_gids.npy", "halo_gids", "must be sorted, distinct global ids "
                   "of nodes that other parts own.")
    if len(p.in_degree) and int(np.min(p.in_degree)) < 0:
        raise _bad(d / "in_degree.npy", "in_degree", "holds a negative degree.")
    complete = np.asarray(p.adj_complete)
    if not complete[:n_owned].all():
        raise _bad(d / "adj_complete.npy", "adj_complete", "is False for an owned node.")
    if (np.diff(indptr)[n_owned:][~complete[n_owned:]] != 0).any():
        raise _bad(d / "indptr.npy", "indptr", "stores in-edges for a halo node marked "
                   "incomplete.")
    label = np.asarray(p.label)
    if len(label) and (int(label.min()) < -1 or int(label.max()) >= max(meta.num_classes, 1)):
        raise _bad(d / "label.npy", "label", f"holds labels outside [-1, {meta.num_classes}).")
    for split in ("train_idx", "val_idx", "test_idx"):
        idx = np.asarray(getattr(p, split))
        if len(idx) and ((np.diff(idx) <= 0).any() or idx[0] < 0 or idx[-1] >= n_owned):
            raise _bad(d / f"{split}.npy", split, f"must hold sorted distinct local ids of "
                       f"owned nodes in [0, {n_owned}).")
    if meta.has_edge_ids:
        _check_edge_arrays(d, p, finite)
    if meta.types is not None:
        assert p.etype is not None
        check_typed_part(d, meta.types, k, meta.offsets, indptr, np.asarray(p.indices),
                         halo, p.edge_ids(), np.asarray(p.etype), label, p.type_feat,
                         {s: np.asarray(getattr(p, s)) for s in ("train_idx", "val_idx",
                                                                  "test_idx")})
    if finite:
        for name, feat in (("feat", p.feat), *((type_feat_name(t), f)
                                                for t, f in p.type_feat.items())):
            _check_finite(d / f"{name}.npy", name, feat, meta.feature_dtype)


def _check_finite(path: Path, name: str, feat: np.ndarray, feature_dtype: str) -> None:
    """Raise naming ``path`` if a stored feature row holds NaN or inf (in row blocks)."""
    n = len(feat)
    if feature_dtype != "bf16":
        step = max(1, (1 << 24) // max(1, feat.shape[1] * feat.itemsize))
        for start in range(0, n, step):
            if not np.isfinite(feat[start:start + step]).all():
                raise _bad(path, name, f"holds a NaN or infinite value in rows "
                           f"{start}..{min(start + step, n)}.")
        return
    step = max(1, (1 << 23) // max(1, feat.shape[1]))  # bf16 bits, checked as float32
    for start in range(0, n, step):
        bits = np.asarray(feat[start:start + step]).astype(np.uint32) << 16
        if not np.isfinite(bits.view(np.float32)).all():
            raise _bad(path, name, f"holds a NaN or infinite value in rows "
                       f"{start}..{min(start + step, n)}.")


def _check_edge_arrays(d: Path, p: Partition, finite: bool) -> None:
    """The version-3 arrays of one part: edge ids, edge features, supervision edges."""
    meta = p.meta
    nnz, n = len(p.indices), meta.num_nodes
    e_id = p.edge_ids()
    if len(e_id) != nnz or (nnz and (int(np.min(e_id)) < 0
                                     or int(np.max(e_id)) >= meta.num_edges)):
        raise _bad(d / "e_id.npy", "e_id", f"must hold {nnz} edge ids in "
                   f"[0, {meta.num_edges}), one per in-edge.")
    if finite and nnz > 1:  # every stored in-edge is another edge: no id twice
        ids = np.sort(e_id)  # a transient 8 bytes per stored edge, before the adjacency
        release(e_id)
        twice = np.flatnonzero(ids[1:] == ids[:-1])
        if len(twice):
            raise _bad(d / "e_id.npy", "e_id", f"holds edge id {int(ids[twice[0]])} twice "
                       f"({len(twice)} repeats); each stored in-edge is a distinct edge.")
    if p.edge_attr.shape != (nnz, meta.edge_dim):
        raise _bad(d / "edge_attr.npy", "edge_attr", f"has shape {p.edge_attr.shape}, "
                   f"expected ({nnz}, {meta.edge_dim}).")
    if finite:
        step = max(1, (1 << 24) // max(1, 4 * meta.edge_dim))
        for start in range(0, nnz, step):
            if not np.isfinite(p.edge_attr[start:start + step]).all():
                raise _bad(d / "edge_attr.npy", "edge_attr", "holds a NaN or infinite "
                           f"value in rows {start}..{min(start + step, nnz)}.")
    lo, hi = meta.offsets[p.part_id], meta.offsets[p.part_id + 1]
    for name in LINK_ARRAYS:
        a = np.asarray(getattr(p, name))
        pairs = name.endswith("_edges") or meta.neg_kind == "shared"
        if pairs and a.shape[1] != 2:
            raise _bad(d / f"{name}.npy", name, f"has shape {a.shape}, expected (m, 2).")
        if a.size and (int(a.min()) < 0 or int(a.max()) >= n):
            raise _bad(d / f"{name}.npy", name, f"holds node ids outside [0, {n}).")
        if pairs and len(a) and (int(a[:, 0].min()) < lo or int(a[:, 0].max()) >= hi):
            raise _bad(d / f"{name}.npy", name, f"holds a pair whose source part "
                       f"{p.part_id} does not own (ids {lo}..{hi}).")
    if meta.neg_kind == "per_edge":
        for split in ("val", "test"):
            neg, pos = getattr(p, f"{split}_neg"), getattr(p, f"{split}_edges")
            if len(neg) != len(pos) and len(neg):
                raise _bad(d / f"{split}_neg.npy", f"{split}_neg", f"has {len(neg)} rows "
                           f"for {len(pos)} {split} edges.")


def part_bytes(out_dir: str | os.PathLike[str], meta: PartitionMeta) -> list[int]:
    """Bytes of each part's files (what loading it with ``verify`` reads), from ``stat``."""
    sizes = [0] * meta.num_parts
    for rel in meta.files:
        with contextlib.suppress(OSError):  # a missing file is the loader's error to name
            sizes[int(rel.split("/")[0][len("part-"):])] += os.path.getsize(Path(out_dir) / rel)
    return sizes


def content_digest(out_dir: str | os.PathLike[str]) -> str:
    """The SHA-256 of a partition's content, wherever it lies (what checkpoints bind to).

    ``meta.json``'s own digest: it covers every field and the checksum of every part
    file (computed, for a version-1 file, which carries none).
    """
    return json_digest(read_json(Path(out_dir) / META_FILE, PartitionError))


def verify_checksums(out_dir: str | os.PathLike[str], meta: PartitionMeta,
                     parts: list[int] | None = None) -> None:
    """Recompute the sha256 of the files of ``parts`` (all when ``None``); raise on mismatch."""
    out = Path(out_dir)
    prefixes = None if parts is None else tuple(part_dir_name(p) + "/" for p in parts)
    for rel, digest in sorted(meta.files.items()):
        if prefixes is not None and not rel.startswith(prefixes):
            continue
        f = out / rel
        if not f.is_file():
            raise PartitionError("file listed in meta.json is missing.", path=f,
                                 fix="re-create the partition with gnnpar-partition.")
        if sha256_file(f) != digest:
            raise PartitionError("sha256 differs from meta.json: the file was changed or "
                                 "damaged.", path=f, field="files",
                                 fix="re-create the partition with gnnpar-partition "
                                 "(or copy the part again from the machine that wrote it).")


def load_partition(out_dir: str | os.PathLike[str], part: int, mmap: bool = True,
                   verify: bool = True) -> Partition:
    """Load part ``part`` of a partition directory.

    Args:
        out_dir: Directory written by ``partition_graph`` / ``gnnpar-partition``.
        part: Part id, ``0 <= part < num_parts``.
        mmap: Memory-map the arrays read-only (nothing is read until touched).
        verify: Check the sha256 of this part's files against ``meta.json`` first, and
            that every feature is finite (dtypes, shapes and id ranges are always
            checked: :func:`check_part`).

    Returns:
        The part's arrays and the whole partition's metadata.

    Example::

        part = gnnpar.load_partition("parts/sbm-2", 0)    # memory-mapped, checksums verified
        part.num_owned, part.feat.shape
    """
    meta = PartitionMeta.load(out_dir)
    if not 0 <= part < meta.num_parts:
        raise PartitionError(f"part {part} requested but the partition has "
                             f"{meta.num_parts} parts.", path=out_dir, field="part",
                             fix=f"ask for a part in 0..{meta.num_parts - 1}.")
    if verify:
        verify_checksums(out_dir, meta, [part])
    d = Path(out_dir) / part_dir_name(part)
    arrays = {name: load_npy(d / f"{name}.npy", mmap, PartitionError)
              for name in meta.part_dtypes()}
    type_feat = {t: arrays.pop(type_feat_name(t)) for t in range(
        meta.types.num_types if meta.types else 0) if type_feat_name(t) in arrays}
    p = Partition(meta=meta, part_id=part, type_feat=type_feat, **arrays)
    check_part(d, p, finite=verify)
    return p

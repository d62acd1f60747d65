"""The partition directory, format version 1: its schema and its reader.

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
                                           bits of bfloat16 (uint16), as meta.json's feat_dtype
                                           (fp32, fp16, bf16) says
        label.npy        int64 [n_owned]   (-1 = unlabelled)
        train_idx.npy val_idx.npy test_idx.npy   int64 local ids of owned nodes

Local id ``i < n_owned`` is global id ``offsets[K] + i``; local id ``n_owned + j`` is global
id ``halo_gids[j]``.  With ``halo_hops = 1`` the halo rows of ``indptr`` are empty.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from gnnpar.errors import ConfigError, PartitionError
from gnnpar.io import load_npy, read_json, sha256_file

FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
"""Version 2 added ``feat_dtype``; a version-1 directory reads as ``fp32`` features."""
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
PART_ARRAYS = tuple(PART_DTYPES)


def store_features(x: np.ndarray, feat_dtype: str) -> np.ndarray:
    """Finite feature rows as ``feat.npy`` stores them for ``feat_dtype``.

    ``bf16`` is rounded to nearest even and kept as its raw 16 bits; check ``fp16``
    features with :func:`check_feature_range` first.
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    if feat_dtype == "bf16":
        bits = x.view(np.uint32)
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return x.astype(FEATURE_DTYPES[feat_dtype], copy=False)


def check_feature_range(blocks: Iterable[np.ndarray], feat_dtype: str) -> None:
    """Raise :class:`ConfigError` if a feature value does not fit ``feat_dtype``."""
    if feat_dtype != "fp16":
        return
    for block in blocks:
        peak = float(np.abs(block).max()) if block.size else 0.0
        if peak > _FP16_MAX:
            raise ConfigError(f"a feature value of magnitude {peak:.4g} does not fit float16 "
                              "(largest 65504).", field="feature_dtype",
                              fix="use --feature-dtype bf16 (float32's range) or scale the "
                              "features.")


def part_dir_name(part: int) -> str:
    """Name of part ``part``'s subdirectory."""
    return f"part-{part}"


@dataclass(frozen=True)
class PartitionMeta:
    """Contents of ``meta.json``.

    Attributes:
        format_version: On-disk format version (1).
        name: Dataset name.
        num_parts: Number of parts ``K``.
        num_nodes: Nodes in the whole graph.
        num_edges: Edges in the whole graph.
        feat_dim: Feature width ``F``.
        feat_dtype: ``fp32``, ``fp16`` or ``bf16`` (``feat.npy`` holds bfloat16's raw bits).
        num_classes: Number of classes.
        offsets: ``K + 1`` monotone global-id boundaries: part ``k`` owns
            ``offsets[k] .. offsets[k+1]``.
        halo_hops: Depth of the stored halo.
        partitioner: Method and its arguments (``{"method": "metis", ...}``).
        quality: Edge cut, balance and halo figures (see ``partition.quality``).
        parts: Per part: ``num_owned``, ``num_halo``, ``num_edges`` (stored in-edges).
        files: ``relative path -> sha256`` of every array file.
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
    feat_dtype: str = "fp32"

    @classmethod
    def from_dict(cls, d: dict[str, Any], path: str | os.PathLike[str]) -> PartitionMeta:
        """Build from parsed JSON, raising :class:`PartitionError` naming a missing field."""
        if not isinstance(d, dict):
            raise PartitionError("expected a JSON object.", path=path,
                                 fix="re-create the partition with gnnpar-partition.")
        version = d.get("format_version")
        if version not in READABLE_VERSIONS:
            raise PartitionError(
                f"format_version is {version!r}; this gnnpar reads versions "
                f"{', '.join(map(str, READABLE_VERSIONS))}.",
                path=path, field="format_version",
                fix="re-partition with this gnnpar version (gnnpar-partition ... --overwrite).")
        kwargs: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in d:
                if f.name in ("quality", "parts", "files", "feat_dtype"):
                    continue
                raise PartitionError("field is missing.", path=path, field=f.name,
                                     fix="re-create the partition with gnnpar-partition.")
            kwargs[f.name] = d[f.name]
        kwargs["offsets"] = tuple(int(o) for o in kwargs["offsets"])
        kwargs["parts"] = tuple(kwargs.get("parts", ()))
        meta = cls(**kwargs)
        if meta.feat_dtype not in FEATURE_DTYPES:
            raise PartitionError(f"feat_dtype is {meta.feat_dtype!r}.", path=path,
                                 field="feat_dtype",
                                 fix=f"use one of {', '.join(FEATURE_DTYPES)} (re-partition).")
        offs = np.asarray(meta.offsets)
        if (len(offs) != meta.num_parts + 1 or offs[0] != 0 or offs[-1] != meta.num_nodes
                or (np.diff(offs) < 0).any()):
            raise PartitionError(
                f"offsets {list(meta.offsets)[:8]}... must be {meta.num_parts + 1} monotone "
                f"values from 0 to num_nodes={meta.num_nodes}.", path=path, field="offsets",
                fix="re-create the partition with gnnpar-partition.")
        return meta

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for ``meta.json``."""
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

    def part_dtypes(self) -> dict[str, type[np.generic]]:
        """Every part file's stored dtype (the schema, with this partition's features)."""
        return {**PART_DTYPES, "feat": FEATURE_DTYPES[self.feat_dtype]}

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

    def local_to_global(self, local: np.ndarray) -> np.ndarray:
        """Global ids of local ids (owned first, then halo)."""
        local = np.asarray(local, dtype=np.int64)
        out = local + self.first_gid
        halo = local >= self.num_owned
        out[halo] = np.asarray(self.halo_gids)[local[halo] - self.num_owned]
        return out


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
        verify: Check the sha256 of this part's files against ``meta.json`` first.

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
    arrays = {name: load_npy(d / f"{name}.npy", mmap, PartitionError) for name in PART_ARRAYS}
    p = Partition(meta=meta, part_id=part, **arrays)
    n_owned = meta.offsets[part + 1] - meta.offsets[part]
    n_local = n_owned + p.num_halo
    expect = {"orig_ids": n_owned, "indptr": n_local + 1, "in_degree": n_local,
              "adj_complete": n_local, "feat": n_owned, "label": n_owned,
              "indices": int(p.indptr[-1]) if len(p.indptr) else 0}
    for name, rows in expect.items():
        if len(arrays[name]) != rows:
            raise PartitionError(f"has {len(arrays[name])} rows, expected {rows}.",
                                 path=d / f"{name}.npy", field=name,
                                 fix="re-create the partition with gnnpar-partition.")
    return p

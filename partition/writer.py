"""``partition_graph``: split a :class:`GraphDataset` into K parts and write the directory.

The directory is format version 1 of :mod:`gnnpar.partition.format` (whose docstring is
the contract every reader relies on)::

    OUT/
      meta.json            format_version, name, num_parts, num_nodes, num_edges, feat_dim,
                           num_classes, offsets (partition book), halo_hops,
                           partitioner (method + arguments), quality (edge cut, per-part
                           load, replication, imbalance), parts (per-part sizes),
                           files (sha256 of every array file)
      part-0/
        orig_ids.npy       int64 [n_owned]           original id of each owned node
        halo_gids.npy      int64 [n_halo]            sorted new global ids of halo nodes
        indptr.npy         int64 [n_owned + n_halo + 1]   in-edge CSC over local ids
        indices.npy        int64 [nnz]               source local ids
        in_degree.npy      int64 [n_owned + n_halo]  global in-degrees
        adj_complete.npy   bool  [n_owned + n_halo]  full in-edge list stored?
        feat.npy           [n_owned, F]  float32 (or --feature-dtype; F = 0 without)
        label.npy          int64 [n_owned]           (-1 = unlabelled / no labels)
        train_idx.npy val_idx.npy test_idx.npy   int64 sorted local ids of owned nodes
      part-1/ ...

How it is written:

1. the edges are grouped by destination once (:mod:`~gnnpar.partition.adjacency`);
2. the assignment is computed (:mod:`~gnnpar.partition.assign`: METIS, random,
   contiguous or given) and nodes are renumbered so that part ``k`` owns new ids
   ``offsets[k] .. offsets[k+1]`` in original-id order (:func:`renumber`);
3. parts are written one at a time: only one part's arrays are in memory, features are
   streamed from a (possibly memory-mapped) ``x`` in row blocks, and every file is
   hashed while it is written;
4. everything goes into a temporary sibling directory that replaces ``OUT`` only once
   ``meta.json`` is written, so a failure leaves no partial directory and never
   destroys an existing one.

The output depends only on the dataset, the arguments and the seed: two runs give
byte-identical directories (METIS is seeded, ``meta.json`` holds no timestamp).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from gnnpar.datasets.graph import SPLITS, GraphDataset
from gnnpar.errors import ConfigError, PartitionError
from gnnpar.io import atomic_directory, save_npy_blocks, save_npy_sha256, write_digested_json
from gnnpar.partition.adjacency import InEdges, group_in_edges
from gnnpar.partition.assign import DEFAULT_BALANCE, assign_parts, check_num_parts
from gnnpar.partition.format import (
    FEATURE_DTYPES,
    FORMAT_VERSION,
    META_FILE,
    PARTITION_MARKER,
    PartitionMeta,
    check_feature_range,
    part_dir_name,
    store_features,
)
from gnnpar.partition.local_graph import Renumbering, build_local_graph, renumber
from gnnpar.partition.quality import PartStats, quality_report

_BLOCK_BYTES = 1 << 24  # feature rows gathered per block


def partition_graph(
    dataset: GraphDataset,
    num_parts: int,
    out_dir: str | os.PathLike[str],
    method: str = "metis",
    halo_hops: int = 1,
    balance: Sequence[str] = DEFAULT_BALANCE,
    seed: int = 0,
    assignment: np.ndarray | None = None,
    feature_dtype: str = "fp32",
    overwrite: bool = False,
    progress: bool = False,
    validate: bool = True,
) -> PartitionMeta:
    """Partition ``dataset`` into ``num_parts`` parts and write the partition directory.

    Args:
        dataset: The graph.
        num_parts: ``K``, in ``1 .. num_nodes``; every part owns at least one node.
        out_dir: Directory to create (see the module docstring for its layout).
        method: ``"metis"`` (few cut edges, balanced), ``"random"`` (seeded, equal sizes)
            or ``"contiguous"`` (equal ranges of ids).
        halo_hops: Halo depth ``>= 1``; halo nodes within ``halo_hops - 1`` hops also
            keep their in-edges.
        balance: Quantities METIS balances: any of ``"nodes"``, ``"train"``, ``"edges"``.
        seed: Seed of METIS and of ``random``.
        assignment: A precomputed int ``[N]`` part per node; overrides ``method``.
        feature_dtype: How features are stored and sent: ``"fp32"``, ``"fp16"`` or
            ``"bf16"`` (half the bytes; bf16 keeps float32's range).
        overwrite: Replace an existing ``out_dir`` (only once the new one is complete).
        progress: Show a progress bar per stage.
        validate: Validate ``dataset`` first (:meth:`GraphDataset.validate`); pass
            ``False`` only for a dataset already validated, e.g. one from
            :func:`gnnpar.datasets.load_dataset`.

    Returns:
        The metadata written to ``meta.json``.

    Raises:
        ConfigError: A bad argument.
        PartitionError: ``out_dir`` exists without ``overwrite``, or a bad ``assignment``.

    Example::

        ds = gnnpar.load_dataset("synthetic:sbm")
        meta = gnnpar.partition_graph(ds, 4, "parts/sbm-4")   # METIS
        meta.quality["edge_cut_share"]
    """
    if int(halo_hops) < 1:
        raise ConfigError(f"got halo_hops={halo_hops}.", field="halo_hops",
                          fix="pass halo_hops >= 1 (CLI: --halo-hops).")
    if validate:
        dataset.validate()
    check_num_parts(num_parts, dataset.num_nodes)
    if feature_dtype not in FEATURE_DTYPES:
        raise ConfigError(f"got feature_dtype={feature_dtype!r}.", field="feature_dtype",
                          fix=f"pass one of {', '.join(FEATURE_DTYPES)} "
                          "(CLI: --feature-dtype fp32|fp16|bf16).")
    if dataset.x is not None:
        check_feature_range(_feature_blocks(dataset.x, np.arange(dataset.num_nodes)),
                            feature_dtype)
    hint = "pass overwrite=True (CLI: --overwrite) or choose another --out."
    with atomic_directory(out_dir, overwrite, PartitionError, hint,
                          marker=PARTITION_MARKER) as tmp:
        with tqdm(total=2, desc=f"assign ({'precomputed' if assignment is not None else method})",
                  disable=not progress) as bar:
            in_edges = group_in_edges(dataset.num_nodes, dataset.src, dataset.dst)
            degree = in_edges.in_degree()
            bar.update()
            part, partitioner = assign_parts(in_edges, degree, num_parts, method, balance,
                                             seed, np.asarray(dataset.train_idx), assignment)
            ren = renumber(part, num_parts)
            del part
            bar.update()
        splits = {name: np.sort(ren.new_of_old[np.asarray(getattr(dataset, name))])
                  for name in SPLITS}
        files: dict[str, str] = {}
        stats: list[PartStats] = []
        sizes: list[dict[str, int]] = []
        for k in tqdm(range(num_parts), desc="write", unit="part", disable=not progress):
            st, size = _write_part(tmp, k, dataset, in_edges, ren, degree, splits,
                                   int(halo_hops), files, feature_dtype)
            stats.append(st)
            sizes.append(size)
        meta = PartitionMeta(
            format_version=FORMAT_VERSION, name=dataset.name, num_parts=num_parts,
            num_nodes=dataset.num_nodes, num_edges=dataset.num_edges,
            feat_dim=dataset.feat_dim, num_classes=dataset.num_classes,
            offsets=tuple(int(o) for o in ren.offsets), halo_hops=int(halo_hops),
            partitioner=partitioner, quality=quality_report(stats, dataset.num_edges),
            parts=tuple(sizes), files=dict(sorted(files.items())), feat_dtype=feature_dtype)
        write_digested_json(tmp / META_FILE, meta.to_dict())
    return meta


def _write_part(tmp: Path, k: int, dataset: GraphDataset, in_edges: InEdges,
                ren: Renumbering, degree: np.ndarray, splits: dict[str, np.ndarray],
                halo_hops: int, files: dict[str, str],
                feature_dtype: str) -> tuple[PartStats, dict[str, int]]:
    """Write part ``k``'s files into ``tmp/part-k``; return its load and sizes."""
    name = part_dir_name(k)
    (tmp / name).mkdir()

    def save(field: str, array: np.ndarray) -> None:
        files[f"{name}/{field}.npy"] = save_npy_sha256(tmp / name / f"{field}.npy", array)

    lo, hi = int(ren.offsets[k]), int(ren.offsets[k + 1])
    owned = ren.owned(k)
    local = build_local_graph(in_edges, ren, k, halo_hops)
    save("orig_ids", owned)
    save("halo_gids", local.halo_gids)
    save("indptr", local.indptr)
    save("indices", local.indices)
    save("in_degree", np.concatenate([degree[owned], degree[ren.old_of_new[local.halo_gids]]]))
    save("adj_complete", local.adj_complete)
    files[f"{name}/feat.npy"] = save_npy_blocks(
        tmp / name / "feat.npy", (len(owned), dataset.feat_dim), FEATURE_DTYPES[feature_dtype],
        (store_features(b, feature_dtype) for b in _feature_blocks(dataset.x, owned)))
    if dataset.y is None:
        save("label", np.full(len(owned), -1, dtype=np.int64))
    else:
        save("label", np.asarray(dataset.y[owned], dtype=np.int64))
    owned_in_split: dict[str, int] = {}
    for split, gids in splits.items():
        a, b = np.searchsorted(gids, [lo, hi])
        save(split, gids[a:b] - lo)
        owned_in_split[split] = int(b - a)
    stats = PartStats(owned=len(owned), train=owned_in_split["train_idx"],
                      edges=local.owned_edges, halo=len(local.halo_gids), cut=local.cut_edges)
    return stats, {"num_owned": len(owned), "num_halo": len(local.halo_gids),
                   "num_edges": len(local.indices)}


def _feature_blocks(x: np.ndarray | None, owned: np.ndarray) -> Iterator[np.ndarray]:
    """Feature rows of ``owned`` in blocks of about 16 MiB (nothing without features)."""
    if x is None:
        return
    rows = max(1, _BLOCK_BYTES // max(1, x.shape[1] * 4))
    for start in range(0, len(owned), rows):
        yield np.asarray(x[owned[start:start + rows]], dtype=np.float32)


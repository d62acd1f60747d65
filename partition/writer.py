"""``partition_graph``: split a :class:`GraphDataset` into K parts and write the directory.

The directory is the current format version (:data:`~gnnpar.partition.format.FORMAT_VERSION`)
of :mod:`gnnpar.partition.format` (whose docstring is the contract every reader relies on)::

    OUT/
      meta.json            format_version, name, num_parts, num_nodes, num_edges, feat_dim,
                           feature_dtype, num_classes, offsets (partition book), halo_hops,
                           partitioner (method + arguments), quality (edge cut, per-part
                           load, replication, imbalance), parts (per-part sizes),
                           files (sha256 of every array file), edge_dim, neg_kind,
                           hetero (a typed graph's types and per-part type figures)
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
        e_id.npy           int64 [nnz]               dataset edge id of each in-edge
        edge_attr.npy      float32 [nnz, D]          edge features (D = 0 without)
        train_edges.npy val_edges.npy test_edges.npy   int64 [m, 2] link supervision
                           edges whose source the part owns (new global ids)
        val_neg.npy test_neg.npy   their fixed negatives (new global ids)
        etype.npy          int16 [nnz]               typed graphs: relation of each in-edge
        feat_{t}.npy       [n_owned of type t, F_t]  typed graphs: features of each
                           featured node type t (feat.npy then has no columns)
      part-1/ ...

How it is written, each stage from memory maps in chunks, under a working-set budget
(the config's ``memory_budget``), so that the peak is the partitioner's own graph plus that
budget:

1. ``check``: the dataset is validated in row blocks;
2. ``group``: the edges are grouped by destination into a CSR on disk by an external
   bucket sort (:mod:`~gnnpar.partition.adjacency`);
3. ``assign``: the assignment is computed (:mod:`~gnnpar.partition.assign`: METIS,
   KaMinPar, streaming, random, contiguous or given; the graph methods read the
   undirected graph, built on disk the same way) and nodes are renumbered so that part
   ``k`` owns new ids ``offsets[k] .. offsets[k+1]`` in original-id order
   (:func:`renumber`);
4. ``write``: parts are written one at a time per writer (``config.workers`` processes side
   by side, each part's bytes the same whichever process writes it): only one part's arrays
   are in memory, features are streamed from a (possibly memory-mapped) ``x`` in row
   blocks, every file is hashed while it is written, and pages read from memory maps
   are released after each block;
5. everything goes into a temporary sibling directory that replaces ``OUT`` only once
   ``meta.json`` is written, so a failure leaves no partial directory and never
   destroys an existing one; scratch files live in another sibling, removed at the end.

The output depends only on the dataset and the config, but not on its budget or number of
writers: two runs give byte-identical directories (METIS is seeded,
``meta.json`` holds no timestamp). :class:`~gnnpar.partition.stages.StageMeter` measures
each stage's time and peak RSS when ``partition_graph`` is handed one.
``gnnpar-partition`` and ``gnnpar-train``'s partition cache reach it through
:func:`partition_dataset`, which loads and checks a dataset spec first (stage ``load``).
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from tqdm import tqdm

from gnnpar.artifacts.arrays import release, save_npy_blocks, save_npy_sha256
from gnnpar.artifacts.directory import atomic_directory
from gnnpar.artifacts.files import write_digested_json
from gnnpar.artifacts.kinds import PARTITION
from gnnpar.console import bars_off
from gnnpar.datasets.graph import SPLITS, GraphDataset, class_count
from gnnpar.datasets.typed import TypedGraphDataset
from gnnpar.errors import ConfigError, PartitionError
from gnnpar.partition.adjacency import InEdges, group_in_edges
from gnnpar.partition.assign import assign_parts, check_num_parts
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.format import (
    FEATURE_DTYPES,
    FORMAT_VERSION,
    LINK_ARRAYS,
    META_FILE,
    PartitionMeta,
    check_feature_range,
    part_dir_name,
    store_features,
)
from gnnpar.partition.local_graph import LocalGraph, Renumbering, build_local_graph, renumber
from gnnpar.partition.quality import PartStats, quality_report
from gnnpar.partition.stages import StageMeter
from gnnpar.partition.typed import TypeBook, sort_by_relation, type_feat_name
from gnnpar.typed import TypedLayout

if TYPE_CHECKING:
    from gnnpar.datasets.config import DataConfig

_BLOCK_BYTES = 1 << 24  # feature rows gathered per block


def partition_graph(
    dataset: GraphDataset | TypedGraphDataset,
    out_dir: str | os.PathLike[str],
    config: PartitionConfig,
    *,
    task: str = "node",
    assignment: np.ndarray | None = None,
    overwrite: bool = False,
    progress: bool = False,
    validate: bool = True,
    meter: StageMeter | None = None,
) -> PartitionMeta:
    """Partition ``dataset`` into ``config.num_parts`` parts and write the directory.

    Args:
        dataset: The graph; a typed graph is partitioned as its homogeneous view, with
            the types kept (:mod:`~gnnpar.partition.typed`).
        out_dir: Directory to create (see the module docstring for its layout).
        config: How to split it, as ``gnnpar-partition``'s flags give it: ``num_parts``
            (``K``, in ``1 .. num_nodes``: every part owns at least one node), the
            partitioner, halo depth, balanced quantities, seed, feature dtype, memory
            budget (GB), writers and KaMinPar's settings.
        task: ``"node"`` or ``"link"``: with ``"link"`` the ``"train"`` balance weighs
            each node by the training supervision edges it is the source of (they are
            stored, and trained on, by the part that owns their source).
        assignment: A precomputed int ``[N]`` part per node; overrides
            ``config.partitioner``.
        overwrite: Replace an existing ``out_dir`` (only once the new one is complete).
        progress: Show a progress bar per stage.
        validate: Validate ``dataset`` first (:meth:`GraphDataset.validate`); pass
            ``False`` only for a dataset already validated, e.g. one from
            :func:`gnnpar.datasets.load_dataset`.
        meter: Receives each stage's time and peak RSS.

    Returns:
        The metadata written to ``meta.json``.

    Raises:
        ConfigError: A bad ``config`` (before any data is read, naming the field and its
            flag; ``num_parts`` unset, or more than the nodes) or ``task``.
        PartitionError: ``out_dir`` exists without ``overwrite``, or a bad ``assignment``.

    Example::

        ds = gnnpar.load_dataset("synthetic:sbm")
        meta = gnnpar.partition_graph(ds, "parts/sbm-4",
                                      gnnpar.PartitionConfig(num_parts=4))   # METIS
        meta.quality["edge_cut_share"]
        gnnpar.partition_graph(ds, "parts/sbm-4-kaminpar", gnnpar.PartitionConfig(
            num_parts=4, partitioner="kaminpar", threads=4))
    """
    config = config.validate()
    num_parts = config.require_parts()
    if task not in ("node", "link"):
        raise ConfigError(f"got task={task!r}.", field="task", fix="pass node or link.")
    meter = meter if meter is not None else StageMeter()
    typed: _Typed | None = None
    with meter.stage("check"):
        if validate:
            dataset.validate()
        if isinstance(dataset, TypedGraphDataset):
            if task != "node":
                raise ConfigError("link prediction on a typed graph is not supported.",
                                  field="task", fix="pass task='node' (--task node).")
            typed = _Typed(dataset.layout(), dataset.x)
            dataset = dataset.to_homogeneous()
        check_num_parts(num_parts, dataset.num_nodes)
        for x in ([dataset.x] if dataset.x is not None else []) + (
                list(typed.x.values()) if typed is not None else []):
            check_feature_range(_feature_blocks(x, np.arange(len(x))), config.feature_dtype)
    hint = "pass overwrite=True (CLI: --overwrite) or choose another --out."
    out = Path(out_dir)
    with (atomic_directory(out, overwrite, PartitionError, hint,
                           kind=PARTITION) as tmp,
          tempfile.TemporaryDirectory(prefix=f".{out.name}.tmp-scratch-",
                                      dir=out.parent) as scratch_dir):
        scratch = Path(scratch_dir)
        how = "precomputed" if assignment is not None else config.partitioner
        with tqdm(total=3, desc=f"assign ({how})", disable=bars_off(progress)) as bar:
            with meter.stage("group"):
                in_edges = group_in_edges(dataset.num_nodes, dataset.src, dataset.dst,
                                          scratch, int(config.memory_budget * 1e9))
            bar.update()
            with meter.stage("assign"):
                train = (np.asarray(dataset.train_edges)[:, 0] if task == "link"
                         else np.asarray(dataset.train_idx))
                part, partitioner = assign_parts(
                    in_edges, config, train, scratch, assignment,
                    None if typed is None else typed.layout.node_offsets)
                bar.update()
                ren = renumber(part, num_parts)
                del part
            bar.update()
        with meter.stage("write"):
            job = _PartJob(tmp, dataset, in_edges, ren, in_edges.degree(),
                           {name: np.sort(ren.new_of_old[np.asarray(getattr(dataset, name))])
                            for name in SPLITS}, config.halo_hops, config.feature_dtype,
                           _link_arrays(dataset, ren), typed)
            written = list(tqdm(_write_parts(job, num_parts, config.workers),
                                total=num_parts, desc="write", unit="part",
                                disable=bars_off(progress)))
        hetero = {}
        if typed is not None:
            hetero = TypeBook(typed.layout, *(tuple(tuple(w.figures[key]) for w in written)
                                              for key in ("counts", "edges", "halo"))).to_dict()
        files = {name: digest for w in written for name, digest in w.files.items()}
        meta = PartitionMeta(
            format_version=FORMAT_VERSION, name=dataset.name, num_parts=num_parts,
            num_nodes=dataset.num_nodes, num_edges=dataset.num_edges,
            feat_dim=dataset.feat_dim, num_classes=class_count(dataset),
            offsets=tuple(int(o) for o in ren.offsets), halo_hops=config.halo_hops,
            partitioner=partitioner,
            quality=quality_report([w.load for w in written], dataset.num_edges),
            parts=tuple(w.sizes for w in written), files=dict(sorted(files.items())),
            feature_dtype=config.feature_dtype, edge_dim=dataset.edge_dim,
            neg_kind=dataset.neg_kind, hetero=hetero)
        write_digested_json(tmp / META_FILE, meta.to_dict())
    return meta


def partition_dataset(
    data: DataConfig,
    out_dir: str | os.PathLike[str],
    config: PartitionConfig,
    *,
    check: Callable[[GraphDataset | TypedGraphDataset], None] | None = None,
    need_labels: bool = False,
    overwrite: bool = False,
    progress: bool = False,
    meter: StageMeter | None = None,
) -> PartitionMeta:
    """Load ``data``'s dataset, check it for its task, and partition it into ``out_dir``.

    The one load -> check -> partition sequence of ``gnnpar-partition`` and of
    ``gnnpar-train``'s partition cache: the settings are checked before any data is
    read, the dataset is loaded (validated) as stage ``load`` of ``meter``, checked for a
    node task (labels and a training split) when it has labels or ``need_labels``, handed
    to ``check`` and written by :func:`partition_graph`.

    Args:
        data: The dataset spec, its data flags and its task.
        out_dir: The partition directory to create.
        config: How to split it (``num_parts`` set).
        check: The caller's own checks of the loaded dataset, run last before the
            partitioning.
        need_labels: A node task needs labels (training does; a partition may be of an
            unlabelled graph).
        overwrite: Replace an existing ``out_dir`` (only once the new one is complete).
        progress: Show a progress bar per stage.
        meter: Receives each stage's time and peak RSS, ``load`` first.

    Returns:
        The metadata written to ``meta.json``.
    """
    data.validate()
    config.validate().require_parts()
    meter = meter if meter is not None else StageMeter()
    with meter.stage("load"):
        dataset = load_data(data, progress)
    if data.task == "node" and (need_labels or dataset.y is not None):
        dataset.require_node_task(data.dataset)
    if check is not None:
        check(dataset)
    return partition_graph(dataset, out_dir, config, task=data.task, overwrite=overwrite,
                           progress=progress, validate=False, meter=meter)


def load_data(data: DataConfig, progress: bool) -> GraphDataset | TypedGraphDataset:
    """``data``'s dataset (:meth:`~gnnpar.datasets.config.DataConfig.load_any`), with a bar."""
    with tqdm(total=1, desc=f"load {data.dataset}", disable=bars_off(progress)) as bar:
        dataset = data.load_any()
        bar.update()
    return dataset


@dataclass(frozen=True)
class _Typed:
    """What a typed graph adds to a part job: its layout and per-type features."""

    layout: TypedLayout
    x: dict[str, np.ndarray]


@dataclass(frozen=True)
class _PartJob:
    """Everything a part writer reads (shared with forked writers, never copied)."""

    tmp: Path
    dataset: GraphDataset
    in_edges: InEdges
    ren: Renumbering
    degree: np.ndarray
    splits: dict[str, np.ndarray]
    halo_hops: int
    feature_dtype: str
    link: dict[str, tuple[np.ndarray, np.ndarray]]
    """Per link array: its rows in new ids grouped by part, and the ``K + 1`` row bounds."""
    typed: _Typed | None = None


def _link_arrays(dataset: GraphDataset,
                 ren: Renumbering) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The supervision edges and negatives in new ids, grouped by the part that stores them.

    A pair goes to the part owning its source; per-edge negatives follow their positive.
    Within a part, rows keep the dataset's order (a stable sort by part).
    """
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    k = ren.num_parts
    for name in LINK_ARRAYS:
        rows = ren.new_of_old[np.asarray(getattr(dataset, name), dtype=np.int64)]
        if name.endswith("_neg") and dataset.neg_kind == "per_edge":
            key_rows = ren.new_of_old[np.asarray(
                getattr(dataset, name.replace("_neg", "_edges")), dtype=np.int64)]
            if len(rows) == 0:
                key_rows = key_rows[:0]
        else:
            key_rows = rows
        part = np.searchsorted(ren.offsets, key_rows[:, 0], side="right") - 1
        order = np.argsort(part, kind="stable")
        bounds = np.searchsorted(part[order], np.arange(k + 1))
        out[name] = rows[order], bounds
    return out


class _Written(NamedTuple):
    """A written part."""

    load: PartStats
    sizes: dict[str, int]
    """``meta.json``'s ``parts`` entry."""
    files: dict[str, str]
    """Path -> sha256 of every file written."""
    figures: dict[str, list[int]]
    """Typed graphs: per-type ``counts``, ``edges`` and ``halo`` (else empty)."""


_JOB: _PartJob | None = None  # the job of a forked writer


def _write_parts(job: _PartJob, num_parts: int, workers: int) -> Iterator[_Written]:
    """Write every part; yield each part's load, sizes and file digests in part order.

    With ``workers > 1`` (where ``fork`` exists) parts are written by that many forked
    processes, which share ``job``'s arrays with this one instead of copying them.
    """
    global _JOB
    if workers == 1 or num_parts == 1 or "fork" not in multiprocessing.get_all_start_methods():
        for k in range(num_parts):
            yield _write_part(job, k)
        return
    _JOB = job
    try:
        with multiprocessing.get_context("fork").Pool(min(workers, num_parts)) as pool:
            yield from pool.imap(_write_forked, range(num_parts))
    finally:
        _JOB = None


def _write_forked(k: int) -> _Written:
    assert _JOB is not None
    return _write_part(_JOB, k)


def _write_part(job: _PartJob, k: int) -> _Written:
    """Write part ``k``'s files into ``tmp/part-k``; return its load, sizes and digests."""
    name = part_dir_name(k)
    (job.tmp / name).mkdir()
    files: dict[str, str] = {}
    dataset, ren = job.dataset, job.ren

    def save(field: str, array: np.ndarray) -> None:
        files[f"{name}/{field}.npy"] = save_npy_sha256(job.tmp / name / f"{field}.npy", array)

    lo, hi = int(ren.offsets[k]), int(ren.offsets[k + 1])
    owned = ren.owned(k)
    local = build_local_graph(job.in_edges, ren, k, job.halo_hops)
    figures: dict[str, list[int]] = {}
    if job.typed is not None:
        local, figures = _write_typed(job.typed, local, owned, save, files,
                                      job.tmp / name, job.feature_dtype)
    save("orig_ids", owned)
    save("halo_gids", local.halo_gids)
    save("indptr", local.indptr)
    save("indices", local.indices)
    save("in_degree", np.concatenate([job.degree[owned],
                                      job.degree[ren.old_of_new[local.halo_gids]]]))
    save("adj_complete", local.adj_complete)
    save("e_id", local.e_id)
    files[f"{name}/edge_attr.npy"] = save_npy_blocks(
        job.tmp / name / "edge_attr.npy", (len(local.e_id), dataset.edge_dim), np.float32,
        _feature_blocks(dataset.edge_attr, local.e_id))
    for link_name, (rows, bounds) in job.link.items():
        save(link_name, rows[bounds[k]:bounds[k + 1]])
    files[f"{name}/feat.npy"] = save_npy_blocks(
        job.tmp / name / "feat.npy", (len(owned), dataset.feat_dim),
        FEATURE_DTYPES[job.feature_dtype],
        (store_features(b, job.feature_dtype) for b in _feature_blocks(dataset.x, owned)))
    if dataset.y is None:
        save("label", np.full(len(owned), -1, dtype=np.int64))
    else:
        save("label", np.asarray(dataset.y[owned], dtype=np.int64))
        release(dataset.y)
    owned_in_split: dict[str, int] = {}
    for split, gids in job.splits.items():
        a, b = np.searchsorted(gids, [lo, hi])
        save(split, gids[a:b] - lo)
        owned_in_split[split] = int(b - a)
    stats = PartStats(owned=len(owned), train=owned_in_split["train_idx"],
                      edges=local.owned_edges, halo=len(local.halo_gids), cut=local.cut_edges)
    return _Written(stats, {"num_owned": len(owned), "num_halo": len(local.halo_gids),
                            "num_edges": len(local.indices),
                            **{f"num_{n}": int(job.link[n][1][k + 1] - job.link[n][1][k])
                               for n in LINK_ARRAYS[:3]}}, files, figures)


def _write_typed(typed: _Typed, local: LocalGraph, owned: np.ndarray,
                 save: Callable[[str, np.ndarray], None], files: dict[str, str], d: Path,
                 feature_dtype: str) -> tuple[LocalGraph, dict[str, list[int]]]:
    """A typed part's extra files; its in-edges sorted by relation, and its type figures.

    Writes ``etype.npy`` and ``feat_{t}.npy`` (:mod:`~gnnpar.partition.typed`); returns the
    local graph with each row's in-edges in relation order and, per type, the owned
    nodes and, per relation, the stored in-edges and halo nodes reached.
    """
    lay = typed.layout
    indices, e_id, etype = sort_by_relation(local.indptr, local.indices, local.e_id,
                                            lay.edge_offsets)
    local = replace(local, indices=indices, e_id=e_id)
    save("etype", etype)
    ntype = np.searchsorted(np.asarray(lay.node_offsets), owned, side="right") - 1
    counts = np.bincount(ntype, minlength=len(lay.node_types))
    n_owned, r = len(owned), len(lay.edge_types)
    halo = [0] * r
    src_halo = indices >= n_owned
    for rel in range(r):
        halo[rel] = len(np.unique(indices[src_halo & (etype == rel)]))
    for t, width in enumerate(lay.feat_dims):
        if width == 0:
            continue
        rows = owned[ntype == t] - lay.node_offsets[t]
        fname = type_feat_name(t)
        files[f"{d.name}/{fname}.npy"] = save_npy_blocks(
            d / f"{fname}.npy", (len(rows), width), FEATURE_DTYPES[feature_dtype],
            (store_features(b, feature_dtype)
             for b in _feature_blocks(typed.x[lay.node_types[t]], rows)))
    return local, {"counts": counts.tolist(),
                   "edges": np.bincount(etype, minlength=r).tolist(), "halo": halo}


def _feature_blocks(x: np.ndarray | None, owned: np.ndarray) -> Iterator[np.ndarray]:
    """Rows ``owned`` of node (or edge) features ``x``, in blocks of about 16 MiB.

    Nothing without features.

    A memory map's pages are released after each block.
    """
    if x is None:
        return
    rows = max(1, _BLOCK_BYTES // max(1, x.shape[1] * 4))
    for start in range(0, len(owned), rows):
        block = np.asarray(x[owned[start:start + rows]], dtype=np.float32)
        release(x)
        yield block

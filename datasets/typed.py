"""``TypedGraphDataset``: a typed graph (node types, relations) for node property prediction.

The typed counterpart of :class:`~gnnpar.datasets.graph.GraphDataset`, as PyG's
``HeteroData``: a node count per node type, per relation ``(src_type, relation,
dst_type)`` an int64 edge list in message direction (source -> destination) over the
per-type ids of its two types, float32 features for the node types that have them, and
labels plus train/val/test splits on one *target* node type. Dict order is meaningful:
node type ``t`` and relation ``r`` are numbered by their position (file names, the
homogeneous view, the partitioner's ``etype.npy``).

:meth:`TypedGraphDataset.to_homogeneous` is the id mapping every other stage uses (as
DistDGL's): node type ``t`` holds homogeneous ids ``node_offsets[t] .. node_offsets[t+1]``
(per-type id ``i`` is ``node_offsets[t] + i``), relation ``r`` holds homogeneous edge ids
``edge_offsets[r] .. edge_offsets[r+1]``, in its own order; that mapping, with the type
names and feature widths, is a small JSON-able value, :class:`~gnnpar.typed.TypedLayout`.

On disk (``dataset.json`` format ``gnnpar-dataset`` version 3, kind ``hetero``: the name
that existing dataset directories carry; version 3 is the first to say a ``kind``, and
homogeneous datasets are still written as version 2)::

    DIR/
      dataset.json      format, format_version, kind, name, node_types, num_nodes,
                        edge_types, num_edges, feat_dims, target, num_classes, arrays
      x_{t}.npy         float32 [n_t, F_t]   (node type t by index; featured types only)
      edge_{r}_src.npy edge_{r}_dst.npy   int64 [E_r]   (relation r by index)
      y.npy             int64 [n_target]     (absent without labels)
      train_idx.npy val_idx.npy test_idx.npy   int64 target-type ids

Loading memory-maps every array and never unpickles; :meth:`GraphDataset.load` refuses a
typed directory (and :meth:`TypedGraphDataset.load` a homogeneous one) with an error that
names the other loader; :func:`gnnpar.load_dataset` reads both.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gnnpar.artifacts.arrays import load_npy, save_npy
from gnnpar.artifacts.directory import atomic_directory
from gnnpar.artifacts.documents import read_json
from gnnpar.artifacts.kinds import DATASET
from gnnpar.datasets.graph import (
    FORMAT,
    SPLITS,
    GraphDataset,
    check_counts,
    check_edges,
    check_features,
    check_kind,
    check_sealed,
    symmetrise,
    write_sealed,
)
from gnnpar.errors import DatasetError
from gnnpar.sizes import NODE_BYTES, check_fits
from gnnpar.typed import EdgeType, TypedLayout

if TYPE_CHECKING:
    from torch_geometric.data import HeteroData

log = logging.getLogger("gnnpar.datasets")
KIND = "hetero"
"""``dataset.json``'s ``kind`` of a typed dataset (the name on disk, kept for the
directories written so far)."""
FORMAT_VERSION = 4
READABLE_VERSIONS = (3, 4)
"""Version 4 added the size and SHA-256 of every array (``files``) and its own digest."""
REVERSE_PREFIX = "rev_"
REVERSE_MODES = ("auto", "add", "none")
"""``--reverse``: add the missing reverse relations, add them all, or none."""
_BAD_NAME = re.compile(r"[/\s]")
_NAME_FIX = "name types and relations with non-empty strings without '/' or whitespace."


def _empty_idx() -> np.ndarray:
    return np.zeros(0, dtype=np.int64)


def edge_type_field(edge_type: EdgeType, part: str | None = None) -> str:
    """The field that names relation ``edge_type`` in errors: ``edges[a,writes,p].src``."""
    name = f"edges[{','.join(map(str, edge_type))}]"
    return name if part is None else f"{name}.{part}"


def _offsets(sizes: Sequence[int]) -> tuple[int, ...]:
    return (0, *np.cumsum(np.asarray(sizes, dtype=np.int64)).tolist())


@dataclass
class TypedGraphDataset:
    """A typed graph with per-type node features, and labels and splits on one node type.

    Attributes:
        num_nodes: Node type -> number of nodes ``n_t`` (ids ``0 .. n_t - 1``); dict order
            is the type order.
        edges: Relation ``(src_type, relation, dst_type)`` -> ``(src, dst)`` int64 ``[E_r]``
            per-type ids, message direction ``src -> dst``; dict order is the relation order.
        x: Node type -> float32 ``[n_t, F_t]`` features (possibly memory maps); types
            absent from ``x`` are featureless.
        target: The node type that has labels and splits.
        y: int64 ``[n_target]`` labels of the target type, ``-1`` = unlabelled, or ``None``.
        train_idx: int64 training ids (of the target type).
        val_idx: int64 validation ids (of the target type).
        test_idx: int64 test ids (of the target type).
        name: A name for logs and records.
        num_classes: Number of classes; by default ``max(y) + 1``.

    Example::

        ds = gnnpar.load_dataset("synthetic:typed")        # paper, author, venue
        ds.layout().node_offsets, ds.to_homogeneous().num_edges
        ds.save("data/typed")
    """

    num_nodes: dict[str, int]
    edges: dict[EdgeType, tuple[np.ndarray, np.ndarray]]
    x: dict[str, np.ndarray]
    target: str
    y: np.ndarray | None = None
    train_idx: np.ndarray = field(default_factory=_empty_idx)
    val_idx: np.ndarray = field(default_factory=_empty_idx)
    test_idx: np.ndarray = field(default_factory=_empty_idx)
    name: str = "typed"
    num_classes: int | None = None

    def __post_init__(self) -> None:
        self.num_nodes = {t: int(n) for t, n in self.num_nodes.items()}
        if self.num_classes is None and self.y is not None and len(self.y):
            self.num_classes = int(np.max(self.y)) + 1
        self.num_classes = int(self.num_classes or 0)

    # ------------------------------------------------------------------ properties
    @property
    def node_types(self) -> tuple[str, ...]:
        """Node type names, in type order."""
        return tuple(self.num_nodes)

    @property
    def edge_types(self) -> tuple[EdgeType, ...]:
        """Relations ``(src_type, relation, dst_type)``, in relation order."""
        return tuple(self.edges)

    @property
    def num_edges(self) -> int:
        """Total number of directed edges (all relations)."""
        return sum(len(s) for s, _ in self.edges.values())

    @property
    def feat_dims(self) -> dict[str, int]:
        """Node type -> feature width (0 for a featureless type)."""
        return {t: int(self.x[t].shape[1]) if t in self.x else 0 for t in self.num_nodes}

    def layout(self) -> TypedLayout:
        """The types and id ranges of :meth:`to_homogeneous` (see :class:`TypedLayout`)."""
        return TypedLayout(
            node_types=self.node_types, edge_types=self.edge_types, target=self.target,
            node_offsets=_offsets(list(self.num_nodes.values())),
            edge_offsets=_offsets([len(s) for s, _ in self.edges.values()]),
            feat_dims=tuple(self.feat_dims.values()))

    def _target_view(self) -> GraphDataset:
        """The target type as an edgeless GraphDataset sharing ``y`` and the splits.

        The label and split checks, :meth:`require_node_task` and :meth:`random_split`
        are GraphDataset's, run on this view.
        """
        return GraphDataset(
            num_nodes=self.num_nodes.get(self.target, 0), src=_empty_idx(), dst=_empty_idx(),
            y=self.y, train_idx=self.train_idx, val_idx=self.val_idx, test_idx=self.test_idx,
            name=self.name, num_classes=self.num_classes)

    # ------------------------------------------------------------------ validation
    def validate(self, path: str | os.PathLike[str] | None = None) -> TypedGraphDataset:
        """Check every invariant; raise :class:`DatasetError` naming the field and the fix.

        Node types: at least one, each with ``n_t >= 1``; names are non-empty strings
        without ``/`` or whitespace, as are relation names. Relations: both end types
        exist; ``src`` / ``dst`` are 1-D integer arrays of one length with ids in range of
        their type (fields ``edges[s,r,d].src`` / ``.dst``). Features: only of known
        types, ``[n_t, F]`` float and finite (field ``x[t]``). ``target`` is a node type;
        ``y`` and the splits are checked on it as :meth:`GraphDataset.validate` checks
        them (fields ``y``, ``train_idx``, ...).

        Args:
            path: File or directory the data came from, named in errors.

        Returns:
            ``self``.
        """
        where = path if path is not None else self.name

        def fail(fld: str, msg: str, fix: str) -> DatasetError:
            return DatasetError(msg, path=where, field=fld, fix=fix)

        if not self.num_nodes:
            raise fail("num_nodes", "holds no node type.", "give at least one node type.")
        for t, n in self.num_nodes.items():
            if not isinstance(t, str) or not t or _BAD_NAME.search(t):
                raise fail("num_nodes", f"node type {t!r} is not a valid name.", _NAME_FIX)
            if n < 1:
                raise fail(f"num_nodes[{t}]", f"must be >= 1, got {n}.",
                           "drop node types without nodes.")
        total = sum(self.num_nodes.values())
        check_fits(total, NODE_BYTES, what=f"{total:,} nodes of all types", field="num_nodes",
                   path=where, error=DatasetError,
                   fix="number each type's nodes 0..n-1 without gaps.")
        if self.target not in self.num_nodes:
            raise fail("target", f"{self.target!r} is not a node type (types: "
                       f"{', '.join(self.num_nodes)}).", "name the node type that has labels.")
        for et, pair in self.edges.items():
            fld = edge_type_field(et) if isinstance(et, tuple) else f"edges[{et!r}]"
            if not (isinstance(et, tuple) and len(et) == 3 and isinstance(pair, tuple)
                    and len(pair) == 2):
                raise fail(fld, "must map (src_type, relation, dst_type) to (src, dst).",
                           "key relations by 3-tuples of names, values (src, dst) arrays.")
            s, r, d = et
            if not isinstance(r, str) or not r or _BAD_NAME.search(r):
                raise fail(fld, f"relation {r!r} is not a valid name.", _NAME_FIX)
            for end in (s, d):
                if end not in self.num_nodes:
                    raise fail(fld, f"names node type {end!r}, which is not one of "
                               f"{', '.join(self.num_nodes)}.",
                               "add the node type to num_nodes or fix the relation.")
            check_edges(pair[0], pair[1], self.num_nodes[s], self.num_nodes[d], where,
                        (edge_type_field(et, "src"), edge_type_field(et, "dst")))
        for t, feat in self.x.items():
            if t not in self.num_nodes:
                raise fail(f"x[{t}]", f"features of {t!r}, which is not a node type.",
                           "key features by node type.")
            check_features(feat, self.num_nodes[t], where, f"x[{t}]")
        self._target_view().validate(path if path is not None else self.name)
        return self

    def validate_splits(self, path: str | os.PathLike[str] | None = None) -> TypedGraphDataset:
        """Check only the split invariants (as :meth:`GraphDataset.validate_splits`)."""
        self._target_view().validate_splits(path if path is not None else self.name)
        return self

    def require_node_task(
        self, where: str | os.PathLike[str] | None = None,
    ) -> TypedGraphDataset:
        """Check that the target type has labels and training nodes.

        As :meth:`GraphDataset.require_node_task` (same fields and messages), on the
        target type.
        """
        self._target_view().require_node_task(where)
        return self

    # ------------------------------------------------------------------ transforms
    def random_split(self, fractions: Sequence[float], seed: int = 0) -> TypedGraphDataset:
        """A copy whose splits are a seeded random split of the labelled target nodes.

        Exactly :meth:`GraphDataset.random_split` on the target type (same sizes, same
        permutation for a seed); every other array is shared.
        """
        view = self._target_view().random_split(fractions, seed)
        return replace(self, train_idx=view.train_idx, val_idx=view.val_idx,
                       test_idx=view.test_idx)

    def add_reverse(self, prefix: str = REVERSE_PREFIX) -> TypedGraphDataset:
        """Every relation also in reverse, as PyG's ``ToUndirected`` (``merge=True``).

        A relation ``(s, r, d)`` with ``s != d`` keeps its place and gains ``(d, prefix +
        r, s)``, appended after every existing relation in the same order; its arrays are
        the original's, swapped (no copy: memory maps stay maps). A same-type relation
        ``(t, r, t)`` is replaced by its symmetrised edges (both directions, duplicates
        dropped, sorted by ``(dst, src)``; self-loops kept). Call it once: the reverse of a
        reverse relation is not recognised (:meth:`with_reverse` ``"auto"`` does).

        Raises:
            DatasetError: A reverse relation's name is taken (field ``edges[...]``).
        """
        return self._reversed(prefix, skip_stored=False)

    def with_reverse(self, mode: str = "auto", prefix: str = REVERSE_PREFIX
                     ) -> TypedGraphDataset:
        """The relations as ``--reverse`` says: ``auto``, ``add`` or ``none``.

        ``none`` keeps the relations as stored; ``add`` is :meth:`add_reverse`; ``auto``
        adds the reverse of each relation the graph does not store already
        (:meth:`stored_reverse`) and symmetrises same-type relations, so a graph saved
        with its reverses (PyG's ``ToUndirected``, ogbn-mag-like layouts) is used as it is.
        """
        if mode not in REVERSE_MODES:
            raise DatasetError(f"unknown reverse mode {mode!r}.", path=self.name,
                               field="reverse", fix="pass --reverse auto, add or none.")
        if mode == "none":
            return self
        out = self._reversed(prefix, skip_stored=mode == "auto")
        out._log_reverse(self, mode, prefix)
        return out

    def _log_reverse(self, stored: TypedGraphDataset, mode: str, prefix: str) -> None:
        """Log at INFO what ``--reverse MODE`` made of ``stored``'s relations (``self``).

        Nothing when the edges are those stored; else one line with the edges before and
        after, then one per relation: symmetrised (edges before and after), added (the
        reverse of which relation), or kept because its reverse is stored (which one).
        """
        def key(et: EdgeType) -> str:
            return "__".join(et)

        lines = []
        for et, (src, _) in self.edges.items():
            if et not in stored.edges:
                forth = (et[2], et[1].removeprefix(prefix), et[0])
                lines.append(f"  {key(et)}: added, the reverse of {key(forth)} "
                             f"({len(src):,} edges)")
            elif len(src) != len(stored.edges[et][0]):
                back = stored.stored_reverse(et, prefix)
                lines.append(f"  {key(et)}: symmetrised, {len(stored.edges[et][0]):,} -> "
                             f"{len(src):,} edges" + (f" (and {key(back)}, its stored "
                                                      "reverse, too)" if back else ""))
            elif mode == "auto" and (back := stored.stored_reverse(et, prefix)) is not None \
                    and et[0] != et[2]:
                lines.append(f"  {key(et)}: kept as stored, its reverse is {key(back)}")
        before, after = stored.num_edges, self.num_edges
        if before == after:
            return  # every reverse stored, every same-type relation symmetric: as stored
        log.info("%s: --reverse %s: %s edges as stored, %s now (--reverse none keeps the "
                 "relations as stored):\n%s", self.name, mode, f"{before:,}", f"{after:,}",
                 "\n".join(lines))

    def stored_reverse(self, rel: EdgeType, prefix: str = REVERSE_PREFIX) -> EdgeType | None:
        """The stored relation that is ``rel``'s reverse, if any (``s != d``).

        Either by name -- ``(d, r', s)`` where ``r'`` is ``prefix + r``, ``r`` is ``prefix
        + r'``, or one of ``r_rev``, ``r_reverse``, ``r_inv``, ``rev-r``, ``reverse_r``,
        ``inv_r`` (or ``r`` is such a name of ``r'``) -- or by its endpoints: the only
        relation from ``d`` to ``s``, ``rel`` the only one from ``s`` to ``d``, holding
        exactly ``rel``'s edges swapped.
        """
        s, r, d = rel
        back = [e for e in self.edges if e[0] == d and e[2] == s and e != rel]

        def names(x: str) -> set[str]:
            return {prefix + x, f"{x}_rev", f"{x}_reverse", f"{x}_inv", f"rev-{x}",
                    f"reverse_{x}", f"inv_{x}"}

        for other in back:
            if other[1] in names(r) or r in names(other[1]):
                return other
        forth = [e for e in self.edges if e[0] == s and e[2] == d]
        if len(back) == 1 and forth == [rel]:
            (src, dst), (bsrc, bdst) = self.edges[rel], self.edges[back[0]]
            n = max(self.num_nodes[s], self.num_nodes[d], 1)
            if len(src) == len(bsrc) and np.array_equal(
                    np.sort(np.asarray(src, np.int64) * n + np.asarray(dst, np.int64)),
                    np.sort(np.asarray(bdst, np.int64) * n + np.asarray(bsrc, np.int64))):
                return back[0]
        return None

    def _reversed(self, prefix: str, skip_stored: bool) -> TypedGraphDataset:
        edges = dict(self.edges)
        reverse: dict[EdgeType, tuple[np.ndarray, np.ndarray]] = {}
        for (s, r, d), (src, dst) in self.edges.items():
            if s == d:
                edges[s, r, d] = symmetrise(self.num_nodes[s], src, dst)
                continue
            if skip_stored and self.stored_reverse((s, r, d), prefix) is not None:
                continue
            rev = (d, prefix + r, s)
            if rev in self.edges:
                raise DatasetError("already exists; adding the reverse relations would add "
                                   "it again.", path=self.name, field=edge_type_field(rev),
                                   fix="pass --reverse auto (keeps the reverses the graph "
                                   "stores) or --reverse none (relations as stored).")
            reverse[rev] = (dst, src)
        return replace(self, edges={**edges, **reverse})

    def to_homogeneous(self) -> GraphDataset:
        """One node and one edge type: the homogeneous view of :meth:`layout`.

        Type ``t``'s node ``i`` is homogeneous node ``node_offsets[t] + i``; relation
        ``r``'s edges are homogeneous edges ``edge_offsets[r] ..``, in their given order.
        ``x`` is ``None`` (typed features stay per type); ``y`` covers all ``N`` nodes,
        ``-1`` outside the target type's range (``None`` without labels); the splits are
        shifted into the target's range. Name and ``num_classes`` are kept.

        Returns:
            A new :class:`GraphDataset`; its edges are new arrays (one copy).
        """
        lay = self.layout()
        offset = dict(zip(lay.node_types, lay.node_offsets, strict=False))
        src = np.empty(lay.num_edges, dtype=np.int64)
        dst = np.empty(lay.num_edges, dtype=np.int64)
        for r, ((s, _, d), (es, ed)) in enumerate(self.edges.items()):
            lo, hi = lay.edge_offsets[r], lay.edge_offsets[r + 1]
            np.add(es, offset[s], out=src[lo:hi], casting="unsafe")
            np.add(ed, offset[d], out=dst[lo:hi], casting="unsafe")
        base = offset[self.target]
        y = None
        if self.y is not None:
            y = np.full(lay.num_nodes, -1, dtype=np.int64)
            y[base : base + self.num_nodes[self.target]] = self.y
        return GraphDataset(
            num_nodes=lay.num_nodes, src=src, dst=dst, y=y, name=self.name,
            num_classes=self.num_classes, train_idx=self.train_idx.astype(np.int64) + base,
            val_idx=self.val_idx.astype(np.int64) + base,
            test_idx=self.test_idx.astype(np.int64) + base)

    def to_pyg(self) -> HeteroData:
        """A PyG ``HeteroData``: per type ``num_nodes`` and ``x``; per relation ``edge_index``.

        The target type also has ``y`` and boolean ``train_mask`` / ``val_mask`` /
        ``test_mask``. Types and relations are inserted in order, so ``data.node_types``
        and ``data.edge_types`` keep it.
        """
        import torch
        from torch_geometric.data import HeteroData

        data = HeteroData()
        for t, n in self.num_nodes.items():
            data[t].num_nodes = n
            if t in self.x:
                data[t].x = torch.from_numpy(np.array(self.x[t], dtype=np.float32))
        for et, (src, dst) in self.edges.items():
            data[et].edge_index = torch.from_numpy(np.stack([src, dst]).astype(np.int64))
        target = data[self.target]
        if self.y is not None:
            target.y = torch.from_numpy(np.array(self.y, dtype=np.int64))
        n = self.num_nodes[self.target]
        for fld, mask in zip(SPLITS, ("train_mask", "val_mask", "test_mask"), strict=True):
            m = torch.zeros(n, dtype=torch.bool)
            m[torch.from_numpy(np.array(getattr(self, fld), dtype=np.int64))] = True
            target[mask] = m
        return data

    def summary(self) -> dict[str, Any]:
        """Sizes per type and relation, for printing and run records.

        Relations are named ``src,relation,dst``.
        """
        return {
            "name": self.name,
            "num_nodes": sum(self.num_nodes.values()),
            "num_edges": self.num_edges,
            **{f"nodes[{t}]": n for t, n in self.num_nodes.items()},
            **{f"edges[{','.join(et)}]": len(s) for et, (s, _) in self.edges.items()},
            **{f"feat_dim[{t}]": f for t, f in self.feat_dims.items()},
            "target": self.target,
            "num_classes": self.num_classes,
            "train": int(len(self.train_idx)),
            "val": int(len(self.val_idx)),
            "test": int(len(self.test_idx)),
        }

    # ------------------------------------------------------------------ disk
    def save(self, out_dir: str | os.PathLike[str], overwrite: bool = False,
             validate: bool = True) -> Path:
        """Validate, then write to ``out_dir`` atomically (see the module docstring).

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
        arrays = []
        with atomic_directory(out, overwrite, DatasetError, kind=DATASET) as tmp:
            for t, name in enumerate(self.num_nodes):
                if name in self.x:
                    save_npy(tmp / f"x_{t}.npy", np.asarray(self.x[name], dtype=np.float32))
                    arrays.append(f"x_{t}")
            for r, (src, dst) in enumerate(self.edges.values()):
                save_npy(tmp / f"edge_{r}_src.npy", np.asarray(src, dtype=np.int64))
                save_npy(tmp / f"edge_{r}_dst.npy", np.asarray(dst, dtype=np.int64))
                arrays += [f"edge_{r}_src", f"edge_{r}_dst"]
            if self.y is not None:
                save_npy(tmp / "y.npy", np.asarray(self.y, dtype=np.int64))
                arrays.append("y")
            for fld in SPLITS:
                save_npy(tmp / f"{fld}.npy", np.asarray(getattr(self, fld), dtype=np.int64))
            write_sealed(tmp, {
                "format": FORMAT,
                "format_version": FORMAT_VERSION,
                "kind": KIND,
                "name": self.name,
                "node_types": list(self.num_nodes),
                "num_nodes": dict(self.num_nodes),
                "edge_types": [list(et) for et in self.edges],
                "num_edges": [len(s) for s, _ in self.edges.values()],
                "feat_dims": self.feat_dims,
                "target": self.target,
                "num_classes": self.num_classes,
                "arrays": sorted([*arrays, *SPLITS]),
            })
        return out

    @classmethod
    def load(cls, path: str | os.PathLike[str], mmap: bool = True,
             validate: bool = True) -> TypedGraphDataset:
        """Read a directory written by :meth:`save`, memory-mapped by default, and validate.

        Args:
            path: Directory holding ``dataset.json``.
            mmap: Memory-map the arrays read-only.
            validate: Check every invariant; pass ``False`` only for a directory this
                process has just written from a validated dataset.
        """
        d = Path(path)
        meta_path = d / "dataset.json"
        meta = read_json(meta_path, DatasetError)
        if not isinstance(meta, dict):
            raise DatasetError("must hold a JSON object.", path=meta_path,
                               fix="re-save the dataset with TypedGraphDataset.save.")
        check_kind(meta, KIND, meta_path)
        if meta.get("format") != FORMAT or meta.get("format_version") not in READABLE_VERSIONS:
            raise DatasetError(
                f"format {meta.get('format')!r} version {meta.get('format_version')!r} is not "
                f"{FORMAT!r} version {' or '.join(map(str, READABLE_VERSIONS))}.",
                path=meta_path, field="format_version",
                fix="re-save the dataset with this gnnpar version.")
        check_sealed(d, meta, 4, validate)
        fix = "re-save the dataset with TypedGraphDataset.save."
        for key in ("name", "node_types", "num_nodes", "edge_types", "num_edges", "feat_dims",
                    "target"):
            if key not in meta:
                raise DatasetError("field is missing.", path=meta_path, field=key, fix=fix)
        check_counts(meta, ("num_nodes", "num_edges", "feat_dims", "num_classes"), meta_path)
        node_types, edge_types = meta["node_types"], meta["edge_types"]
        num_nodes, num_edges, feat_dims = meta["num_nodes"], meta["num_edges"], meta["feat_dims"]
        if not (isinstance(node_types, list) and isinstance(num_nodes, dict)
                and isinstance(feat_dims, dict)
                and all(t in num_nodes and t in feat_dims for t in node_types)):
            raise DatasetError("node_types, num_nodes and feat_dims disagree.", path=meta_path,
                               field="node_types", fix=fix)
        if not (isinstance(edge_types, list) and isinstance(num_edges, list)
                and len(edge_types) == len(num_edges)
                and all(isinstance(et, list) and len(et) == 3 for et in edge_types)):
            raise DatasetError("edge_types and num_edges disagree.", path=meta_path,
                               field="edge_types", fix=fix)

        def arr(name: str) -> np.ndarray:
            return load_npy(d / f"{name}.npy", mmap, DatasetError)  # names the bad file

        edges = {(et[0], et[1], et[2]): (arr(f"edge_{r}_src"), arr(f"edge_{r}_dst"))
                 for r, et in enumerate(edge_types)}
        for r, ((et, (src, _)), n) in enumerate(zip(edges.items(), num_edges, strict=True)):
            if len(src) != n:
                raise DatasetError(f"edge_{r}_src.npy has {len(src)} edges but dataset.json "
                                   f"says {n}.", path=d, field=edge_type_field(et),
                                   fix="re-save the dataset; a file was replaced or truncated.")
        saved = set(meta.get("arrays") or [])
        ds = cls(
            num_nodes={t: num_nodes[t] for t in node_types}, edges=edges,
            x={t: arr(f"x_{i}") for i, t in enumerate(node_types) if feat_dims[t]},
            target=meta["target"], y=arr("y") if "y" in saved else None,
            name=meta["name"], num_classes=meta.get("num_classes"),
            **{fld: arr(fld) for fld in SPLITS})
        return ds.validate(d) if validate else ds

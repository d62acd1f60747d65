"""Loaders from files users already have: edge lists and ``.npz``, and the shared checks.

Every loader returns a validated :class:`GraphDataset`. Edges are taken as given, in
message direction (source -> destination); call :meth:`GraphDataset.to_undirected` for an
undirected graph. Labels may be ``[N]`` or ``[N, 1]``, integer (``-1`` = unlabelled) or
float with NaN for unlabelled nodes (as in ogbn-papers100M). Splits are id arrays or
boolean masks ``[N]``; link-prediction splits come from a ``.npz``'s link members
(:func:`from_npz`); a typed ``.npz`` (node types, relations) gives a
:class:`~gnnpar.datasets.typed.TypedGraphDataset` (:func:`from_typed_npz`). In-memory
PyG and DGL graphs: :mod:`gnnpar.datasets.pyg`, through the same field names and checks
(:data:`FIELD_NAMES`, :func:`build_dataset`). Errors name the file, the line or field, and
the fix; what a loader skips (arrays of a ``.npz`` it does
not know, a missing split) is logged as a warning on the ``gnnpar.datasets`` logger.
"""

from __future__ import annotations

import difflib
import gzip
import logging
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from gnnpar.artifacts.arrays import load_npy
from gnnpar.datasets.graph import SPLITS, GraphDataset
from gnnpar.datasets.link_split import EDGE_SPLITS, NEG_KINDS, NEG_SPLITS
from gnnpar.datasets.typed import TypedGraphDataset, edge_type_field
from gnnpar.errors import DatasetError
from gnnpar.typed import EdgeType

EDGE_LIST_SUFFIXES = (".csv", ".tsv", ".txt", ".edges", ".csv.gz", ".tsv.gz", ".txt.gz")
_COMMENTS = ("#", "%")
# Accepted names for each GraphDataset field in .npz files, PyG Data and DGL ndata.
FIELD_NAMES = {
    "x": ("x", "feat", "features", "node_feat"),
    "y": ("y", "label", "labels", "node_label"),
    "train_idx": ("train_idx", "train_mask"),
    "val_idx": ("val_idx", "valid_idx", "val_mask", "valid_mask"),
    "test_idx": ("test_idx", "test_mask"),
}
# The .npz members from_npz reads besides the FIELD_NAMES fields.
_NPZ_GRAPH_KEYS = ("edge_index", "src", "dst", "num_nodes")
# Optional link-prediction members of a .npz (GraphDataset fields of the same names).
_NPZ_LINK_KEYS = ("edge_attr", *EDGE_SPLITS, *NEG_SPLITS, "neg_kind")
# A link .npz's supervision in OGB's names, per split (SPLIT_NAME, SPLIT/NAME, ...):
# ogbl-citation2's source_node/target_node/target_node_neg, ogbl-collab's edge/edge_neg,
# and edge_index [2, M].
_OGB_LINK_NAMES = ("source_node", "target_node", "target_node_neg", "edge", "edge_neg",
                   "edge_index")
_OGB_LINK_MEMBER = re.compile(r"(train|valid|val|test)(?:_|/|\.|__)(" + "|".join(
    sorted(_OGB_LINK_NAMES, key=len, reverse=True)) + r")")
LINK_NPZ_NAMES = ("train_edges / val_edges / test_edges [M, 2] with val_neg / test_neg "
                  "and neg_kind; or per split (train, valid or val, test) OGB's arrays "
                  "SPLIT_source_node + SPLIT_target_node [M] with SPLIT_target_node_neg "
                  "[M, C] (ogbl-citation2), SPLIT_edge [M, 2] with SPLIT_edge_neg [M', 2] "
                  "(ogbl-collab), or SPLIT_edge_index [2, M]")
"""The link-prediction members a ``.npz`` may hold (named in the README and errors)."""
# Prefixes of a typed .npz's members (from_typed_npz), joined to names by "__".
TYPED_NPZ_SEP = "__"
_TYPED_PREFIXES = ("num_nodes", "x", "edge_index")
Where = str | os.PathLike[str]
log = logging.getLogger("gnnpar.datasets")


# ---------------------------------------------------------------------- array helpers
def labels_to_int(labels: Any, num_nodes: int, where: Where, field: str = "y") -> np.ndarray:
    """Labels ``[N]`` or ``[N, 1]`` (int, or float with NaN = unlabelled) -> int64 ``[N]``, -1.

    Args:
        labels: Label array.
        num_nodes: Expected number of rows ``N``.
        where: File or object named in errors.
        field: Field named in errors.
    """
    y: np.ndarray = np.asarray(labels)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1 or len(y) != num_nodes:
        raise DatasetError(f"has shape {y.shape}, expected ({num_nodes},) or ({num_nodes}, 1).",
                           path=where, field=field,
                           fix="give one class per node (multi-task labels are not supported).")
    if np.issubdtype(y.dtype, np.floating):
        unlabelled = np.isnan(y)
        filled = np.where(unlabelled, -1, y)
        if not np.array_equal(filled, np.round(filled)):
            raise DatasetError("holds non-integer class labels.", path=where, field=field,
                               fix="give integer classes; NaN or -1 for unlabelled nodes.")
        return filled.astype(np.int64)
    if not np.issubdtype(y.dtype, np.integer):
        raise DatasetError(f"has dtype {y.dtype}, expected integers.", path=where, field=field,
                           fix="give integer classes; -1 for unlabelled nodes.")
    return y.astype(np.int64, copy=False)


def features_to_float(feat: Any, num_nodes: int, where: Where, field: str = "x",
                      rows: str = "node") -> np.ndarray:
    """Features ``[N]`` or ``[N, F]`` -> float32 ``[N, F]`` (a float32 memory map is kept).

    ``rows``: what a row is, ``"node"`` or ``"edge"`` (named in errors).
    """
    x: np.ndarray = feat if isinstance(feat, np.ndarray) else np.asarray(feat)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2 or x.shape[0] != num_nodes:
        raise DatasetError(f"has shape {x.shape}, but the graph has {num_nodes} {rows}s.",
                           path=where, field=field,
                           fix=f"give exactly one feature row per {rows} ({num_nodes} rows"
                           + (", in edge order)." if rows == "edge" else ")."))
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
        raise DatasetError(f"has dtype {x.dtype}, expected numbers.", path=where, field=field,
                           fix=f"store numeric {'edge ' if rows == 'edge' else ''}features.")
    return x.astype(np.float32, copy=False)


def edge_features_to_float(feat: Any, num_edges: int, where: Where,
                           field: str = "edge_attr") -> np.ndarray:
    """Edge features ``[E]`` or ``[E, D]`` -> float32 ``[E, D]`` (row ``i`` = edge ``i``)."""
    return features_to_float(feat, num_edges, where, field, rows="edge")


def split_to_idx(split: Any, num_nodes: int, where: Where, field: str) -> np.ndarray:
    """A boolean mask ``[N]`` or an integer id array -> int64 ids.

    Under a ``*_mask`` name, an integer ``[N]`` array of 0s and 1s is read as a mask.
    """
    a = np.asarray(split)
    if (field.endswith("_mask") and a.ndim == 1 and np.issubdtype(a.dtype, np.integer)
            and len(a) == num_nodes and ((a == 0) | (a == 1)).all()):
        a = a.astype(bool)  # a 0/1 mask (older PyG versions, uint8 tensors)
    if a.dtype == np.bool_:
        if a.shape != (num_nodes,):
            raise DatasetError(f"mask has shape {a.shape}, expected ({num_nodes},).",
                               path=where, field=field,
                               fix="give one boolean per node (select one column of a "
                                   "multi-split mask).")
        return np.flatnonzero(a).astype(np.int64)
    a = a.reshape(-1) if a.ndim == 2 and 1 in a.shape else a
    if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
        raise DatasetError(f"must be 1-D node ids or a boolean mask, got {a.dtype} {a.shape}.",
                           path=where, field=field, fix="give int64 node ids.")
    return a.astype(np.int64, copy=False)


def pick_field(fields: Mapping[str, Any], name: str) -> tuple[str | None, Any]:
    """The first of ``FIELD_NAMES[name]`` present in ``fields``: ``(key, value)``."""
    for key in FIELD_NAMES[name]:
        if key in fields and fields[key] is not None:
            return key, fields[key]
    return None, None


def build_dataset(
    num_nodes: int, src: Any, dst: Any, fields: Mapping[str, Any], where: Where, name: str,
    files: Mapping[str, Where] | None = None, link: Mapping[str, Any] | None = None,
) -> GraphDataset:
    """Convert the optional ``x``/``y``/split entries of ``fields`` and validate.

    A graph without edges is refused (it would train as isolated nodes).

    ``files`` maps a GraphDataset field to the file it came from, named in its errors;
    ``link`` holds GraphDataset link fields (``edge_attr``, ``train_edges``, ...) as given.
    """
    files = files or {}
    if np.size(src) == 0:
        raise DatasetError(f"holds no edges, so the {num_nodes:,} nodes would train as "
                           "isolated nodes (no message passing at all).", path=where,
                           field="src dst", fix="give the graph's edges (an empty edge list "
                           "is almost always a wrong file or a header-only export).")
    xk, x = pick_field(fields, "x")
    yk, y = pick_field(fields, "y")
    kwargs: dict[str, Any] = {}
    for fld in SPLITS:
        key, value = pick_field(fields, fld)
        if value is not None:
            kwargs[fld] = split_to_idx(value, num_nodes, files.get(fld, where), key or fld)
    ds = GraphDataset(
        num_nodes=num_nodes,
        src=np.asarray(src).astype(np.int64, copy=False).reshape(-1),
        dst=np.asarray(dst).astype(np.int64, copy=False).reshape(-1),
        x=None if x is None else features_to_float(x, num_nodes, files.get("x", where), xk or "x"),
        y=None if y is None else labels_to_int(y, num_nodes, files.get("y", where), yk or "y"),
        name=name, **kwargs, **(link or {}),
    )
    try:
        return ds.validate(where)
    except DatasetError as exc:
        if exc.field is None or exc.field not in files:
            raise
        raise DatasetError(exc.message, path=files[exc.field], field=exc.field,
                           fix=exc.fix) from None


def to_numpy(t: Any) -> Any:
    """A torch tensor -> numpy (CPU); anything else unchanged."""
    return t.detach().cpu().numpy() if hasattr(t, "detach") else t


# ---------------------------------------------------------------------- .npz
def from_npz(path: Where, name: str | None = None) -> GraphDataset | TypedGraphDataset:
    """Read a ``.npz`` graph (never unpickling).

    A typed ``.npz`` -- one with a member whose name starts with ``edge_index__`` -- is
    read by :func:`from_typed_npz` and gives a
    :class:`~gnnpar.datasets.typed.TypedGraphDataset`; the rest of this docstring is
    about homogeneous ones.

    Keys: ``edge_index`` ``[2, E]`` or ``src`` and ``dst``; optional ``num_nodes`` (scalar;
    else the feature / label rows, else the largest id + 1), ``x`` (or ``feat``), ``y``
    (or ``label``), ``train_idx``/``val_idx``/``test_idx`` or boolean ``*_mask``; and the
    optional link-prediction members, as the :class:`GraphDataset` fields of the same
    names: ``edge_attr`` ``[E]`` or ``[E, D]`` (row = edge), ``train_edges`` /
    ``val_edges`` / ``test_edges`` ``[M, 2]``, ``val_neg`` / ``test_neg`` and ``neg_kind``
    (a string, ``"per_edge"`` -- the default -- or ``"shared"``).

    Only those members are read; any other (``node_names``, ``class_names``, even object
    arrays) is left unread and named in a warning on the ``gnnpar.datasets`` logger, as is
    an alias shadowed by an earlier one (``feat`` next to ``x``, ``src`` next to
    ``edge_index``).

    Args:
        path: The ``.npz`` file.
        name: Dataset name; default: the file's stem.
    """
    p = Path(path)
    valid = sorted({*_NPZ_GRAPH_KEYS, *sum(FIELD_NAMES.values(), ()), *_NPZ_LINK_KEYS,
                    *(f"{s}_{n}" for s in ("train", "valid", "test") for n in _OGB_LINK_NAMES)})
    members, arrays = _read_npz(p, _npz_members)
    if any(k.startswith(f"edge_index{TYPED_NPZ_SEP}") for k in members):
        return from_typed_npz(p, name)
    _warn_ignored(p, members, arrays, valid)
    link = _npz_link(arrays, p)
    if "edge_index" in arrays:
        ei = arrays["edge_index"]
        if ei.ndim != 2 or ei.shape[0] != 2:
            raise DatasetError(f"has shape {ei.shape}, expected (2, E).", path=p,
                               field="edge_index", fix="store source and destination rows.")
        src, dst = ei[0], ei[1]
    elif "src" in arrays and "dst" in arrays:
        src, dst = arrays["src"], arrays["dst"]
    elif len(link.get("train_edges", ())):  # OGB's link splits: the training edges
        log.info("%s: no edge_index; the graph is its training edges (as ogbl-citation2's).",
                 p)
        src, dst = link["train_edges"][:, 0], link["train_edges"][:, 1]
    else:
        raise DatasetError(f"holds no edges (members: {', '.join(members) or 'none'}).",
                           path=p, field="edge_index",
                           fix="store edge_index [2, E] or src and dst [E]; a link .npz may "
                           f"give its training edges instead: {LINK_NPZ_NAMES}.")
    for fld, a in (("src", src), ("dst", dst)):
        if not np.issubdtype(a.dtype, np.integer):
            raise DatasetError(f"has dtype {a.dtype}, expected integer node ids.", path=p,
                               field=fld, fix="store int64 node ids.")
    if "num_nodes" in arrays:
        nn = arrays["num_nodes"]
        value = nn.reshape(-1)[0] if nn.size == 1 and np.issubdtype(nn.dtype, np.number) else None
        if value is None or not np.isfinite(value) or value != int(value):
            raise DatasetError(f"must be one integer, got {nn.dtype} {nn.shape}.", path=p,
                               field="num_nodes", fix="store num_nodes as an integer scalar.")
        num_nodes = int(value)
    else:
        num_nodes = _infer_num_nodes(src, dst, pick_field(arrays, "x"), pick_field(arrays, "y"), p,
                                     "store num_nodes in the .npz")
    return build_dataset(num_nodes, src, dst, arrays, p, name or p.stem, link=link)


def _read_npz(
    p: Path, wanted: Callable[[Sequence[str]], list[str]],
) -> tuple[list[str], dict[str, np.ndarray]]:
    """``(every member name, the wanted members' arrays)`` of a ``.npz``, never unpickling."""
    try:
        with np.load(p, allow_pickle=False) as npz:
            members = list(npz.files)
            return members, {k: _npz_member(npz, k, p) for k in wanted(members)}
    except DatasetError:
        raise
    except FileNotFoundError:
        raise DatasetError("file is missing.", path=p, fix="check the path.") from None
    except (ValueError, OSError) as exc:
        raise DatasetError(f"not a readable .npz ({exc}).", path=p,
                           fix="save plain numeric arrays with numpy.savez.") from exc


def _warn_ignored(p: Path, members: Sequence[str], arrays: Mapping[str, Any],
                  valid: Sequence[str]) -> None:
    """Log the members that were not read, with a guess at a misspelt name."""
    ignored = [k for k in members if k not in arrays]
    if ignored:
        # Only near-typos ('lables' -> 'labels'): looser guesses mislead.
        hints = [f"{k!r} -> {m[0]!r}?" for k in ignored if k not in valid and (
            m := difflib.get_close_matches(k, valid, n=1, cutoff=0.8))]
        log.warning("%s: ignored arrays %s (gnnpar reads %s)%s", p, ignored, ", ".join(valid),
                    f"; misspelt? {', '.join(hints)}" if hints else "")


def _typed_npz_members(members: Sequence[str]) -> list[str]:
    """The members :func:`from_typed_npz` reads."""
    fixed = ("y", "target", *SPLITS)
    return [k for k in members if k in fixed or k.partition(TYPED_NPZ_SEP)[0]
            in _TYPED_PREFIXES and TYPED_NPZ_SEP in k]


def _npz_int(a: np.ndarray, path: Path, key: str) -> int:
    """A one-element integer array as ``int``, or a :class:`DatasetError` naming ``key``."""
    value = a.reshape(-1)[0] if a.size == 1 and np.issubdtype(a.dtype, np.number) else None
    if value is None or not np.isfinite(value) or value != int(value):
        raise DatasetError(f"must be one integer, got {a.dtype} {a.shape}.", path=path,
                           field=key, fix=f"store {key} as an integer scalar.")
    return int(value)


def from_typed_npz(path: Where, name: str | None = None) -> TypedGraphDataset:
    """Read a typed ``.npz`` graph (never unpickling); :func:`from_npz` hands these here.

    Members (``__`` joins a prefix to type and relation names, which therefore must not
    contain ``__``):

    - ``num_nodes__{type}``: integer scalar, one per node type; their order in the file
      is the type order (``numpy.savez`` keeps keyword order);
    - ``x__{type}`` (optional): ``[n_type, F]`` (or ``[n_type]``) numeric features;
    - ``edge_index__{src}__{relation}__{dst}``: ``[2, E]`` integer per-type ids, message
      direction ``src -> dst``, in relation order;
    - ``target``: a string (0-d array), the node type with labels and splits;
    - ``y`` (optional): ``[n_target]`` (or ``[n_target, 1]``) labels, ``-1`` (or NaN) =
      unlabelled;
    - ``train_idx`` / ``val_idx`` / ``test_idx`` (optional): target-type ids (or boolean
      masks).

    Any other member is left unread and named in a warning.

    Args:
        path: The ``.npz`` file.
        name: Dataset name; default: the file's stem.

    Returns:
        The validated dataset.

    Raises:
        DatasetError: A missing or malformed member (naming the file and the member).

    Example::

        np.savez("g.npz", num_nodes__paper=3, num_nodes__author=2, x__paper=x,
                 edge_index__author__writes__paper=[[0, 1], [2, 2]], target="paper", y=y)
        ds = gnnpar.from_npz("g.npz")  # a TypedGraphDataset
    """
    p = Path(path)
    members, arrays = _read_npz(p, _typed_npz_members)
    sep = TYPED_NPZ_SEP
    _warn_ignored(p, members, arrays, [f"num_nodes{sep}TYPE", f"x{sep}TYPE",
                                       f"edge_index{sep}SRC{sep}REL{sep}DST", "target", "y",
                                       *SPLITS])
    num_nodes = {k[len("num_nodes" + sep):]: _npz_int(a, p, k) for k, a in arrays.items()
                 if k.startswith("num_nodes" + sep)}
    if not num_nodes:
        raise DatasetError(f"holds no num_nodes{sep}TYPE member.", path=p, field="num_nodes",
                           fix=f"store one num_nodes{sep}<type> integer per node type.")
    if "target" not in arrays:
        raise DatasetError("member is missing.", path=p, field="target",
                           fix="store target=np.array('<node type with labels>').")
    tgt = arrays["target"]
    if tgt.size != 1 or tgt.dtype.kind not in "US":
        raise DatasetError(f"must be one string, got {tgt.dtype} {tgt.shape}.", path=p,
                           field="target", fix="store target=np.array('<node type>').")
    target = str(tgt.reshape(-1)[0])
    x: dict[str, np.ndarray] = {}
    edges: dict[EdgeType, tuple[np.ndarray, np.ndarray]] = {}
    for key, a in arrays.items():
        prefix, _, rest = key.partition(sep)
        if prefix == "x":
            if rest not in num_nodes:
                raise DatasetError(f"features of {rest!r}, which has no num_nodes{sep}{rest}.",
                                   path=p, field=key, fix=f"store num_nodes{sep}{rest}.")
            x[rest] = features_to_float(a, num_nodes[rest], p, key)
        elif prefix == "edge_index":
            parts = rest.split(sep)
            if len(parts) != 3 or not all(parts):
                raise DatasetError(f"must name src{sep}relation{sep}dst, got {rest!r}.",
                                   path=p, field=key, fix="rename it (names without '__').")
            et = (parts[0], parts[1], parts[2])
            for end in (et[0], et[2]):
                if end not in num_nodes:
                    raise DatasetError(f"names node type {end!r}, which has no "
                                       f"num_nodes{sep}{end}.", path=p, field=key,
                                       fix=f"store num_nodes{sep}{end}.")
            if a.ndim != 2 or a.shape[0] != 2 or not np.issubdtype(a.dtype, np.integer):
                raise DatasetError(f"must be a [2, E] integer array, got {a.dtype} {a.shape}.",
                                   path=p, field=key, fix="store source and destination rows.")
            edges[et] = (a[0].astype(np.int64), a[1].astype(np.int64))
    if target not in num_nodes:
        raise DatasetError(f"{target!r} is not a node type (types: {', '.join(num_nodes)}).",
                           path=p, field="target", fix="name one of the num_nodes types.")
    n = num_nodes[target]
    splits: dict[str, Any] = {fld: split_to_idx(arrays[fld], n, p, fld) for fld in SPLITS
                              if fld in arrays}
    ds = TypedGraphDataset(
        num_nodes=num_nodes, edges=edges, x=x, target=target,
        y=labels_to_int(arrays["y"], n, p, "y") if "y" in arrays else None,
        name=name or p.stem, **splits)
    try:
        return ds.validate(p)
    except DatasetError as exc:  # name the member, not the dataset field
        member = _typed_npz_member(exc.field, edges)
        if member is None:
            raise
        raise DatasetError(exc.message, path=p, field=member, fix=exc.fix) from None


def _typed_npz_member(fld: str | None,
                       edges: Mapping[EdgeType, tuple[np.ndarray, np.ndarray]]) -> str | None:
    """The ``.npz`` member behind a TypedGraphDataset error field, if it differs."""
    sep = TYPED_NPZ_SEP
    for et in edges:
        if fld in (edge_type_field(et, "src"), edge_type_field(et, "dst")):
            return f"edge_index{sep}{sep.join(et)} ({fld.rsplit('.', 1)[1]} row)"
    if fld is not None and fld.startswith("x[") and fld.endswith("]"):
        return f"x{sep}{fld[2:-1]}"
    if fld is not None and fld.startswith("num_nodes[") and fld.endswith("]"):
        return f"num_nodes{sep}{fld[len('num_nodes['):-1]}"
    return None


def _ogb_link_splits(arrays: Mapping[str, np.ndarray], path: Path) -> dict[str, Any]:
    """GraphDataset link fields from OGB-named split members (:data:`LINK_NPZ_NAMES`)."""
    from gnnpar.datasets.ogb import _LINK_SPLITS, _link_supervision

    by_split: dict[str, dict[str, np.ndarray]] = {}
    for key, value in arrays.items():
        m = _OGB_LINK_MEMBER.fullmatch(key)
        if m:
            split = "valid" if m.group(1) == "val" else m.group(1)
            name = m.group(2)
            if name == "edge_index":
                if value.ndim != 2 or value.shape[0] != 2:
                    raise DatasetError(f"has shape {value.shape}, expected (2, M).",
                                       path=path, field=key, fix="store [2, M] node ids.")
                name, value = "edge", value.T
            by_split.setdefault(split, {})[name] = value
    out: dict[str, Any] = {}
    kinds = set()
    for split, d in by_split.items():
        pos, neg, kind = _link_supervision(d, path)
        pos_field, neg_field = _LINK_SPLITS[split]
        out[pos_field] = pos
        if neg_field is not None and neg is not None:
            out[neg_field] = neg
            kinds.add(kind)
    if len(kinds) > 1:
        raise DatasetError("validation and test negatives differ in kind (target_node_neg in "
                           "one, edge_neg in the other).", path=path, field="neg_kind",
                           fix="give SPLIT_target_node_neg in both, or SPLIT_edge_neg in both.")
    if kinds:
        out["neg_kind"] = kinds.pop()
    return out


def _npz_link(arrays: Mapping[str, np.ndarray], path: Path) -> dict[str, Any]:
    """The link-prediction members of a ``.npz`` as GraphDataset fields."""
    link: dict[str, Any] = {k: arrays[k] for k in (*EDGE_SPLITS, *NEG_SPLITS) if k in arrays}
    for key, value in _ogb_link_splits(arrays, path).items():
        if key in link:
            raise DatasetError(f"is given twice: as {key} and in OGB's names.", path=path,
                               field=key, fix=f"keep one of them ({LINK_NPZ_NAMES}).")
        link[key] = value
    if "edge_attr" in arrays:
        num_edges = int(np.shape(arrays["edge_index"])[1] if "edge_index" in arrays
                        else len(arrays["src"]))
        link["edge_attr"] = edge_features_to_float(arrays["edge_attr"], num_edges, path)
    if "neg_kind" in arrays:
        kind = arrays["neg_kind"]
        value = str(kind.reshape(-1)[0]) if kind.size == 1 and kind.dtype.kind in "US" else None
        if value not in NEG_KINDS:
            raise DatasetError(f"must be one string of {', '.join(NEG_KINDS)}, got {kind.dtype} "
                               f"{kind.shape}.", path=path, field="neg_kind",
                               fix="store e.g. neg_kind=np.array('shared').")
        link["neg_kind"] = value
    return link


def _npz_members(members: Sequence[str]) -> list[str]:
    """The members :func:`from_npz` reads: the edges, ``num_nodes``, one alias per field."""
    present = set(members)
    if "edge_index" in present:
        wanted = ["edge_index"]
    else:
        wanted = [k for k in ("src", "dst") if k in present]
    if "num_nodes" in present:
        wanted.append("num_nodes")
    for aliases in FIELD_NAMES.values():
        wanted += [k for k in aliases if k in present][:1]
    return wanted + [k for k in _NPZ_LINK_KEYS if k in present] + [
        k for k in members if _OGB_LINK_MEMBER.fullmatch(k)]


def _npz_member(npz: Any, key: str, path: Path) -> np.ndarray:
    try:
        a: np.ndarray = npz[key]
    except ValueError as exc:  # an object array: reading it would unpickle
        raise DatasetError(f"cannot be read without unpickling ({exc}).", path=path, field=key,
                           fix="store it as a plain numeric array.") from None
    return a


def _infer_num_nodes(
    src: np.ndarray, dst: np.ndarray, x: tuple[str | None, Any], y: tuple[str | None, Any],
    where: Where, fix: str,
) -> int:
    """``N`` from the feature / label rows, else from the edges.

    ``x`` and ``y`` are ``(name, array or None)``. When both are given with different row
    counts, the edges decide: the one that covers every node id is taken, so the error
    that follows names the other one. When both cover the edges the choice is ambiguous
    and an error names both.
    """
    needed = int(max(src.max(initial=-1), dst.max(initial=-1))) + 1
    rows = {k or fld: int(np.shape(a)[0]) for fld, (k, a) in (("x", x), ("y", y))
            if a is not None and np.ndim(a) > 0}
    counts = sorted(set(rows.values()))
    if not counts:
        return needed
    if len(counts) == 1:
        return counts[0]
    covering = [r for r in counts if r >= needed]
    if not covering:
        return needed
    if len(covering) == 1:
        return covering[0]
    listed = " and ".join(f"{k} has {r}" for k, r in rows.items())
    raise DatasetError(f"row counts disagree: {listed} rows, and the largest node id needs "
                       f"only {needed}.", path=where, field="num_nodes",
                       fix=f"give one row per node in both, or {fix}.")


# ---------------------------------------------------------------------- edge lists
def _open_text(path: Path) -> TextIO:
    if path.name.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")  # noqa: SIM115


def _data_lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(1-based line number, stripped text)`` of every non-blank, non-comment line.

    Raises:
        DatasetError: Bytes that are not UTF-8 (naming the line), or a damaged ``.gz``.
    """
    try:
        with _open_text(path) as f:
            for lineno, line in enumerate(f, 1):
                text = line.strip()
                if text and not text.startswith(_COMMENTS):
                    yield lineno, text
    except UnicodeDecodeError:
        raise DatasetError(f"is not UTF-8 text ({_first_bad_byte(path)}).", path=path,
                           field="encoding",
                           fix="save it as UTF-8 (or ASCII) text of integer node ids.") from None
    except (OSError, EOFError) as exc:
        raise DatasetError(f"cannot be read ({exc}).", path=path,
                           fix="check the file (a .gz must be a complete gzip file).") from None


def _first_bad_byte(path: Path) -> str:
    """``"byte 0xff on line 3"``: where a file stops being UTF-8."""
    with (gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")) as f:
        for lineno, raw in enumerate(f, 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                return f"byte 0x{raw[exc.start]:02x} on line {lineno}"
    return "a byte sequence cut at the end"


def _split(text: str, delimiter: str | None) -> list[str]:
    return [t.strip() for t in text.split(delimiter)]


def _is_number(token: str, kind: type = float) -> bool:
    try:
        kind(token)
    except ValueError:
        return False
    return True


def _sniff(path: Path, delimiter: str | None) -> tuple[str | None, int]:
    """The delimiter (None = whitespace) and the line number of a header (0 if none).

    The delimiter defaults to ``,`` if the first data line has one, else a tab, else
    whitespace; that line is a header when no word of it is a number.
    """
    for lineno, text in _data_lines(path):
        if delimiter is None:
            delimiter = "," if "," in text else ("\t" if "\t" in text else None)
        has_header = not any(_is_number(w) for w in re.split(r"[\s,;]+", text))
        return delimiter, lineno if has_header else 0
    return delimiter, 0


def _edge_error(path: Path, delimiter: str | None, header: int, num_nodes: int | None) -> None:
    """Scan line by line and raise the first problem; return if there is none."""
    where = f"{path}:"
    for lineno, text in _data_lines(path):
        if lineno == header:
            continue
        tokens = _split(text, delimiter)
        loc = f"{where}{lineno}"
        if len(tokens) != 2:
            raise DatasetError(f"has {len(tokens)} columns {tokens!r}, expected 2.", path=loc,
                               field="src dst",
                               fix="write one edge per line as 'src dst' (or set delimiter).")
        for col, tok in zip(("src", "dst"), tokens, strict=True):
            if not _is_number(tok, int):
                raise DatasetError(f"{tok!r} is not an integer node id.", path=loc, field=col,
                                   fix="use integer ids 0..N-1 (map names to ids first).")
            if int(tok) < 0:
                raise DatasetError(f"node id {tok} is negative.", path=loc, field=col,
                                   fix="use ids 0..N-1.")
            if num_nodes is not None and int(tok) >= num_nodes:
                raise DatasetError(f"node id {tok} >= num_nodes {num_nodes}.", path=loc,
                                   field=col, fix=f"use ids 0..{num_nodes - 1} or raise "
                                                  "num_nodes (or give more feature rows).")


def _read_edges(path: Path, delimiter: str | None) -> tuple[np.ndarray, str | None, int]:
    delimiter, header = _sniff(path, delimiter)
    try:
        edges = np.loadtxt(path, dtype=np.int64, comments=_COMMENTS, delimiter=delimiter,
                           skiprows=header, ndmin=2)
    except ValueError:
        edges = None
    if edges is None or (edges.size and edges.shape[1] != 2):
        _edge_error(path, delimiter, header, None)
        raise DatasetError("cannot be parsed as an edge list.", path=path, field="src dst",
                           fix="write one 'src dst' pair of integers per line.")
    return edges.reshape(-1, 2), delimiter, header


def _read_table(path: Where, field: str, dtype: type) -> np.ndarray:
    """A ``.npy`` (memory-mapped) or a text table of numbers (one row per line)."""
    p = Path(path)
    if p.name.endswith(".npy"):
        return load_npy(p, True, DatasetError)
    if not p.is_file():
        raise DatasetError("file is missing.", path=p, field=field, fix="check the path.")
    delimiter, header = _sniff(p, None)
    try:
        return np.loadtxt(p, dtype=dtype, comments=_COMMENTS, delimiter=delimiter,
                          skiprows=header, ndmin=1)
    except ValueError as exc:
        raise DatasetError(f"cannot be parsed ({exc}).", path=p, field=field,
                           fix=f"write one row of {dtype.__name__} values per line, or give "
                               "a .npy file.") from None


def with_split_files(
    dataset: GraphDataset | TypedGraphDataset, files: Sequence[Where],
) -> GraphDataset | TypedGraphDataset:
    """``dataset`` with its train/val/test replaced by the node ids in three files.

    For a :class:`~gnnpar.datasets.typed.TypedGraphDataset` the ids are of its target
    type.

    Each file is a ``.npy`` (ids, or a boolean ``[N]`` mask) or text with one id per line;
    the new splits are checked as :meth:`GraphDataset.validate` checks splits (in range,
    no repeats, disjoint, labelled), and an error names the file it came from.

    Args:
        dataset: A validated dataset; every array but the splits is shared.
        files: ``(train, val, test)`` files.

    Returns:
        The new dataset.
    """
    if isinstance(files, str | os.PathLike) or len(files) != 3:
        raise DatasetError(f"expected three split files (train, val, test), got {files!r}.",
                           path=dataset.name, field="split",
                           fix="give TRAIN,VAL,TEST files of node ids.")
    paths = dict(zip(SPLITS, files, strict=True))
    n = (dataset.num_nodes[dataset.target] if isinstance(dataset, TypedGraphDataset)
         else dataset.num_nodes)
    train, val, test = (split_to_idx(_read_table(f, fld, np.int64), n, f, fld)
                        for fld, f in paths.items())
    try:
        return replace(dataset, train_idx=train, val_idx=val, test_idx=test).validate_splits()
    except DatasetError as exc:
        if exc.field not in paths:
            raise
        raise DatasetError(exc.message, path=paths[exc.field], field=exc.field,
                           fix=exc.fix) from None


def from_edge_list(
    path: Where,
    num_nodes: int | None = None,
    features: Where | None = None,
    labels: Where | None = None,
    splits: Mapping[str, Where] | None = None,
    delimiter: str | None = None,
    name: str | None = None,
) -> GraphDataset:
    """Read an edge list: one ``src dst`` pair of integer ids per line.

    Fields are separated by ``delimiter`` (default: ``,`` if the first line has one, else a
    tab, else whitespace); blank lines and lines starting with ``#`` or ``%`` are skipped,
    and a first line without any integer is taken as a header. ``.gz`` files are read
    compressed.

    Args:
        path: The edge file (``.csv``, ``.tsv``, ``.txt``, ``.edges``, optionally ``.gz``).
        num_nodes: Number of nodes; default: the feature rows, else the label rows, else the
            largest id + 1 (when features and labels disagree in rows, the one that covers
            every edge is taken, so the error names the other file).
        features: ``.npy`` or text file of ``[N, F]`` features, one row per node.
        labels: ``.npy`` or text file of ``N`` integer labels (-1 = unlabelled).
        splits: ``{"train": file, "val": file, "test": file}`` of node ids (``.npy`` or text).
        delimiter: Field separator.
        name: Dataset name; default: the file's stem.

    Returns:
        The directed graph as listed (use ``to_undirected()`` to symmetrise).
    """
    p = Path(path)
    if not p.is_file():
        raise DatasetError("edge file is missing.", path=p, field="path", fix="check the path.")
    edges, delimiter, header = _read_edges(p, delimiter)
    fields: dict[str, Any] = {}
    files: dict[str, Where] = {}
    for fld, f, dtype in (("x", features, np.float32), ("y", labels, np.float64)):
        if f is not None:
            fields[fld], files[fld] = _read_table(f, fld, dtype), f
    split_fields = {"train": "train_idx", "val": "val_idx", "valid": "val_idx",
                    "test": "test_idx"}
    for key, f in (splits or {}).items():
        if key not in split_fields:
            raise DatasetError(f"unknown split {key!r}.", path=f, field="splits",
                               fix="use the keys 'train', 'val' and 'test'.")
        fld = split_fields[key]
        fields[fld], files[fld] = _read_table(f, fld, np.int64), f
    if num_nodes is None:
        num_nodes = _infer_num_nodes(edges[:, 0], edges[:, 1], (None, fields.get("x")),
                                     (None, fields.get("y")), p, "pass num_nodes")
    if edges.size and (edges.min() < 0 or edges.max() >= num_nodes):
        _edge_error(p, delimiter, header, num_nodes)
    return build_dataset(num_nodes, edges[:, 0], edges[:, 1], fields, p,
                  name or p.name.split(".")[0], files)

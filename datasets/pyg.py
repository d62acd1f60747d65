"""Converters from in-memory graphs: PyG ``Data`` / ``HeteroData`` and DGL graphs.

:func:`from_pyg` and :func:`from_dgl` read node-classification graphs with the field names
and checks of the file loaders (:data:`~gnnpar.datasets.loaders.FIELD_NAMES`,
:func:`~gnnpar.datasets.loaders.build_dataset`); :func:`from_pyg_link` reads PyG's
``RandomLinkSplit`` output (training, validation and test ``Data``) as a link task;
:func:`from_pyg_typed` reads a typed ``HeteroData`` (which :func:`from_pyg` hands it).
Every converter returns a validated :class:`GraphDataset` (or
:class:`~gnnpar.datasets.typed.TypedGraphDataset`).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from gnnpar.datasets.graph import SPLITS, TRAIN_SPLIT_FIX, GraphDataset
from gnnpar.datasets.link_split import empty_pairs
from gnnpar.datasets.loaders import (
    FIELD_NAMES,
    Where,
    build_dataset,
    edge_features_to_float,
    features_to_float,
    labels_to_int,
    pick_field,
    split_to_idx,
    to_numpy,
)
from gnnpar.datasets.typed import TypedGraphDataset, edge_type_field
from gnnpar.errors import DatasetError
from gnnpar.typed import EdgeType

log = logging.getLogger("gnnpar.datasets")
_COALESCE_FIX = ("remove duplicate edges before splitting (data.coalesce(), or "
                 "torch_geometric.utils.coalesce), then run RandomLinkSplit again: a "
                 "duplicated edge can land in both the training graph and the held-out edges.")


def _edge_index(data: Any, name: str, fix: str) -> np.ndarray:
    """A PyG ``Data``'s ``edge_index`` as numpy ``[2, E]``, or a :class:`DatasetError`."""
    if getattr(data, "edge_index", None) is None:
        raise DatasetError("has no edge_index.", path=name, field="edge_index", fix=fix)
    edge_index: np.ndarray = to_numpy(data.edge_index)
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise DatasetError(f"has shape {edge_index.shape}, expected (2, E).", path=name,
                           field="edge_index", fix="give source and destination rows.")
    return edge_index


def _is_typed(data: Any) -> bool:
    from torch_geometric.data import HeteroData

    return isinstance(data, HeteroData)


def from_pyg(data: Any, name: str = "pyg") -> GraphDataset | TypedGraphDataset:
    """Convert a PyG ``Data`` (``x``, ``edge_index``, ``y``, masks or ``*_idx``).

    A ``HeteroData`` is handed to :func:`from_pyg_typed` (target: the one node type with
    ``y``) and gives a :class:`~gnnpar.datasets.typed.TypedGraphDataset`.

    Args:
        data: A ``torch_geometric.data.Data``; ``y`` may be ``[N]`` or ``[N, 1]`` with -1
            for unlabelled nodes; splits as boolean ``[N]`` masks ``train_mask`` /
            ``val_mask`` (or ``valid_mask``) / ``test_mask``, or id arrays ``train_idx`` /
            ``val_idx`` (or ``valid_idx``) / ``test_idx``. A ``Data`` with none of them
            gives empty splits and a logged warning (add a split with
            :meth:`GraphDataset.random_split`). A 2-D mask (PyG's multi-split masks, e.g.
            WikiCS ``[N, 20]``) is an error: select one column first.
        name: Dataset name, also named in errors and warnings.

    Returns:
        The dataset (its arrays may share memory with CPU tensors).

    Example::

        from torch_geometric.datasets import Planetoid
        ds = gnnpar.from_pyg(Planetoid("data", "Cora")[0], name="cora")
        gnnpar.partition_graph(ds, "parts/cora-2", gnnpar.PartitionConfig(num_parts=2))
    """
    if _is_typed(data):
        return from_pyg_typed(data, name=name)
    edge_index = _edge_index(data, name, "give a Data with edge_index [2, E].")
    fields = {k: to_numpy(data[k]) for k in data.keys()}
    if "edge_label_index" in fields or "pos_edge_label_index" in fields:
        log.warning("%s: the Data has link supervision (edge_label_index), which from_pyg "
                    "does not read; use from_pyg_link(train_data, val_data, test_data).", name)
    if all(pick_field(fields, fld)[0] is None for fld in SPLITS):
        names = ", ".join(n for fld in SPLITS for n in FIELD_NAMES[fld])
        log.warning("%s: %s has no train/val/test split (looked for %s); the dataset has "
                    "empty splits. Fix: %s", name, _short_repr(data), names, TRAIN_SPLIT_FIX)
    return build_dataset(int(data.num_nodes), edge_index[0], edge_index[1], fields, name, name)


def from_pyg_typed(data: Any, target: str | None = None,
                    name: str = "pyg") -> TypedGraphDataset:
    """Convert a PyG ``HeteroData`` into a typed dataset.

    Node types and relations keep ``data.node_types`` / ``data.edge_types`` order. Per
    node type: ``num_nodes``, and ``x`` (or ``feat``, as :data:`FIELD_NAMES`) when
    present; per relation: ``edge_index`` ``[2, E]``. On the target type: ``y`` (``[n]``
    or ``[n, 1]``, -1 = unlabelled) and the splits as :func:`from_pyg` reads them
    (``train_mask`` / ``val_mask`` (or ``valid_mask``) / ``test_mask``, or ``*_idx`` ids);
    other types' labels and masks are not read. Edge features are not read.

    Args:
        data: A ``torch_geometric.data.HeteroData``.
        target: The node type with labels and splits; default: the only type with ``y``.
        name: Dataset name, also named in errors.

    Returns:
        The validated dataset (its arrays may share memory with CPU tensors).

    Raises:
        DatasetError: No or several labelled types and no ``target``, an unknown target,
            or malformed arrays (naming the type or relation).

    Example::

        from torch_geometric.datasets import OGB_MAG
        ds = gnnpar.from_pyg_typed(OGB_MAG("data")[0], name="mag")  # target "paper"
    """
    node_types: list[str] = list(data.node_types)
    if target is None:
        labelled = [t for t in node_types if getattr(data[t], "y", None) is not None]
        if len(labelled) != 1:
            raise DatasetError(
                f"{'no node type has' if not labelled else 'node types ' + ', '.join(labelled)}"
                f"{'' if not labelled else ' have'} labels (y); the target type is ambiguous.",
                path=name, field="target",
                fix="pass target=<the node type with labels and splits>.")
        target = labelled[0]
    if target not in node_types:
        raise DatasetError(f"{target!r} is not a node type (types: {', '.join(node_types)}).",
                           path=name, field="target", fix="pass one of the node types.")
    num_nodes: dict[str, int] = {}
    x: dict[str, np.ndarray] = {}
    for t in node_types:
        store = data[t]
        if store.num_nodes is None:
            raise DatasetError("has no num_nodes (nor x).", path=name, field=f"num_nodes[{t}]",
                               fix=f"set data[{t!r}].num_nodes.")
        num_nodes[t] = int(store.num_nodes)
        key, feat = pick_field({k: to_numpy(store[k]) for k in store.keys()}, "x")
        if feat is not None:
            x[t] = features_to_float(feat, num_nodes[t], name, f"x[{t}]")
    edges: dict[EdgeType, tuple[np.ndarray, np.ndarray]] = {}
    for et in data.edge_types:
        s, r, d = (str(p) for p in et)
        try:
            ei = _edge_index(data[et], name, "give every relation an edge_index [2, E].")
        except DatasetError as exc:
            raise DatasetError(exc.message, path=name, field=edge_type_field((s, r, d)),
                               fix=exc.fix) from None
        if not np.issubdtype(ei.dtype, np.integer):
            raise DatasetError(f"has dtype {ei.dtype}, expected integer node ids.", path=name,
                               field=edge_type_field((s, r, d)), fix="store int64 node ids.")
        edges[s, r, d] = (ei[0].astype(np.int64, copy=False), ei[1].astype(np.int64, copy=False))
    store = data[target]
    fields = {k: to_numpy(store[k]) for k in store.keys()}
    n = num_nodes[target]
    yk, y = pick_field(fields, "y")
    splits: dict[str, Any] = {}
    for fld in SPLITS:
        key, value = pick_field(fields, fld)
        if value is not None:
            splits[fld] = split_to_idx(value, n, name, key or fld)
    if not splits:
        log.warning("%s: the target type %r has no train/val/test split; the dataset has "
                    "empty splits. Fix: %s", name, target, TRAIN_SPLIT_FIX)
    return TypedGraphDataset(
        num_nodes=num_nodes, edges=edges, x=x, target=target,
        y=None if y is None else labels_to_int(y, n, name, yk or "y"), name=name, **splits,
    ).validate(name)


def _pyg_pairs(value: Any, where: Where, field: str) -> np.ndarray:
    """A ``[2, M]`` integer index (tensor or array) -> int64 ``[M, 2]`` pairs."""
    a = np.asarray(to_numpy(value))
    if a.ndim != 2 or a.shape[0] != 2 or not np.issubdtype(a.dtype, np.integer):
        raise DatasetError(f"must be a [2, M] integer index, got {a.dtype} {a.shape}.",
                           path=where, field=field, fix="give source and destination rows.")
    return np.ascontiguousarray(a.T, dtype=np.int64)


def _pyg_supervision(
    data: Any, key: str, where: Where,
) -> tuple[np.ndarray, np.ndarray] | None:
    """``(positive pairs, negative pairs)`` of one RandomLinkSplit output, or ``None``.

    Reads ``{key}_index`` with ``{key}`` (0 = negative, anything else = positive; all
    positive without it), or ``pos_{key}_index`` / ``neg_{key}_index`` (``split_labels``).
    """
    pos_key, neg_key, index_key = f"pos_{key}_index", f"neg_{key}_index", f"{key}_index"
    if getattr(data, pos_key, None) is not None:
        neg = getattr(data, neg_key, None)
        return (_pyg_pairs(data[pos_key], where, pos_key),
                empty_pairs() if neg is None else _pyg_pairs(neg, where, neg_key))
    if getattr(data, index_key, None) is None:
        return None
    pairs = _pyg_pairs(data[index_key], where, index_key)
    label = getattr(data, key, None)
    if label is None:
        return pairs, empty_pairs()
    lab = np.asarray(to_numpy(label))
    if lab.shape != (len(pairs),):
        raise DatasetError(f"has shape {lab.shape}, expected ({len(pairs)},): one label per "
                           f"column of {index_key}.", path=where, field=key,
                           fix="give one label per supervision edge (1 = edge, 0 = negative).")
    positive = lab != 0
    return pairs[positive], pairs[~positive]


def from_pyg_link(
    train_data: Any,
    val_data: Any | None = None,
    test_data: Any | None = None,
    name: str = "pyg",
    key: str = "edge_label",
) -> GraphDataset:
    """Convert PyG link-prediction splits, e.g. the output of ``RandomLinkSplit``.

    The message-passing graph is ``train_data.edge_index``, with ``train_data``'s ``x``,
    ``edge_attr`` (as ``edge_attr``, row = edge), ``y`` and node splits read as
    :func:`from_pyg` reads them. Each split's supervision is its ``edge_label_index``
    ``[2, M]`` with ``edge_label`` (``0`` = negative, any other value = positive, as
    ``RandomLinkSplit`` labels them; all positive without labels), or its
    ``pos_edge_label_index`` / ``neg_edge_label_index`` (``split_labels=True``):

    - ``train_edges``: ``train_data``'s positives (its ``edge_index`` when it has no
      supervision edges); its negatives are dropped (a link trainer draws its own).
    - ``val_edges`` / ``test_edges``: ``val_data``'s / ``test_data``'s positives.
    - ``val_neg`` / ``test_neg``: their negatives, as ``neg_kind="shared"`` pairs (every
      positive is ranked against all of them, as for ogbl-collab).

    ``val_data.edge_index`` and ``test_data.edge_index`` are not read (``RandomLinkSplit``
    gives the training edges, and the training plus validation edges): validation and
    test positives must stay out of the message-passing graph, which a duplicate edge in
    the graph given to ``RandomLinkSplit`` breaks (the error then says so).

    Args:
        train_data: The training ``Data`` (its graph is the message-passing graph).
        val_data: The validation ``Data``, or ``None`` (no validation edges).
        test_data: The test ``Data``, or ``None`` (no test edges).
        name: Dataset name, also named in errors.
        key: The label attribute, as ``RandomLinkSplit(key=...)``.

    Returns:
        The validated dataset.

    Example::

        from torch_geometric.transforms import RandomLinkSplit
        split = RandomLinkSplit(num_val=0.05, num_test=0.1, is_undirected=True)
        ds = from_pyg_link(*split(data), name="cora-link")
    """
    edge_index = _edge_index(train_data, name, "give RandomLinkSplit's training Data (with "
                             "edge_index [2, E]).")
    num_nodes = int(train_data.num_nodes)
    link: dict[str, Any] = {"neg_kind": "shared"}
    for part, data, pos_field, neg_field in (
            ("train_data", train_data, "train_edges", None),
            ("val_data", val_data, "val_edges", "val_neg"),
            ("test_data", test_data, "test_edges", "test_neg")):
        if data is None:
            continue
        where = f"{name}: {part}"
        if int(data.num_nodes) != num_nodes:
            raise DatasetError(f"has {int(data.num_nodes)} nodes but train_data has "
                               f"{num_nodes}.", path=where, field="num_nodes",
                               fix="pass the three Data objects of one split of one graph.")
        sup = _pyg_supervision(data, key, where)
        if sup is None and neg_field is not None:
            raise DatasetError(f"has no {key}_index (nor pos_{key}_index).", path=where,
                               field=f"{key}_index",
                               fix="give RandomLinkSplit's output, or set key= to the label "
                                   "attribute's name.")
        if sup is None:
            link[pos_field] = np.ascontiguousarray(edge_index.T, dtype=np.int64)
            continue
        link[pos_field] = sup[0]
        if neg_field is not None:
            link[neg_field] = sup[1]
    attr = getattr(train_data, "edge_attr", None)
    if attr is not None:
        link["edge_attr"] = edge_features_to_float(to_numpy(attr), edge_index.shape[1], name,
                                                   "edge_attr")
    fields = {k: to_numpy(train_data[k]) for k in train_data.keys()}
    try:
        return build_dataset(num_nodes, edge_index[0], edge_index[1], fields, name, name, link=link)
    except DatasetError as exc:
        if exc.field != "val_edges" or "message-passing" not in exc.message:
            raise
        raise DatasetError(exc.message, path=exc.path, field=exc.field,
                           fix=_COALESCE_FIX) from None


def _short_repr(obj: Any, limit: int = 200) -> str:
    text = repr(obj)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def from_dgl(graph: Any, name: str = "dgl") -> GraphDataset:
    """Convert a homogeneous ``dgl.DGLGraph`` (``ndata``: feat/x, label/y, *_mask).

    Args:
        graph: The DGL graph.
        name: Dataset name.

    Raises:
        DatasetError: DGL is not installed, or the graph is typed.
    """
    try:
        import dgl  # noqa: F401
    except ImportError as exc:
        raise DatasetError("DGL is not importable here.", path=name, field="dgl",
                           fix="pip install 'gnnpar[dgl]' (DGL pins older torch releases), or "
                               "export the graph with from_pyg / a .npz instead.") from exc
    if len(graph.ntypes) != 1 or len(graph.etypes) != 1:
        raise DatasetError(f"is typed (node types {graph.ntypes}, edge types "
                           f"{graph.etypes}).", path=name, field="ntypes",
                           fix="convert it with dgl.to_homogeneous first.")
    src, dst = graph.edges()
    fields = {k: to_numpy(v) for k, v in graph.ndata.items()}
    return build_dataset(int(graph.num_nodes()), to_numpy(src), to_numpy(dst), fields, name, name)

"""Link-prediction supervision of a :class:`~gnnpar.datasets.graph.GraphDataset`.

A link task is the message-passing graph (the dataset's ``src``/``dst``) plus supervision
edges per split, in OGB's ``get_edge_split()`` terms:

- ``train_edges``, ``val_edges``, ``test_edges``: int64 ``[M, 2]`` (source, destination)
  pairs whose existence is predicted.  Training supervision edges may be message-passing
  edges (ogbl-citation2's are the graph itself; a loader hides each batch's targets, and
  their reverses, from its message passing).  Validation and test edges must *not* be
  message-passing edges: leaving them in the graph leaks the answer, so
  :func:`check_link_fields` refuses such a dataset.
- ``val_neg``, ``test_neg``: the fixed negatives evaluation ranks positives against,
  as ``neg_kind`` says: ``"per_edge"`` -- int64 ``[M, C]`` candidate destinations for
  each positive, the same row (ogbl-citation2's ``target_node_neg``; metric MRR and
  Hits@K) -- or ``"shared"`` -- int64 ``[M', 2]`` negative pairs every positive is
  compared with (ogbl-collab's ``edge_neg``; metric Hits@K).

:func:`random_link_split` makes a link task out of any graph: a seeded random share of its
edges becomes validation and test supervision and leaves the graph (with its reverse),
the rest stays for message passing and is the training supervision, and every
validation/test positive gets ``num_neg`` random candidate destinations.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import numpy as np

from gnnpar.artifacts.arrays import copy_rows
from gnnpar.datasets.splits import check_split_fractions, split_sizes
from gnnpar.errors import DatasetError

if TYPE_CHECKING:
    from gnnpar.datasets.graph import GraphDataset

log = logging.getLogger("gnnpar.datasets")

EDGE_SPLITS = ("train_edges", "val_edges", "test_edges")
NEG_SPLITS = ("val_neg", "test_neg")
NEG_KINDS = ("per_edge", "shared")
LINK_FIX = ("pass --split 0.85,0.05,0.1 with --task link (a seeded random split of the "
            "edges: GraphDataset.random_link_split), or a dataset with supervision edges "
            "(an ogbl-* dataset, or from_pyg of RandomLinkSplit's data).")
_CHUNK = 1 << 22


def empty_pairs(width: int = 2) -> np.ndarray:
    """An empty int64 ``[0, width]`` array (a split without edges)."""
    return np.zeros((0, width), dtype=np.int64)


def pair_keys(pairs: np.ndarray, num_nodes: int) -> np.ndarray:
    """int64 ``src * N + dst`` of ``[M, 2]`` pairs."""
    p = np.asarray(pairs, dtype=np.int64)
    return p[:, 0] * num_nodes + p[:, 1]


def check_link_fields(ds: GraphDataset, where: str | os.PathLike[str] | None) -> None:
    """Check the supervision edges, negatives and edge features of ``ds``.

    Raises:
        DatasetError: Naming the field and the fix: a bad shape or dtype, an id outside
            ``[0, N)``, negatives that do not match their positives, a non-finite edge
            feature, or a validation/test edge that is also a message-passing edge.
    """
    n = ds.num_nodes
    loc = where if where is not None else ds.name

    def fail(fld: str, msg: str, fix: str) -> DatasetError:
        return DatasetError(msg, path=loc, field=fld, fix=fix)

    if ds.edge_attr is not None:
        a = ds.edge_attr
        if a.ndim != 2 or a.shape[0] != ds.num_edges:
            raise fail("edge_attr", f"has shape {tuple(a.shape)}, expected "
                       f"({ds.num_edges}, D).", "give one feature row per edge.")
        if not np.issubdtype(a.dtype, np.floating):
            raise fail("edge_attr", f"has dtype {a.dtype}, expected a float type.",
                       "convert edge features to float32.")
        for start in range(0, len(a), _CHUNK // max(1, a.shape[1])):
            block = copy_rows(a, start, start + _CHUNK // max(1, a.shape[1]))
            if not np.isfinite(block).all():
                row = start + int(np.argwhere(~np.isfinite(block))[0, 0])
                raise fail("edge_attr", f"row {row} holds NaN or inf.",
                           "impute or drop non-finite edge feature values.")
    if ds.neg_kind not in NEG_KINDS:
        raise fail("neg_kind", f"is {ds.neg_kind!r}.", f"use one of {', '.join(NEG_KINDS)}.")
    arrays = {f: getattr(ds, f) for f in (*EDGE_SPLITS, *NEG_SPLITS)}
    for fld, a in arrays.items():
        width_ok = a.ndim == 2 and (a.shape[1] == 2 or (fld in NEG_SPLITS and
                                                        ds.neg_kind == "per_edge"))
        if not np.issubdtype(a.dtype, np.integer) or not width_ok:
            want = "[M, C]" if fld in NEG_SPLITS and ds.neg_kind == "per_edge" else "[M, 2]"
            raise fail(fld, f"must be a {want} integer array, got {a.dtype} {a.shape}.",
                       f"pass int64 node ids of shape {want}.")
        if a.size and (int(a.min()) < 0 or int(a.max()) >= n):
            raise fail(fld, f"holds node ids outside [0, {n}).", f"use ids 0..{n - 1}.")
    for split in ("val", "test"):
        if len(arrays[f"{split}_edges"]) and not len(arrays[f"{split}_neg"]):
            raise fail(f"{split}_neg", f"is empty, but there are {split} edges to rank "
                       "against negatives.", f"give {split}_neg (GraphDataset."
                       "random_link_split draws them).")
    if ds.neg_kind == "per_edge":
        for split in ("val", "test"):
            pos, neg = arrays[f"{split}_edges"], arrays[f"{split}_neg"]
            if len(neg) and (len(neg) != len(pos) or neg.shape[1] < 1):
                raise fail(f"{split}_neg", f"has {len(neg)} rows of {neg.shape[1]} "
                           f"candidates for {len(pos)} {split} edges.",
                           "give C >= 1 candidate destinations per positive, one row each "
                           "(or neg_kind='shared' for negative pairs).")
    val, test = arrays["val_edges"], arrays["test_edges"]
    if len(val) and len(val) == len(test) and np.array_equal(
            np.sort(pair_keys(val, n)), np.sort(pair_keys(test, n))):
        log.warning("%s: the validation and test supervision edges are the same %d edges, "
                    "so validation figures are test figures (model selection on them "
                    "leaks the test set); give disjoint val_edges and test_edges.", loc,
                    len(val))
    held = [arrays[f] for f in ("val_edges", "test_edges") if len(arrays[f])]
    if held and ds.num_edges:
        keys = np.sort(np.concatenate([pair_keys(p, n) for p in held]))
        for start in range(0, ds.num_edges, _CHUNK):
            src = copy_rows(ds.src, start, start + _CHUNK).astype(np.int64)
            key = src * n + copy_rows(ds.dst, start, start + _CHUNK)
            pos = np.searchsorted(keys, key).clip(max=len(keys) - 1)
            hit = np.flatnonzero(keys[pos] == key)
            if len(hit):
                i = start + int(hit[0])
                raise fail("val_edges", f"edge {int(ds.src[i])} -> {int(ds.dst[i])} (edge "
                           f"{i}) is a validation/test supervision edge and also a "
                           "message-passing edge, which leaks the answer.",
                           "remove validation and test edges from src/dst "
                           "(GraphDataset.random_link_split does).")


def random_link_split(ds: GraphDataset, fractions: tuple[float, float, float], seed: int = 0,
                      num_neg: int = 100) -> GraphDataset:
    """A copy of ``ds`` with a seeded random link split of its edges (module docstring).

    Edges are taken as undirected pairs ``{u, v}`` (self-loops stay in the graph and out
    of the supervision).  The pairs are shuffled by ``np.random.default_rng(seed)``; the
    sizes follow :func:`~gnnpar.datasets.splits.split_sizes` of the train, val and test
    fractions (test is what remains when they sum to 1).  Validation and test pairs leave
    the graph in both directions; the message-passing graph keeps the training pairs (as
    stored: both directions where the input had both); the training supervision is the
    training pairs once, as ``(min, max)``.  Each validation/test positive gets
    ``num_neg`` destinations drawn uniformly from all nodes (``neg_kind="per_edge"``, as
    ogbl-citation2's candidates).

    Args:
        ds: The graph (its node splits are kept).
        fractions: ``(train, val, test)`` shares of the undirected pairs.
        seed: Seed of the shuffle and of the negatives.
        num_neg: Candidate destinations per validation/test positive, ``>= 1``.

    Returns:
        The new dataset (``edge_attr`` follows the kept edges).
    """
    from dataclasses import replace

    from gnnpar.datasets.graph import unique_sorted  # graph imports this module

    f = check_split_fractions(fractions, ds.name)
    if isinstance(num_neg, bool) or not isinstance(num_neg, int) or num_neg < 1:
        raise DatasetError(f"num_neg is {num_neg!r}.", path=ds.name, field="num_neg",
                           fix="pass num_neg >= 1 candidates per positive.")
    n = ds.num_nodes
    src, dst = np.asarray(ds.src, dtype=np.int64), np.asarray(ds.dst, dtype=np.int64)
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    pair = unique_sorted((lo * n + hi)[lo != hi])
    if len(pair) == 0:
        raise DatasetError("the graph has no edge between two distinct nodes to split.",
                           path=ds.name, field="src", fix="give a graph with edges.")
    n_train, n_val, n_test = split_sizes(f, len(pair))
    rng = np.random.default_rng(seed)
    shuffled = pair[rng.permutation(len(pair))]
    train = np.sort(shuffled[:n_train])
    val, test = shuffled[n_train:n_train + n_val], shuffled[n_train + n_val:
                                                        n_train + n_val + n_test]
    held = np.sort(np.concatenate([val, test]))
    key = lo * n + hi
    at = np.searchsorted(held, key).clip(max=max(len(held) - 1, 0))
    keep = np.ones(len(key), dtype=bool) if len(held) == 0 else held[at] != key

    def as_pairs(keys: np.ndarray) -> np.ndarray:
        return np.stack([keys // n, keys % n], 1).astype(np.int64)

    return replace(
        ds, src=src[keep], dst=dst[keep],
        edge_attr=None if ds.edge_attr is None else np.asarray(ds.edge_attr)[keep],
        train_edges=as_pairs(train), val_edges=as_pairs(val), test_edges=as_pairs(test),
        val_neg=rng.integers(0, n, size=(len(val), num_neg), dtype=np.int64),
        test_neg=rng.integers(0, n, size=(len(test), num_neg), dtype=np.int64),
        neg_kind="per_edge")

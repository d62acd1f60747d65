"""OGB node- and link-property datasets through the real ``ogb`` package, cached as ``.npy``.

``load_ogb`` takes the meta information from ``ogb``'s own ``nodeproppred/master.csv`` or
``linkproppred/master.csv`` (or from a ``meta_dict``), reads the raw files with ``ogb``'s
own readers (``read_csv_graph_raw`` / ``read_binary_graph_raw``) and the split files as
``NodePropPredDataset.get_idx_split`` / ``LinkPropPredDataset.get_edge_split`` do, then
keeps gnnpar's own cache next to them::

    ROOT/ogbn_arxiv/          (or meta_dict["dir_path"])
      raw/ split/<split>/     as downloaded from OGB
      gnnpar-v1/              GraphDataset.save directory, memory-mapped on later loads

A typed node dataset (OGB's "heterogeneous": ``"is hetero": "True"``, e.g. ogbn-mag) is
read the same way, with ``ogb``'s typed readers (``read_csv_heterograph_raw`` /
``read_binary_heterograph_raw``, ``read_node_label_hetero``,
``read_nodesplitidx_split_hetero``), into a
:class:`~gnnpar.datasets.typed.TypedGraphDataset` cached in the same place.

It never goes through ``NodePropPredDataset.pre_process`` (or the link one): ``ogb`` 1.3.6
caches with ``torch.save`` and then fails to reload that pickle under torch >= 2.6's
``weights_only`` default (the second load of a dataset), and it needs a ``processed/``
folder. Nothing here loads pickle, with one guarded exception: OGB ships link splits only
as ``torch.save`` files (``split/<split>/train.pt``, ``valid.pt``, ``test.pt``, or
``split_dict.pt``), read with ``torch.load(weights_only=True)``, whose unpickler builds
only tensors and containers and refuses every other global (so no code in the file runs);
numeric numpy arrays, which some OGB split files hold, are allowed through a short
allowlist (:func:`_torch_split_file`).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import importlib.util
import logging
import os
import shutil
import sys
import tempfile
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from gnnpar.artifacts.documents import read_json
from gnnpar.artifacts.files import sha256_file
from gnnpar.artifacts.lock import fill_cache
from gnnpar.datasets.graph import GraphDataset
from gnnpar.datasets.link_split import EDGE_SPLITS, NEG_SPLITS
from gnnpar.datasets.loaders import (
    edge_features_to_float,
    features_to_float,
    labels_to_int,
    split_to_idx,
)
from gnnpar.datasets.typed import TypedGraphDataset
from gnnpar.errors import DatasetError
from gnnpar.typed import EdgeType

CACHE_DIR = "gnnpar-v1"
# ogb's split file names -> GraphDataset fields.
_SPLIT_FILES = {"train": "train_idx", "valid": "val_idx", "test": "test_idx"}
_REQUIRED_META = ("split", "add_inverse_edge", "binary", "is hetero")
_MASTERS = ("nodeproppred", "linkproppred")
# ogb's link split files (and the parts of split_dict.pt) -> GraphDataset fields.
_LINK_SPLITS = {"train": ("train_edges", None), "valid": ("val_edges", "val_neg"),
                "test": ("test_edges", "test_neg")}
_LINK_TASK_TYPES = ("link prediction", "KG completion")
log = logging.getLogger("gnnpar.datasets")


def _master(kind: str = "nodeproppred") -> dict[str, dict[str, str]]:
    """``ogb/<kind>/master.csv`` as ``{dataset: {key: value}}`` (strings).

    Located without importing ``ogb.nodeproppred`` / ``ogb.linkproppred`` (which import
    torch_geometric).
    """
    spec = importlib.util.find_spec("ogb")
    if spec is None or not spec.submodule_search_locations:
        raise DatasetError("the ogb package is not installed.", field="ogb",
                           fix="pip install 'ogb>=1.3.6'.")
    path = Path(spec.submodule_search_locations[0]) / kind / "master.csv"
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    names = rows[0][1:]
    return {n: {row[0]: row[i + 1] for row in rows[1:]} for i, n in enumerate(names)}


def _meta_info(
    name: str, root: Path, meta_dict: dict[str, Any] | str | os.PathLike[str] | None,
) -> tuple[dict[str, str], Path, Path | str]:
    """``(meta info as strings, dataset directory, where the meta came from)``."""
    if meta_dict is None:
        masters = {kind: _master(kind) for kind in _MASTERS}
        for kind, master in masters.items():
            if name in master:
                return master[name], root / name.replace("-", "_"), f"ogb/{kind}/master.csv"
        known = [n for master in masters.values() for n in master]
        raise DatasetError(f"{name!r} is not an OGB node- or link-property dataset.",
                           field="name", fix=f"use one of {', '.join(known)}, or pass "
                           "meta_dict for a dataset in OGB's layout.")
    source: Path | str = "meta_dict"
    base = Path.cwd()
    if not isinstance(meta_dict, dict):
        source = Path(meta_dict)
        base = source.parent
        meta_dict = read_json(source, DatasetError)
        if not isinstance(meta_dict, dict):
            raise DatasetError("must hold a JSON object.", path=source,
                               fix="write the meta_dict as a JSON object.")
    meta = {k: str(v) for k, v in meta_dict.items()}
    for key in ("dir_path", *_REQUIRED_META):
        if key not in meta:
            raise DatasetError("key is missing.", path=source, field=key,
                               fix=f"add {key!r} as in ogb's nodeproppred/master.csv "
                                   "(or linkproppred/master.csv).")
    # A file's dataset folder stays inside the file's folder (its content may come from
    # anyone); a dict is the calling program's own.  download_name is always one name.
    if isinstance(source, Path) and not _is_inside(base, meta["dir_path"]):
        raise DatasetError(f"{meta['dir_path']!r} is not inside the folder of the meta_dict "
                           f"file ({base}).", path=source, field="dir_path",
                           fix="give the dataset folder relative to that folder, e.g. "
                           "'ogbn_mine' (or '.' for the folder itself).")
    download = meta.get("download_name")
    if download is not None and (Path(download).name != download
                                 or download in ("", ".", "..")):
        raise DatasetError(f"{download!r} must be one folder name.", path=source,
                           field="download_name", fix="give the archive's top folder name.")
    return meta, base / meta["dir_path"], source


def _is_inside(base: Path, value: str) -> bool:
    """Whether ``base / value`` (symbolic links resolved) is ``base`` or below it."""
    if not value or "\0" in value:
        return False
    root, target = base.resolve(), (base / value).resolve()
    return target == root or root in target.parents


def _has_raw(raw: Path, binary: bool, typed: bool = False) -> bool:
    """Whether ``raw`` holds the file ``NodePropPredDataset.pre_process`` looks for."""
    if typed:
        return (raw / ("edge_index_dict.npz" if binary else "triplet-type-list.csv.gz")).is_file()
    return (raw / ("data.npz" if binary else "edge.csv.gz")).is_file()


def _download(meta: dict[str, str], dataset_dir: Path, name: str) -> None:
    """Fetch ``meta["url"]`` with ogb's helper, check it, unpack it as ``dataset_dir``.

    The archive goes into a new temporary folder beside ``dataset_dir`` and is checked
    (every member's CRC, and ``meta["sha256"]`` when given) before anything is unpacked;
    ``dataset_dir`` must not exist yet (or be empty): a directory the download did not
    create is never removed.
    """
    from ogb.utils.url import download_url

    url = meta.get("url", "")
    fix = (f"on a machine with internet run `python -m gnnpar.datasets {name} --root ROOT`, "
           f"then copy ROOT/{dataset_dir.name} to {dataset_dir}"
           + (f"; or download {url}, unzip it and rename its folder "
              f"'{meta.get('download_name', '')}' to {dataset_dir}." if url else "."))
    if not url:
        raise DatasetError(f"no raw files (looked for {dataset_dir / 'raw'}) and no 'url' "
                           "to download them from.", path=dataset_dir, field="raw", fix=fix)
    if dataset_dir.exists() and (not dataset_dir.is_dir() or any(dataset_dir.iterdir())):
        raise DatasetError("exists but holds no OGB raw files, and a download would have to "
                           "replace it.", path=dataset_dir, field="raw",
                           fix=f"move it away (or put the dataset's raw/ and split/ in it); "
                           f"{fix}")
    parent = dataset_dir.parent
    parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{dataset_dir.name}.download-", dir=parent))
    try:
        try:
            with contextlib.redirect_stdout(sys.stderr):
                archive = Path(download_url(url, str(work)))
            _check_archive(archive, meta.get("sha256"))
            with zipfile.ZipFile(archive) as z:
                z.extractall(work / "unpacked")  # zipfile drops absolute and '..' names
        except (OSError, RuntimeError, ValueError, zipfile.BadZipFile) as exc:
            raise DatasetError(f"raw files are not there (looked for {dataset_dir / 'raw'}) "
                               f"and downloading {url} failed ({exc}).", path=dataset_dir,
                               field="raw", fix=fix) from exc
        unpacked = work / "unpacked" / meta.get("download_name", dataset_dir.name)
        if not unpacked.is_dir():
            raise DatasetError(f"the archive from {url} holds no folder "
                               f"{unpacked.name!r}.", path=dataset_dir, field="download_name",
                               fix=f"set download_name to the archive's folder; {fix}")
        if dataset_dir.is_dir():
            dataset_dir.rmdir()  # empty, checked above
        os.rename(unpacked, dataset_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _check_archive(archive: Path, sha256: str | None) -> None:
    """Raise ``ValueError`` for a damaged zip, or one whose SHA-256 is not ``sha256``."""
    if sha256 and sha256_file(archive) != sha256.lower():
        raise ValueError(f"{archive.name}'s SHA-256 differs from the meta_dict's sha256")
    with zipfile.ZipFile(archive) as z:
        bad = z.testzip()
    if bad is not None:
        raise ValueError(f"{archive.name} is damaged (CRC of {bad})")


def _read_split(split_dir: Path) -> dict[str, np.ndarray]:
    """``train/valid/test.csv.gz`` of ``split_dir``, read as ``get_idx_split`` does."""
    import pandas as pd

    out = {}
    for fname, fld in _SPLIT_FILES.items():
        f = split_dir / f"{fname}.csv.gz"
        if not f.is_file():
            raise DatasetError("split file is missing.", path=f, field=fld,
                               fix="re-download the dataset (split_dict.pt files are pickle "
                                   "and are not read).")
        try:
            table = pd.read_csv(f, compression="gzip", header=None)
        except pd.errors.EmptyDataError:
            raise DatasetError("split file is empty; it holds one node id per line.",
                               path=f, field=fld, fix="re-download the dataset, or write "
                               "the split's node ids into it.") from None
        except (OSError, ValueError, EOFError) as exc:
            raise DatasetError(f"cannot be read as a gzip-compressed CSV of node ids "
                               f"({type(exc).__name__}: {str(exc)[:120]}).", path=f,
                               field=fld, fix="re-download the dataset.") from None
        out[fld] = table.values.T[0]
    return out


@contextlib.contextmanager
def _raw_errors(raw: Path) -> Iterator[None]:
    """Turn a failure reading OGB's raw files into one :class:`DatasetError`."""
    try:
        yield
    except (OSError, RuntimeError, ValueError, KeyError) as exc:
        raise DatasetError(f"cannot read OGB raw files ({type(exc).__name__}: {exc}).",
                           path=raw, field="raw",
                           fix="re-download the dataset or fix the files named above.") from exc


def _read_graph(meta: dict[str, str], raw: Path) -> dict[str, Any]:
    """OGB's raw graph through its own readers (inverse edges added as ``meta`` says)."""
    from ogb.io.read_graph_raw import read_binary_graph_raw, read_csv_graph_raw

    reader = read_binary_graph_raw if meta["binary"] == "True" else read_csv_graph_raw
    with _raw_errors(raw), contextlib.redirect_stdout(sys.stderr):  # ogb prints progress
        graph: dict[str, Any] = reader(str(raw), add_inverse_edge=(
            meta["add_inverse_edge"] == "True"))[0]
    return graph


def _read_raw(
    meta: dict[str, str], dataset_dir: Path, name: str,
) -> GraphDataset:
    import pandas as pd

    raw = dataset_dir / "raw"
    graph = _read_graph(meta, raw)
    with _raw_errors(raw):
        if meta["binary"] == "True":
            with np.load(raw / "node-label.npz", allow_pickle=False) as npz:
                labels = npz["node_label"]
        else:
            labels = pd.read_csv(raw / "node-label.csv.gz", compression="gzip",
                                 header=None).values
    n = int(graph["num_nodes"])
    splits = _read_split(dataset_dir / "split" / meta["split"])
    x = graph["node_feat"]
    num_classes = meta.get("num classes")
    idx: dict[str, Any] = {fld: split_to_idx(ids, n, dataset_dir / "split", fld)
                           for fld, ids in splits.items()}
    return GraphDataset(
        num_nodes=n,
        src=np.asarray(graph["edge_index"][0], dtype=np.int64),
        dst=np.asarray(graph["edge_index"][1], dtype=np.int64),
        x=None if x is None else features_to_float(x, n, raw, "node_feat"),
        y=labels_to_int(labels, n, raw, "node_label"),
        name=name,
        num_classes=int(num_classes) if num_classes and num_classes.isdigit() else None,
        **idx,
    ).validate(dataset_dir)


def _read_typed_raw(meta: dict[str, str], dataset_dir: Path, name: str) -> TypedGraphDataset:
    """A typed node dataset through ogb's typed readers, as ``pre_process`` reads it.

    Node types and relations come in ogb's (sorted) order; the target is the one node
    type with labels (``raw/node-label/<type>/``); its split is
    ``split/<split>/<type>/{train,valid,test}.csv.gz``, read as ``get_idx_split`` reads
    it (``split_dict.pt`` files are pickle and are not read). Edge features and the
    meta's ``additional node files`` / ``additional edge files`` (ogbn-mag's
    ``node_year``, ``edge_reltype``) are not read.
    """
    from ogb.io.read_graph_raw import (
        read_binary_heterograph_raw,
        read_csv_heterograph_raw,
        read_node_label_hetero,
        read_nodesplitidx_split_hetero,
    )

    raw = dataset_dir / "raw"
    binary = meta["binary"] == "True"
    with _raw_errors(raw), contextlib.redirect_stdout(sys.stderr):  # ogb prints progress
        # add_inverse_edge: the reverse relations (load_ogb's add_reverse), not ogb's
        # copies inside each relation (wrong endpoint types where they differ).
        if binary:
            graph = read_binary_heterograph_raw(str(raw), add_inverse_edge=False)[0]
            feats = graph.get("node_feat") or {}
            with np.load(raw / "node-label.npz", allow_pickle=False) as npz:
                labels = {t: npz[t] for t in npz.files}
        else:
            graph = read_csv_heterograph_raw(str(raw), add_inverse_edge=False)[0]
            feats = graph.get("node_feat_dict") or {}
            labels = read_node_label_hetero(str(raw))
    num_nodes = {str(t): int(n) for t, n in graph["num_nodes_dict"].items()}
    if len(labels) != 1:
        raise DatasetError(f"node types {', '.join(labels)} have labels; gnnpar trains one "
                           "target type.", path=raw, field="node-label",
                           fix="keep the labels of one node type (nodetype-has-label.csv.gz).")
    target = str(next(iter(labels)))
    split_dir = dataset_dir / "split" / meta["split"]
    if not (split_dir / "nodetype-has-split.csv.gz").is_file():
        raise DatasetError("split file is missing.", path=split_dir / "nodetype-has-split.csv.gz",
                           field="split", fix="re-download the dataset (split_dict.pt files "
                           "are pickle and are not read).")
    with _raw_errors(split_dir):
        parts = read_nodesplitidx_split_hetero(str(split_dir))
    if target not in parts[0]:
        raise DatasetError(f"holds no split of the labelled type {target!r}.", path=split_dir,
                           field="split", fix="re-download the dataset.")
    n = num_nodes[target]
    edges: dict[EdgeType, tuple[np.ndarray, np.ndarray]] = {}
    for (s, r, d), ei in graph["edge_index_dict"].items():
        edge_index = np.asarray(ei, dtype=np.int64)
        edges[str(s), str(r), str(d)] = (edge_index[0], edge_index[1])
    num_classes = meta.get("num classes")
    idx: dict[str, Any] = {fld: split_to_idx(part[target], n, split_dir / target, fld)
                           for fld, part in zip(_SPLIT_FILES.values(), parts, strict=True)}
    return TypedGraphDataset(
        num_nodes=num_nodes, edges=edges,
        x={t: features_to_float(f, num_nodes[t], raw / "node-feat" / t, "node_feat")
           for t, f in feats.items()},
        target=target, y=labels_to_int(labels[target], n, raw / "node-label" / target,
                                       "node_label"),
        name=name,
        num_classes=int(num_classes) if num_classes and num_classes.isdigit() else None,
        **idx,
    ).validate(dataset_dir)


def _is_link(name: str, meta: dict[str, str], split_dir: Path) -> bool:
    """Whether the dataset is in OGB's link layout.

    That is: an ``ogbl-*`` name, a link ``task type``, or (neither said) ``.pt`` split files
    without the node layout's CSVs.
    """
    if name.startswith("ogbl-") or meta.get("task type") in _LINK_TASK_TYPES:
        return True
    if name.startswith("ogbn-") or "task type" in meta:
        return False
    return not (split_dir / "train.csv.gz").is_file() and any(
        (split_dir / f).is_file() for f in ("train.pt", "split_dict.pt"))


def _numpy_globals() -> list[Any]:
    """What a weights-only ``torch.load`` needs to rebuild *numeric* numpy arrays.

    numpy's array reconstructors (under numpy 1's and numpy 2's module names), ``ndarray``,
    ``dtype`` and the classes of the bool, integer and float dtypes: an object (or string)
    array is still refused, so nothing beyond numbers can come out of the file.
    """
    reconstruct = np.zeros(1).__reduce__()[0]  # numpy's _reconstruct (protocols 2-4)
    frombuffer = np.zeros(1).__reduce_ex__(5)[0]  # its _frombuffer (protocol 5)
    names: list[Any] = [np.ndarray, np.dtype]
    for core in ("numpy.core", "numpy._core"):
        names += [(reconstruct, f"{core}.multiarray._reconstruct"),
                  (frombuffer, f"{core}.numeric._frombuffer")]
    names += sorted({type(np.dtype(c)) for c in "?bBhHiIlLqQefd"}, key=str)
    return names


def _torch_split_file(path: Path) -> dict[str, Any]:
    """Read one OGB link split file (``torch.save`` of a dict) without running its code.

    ``torch.load(weights_only=True)`` rebuilds tensors, numbers, strings and containers only;
    any other global in the pickle (a class, ``os.system``) is refused before it is called.
    Numeric numpy arrays are allowed as well (:func:`_numpy_globals`).
    """
    import torch

    fix = "re-download the dataset; gnnpar reads only tensors and numeric arrays from it."
    if not path.is_file():
        raise DatasetError("split file is missing.", path=path, field="split", fix=fix)
    safe = getattr(torch.serialization, "safe_globals", None)  # torch >= 2.5
    try:
        with warnings.catch_warnings():  # torch warns of pickle protocols on its way out
            warnings.simplefilter("ignore")
            if safe is None:  # torch 2.4: for good, and without the (global, name) aliases
                torch.serialization.add_safe_globals(
                    [g for g in _numpy_globals() if not isinstance(g, tuple)])
                obj = torch.load(path, map_location="cpu", weights_only=True)
            else:
                with safe(_numpy_globals()):
                    obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # the unpickler and torch's readers raise many types
        raise DatasetError(f"cannot be read as a weights-only torch file "
                           f"({type(exc).__name__}: {_unpickler_reason(exc)}).", path=path,
                           field="split", fix=fix) from None
    if not isinstance(obj, dict):
        raise DatasetError(f"holds a {type(obj).__name__}, expected a dict of arrays.",
                           path=path, field="split", fix=fix)
    return obj


def _unpickler_reason(exc: Exception) -> str:
    """What torch's weights-only loader refused, without its advice to load unsafely.

    torch's message explains the ``weights_only`` default, suggests re-running with
    ``weights_only=False`` ("will likely succeed") and points to its documentation; only
    the paragraph that names the refused content is kept.
    """
    text = str(exc).partition("WeightsUnpickler error:")
    paragraphs = [" ".join(p.split()) for p in (text[2] or text[0]).split("\n\n")]
    kept = [p for p in paragraphs if p and "weights_only" not in p.lower()
            and "documentation" not in p.lower()]
    return kept[0] if kept else "it holds objects other than tensors and numbers"


def _split_array(d: dict[str, Any], key: str, path: Path, ndim: int) -> np.ndarray:
    """``d[key]`` (a tensor or numpy array) as int64 with ``ndim`` dimensions."""
    v = d[key]
    a = v.numpy() if hasattr(v, "numpy") and not isinstance(v, np.ndarray) else v
    ok = (isinstance(a, np.ndarray) and np.issubdtype(a.dtype, np.integer) and a.ndim == ndim
          and (key not in ("edge", "edge_neg") or a.shape[1] == 2))
    if not ok:
        what = (f"a {a.dtype} array of shape {a.shape}" if isinstance(a, np.ndarray)
                else f"a {type(v).__name__}")
        want = {"edge": "[M, 2]", "edge_neg": "[M', 2]",
                "target_node_neg": "[M, C]"}.get(key, "[M]")
        raise DatasetError(f"is {what}, expected integer node ids {want}.", path=path,
                           field=key, fix="re-download the dataset.")
    ids: np.ndarray = np.asarray(a, dtype=np.int64)
    return ids


def _link_supervision(
    d: dict[str, Any], path: Path,
) -> tuple[np.ndarray, np.ndarray | None, str | None]:
    """``(positives [M, 2], negatives or None, neg_kind or None)`` of one split's dict.

    Positives are ``source_node``/``target_node`` (ogbl-citation2) or ``edge``
    (ogbl-collab, -ppa, -ddi); negatives ``target_node_neg`` ``[M, C]`` (``"per_edge"``)
    or ``edge_neg`` ``[M', 2]`` (``"shared"``).
    """
    keys = ", ".join(map(repr, d))
    if "head" in d or "relation" in d:
        raise DatasetError(f"holds a knowledge-graph split ({keys}); gnnpar's link task has "
                           "no relation types.", path=path, field="relation",
                           fix="use a link-prediction dataset (ogbl-citation2, -collab, -ppa, "
                               "-ddi), or drop the relations and build it with from_npz.")
    if "source_node" in d or "target_node" in d:
        for key in ("source_node", "target_node"):
            if key not in d:
                raise DatasetError(f"key is missing (the file holds {keys}).", path=path,
                                   field=key, fix="re-download the dataset.")
        src, dst = (_split_array(d, k, path, 1) for k in ("source_node", "target_node"))
        if len(src) != len(dst):
            raise DatasetError(f"has {len(dst)} entries but source_node has {len(src)}.",
                               path=path, field="target_node", fix="re-download the dataset.")
        pos = np.stack([src, dst], axis=1)
    elif "edge" in d:
        pos = _split_array(d, "edge", path, 2)
    else:
        raise DatasetError(f"holds neither 'source_node'/'target_node' nor 'edge' (keys: "
                           f"{keys}).", path=path, field="edge", fix="re-download the dataset.")
    if "target_node_neg" in d:
        neg = _split_array(d, "target_node_neg", path, 2)
        if len(neg) != len(pos):
            raise DatasetError(f"has {len(neg)} rows for {len(pos)} positives.", path=path,
                               field="target_node_neg", fix="re-download the dataset.")
        return pos, neg, "per_edge"
    if "edge_neg" in d:
        return pos, _split_array(d, "edge_neg", path, 2), "shared"
    return pos, None, None


def _read_link_split(split_dir: Path) -> dict[str, Any]:
    """The link split of ``split_dir`` as GraphDataset fields (``get_edge_split``'s files).

    As ``LinkPropPredDataset.get_edge_split``: ``split_dict.pt`` when present, else
    ``train.pt``, ``valid.pt`` and ``test.pt``.
    """
    combined = split_dir / "split_dict.pt"
    if combined.is_file():
        whole = _torch_split_file(combined)
        parts = {}
        for part in _LINK_SPLITS:
            if not isinstance(whole.get(part), dict):
                raise DatasetError(f"holds no dict {part!r} (keys: {', '.join(map(repr, whole))}"
                                   ").", path=combined, field=part, fix="re-download the dataset.")
            parts[part] = (whole[part], combined)
    else:
        parts = {part: (_torch_split_file(split_dir / f"{part}.pt"), split_dir / f"{part}.pt")
                 for part in _LINK_SPLITS}
    out: dict[str, Any] = {}
    kinds: dict[str, str] = {}
    for part, (d, path) in parts.items():
        pos, neg, kind = _link_supervision(d, path)
        pos_field, neg_field = _LINK_SPLITS[part]
        out[pos_field] = pos
        if neg_field is None:
            if neg is not None:
                log.info("%s: training negatives are not read (a link trainer draws its own).",
                         path)
        elif neg is not None and kind is not None:
            out[neg_field] = neg
            kinds[part] = kind
    if len(set(kinds.values())) > 1:
        listed = ", ".join(f"{part}: {k}" for part, k in kinds.items())
        raise DatasetError(f"validation and test negatives differ in kind ({listed}).",
                           path=split_dir, field="neg_kind",
                           fix="give target_node_neg in both, or edge_neg in both.")
    out["neg_kind"] = next(iter(kinds.values()), "per_edge")
    return out


def _read_link_raw(meta: dict[str, str], dataset_dir: Path, name: str) -> GraphDataset:
    """A link dataset: OGB's graph (message passing) plus its edge split."""
    raw = dataset_dir / "raw"
    graph = _read_graph(meta, raw)
    split_dir = dataset_dir / "split" / meta["split"]
    link = _read_link_split(split_dir)
    n = int(graph["num_nodes"])
    edge_index = np.asarray(graph["edge_index"], dtype=np.int64)
    x, edge_feat = graph["node_feat"], graph.get("edge_feat")
    ds = GraphDataset(
        num_nodes=n, src=edge_index[0], dst=edge_index[1],
        x=None if x is None else features_to_float(x, n, raw, "node_feat"),
        name=name,
        edge_attr=None if edge_feat is None else edge_features_to_float(
            edge_feat, edge_index.shape[1], raw, "edge_feat"),
        **link,
    )
    try:
        return ds.validate(dataset_dir)
    except DatasetError as exc:
        if exc.field not in (*EDGE_SPLITS, *NEG_SPLITS, "neg_kind"):
            raise
        raise DatasetError(exc.message, path=split_dir, field=exc.field, fix=exc.fix) from None


def load_ogb(
    name: str,
    root: str | os.PathLike[str] = "data",
    meta_dict: dict[str, Any] | str | os.PathLike[str] | None = None,
    add_reverse: bool | str = "auto",
) -> GraphDataset | TypedGraphDataset:
    """Load an OGB node- or link-property dataset as a GraphDataset (typed: see below).

    The first load reads ``raw/`` and ``split/`` with ``ogb``'s readers (downloading them
    with ``ogb``'s helpers when they are missing) and writes ``<dataset dir>/gnnpar-v1``;
    later loads memory-map that cache. Labels ``[N, 1]`` (float with NaN for unlabelled
    nodes in ogbn-papers100M) become int64 ``[N]`` with -1. Edges are as OGB stores them
    (ogbn-arxiv and ogbn-papers100M are directed; call ``to_undirected()``), with the
    reverse of every edge added where the meta's ``add_inverse_edge`` says so.

    A typed node dataset (``"is hetero": "True"``: ogbn-mag, or any meta_dict
    saying so) gives a :class:`~gnnpar.datasets.typed.TypedGraphDataset`: node types
    and relations in ogb's order, the features of the types that have them, labels and
    splits of the one labelled type (ogbn-mag: 4 node types, ``paper`` the target with
    its 128 features and 349 classes, the others featureless). OGB stores directed
    relations (ogbn-mag: author-writes-paper, paper-cites-paper, paper-has_topic-
    field_of_study, author-affiliated_with-institution); ``add_reverse`` (``--reverse``)
    decides their reverses: ``"auto"`` (the default) gives every relation ``(s, r, d)``
    with ``s != d`` a ``(d, "rev_" + r, s)`` unless the graph stores its reverse already
    (by name or endpoints: :meth:`~gnnpar.datasets.typed.TypedGraphDataset.stored_reverse`)
    and symmetrises a same-type one (paper-cites-paper), as PyG's ``ToUndirected`` and the
    PyG / DGL ogbn-mag examples do; ``"add"`` (or ``True``) adds every reverse and refuses
    a name that is taken; ``"none"`` (or ``False``) keeps the relations as stored. The
    meta's ``add_inverse_edge`` asks for the inverse edges: in a typed graph they are these
    reverse relations (ogb's reader would append them inside each relation, with the
    endpoint types swapped). The cache holds the relations as stored, so every setting
    shares it; the reverse relations are the cached maps swapped (no copy), and a
    same-type relation is symmetrised in memory.

    A link dataset (``ogbl-*``, a meta ``task type`` of ``link prediction``, or a split
    folder of ``.pt`` files) maps ``get_edge_split()`` onto the link fields: the graph
    (``edge_index``, ``edge_feat`` as ``edge_attr``, ``node_feat`` as ``x``) is the
    message-passing graph; ``train_edges`` / ``val_edges`` / ``test_edges`` are each
    split's ``source_node``/``target_node`` (ogbl-citation2) or ``edge`` (ogbl-collab,
    -ppa, -ddi); ``target_node_neg`` ``[M, C]`` becomes ``neg_kind="per_edge"`` negatives,
    ``edge_neg`` ``[M', 2]`` ``neg_kind="shared"`` ones. There are no labels (``y`` is
    ``None``) nor node splits, and training negatives (ogbl-vessel) are not read. The
    ``.pt`` split files are read with ``torch.load(weights_only=True)`` (see the module
    docstring); knowledge-graph and typed link datasets (ogbl-wikikg2, -biokg) are
    refused.

    Args:
        name: ``ogbn-arxiv``, ``ogbn-products``, ``ogbn-papers100M``, ``ogbn-mag``,
            ``ogbl-citation2``, ``ogbl-collab``, ``ogbl-ppa``, another dataset of ``ogb``'s
            ``master.csv`` files, or any name when ``meta_dict`` is given.
        root: Directory holding ``<name with _>/`` (ignored with ``meta_dict``).
        meta_dict: OGB meta information (keys as in ``master.csv``, plus ``dir_path``, and
            optionally ``sha256`` of the archive at ``url``), or the path to a JSON file
            of it; a file's ``dir_path`` is relative to the file's folder and must stay
            inside it (a dict's may be any path).
        add_reverse: Typed datasets only: ``"auto"``, ``"add"`` or ``"none"`` (above).

    Returns:
        The dataset, memory-mapped from the cache when it could be written.

    Raises:
        DatasetError: Unknown name, multi-task, knowledge-graph or typed link dataset,
            data neither on disk nor downloadable, or malformed files (naming the file and
            the field).

    Example::

        ds = gnnpar.load_ogb("ogbl-collab", root="data")  # ds.val_edges, ds.val_neg
        mag = gnnpar.load_ogb("ogbn-mag", root="data")    # TypedGraphDataset, 7 relations
    """
    meta, dataset_dir, source = _meta_info(name, Path(root), meta_dict)
    typed = meta["is hetero"] == "True"
    if typed and (name.startswith("ogbl-")
                   or meta.get("task type") in (*_LINK_TASK_TYPES, "KG completion")):
        raise DatasetError(f"{name} is a typed link dataset; gnnpar's link task is "
                           "homogeneous.", path=source, field="is hetero",
                           fix="convert it to one node type first (e.g. PyG's "
                               "HeteroData.to_homogeneous) and use from_pyg_link.")
    if meta.get("task type") == "KG completion":
        raise DatasetError(f"{name} is a knowledge graph (relation-typed edges); gnnpar's link "
                           "task has no relation types.", path=source, field="task type",
                           fix="use a link-prediction dataset (ogbl-citation2, -collab, -ppa, "
                               "-ddi), or drop the relations and build it with from_npz.")
    if meta.get("num tasks", "1") != "1":
        raise DatasetError(f"{name} has {meta['num tasks']} prediction tasks; gnnpar needs one "
                           "class label per node.", path=source, field="num tasks",
                           fix="pick one task and build the dataset with from_pyg / from_npz.")
    cls: type[GraphDataset] | type[TypedGraphDataset] = (
        TypedGraphDataset if typed else GraphDataset)
    cache = _cache_dir(dataset_dir, Path(root))
    read: list[GraphDataset | TypedGraphDataset] = []

    def make() -> None:  # under the cache's lock: a concurrent load waits, then reads it
        if not _has_raw(dataset_dir / "raw", meta["binary"] == "True", typed):
            _download(meta, dataset_dir, name)
        if typed:
            ds: GraphDataset | TypedGraphDataset = _read_typed_raw(meta, dataset_dir, name)
        elif _is_link(name, meta, dataset_dir / "split" / meta["split"]):
            ds = _read_link_raw(meta, dataset_dir, name)
        else:
            ds = _read_raw(meta, dataset_dir, name)  # each validated
        read.append(ds)
        try:
            ds.save(cache, validate=False)
        except OSError as exc:
            warnings.warn(f"{cache}: cannot write gnnpar's cache ({exc}); the next load "
                          "reads the raw files again.", stacklevel=4)

    def waiting(who: str) -> None:
        log.info("waiting for %s: it converts %s into gnnpar's cache %s", who, name, cache)

    fill_cache(cache, (cache / "dataset.json").is_file, make, waiting)
    if read and not (cache / "dataset.json").is_file():  # the cache could not be written
        return _with_reverse(read[0], add_reverse)
    return _with_reverse(cls.load(cache, validate=not read), add_reverse)


def _cache_dir(dataset_dir: Path, root: Path) -> Path:
    """Where gnnpar keeps its converted copy of an OGB dataset folder.

    ``<dataset dir>/gnnpar-v1``, unless that folder cannot be written (a read-only mount,
    someone else's files) and holds no such copy yet: then ``ROOT/ogb-cache/NAME-HASH/
    gnnpar-v1``, keyed by the folder's absolute path, and a log line says where.
    """
    inside = dataset_dir / CACHE_DIR
    if inside.is_dir() or (os.access(dataset_dir, os.W_OK | os.X_OK)
                           if dataset_dir.is_dir() else True):
        return inside
    key = hashlib.sha256(str(dataset_dir.resolve()).encode()).hexdigest()[:12]
    aside = root / "ogb-cache" / f"{dataset_dir.name}-{key}" / CACHE_DIR
    log.info("%s is not writable: gnnpar's converted copy of it goes to %s", dataset_dir,
             aside)
    return aside


def _with_reverse(ds: GraphDataset | TypedGraphDataset,
                  add_reverse: bool | str) -> GraphDataset | TypedGraphDataset:
    """A typed dataset with its reverse relations as ``add_reverse`` says; others as they are."""
    if not isinstance(ds, TypedGraphDataset):
        return ds
    modes: dict[bool | str, str] = {True: "add", False: "none"}
    return ds.with_reverse(modes.get(add_reverse, str(add_reverse)))

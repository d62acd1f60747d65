"""OGB node-property datasets through the real ``ogb`` package, cached as ``.npy``.

``load_ogb`` takes the meta information from ``ogb``'s own ``nodeproppred/master.csv``
(or from a ``meta_dict``), reads the raw files with ``ogb``'s own readers
(``read_csv_graph_raw`` / ``read_binary_graph_raw``) and the split CSVs as
``NodePropPredDataset.get_idx_split`` does, then keeps gnnpar's own cache next to them::

    ROOT/ogbn_arxiv/          (or meta_dict["dir_path"])
      raw/ split/<split>/     as downloaded from OGB
      gnnpar-v1/              GraphDataset.save directory, memory-mapped on later loads

It never goes through ``NodePropPredDataset.pre_process``: ``ogb`` 1.3.6 caches with
``torch.save`` and then fails to reload that pickle under torch >= 2.6's ``weights_only``
default (the second load of a dataset), and it needs a ``processed/`` folder. Nothing here
loads pickle.
"""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import os
import shutil
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from gnnpar.datasets.graph import GraphDataset
from gnnpar.datasets.loaders import features_to_float, labels_to_int, split_to_idx
from gnnpar.errors import DatasetError
from gnnpar.io import read_json, sha256_file

CACHE_DIR = "gnnpar-v1"
# ogb's split file names -> GraphDataset fields.
_SPLIT_FILES = {"train": "train_idx", "valid": "val_idx", "test": "test_idx"}
_REQUIRED_META = ("split", "add_inverse_edge", "binary", "is hetero")


def _master() -> dict[str, dict[str, str]]:
    """``ogb/nodeproppred/master.csv`` as ``{dataset: {key: value}}`` (strings).

    Located without importing ``ogb.nodeproppred`` (which imports torch_geometric).
    """
    spec = importlib.util.find_spec("ogb")
    if spec is None or not spec.submodule_search_locations:
        raise DatasetError("the ogb package is not installed.", field="ogb",
                           fix="pip install 'ogb>=1.3.6'.")
    path = Path(spec.submodule_search_locations[0]) / "nodeproppred" / "master.csv"
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    names = rows[0][1:]
    return {n: {row[0]: row[i + 1] for row in rows[1:]} for i, n in enumerate(names)}


def _meta_info(
    name: str, root: Path, meta_dict: dict[str, Any] | str | os.PathLike[str] | None,
) -> tuple[dict[str, str], Path, Path | str]:
    """``(meta info as strings, dataset directory, where the meta came from)``."""
    if meta_dict is None:
        master = _master()
        if name not in master:
            raise DatasetError(f"{name!r} is not an OGB node-property dataset.", field="name",
                               fix=f"use one of {', '.join(master)}, or pass meta_dict for a "
                                   "dataset in OGB's layout.")
        return master[name], root / name.replace("-", "_"), "ogb/nodeproppred/master.csv"
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
                               fix=f"add {key!r} as in ogb's nodeproppred/master.csv.")
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


def _has_raw(raw: Path, binary: bool) -> bool:
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
        out[fld] = pd.read_csv(f, compression="gzip", header=None).values.T[0]
    return out


def _read_raw(
    meta: dict[str, str], dataset_dir: Path, name: str,
) -> GraphDataset:
    import pandas as pd
    from ogb.io.read_graph_raw import read_binary_graph_raw, read_csv_graph_raw

    raw = dataset_dir / "raw"
    add_inverse = meta["add_inverse_edge"] == "True"
    try:
        with contextlib.redirect_stdout(sys.stderr):  # ogb's readers print progress
            if meta["binary"] == "True":
                graph = read_binary_graph_raw(str(raw), add_inverse_edge=add_inverse)[0]
                with np.load(raw / "node-label.npz", allow_pickle=False) as npz:
                    labels = npz["node_label"]
            else:
                graph = read_csv_graph_raw(str(raw), add_inverse_edge=add_inverse)[0]
                labels = pd.read_csv(raw / "node-label.csv.gz", compression="gzip",
                                     header=None).values
    except (OSError, RuntimeError, ValueError, KeyError) as exc:
        raise DatasetError(f"cannot read OGB raw files ({type(exc).__name__}: {exc}).",
                           path=raw, field="raw",
                           fix="re-download the dataset or fix the files named above.") from exc
    n = int(graph["num_nodes"])
    splits = _read_split(dataset_dir / "split" / meta["split"])
    x = graph["node_feat"]
    num_classes = meta.get("num classes")
    return GraphDataset(
        num_nodes=n,
        src=np.asarray(graph["edge_index"][0], dtype=np.int64),
        dst=np.asarray(graph["edge_index"][1], dtype=np.int64),
        x=None if x is None else features_to_float(x, n, raw, "node_feat"),
        y=labels_to_int(labels, n, raw, "node_label"),
        name=name,
        num_classes=int(num_classes) if num_classes and num_classes.isdigit() else None,
        **{fld: split_to_idx(idx, n, dataset_dir / "split", fld) for fld, idx in splits.items()},
    ).validate(dataset_dir)


def load_ogb(
    name: str,
    root: str | os.PathLike[str] = "data",
    meta_dict: dict[str, Any] | str | os.PathLike[str] | None = None,
) -> GraphDataset:
    """Load an OGB node-property dataset (homogeneous, single-label) as a GraphDataset.

    The first load reads ``raw/`` and ``split/`` with ``ogb``'s readers (downloading them
    with ``ogb``'s helpers when they are missing) and writes ``<dataset dir>/gnnpar-v1``;
    later loads memory-map that cache. Labels ``[N, 1]`` (float with NaN for unlabelled
    nodes in ogbn-papers100M) become int64 ``[N]`` with -1. Edges are as OGB stores them
    (ogbn-arxiv and ogbn-papers100M are directed; call ``to_undirected()``).

    Args:
        name: ``ogbn-arxiv``, ``ogbn-products``, ``ogbn-papers100M``, another homogeneous
            dataset of ``ogb``'s ``master.csv``, or any name when ``meta_dict`` is given.
        root: Directory holding ``<name with _>/`` (ignored with ``meta_dict``).
        meta_dict: OGB meta information (keys as in ``master.csv``, plus ``dir_path``, and
            optionally ``sha256`` of the archive at ``url``), or the path to a JSON file
            of it; a file's ``dir_path`` is relative to the file's folder and must stay
            inside it (a dict's may be any path).

    Returns:
        The dataset, memory-mapped from the cache when it could be written.

    Raises:
        DatasetError: Unknown name, heterogeneous or multi-task dataset, data neither on
            disk nor downloadable, or malformed files.
    """
    meta, dataset_dir, source = _meta_info(name, Path(root), meta_dict)
    if meta["is hetero"] == "True":
        raise DatasetError(f"{name} is heterogeneous; gnnpar trains homogeneous graphs.",
                           path=source, field="is hetero",
                           fix="convert it to one node type first (e.g. PyG's "
                               "HeteroData.to_homogeneous) and use from_pyg.")
    if meta.get("num tasks", "1") != "1":
        raise DatasetError(f"{name} has {meta['num tasks']} prediction tasks; gnnpar needs one "
                           "class label per node.", path=source, field="num tasks",
                           fix="pick one task and build the dataset with from_pyg / from_npz.")
    cache = dataset_dir / CACHE_DIR
    if (cache / "dataset.json").is_file():
        return GraphDataset.load(cache)
    if not _has_raw(dataset_dir / "raw", meta["binary"] == "True"):
        _download(meta, dataset_dir, name)
    ds = _read_raw(meta, dataset_dir, name)  # validated
    try:
        ds.save(cache, validate=False)
    except OSError as exc:
        warnings.warn(f"{cache}: cannot write gnnpar's cache ({exc}); the next load reads "
                      "the raw files again.", stacklevel=2)
        return ds
    except DatasetError:
        if not (cache / "dataset.json").is_file():  # not a concurrent writer's result
            raise
        return GraphDataset.load(cache)  # another process's cache: check it
    return GraphDataset.load(cache, validate=False)

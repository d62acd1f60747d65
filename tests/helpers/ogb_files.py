"""Files in OGB's own on-disk layout, written by the tests (OGB data cannot be downloaded)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from gnnpar.datasets.typed import TypedGraphDataset


def csv_gz(path: Path, rows: np.ndarray | list[int]) -> None:
    """Write ``rows`` (one value or one row per line) as OGB's gzipped CSV."""
    path.parent.mkdir(parents=True, exist_ok=True)
    arr = np.asarray(rows)
    arr = arr.reshape(len(arr), -1)
    with gzip.open(path, "wt") as f:
        for row in arr:
            f.write(",".join(str(v) for v in row) + "\n")


def csv_header_gz(path: Path, header: list[str], row: list[object]) -> None:
    """Write one header line and one row as OGB's gzipped CSV (``num-node-dict.csv.gz``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.write(",".join(header) + "\n" + ",".join(str(v) for v in row) + "\n")


def write_typed_layout(d: Path, ds: TypedGraphDataset, split: str = "time") -> None:
    """``ds`` in ogbn-mag's layout, as ogb's ``read_csv_heterograph_raw`` reads it.

    Its relations are written as they are (OGB stores each relation once; the loader adds
    the reverses); unlabelled targets get label 0, as OGB has no "unlabelled".
    """
    raw = d / "raw"
    types = list(ds.num_nodes)
    csv_header_gz(raw / "num-node-dict.csv.gz", types, list(ds.num_nodes.values()))
    csv_gz(raw / "triplet-type-list.csv.gz", np.array([list(et) for et in ds.edges]))
    for et, (s, t) in ds.edges.items():
        rel = raw / "relations" / "___".join(et)
        csv_gz(rel / "edge.csv.gz", np.stack([s, t], axis=1))
        csv_gz(rel / "num-edge-list.csv.gz", [len(s)])
    for t, x in ds.x.items():
        csv_gz(raw / "node-feat" / t / "node-feat.csv.gz", np.asarray(x))
    has = [t == ds.target for t in types]
    csv_header_gz(raw / "nodetype-has-label.csv.gz", types, has)
    assert ds.y is not None
    csv_gz(raw / "node-label" / ds.target / "node-label.csv.gz", np.where(ds.y < 0, 0, ds.y))
    csv_header_gz(d / "split" / split / "nodetype-has-split.csv.gz", types, has)
    for part, idx in (("train", ds.train_idx), ("valid", ds.val_idx), ("test", ds.test_idx)):
        csv_gz(d / "split" / split / ds.target / f"{part}.csv.gz", idx)

"""from_edge_list, from_npz, from_pyg, from_dgl: hand-checked tiny graphs and every bad input."""

from __future__ import annotations

import gzip
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from gnnpar.datasets.loaders import from_edge_list, from_npz
from gnnpar.datasets.pyg import from_dgl, from_pyg
from gnnpar.errors import DatasetError

# 5 nodes; the edge list as a user would write it.
SRC = [0, 1, 2, 3, 4, 0]
DST = [1, 2, 3, 4, 0, 2]
X = np.array([[0.5, 1], [1.5, 2], [2.5, 3], [3.5, 4], [4.5, 5]], dtype=np.float32)
Y = np.array([0, 1, -1, 1, 0])


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def assert_error(exc: pytest.ExceptionInfo[DatasetError], where: str, field: str) -> None:
    """The error names the file (and line) and the field, and carries a fix."""
    assert isinstance(exc.value, DatasetError)
    assert where in str(exc.value), str(exc.value)
    assert exc.value.field == field and f": {field}:" in str(exc.value), str(exc.value)
    assert exc.value.fix


# ---------------------------------------------------------------------- edge lists
def rows(sep: str) -> str:
    return "".join(f"{s}{sep}{d}\n" for s, d in zip(SRC, DST, strict=True))


@pytest.mark.parametrize(("name", "text"), [
    ("e.csv", "src,dst\n" + rows(",")),
    ("e.tsv", "# comment\n" + rows("\t")),
    ("e.txt", "% konect header\n\n" + rows("  ")),
])
def test_edge_list_formats(tmp_path: Path, name: str, text: str) -> None:
    ds = from_edge_list(write(tmp_path / name, text))
    assert ds.num_nodes == 5 and ds.name == "e"
    assert ds.src.tolist() == SRC and ds.dst.tolist() == DST


def test_edge_list_gz_with_features_labels_splits(tmp_path: Path) -> None:
    with gzip.open(tmp_path / "g.csv.gz", "wt") as f:
        f.write(rows(", "))
    np.save(tmp_path / "x.npy", X)
    write(tmp_path / "y.txt", "\n".join(str(v) for v in Y))
    write(tmp_path / "train.txt", "0\n1\n")
    np.save(tmp_path / "val.npy", np.array([3]))
    ds = from_edge_list(tmp_path / "g.csv.gz", num_nodes=6, features=None, labels=None)
    assert ds.num_nodes == 6 and ds.x is None
    ds = from_edge_list(tmp_path / "g.csv.gz", features=tmp_path / "x.npy",
                        labels=tmp_path / "y.txt",
                        splits={"train": tmp_path / "train.txt", "val": tmp_path / "val.npy"})
    np.testing.assert_array_equal(ds.x, X)
    assert ds.y.tolist() == Y.tolist() and ds.num_classes == 2
    assert ds.train_idx.tolist() == [0, 1] and ds.val_idx.tolist() == [3]
    assert ds.test_idx.tolist() == []


def test_edge_list_text_features_with_header(tmp_path: Path) -> None:
    edges = write(tmp_path / "e.txt", "0 1\n1 2\n")
    feats = write(tmp_path / "f.csv", "a,b\n" + "".join(f"{r[0]},{r[1]}\n" for r in X[:3]))
    ds = from_edge_list(edges, features=feats)
    np.testing.assert_array_equal(ds.x, X[:3])


@pytest.mark.parametrize(("text", "line", "field", "kwargs"), [
    ("0 1\n1 2 3\n", 2, "src dst", {}),           # wrong column count
    ("0 1\n1\n", 2, "src dst", {}),               # wrong column count
    ("0 1\n# c\n1 x\n", 3, "dst", {}),            # non-integer id
    ("0 1\n1.5 2\n", 2, "src", {}),               # non-integer id
    ("0 1\n-1 2\n", 2, "src", {}),                # negative id
    ("0 1\n1 2\n2 9\n", 3, "dst", {"num_nodes": 5}),  # id >= num_nodes
])
def test_malformed_edge_lists(tmp_path: Path, text: str, line: int, field: str,
                              kwargs: dict[str, int]) -> None:
    path = write(tmp_path / "bad.txt", text)
    with pytest.raises(DatasetError) as exc:
        from_edge_list(path, **kwargs)
    assert_error(exc, f"{path}:{line}", field)


def test_edge_id_beyond_feature_rows(tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", X)  # 5 rows -> 5 nodes
    path = write(tmp_path / "e.csv", "0,1\n1,5\n")
    with pytest.raises(DatasetError) as exc:
        from_edge_list(path, features=tmp_path / "x.npy")
    assert_error(exc, f"{path}:2", "dst")


@pytest.mark.parametrize(("fname", "field"), [("x.npy", "x"), ("y.txt", "y")])
def test_row_counts_disagree_with_num_nodes(tmp_path: Path, fname: str, field: str) -> None:
    edges = write(tmp_path / "e.txt", "0 1\n1 2\n")
    np.save(tmp_path / "x.npy", X[:4])
    write(tmp_path / "y.txt", "0\n1\n0\n")
    with pytest.raises(DatasetError) as exc:
        from_edge_list(edges, num_nodes=5, **{"features" if field == "x" else "labels":
                                             tmp_path / fname})
    assert_error(exc, fname, field)


def test_nan_features_and_overlapping_splits_name_their_file(tmp_path: Path) -> None:
    edges = write(tmp_path / "e.txt", "0 1\n1 2\n")
    bad = X[:3].copy()
    bad[1, 1] = np.nan
    np.save(tmp_path / "x.npy", bad)
    with pytest.raises(DatasetError) as exc:
        from_edge_list(edges, features=tmp_path / "x.npy")
    assert_error(exc, "x.npy", "x")
    assert "row 1" in str(exc.value)
    write(tmp_path / "tr.txt", "0\n1\n")
    write(tmp_path / "te.txt", "1\n2\n")
    with pytest.raises(DatasetError) as exc:
        from_edge_list(edges, splits={"train": tmp_path / "tr.txt", "test": tmp_path / "te.txt"})
    assert_error(exc, "te.txt", "test_idx")
    assert "disjoint" in str(exc.value)


def test_missing_edge_file_and_unknown_split_key(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as exc:
        from_edge_list(tmp_path / "none.csv")
    assert_error(exc, "none.csv", "path")
    edges = write(tmp_path / "e.txt", "0 1\n")
    with pytest.raises(DatasetError) as exc:
        from_edge_list(edges, splits={"training": edges})
    assert_error(exc, "e.txt", "splits")


# ---------------------------------------------------------------------- .npz
def test_npz_edge_index_masks_and_float_labels(tmp_path: Path) -> None:
    y = Y.astype(np.float64)
    y[2] = np.nan
    mask = np.array([True, True, False, False, False])
    np.savez(tmp_path / "g.npz", edge_index=np.array([SRC, DST]), x=X, y=y[:, None],
             train_mask=mask, test_idx=np.array([3]))
    ds = from_npz(tmp_path / "g.npz")
    assert ds.name == "g" and ds.num_nodes == 5
    assert ds.src.tolist() == SRC and ds.dst.tolist() == DST
    assert ds.y.tolist() == Y.tolist() and ds.train_idx.tolist() == [0, 1]
    np.savez(tmp_path / "h.npz", src=np.array(SRC), dst=np.array(DST), num_nodes=7)
    ds = from_npz(tmp_path / "h.npz")
    assert ds.num_nodes == 7 and ds.x is None and ds.y is None
    np.savez(tmp_path / "f.npz", src=np.array(SRC), dst=np.array(DST), num_nodes=np.array([6.0]))
    assert from_npz(tmp_path / "f.npz").num_nodes == 6


@pytest.mark.parametrize(("arrays", "field"), [
    ({"edge_index": np.array([SRC])}, "edge_index"),
    ({"x": X}, "edge_index"),
    ({"src": np.array(SRC, dtype=float), "dst": np.array(DST)}, "src"),
    ({"edge_index": np.array([SRC, DST]), "x": X[:4], "num_nodes": 5}, "x"),
    ({"edge_index": np.array([SRC, DST]), "y": Y[:4], "num_nodes": 5}, "y"),
    ({"edge_index": np.array([SRC, DST]), "train_mask": np.ones(4, bool)}, "train_mask"),
    ({"edge_index": np.array([SRC, DST]), "num_nodes": np.array([5, 6])}, "num_nodes"),
    ({"edge_index": np.array([SRC, DST]), "num_nodes": 5.5}, "num_nodes"),
    ({"edge_index": np.array([SRC, DST]), "num_nodes": np.nan}, "num_nodes"),
    # No num_nodes: x and y disagree in rows; the edges (ids 0..4) need 5 nodes, so the
    # array that does not cover them is the one named.
    ({"edge_index": np.array([SRC, DST]), "x": X[:4], "y": Y}, "x"),
    ({"edge_index": np.array([SRC, DST]), "x": X, "y": Y[:4]}, "y"),
    ({"edge_index": np.array([SRC, DST]), "x": X[:3], "y": Y[:4]}, "x"),
    ({"src": np.array(SRC), "dst": np.array(DST), "feat": X[:4], "label": Y}, "feat"),
    # Both cover the edges but differ: ambiguous, so num_nodes is asked for.
    ({"edge_index": np.array([SRC, DST]), "x": np.zeros((7, 2)), "y": np.zeros(6, int)},
     "num_nodes"),
])
def test_bad_npz(tmp_path: Path, arrays: dict[str, np.ndarray], field: str) -> None:
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(DatasetError) as exc:
        from_npz(tmp_path / "bad.npz")
    assert_error(exc, "bad.npz", field)


def test_npz_short_features_blame_features_in_the_message(tmp_path: Path) -> None:
    np.savez(tmp_path / "short.npz", edge_index=np.array([SRC, DST]), x=X[:4], y=Y)
    with pytest.raises(DatasetError) as exc:
        from_npz(tmp_path / "short.npz")
    assert "(4, 2)" in exc.value.message and "5 nodes" in exc.value.message
    with pytest.raises(DatasetError) as exc:  # as an edge list with two files: the same
        from_edge_list(write(tmp_path / "e.txt", rows(" ")), features=_save(tmp_path, X[:4]),
                       labels=write(tmp_path / "y.txt", "\n".join(map(str, Y.tolist()))))
    assert_error(exc, "x.npy", "x")


def _save(d: Path, x: np.ndarray) -> Path:
    np.save(d / "x.npy", x)
    return d / "x.npy"


def test_npz_with_pickled_objects_is_refused(tmp_path: Path) -> None:
    np.savez(tmp_path / "obj.npz", edge_index=np.array([{"a": 1}], dtype=object))
    with pytest.raises(DatasetError, match="obj.npz") as exc:
        from_npz(tmp_path / "obj.npz")
    assert_error(exc, "obj.npz", "edge_index")


def test_npz_extra_arrays_are_not_read_and_are_named(tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    np.savez(tmp_path / "named.npz", edge_index=np.array([SRC, DST]), x=X, y=Y,
             feat=np.zeros((5, 9)),                     # shadowed by x
             node_names=np.array(["a", "b", "c", "d", "e"]),
             class_names=np.array(["cat", "dog"]),
             meta=np.array([{"k": 1}, None], dtype=object))  # would need unpickling
    with caplog.at_level(logging.WARNING, logger="gnnpar.datasets"):
        ds = from_npz(tmp_path / "named.npz")
    assert ds.num_nodes == 5 and ds.src.tolist() == SRC and ds.dst.tolist() == DST
    assert ds.x is not None and ds.x.tolist() == X.tolist()
    assert ds.y is not None and ds.y.tolist() == [0, 1, -1, 1, 0]
    (record,) = [r for r in caplog.records if "ignored arrays" in r.getMessage()]
    msg = record.getMessage()
    assert record.levelno == logging.WARNING and record.name == "gnnpar.datasets"
    assert msg.startswith(f"{tmp_path / 'named.npz'}: ignored arrays ")
    assert "['feat', 'node_names', 'class_names', 'meta']" in msg, msg
    assert "gnnpar reads" in msg and "edge_index" in msg


def test_npz_misspelt_key_is_ignored_with_a_hint(tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    np.savez(tmp_path / "typo.npz", edge_index=np.array([SRC, DST]), lables=Y)
    with caplog.at_level(logging.WARNING, logger="gnnpar.datasets"):
        ds = from_npz(tmp_path / "typo.npz")
    assert ds.y is None and ds.num_nodes == 5
    assert "ignored arrays ['lables']" in caplog.text and "'lables' -> 'labels'?" in caplog.text


# ---------------------------------------------------------------------- PyG / DGL
def test_from_pyg_masks_and_column_labels() -> None:
    data = Data(x=torch.from_numpy(X), edge_index=torch.tensor([SRC, DST]),
                y=torch.from_numpy(Y)[:, None], train_mask=torch.tensor([1, 0, 0, 1, 0]).bool(),
                val_idx=torch.tensor([0 + 4]))
    ds = from_pyg(data, name="tiny")
    assert ds.src.tolist() == SRC and ds.y.tolist() == Y.tolist()
    assert ds.train_idx.tolist() == [0, 3] and ds.val_idx.tolist() == [4]
    back = ds.to_pyg()
    assert torch.equal(back.edge_index, data.edge_index) and torch.equal(back.x, data.x)


def test_from_pyg_idx_arrays_and_full_masks() -> None:
    base = {"x": torch.from_numpy(X), "edge_index": torch.tensor([SRC, DST]),
            "y": torch.from_numpy(Y)}
    ds = from_pyg(Data(**base, train_idx=torch.tensor([4, 0]), valid_idx=torch.tensor([1]),
                       test_idx=torch.tensor([3])), name="idx")
    assert ds.train_idx.tolist() == [4, 0] and ds.val_idx.tolist() == [1]
    assert ds.test_idx.tolist() == [3]
    ds = from_pyg(Data(**base, train_mask=torch.tensor([True, False, False, False, True]),
                       val_mask=torch.tensor([False, True, False, False, False]),
                       test_mask=torch.tensor([0, 0, 0, 1, 0], dtype=torch.uint8)),
                  name="masks")
    assert ds.train_idx.tolist() == [0, 4] and ds.val_idx.tolist() == [1]
    assert ds.test_idx.tolist() == [3]  # a 0/1 uint8 mask is a mask, not ids


def test_from_pyg_without_splits_warns_and_fails_require_node_task(
        caplog: pytest.LogCaptureFixture) -> None:
    data = Data(x=torch.from_numpy(X), edge_index=torch.tensor([SRC, DST]),
                y=torch.from_numpy(Y))
    with caplog.at_level(logging.WARNING, logger="gnnpar.datasets"):
        ds = from_pyg(data, name="mygraph")
    assert len(ds.train_idx) == len(ds.val_idx) == len(ds.test_idx) == 0
    (record,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    msg = record.getMessage()
    assert msg.startswith("mygraph: Data(") and "no train/val/test split" in msg, msg
    assert "random_split" in msg and "--split" in msg
    with pytest.raises(DatasetError) as exc:
        ds.require_node_task()
    assert exc.value.field == "train_idx" and "--split 0.6,0.2,0.2" in str(exc.value)
    unlabelled = from_pyg(Data(edge_index=torch.tensor([SRC, DST]), num_nodes=5))
    with pytest.raises(DatasetError) as exc:
        unlabelled.require_node_task()
    assert exc.value.field == "y" and "--labels FILE" in str(exc.value)


def test_from_pyg_multi_split_mask_is_refused() -> None:
    data = Data(x=torch.from_numpy(X), edge_index=torch.tensor([SRC, DST]),
                y=torch.from_numpy(Y), train_mask=torch.ones(5, 20, dtype=torch.bool))
    with pytest.raises(DatasetError) as exc:
        from_pyg(data, name="wikics")
    assert_error(exc, "wikics", "train_mask")
    assert "(5, 20)" in str(exc.value) and "column" in str(exc.value)


def test_from_pyg_bad_labels_name_the_field() -> None:
    data = Data(x=torch.from_numpy(X), edge_index=torch.tensor([SRC, DST]),
                y=torch.zeros(5, 3))
    with pytest.raises(DatasetError) as exc:
        from_pyg(data, name="tiny")
    assert_error(exc, "tiny", "y")


def test_from_dgl_without_dgl_is_a_clear_error() -> None:
    try:
        import dgl  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.fail("this environment has DGL; the error path cannot be tested here")
    with pytest.raises(DatasetError) as exc:
        from_dgl(object())
    assert_error(exc, "dgl", "dgl")
    assert "pip install" in str(exc.value)


@pytest.mark.parametrize("gz", [False, True])
def test_non_utf8_bytes_in_an_edge_list_are_one_line(tmp_path: Path, gz: bool) -> None:
    data = b"0 1\n1 2\n2 \xff\xfe3\n"
    path = tmp_path / ("edges.csv.gz" if gz else "edges.csv")
    if gz:
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)
    with pytest.raises(DatasetError, match=r"not UTF-8 text \(byte 0xff on line 3\)") as exc:
        from_edge_list(path)
    assert exc.value.path == str(path) and exc.value.field == "encoding"

"""from_edge_list, from_npz, from_pyg, from_dgl: hand-checked tiny graphs and every bad input."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from gnnpar.datasets import from_dgl, from_edge_list, from_npz, from_pyg
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


@pytest.mark.parametrize(("arrays", "field"), [
    ({"edge_index": np.array([SRC, DST]), "lables": Y}, "lables"),
    ({"edge_index": np.array([SRC])}, "edge_index"),
    ({"x": X}, "edge_index"),
    ({"src": np.array(SRC, dtype=float), "dst": np.array(DST)}, "src"),
    ({"edge_index": np.array([SRC, DST]), "x": X[:4], "num_nodes": 5}, "x"),
    ({"edge_index": np.array([SRC, DST]), "y": Y[:4], "num_nodes": 5}, "y"),
    ({"edge_index": np.array([SRC, DST]), "train_mask": np.ones(4, bool)}, "train_mask"),
])
def test_bad_npz(tmp_path: Path, arrays: dict[str, np.ndarray], field: str) -> None:
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(DatasetError) as exc:
        from_npz(tmp_path / "bad.npz")
    assert_error(exc, "bad.npz", field)


def test_npz_with_pickled_objects_is_refused(tmp_path: Path) -> None:
    np.savez(tmp_path / "obj.npz", edge_index=np.array([{"a": 1}], dtype=object))
    with pytest.raises(DatasetError, match="obj.npz"):
        from_npz(tmp_path / "obj.npz")


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

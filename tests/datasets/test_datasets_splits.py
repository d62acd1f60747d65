"""Random splits, --split parsing, require_node_task, and load_dataset's files and splits."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from gnnpar.datasets.graph import GraphDataset
from gnnpar.datasets.spec import load_dataset, parse_split
from gnnpar.datasets.splits import split_sizes
from gnnpar.errors import DatasetError

# 10 nodes, 8 of them labelled: LABELLED are the ids with Y >= 0, written out by hand.
Y = np.array([0, 1, -1, 0, 1, -1, 0, 1, 0, 1], dtype=np.int64)
LABELLED = [0, 1, 3, 4, 6, 7, 8, 9]
SRC = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0]
DST = [1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 5]
X = (np.arange(30, dtype=np.float32).reshape(10, 3) - 7.5) / 4


def graph(**over: object) -> GraphDataset:
    base: dict[str, object] = dict(num_nodes=10, src=np.array(SRC), dst=np.array(DST), x=X,
                                   y=Y, name="ring")
    base.update(over)
    return GraphDataset(**base)  # type: ignore[arg-type]


def ids(a: np.ndarray) -> list[int]:
    return [int(v) for v in a]


# ---------------------------------------------------------------------- split_sizes
@pytest.mark.parametrize(("fractions", "n", "want"), [
    ((0.6, 0.2, 0.2), 10, (6, 2, 2)),
    ((0.6, 0.2, 0.2), 8, (4, 1, 3)),      # floor 4.8, floor 1.6, the rest
    ((0.5, 0.25, 0.25), 8, (4, 2, 2)),
    ((0.7, 0.2, 0.1), 10, (7, 2, 1)),     # sums to 0.9999999999999999: counts as 1
    ((0.29, 0.01, 0.7), 100, (29, 1, 70)),  # 0.29 * 100 is 28.999999999999996 in floats
    ((0.3, 0.3, 0.3), 8, (2, 2, 2)),      # sum < 1: floor of each
    ((0.5, 0.25, 0.0), 8, (4, 2, 0)),
    ((1.0, 0.0, 0.0), 5, (5, 0, 0)),
    ((0.0, 0.0, 0.0), 5, (0, 0, 0)),
])
def test_split_sizes(fractions: tuple[float, float, float], n: int,
                     want: tuple[int, int, int]) -> None:
    assert split_sizes(fractions, n) == want


# ---------------------------------------------------------------------- random_split
def test_random_split_sizes_disjoint_only_labelled_and_shares_arrays() -> None:
    ds = graph(train_idx=np.array([0]), val_idx=np.array([1]))
    out = ds.random_split((0.6, 0.2, 0.2), seed=3)
    tr, va, te = ids(out.train_idx), ids(out.val_idx), ids(out.test_idx)
    assert (len(tr), len(va), len(te)) == (4, 1, 3)
    assert tr == sorted(tr) and va == sorted(va) and te == sorted(te)
    assert not (set(tr) & set(va) or set(tr) & set(te) or set(va) & set(te))
    assert sorted(tr + va + te) == LABELLED  # fractions sum to 1: every labelled node
    assert {a.dtype for a in (out.train_idx, out.val_idx, out.test_idx)} == {np.dtype(np.int64)}
    for fld in ("src", "dst", "x", "y"):
        assert getattr(out, fld) is getattr(ds, fld)
    assert (out.num_nodes, out.num_classes, out.name) == (10, 2, "ring")
    assert ids(ds.train_idx) == [0] and ids(ds.val_idx) == [1]  # the original is untouched
    out.validate()


def test_random_split_is_the_documented_permutation() -> None:
    # np.random.default_rng(7).permutation(8) == [0, 6, 7, 2, 4, 5, 1, 3] (PCG64's stream);
    # LABELLED taken in that order: [0, 8, 9, 3 | 6, 7 | 1, 4].
    assert np.random.default_rng(7).permutation(8).tolist() == [0, 6, 7, 2, 4, 5, 1, 3]
    out = graph().random_split((0.5, 0.25, 0.25), seed=7)
    assert ids(out.train_idx) == [0, 3, 8, 9]
    assert ids(out.val_idx) == [6, 7]
    assert ids(out.test_idx) == [1, 4]
    again = graph().random_split((0.5, 0.25, 0.25), seed=7)
    assert ids(again.train_idx) == [0, 3, 8, 9] and ids(again.test_idx) == [1, 4]
    others = {tuple(ids(graph().random_split((0.5, 0.25, 0.25), seed=s).train_idx))
              for s in range(8)}
    assert len(others) > 1  # the seed matters


def test_random_split_with_fractions_below_one_leaves_nodes_out() -> None:
    out = graph().random_split((0.3, 0.3, 0.3), seed=1)
    sizes = (len(out.train_idx), len(out.val_idx), len(out.test_idx))
    assert sizes == (2, 2, 2)
    chosen = ids(out.train_idx) + ids(out.val_idx) + ids(out.test_idx)
    assert len(set(chosen)) == 6 and set(chosen) <= set(LABELLED)


@pytest.mark.parametrize("fractions", [
    (0.7, 0.3, 0.1),         # sums to 1.1
    (-0.1, 0.6, 0.5),
    (1.5, 0.0, 0.0),
    (float("nan"), 0.2, 0.2),
    (0.5, 0.5),              # two values
])
def test_random_split_bad_fractions(fractions: tuple[float, ...]) -> None:
    with pytest.raises(DatasetError) as exc:
        graph().random_split(fractions)  # type: ignore[arg-type]
    assert exc.value.field == "split" and "0.6,0.2,0.2" in (exc.value.fix or "")


@pytest.mark.parametrize("y", [None, np.full(10, -1, dtype=np.int64)], ids=["no-y", "all--1"])
def test_random_split_without_labels(y: np.ndarray | None) -> None:
    with pytest.raises(DatasetError) as exc:
        graph(y=y).random_split((0.6, 0.2, 0.2))
    assert exc.value.field == "y" and "--labels" in str(exc.value)


# ---------------------------------------------------------------------- parse_split
@pytest.mark.parametrize(("text", "want"), [
    ("0.6,0.2,0.2", (0.6, 0.2, 0.2)),
    (" 0.5 , 0.25,0.25 ", (0.5, 0.25, 0.25)),
    ("1,0,0", (1.0, 0.0, 0.0)),
    ("0.3,0.3,0.3", (0.3, 0.3, 0.3)),
])
def test_parse_split_fractions(text: str, want: tuple[float, float, float]) -> None:
    got = parse_split(text)
    assert got == want and all(isinstance(v, float) for v in got)


def test_parse_split_files(tmp_path: Path) -> None:
    np.save(tmp_path / "train.npy", np.array([0, 1]))
    (tmp_path / "val.txt").write_text("3\n")
    (tmp_path / "test.txt").write_text("4\n")
    names = [str(tmp_path / n) for n in ("train.npy", "val.txt", "test.txt")]
    assert parse_split(",".join(names)) == tuple(names)


@pytest.mark.parametrize(("text", "needle"), [
    ("0.6,0.4", "expected 3"),
    ("0.6,0.2,0.1,0.1", "expected 3"),
    ("0.6,,0.4", "expected 3"),
    ("", "expected 3"),
    ("-0.1,0.6,0.5", "outside [0, 1]"),
    ("60,20,20", "outside [0, 1]"),
    ("0.7,0.3,0.1", "sum to"),
    ("nan,0.2,0.2", "outside [0, 1]"),
    ("a.npy,b.npy,c.npy", "neither a number nor an existing file"),
    ("0.6,EXISTING,0.2", "mixes numbers and file names"),
])
def test_parse_split_bad(tmp_path: Path, text: str, needle: str) -> None:
    existing = tmp_path / "ids.txt"
    existing.write_text("0\n")
    with pytest.raises(DatasetError) as exc:
        parse_split(text.replace("EXISTING", str(existing)))
    assert exc.value.field == "split" and needle in str(exc.value), str(exc.value)
    assert exc.value.fix and "0.6,0.2,0.2" in exc.value.fix and "TRAIN,VAL,TEST" in exc.value.fix


# ---------------------------------------------------------------------- require_node_task
def test_require_node_task() -> None:
    ok = graph(train_idx=np.array([0, 1]))
    assert ok.require_node_task() is ok
    for y in (None, np.full(10, -1, dtype=np.int64)):
        with pytest.raises(DatasetError) as exc:
            graph(y=y).require_node_task("edges.csv")
        assert exc.value.field == "y" and exc.value.path == "edges.csv"
        assert exc.value.fix == ("pass --labels FILE (one integer class per node; "
                                 "-1 = unlabelled).")
    with pytest.raises(DatasetError) as exc:
        graph().require_node_task()
    assert exc.value.field == "train_idx" and exc.value.path == "ring"
    assert "8 of 10 nodes are labelled" in exc.value.message
    for flag in ("--split 0.6,0.2,0.2", "--split-seed", "--split TRAIN,VAL,TEST"):
        assert flag in (exc.value.fix or ""), exc.value.fix


# ---------------------------------------------------------------------- load_dataset
def write_edge_list_inputs(d: Path) -> tuple[Path, Path, Path]:
    """The edge list as CSV with a header, features as .npy, labels as a CSV column."""
    edges = d / "edges.csv"
    edges.write_text("src,dst\n" + "".join(f"{s},{t}\n" for s, t in zip(SRC, DST, strict=True)))
    np.save(d / "feat.npy", X)
    labels = d / "labels.csv"
    labels.write_text("label\n" + "".join(f"{v}\n" for v in Y.tolist()))
    return edges, d / "feat.npy", labels


def test_load_dataset_edge_list_features_labels_random_split(tmp_path: Path) -> None:
    edges, feat, labels = write_edge_list_inputs(tmp_path)
    ds = load_dataset(str(edges), features=feat, labels=str(labels), split=(0.6, 0.2, 0.2),
                      split_seed=3)
    assert (ds.num_nodes, ds.num_edges, ds.feat_dim, ds.num_classes) == (10, 11, 3, 2)
    assert ds.src.tolist() == SRC and ds.dst.tolist() == DST
    assert ds.x is not None and ds.x.dtype == np.float32
    assert ds.x.tolist() == [[(3 * r + c - 7.5) / 4 for c in range(3)] for r in range(10)]
    assert ds.y is not None and ds.y.tolist() == [0, 1, -1, 0, 1, -1, 0, 1, 0, 1]
    # default_rng(3).permutation(8) == [6, 7, 2, 1, 4, 5, 3, 0]: LABELLED in that order is
    # [8, 9, 3, 1 | 6 | 7, 4, 0]; sizes 4, 1, 3.
    assert ids(ds.train_idx) == [1, 3, 8, 9]
    assert ids(ds.val_idx) == [6]
    assert ids(ds.test_idx) == [0, 4, 7]
    assert ds.require_node_task() is ds
    same = load_dataset(str(edges), features=feat, labels=labels, split="0.6,0.2,0.2",
                        split_seed=3)
    assert ids(same.train_idx) == [1, 3, 8, 9] and ids(same.test_idx) == [0, 4, 7]


def test_load_dataset_edge_list_split_files(tmp_path: Path) -> None:
    edges, _, labels = write_edge_list_inputs(tmp_path)
    (tmp_path / "tr.txt").write_text("0\n3\n4\n")
    np.save(tmp_path / "va.npy", np.array([6, 7]))
    (tmp_path / "te.txt").write_text("9\n")
    files = (tmp_path / "tr.txt", tmp_path / "va.npy", tmp_path / "te.txt")
    ds = load_dataset(str(edges), labels=labels, split=files)
    assert ds.x is None
    assert (ids(ds.train_idx), ids(ds.val_idx), ids(ds.test_idx)) == ([0, 3, 4], [6, 7], [9])
    (tmp_path / "te.txt").write_text("2\n")  # node 2 is unlabelled
    with pytest.raises(DatasetError) as exc:
        load_dataset(str(edges), labels=labels, split=files)
    assert exc.value.field == "test_idx" and "te.txt" in str(exc.value)


def test_load_dataset_split_replaces_an_existing_split(tmp_path: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    saved = graph(train_idx=np.array([0, 1, 3]), val_idx=np.array([4]),
                  test_idx=np.array([6])).save(tmp_path / "saved")
    (tmp_path / "tr.txt").write_text("8\n9\n")
    (tmp_path / "va.txt").write_text("0\n")
    (tmp_path / "te.txt").write_text("1\n3\n")
    with caplog.at_level(logging.INFO, logger="gnnpar.datasets"):
        ds = load_dataset(str(saved), split=[str(tmp_path / n) for n in
                                             ("tr.txt", "va.txt", "te.txt")])
    assert (ids(ds.train_idx), ids(ds.val_idx), ids(ds.test_idx)) == ([8, 9], [0], [1, 3])
    assert isinstance(ds.x, np.memmap)  # everything else as loaded
    assert any(r.levelno == logging.INFO and "replaced its split (train 3, val 1, test 1)"
               in r.getMessage() for r in caplog.records), caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="gnnpar.datasets"):
        ds = load_dataset(str(saved), split=(0.5, 0.25, 0.25), split_seed=7)
    assert (ids(ds.train_idx), ids(ds.val_idx), ids(ds.test_idx)) == ([0, 3, 8, 9], [6, 7],
                                                                      [1, 4])
    assert "replaced its split" in caplog.text and "seed 7" in caplog.text
    (tmp_path / "te.txt").write_text("9\n")  # also in train
    with pytest.raises(DatasetError) as exc:
        load_dataset(str(saved), split=(tmp_path / "tr.txt", tmp_path / "va.txt",
                                        tmp_path / "te.txt"))
    assert exc.value.field == "test_idx" and "te.txt" in str(exc.value)
    assert "disjoint" in str(exc.value)


def test_load_dataset_random_split_of_a_synthetic_graph() -> None:
    spec = "synthetic:sbm?nodes=200&avg_degree=4&classes=3&feat_dim=2&seed=1"
    ds = load_dataset(spec, split=(0.1, 0.1, 0.8), split_seed=5)
    assert (len(ds.train_idx), len(ds.val_idx), len(ds.test_idx)) == (20, 20, 160)
    assert sorted(ids(ds.train_idx) + ids(ds.val_idx) + ids(ds.test_idx)) == list(range(200))


def test_load_dataset_random_split_without_labels_names_the_spec(tmp_path: Path) -> None:
    edges, _, _ = write_edge_list_inputs(tmp_path)
    with pytest.raises(DatasetError) as exc:
        load_dataset(str(edges), split=(0.6, 0.2, 0.2))
    assert exc.value.field == "y" and str(edges) in str(exc.value)
    assert "--labels" in str(exc.value)


@pytest.mark.parametrize("kind", ["synthetic", "npz", "saved"])
@pytest.mark.parametrize("arg", ["features", "labels"])
def test_features_or_labels_for_a_non_edge_list_spec(tmp_path: Path, kind: str,
                                                     arg: str) -> None:
    np.save(tmp_path / "f.npy", X)
    np.savez(tmp_path / "g.npz", src=np.array(SRC), dst=np.array(DST))
    graph().save(tmp_path / "saved")
    spec = {"synthetic": "synthetic:sbm?nodes=10", "npz": str(tmp_path / "g.npz"),
            "saved": str(tmp_path / "saved")}[kind]
    with pytest.raises(DatasetError) as exc:
        load_dataset(spec, **{arg: tmp_path / "f.npy"})  # type: ignore[arg-type]
    assert exc.value.field == arg and exc.value.path == spec
    assert "edge-list" in exc.value.message and f"--{arg}" in exc.value.message
    assert exc.value.fix and ".npz" in exc.value.fix


def test_load_dataset_bad_split_argument(tmp_path: Path) -> None:
    edges, _, labels = write_edge_list_inputs(tmp_path)
    for bad in [(0.5, "a.npy", 0.2), (0.5, 0.5), (0.8, 0.3, 0.0)]:
        with pytest.raises(DatasetError) as exc:
            load_dataset(str(edges), labels=labels, split=bad)  # type: ignore[arg-type]
        assert exc.value.field == "split", bad

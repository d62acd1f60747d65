"""TypedGraphDataset: hand-checked typed graphs, disk, PyG, OGB's typed layout, typed npz."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import HeteroData

from gnnpar.datasets.config import DataConfig
from gnnpar.datasets.graph import GraphDataset
from gnnpar.datasets.loaders import from_npz
from gnnpar.datasets.ogb import load_ogb
from gnnpar.datasets.pyg import from_pyg, from_pyg_typed
from gnnpar.datasets.spec import load_dataset
from gnnpar.datasets.synthetic import typed
from gnnpar.datasets.typed import TypedGraphDataset
from gnnpar.errors import DatasetError
from gnnpar.testing import typed_reference as R  # the PyG references of the typed tests
from gnnpar.typed import TypedLayout
from tests.helpers.ogb_files import write_typed_layout

# A hand-written typed graph; the target type is not the first type, so ids shift.
NUM_NODES = {"author": 3, "paper": 4, "venue": 2}
WRITES = ("author", "writes", "paper")
CITES = ("paper", "cites", "paper")
IN = ("paper", "in", "venue")
EDGES = {WRITES: ([0, 1, 2, 2], [0, 0, 1, 3]), CITES: ([1, 2], [0, 1]),
         IN: ([0, 1, 2, 3], [0, 1, 1, 0])}
X_PAPER = np.arange(8, dtype=np.float32).reshape(4, 2) / 2
X_VENUE = -np.arange(6, dtype=np.float32).reshape(2, 3)
Y = np.array([0, 1, -1, 1])
SPLIT = {"train_idx": [0], "val_idx": [1], "test_idx": [3]}


def small(**changes: object) -> TypedGraphDataset:
    fields: dict[str, object] = dict(
        num_nodes=dict(NUM_NODES),
        edges={et: (np.array(s, dtype=np.int64), np.array(d, dtype=np.int64))
               for et, (s, d) in EDGES.items()},
        x={"paper": X_PAPER.copy(), "venue": X_VENUE.copy()}, target="paper", y=Y.copy(),
        name="small", **{k: np.array(v, dtype=np.int64) for k, v in SPLIT.items()})
    fields.update(changes)
    return TypedGraphDataset(**fields)  # type: ignore[arg-type]


def assert_same(a: TypedGraphDataset, b: TypedGraphDataset) -> None:
    assert list(a.num_nodes.items()) == list(b.num_nodes.items())
    assert a.edge_types == b.edge_types and a.target == b.target
    for et in a.edge_types:
        for i in range(2):
            np.testing.assert_array_equal(a.edges[et][i], b.edges[et][i])
            assert b.edges[et][i].dtype == np.int64
    assert sorted(a.x) == sorted(b.x)
    for t in a.x:
        np.testing.assert_array_equal(a.x[t], b.x[t])
        assert b.x[t].dtype == np.float32
    np.testing.assert_array_equal(a.y, b.y)
    for fld in SPLIT:
        np.testing.assert_array_equal(getattr(a, fld), getattr(b, fld))
    assert (a.name, a.num_classes) == (b.name, b.num_classes)


# ---------------------------------------------------------------------- the dataset itself
def test_properties_and_layout_by_hand() -> None:
    ds = small().validate()
    assert ds.node_types == ("author", "paper", "venue")
    assert ds.edge_types == (WRITES, CITES, IN) and ds.num_edges == 10
    assert ds.feat_dims == {"author": 0, "paper": 2, "venue": 3} and ds.num_classes == 2
    lay = ds.layout()
    assert lay.node_offsets == (0, 3, 7, 9) and lay.edge_offsets == (0, 4, 6, 10)
    assert lay.feat_dims == (0, 2, 3) and lay.target == "paper"
    assert lay.src_types() == (0, 1, 1) and lay.dst_types() == (1, 1, 2)
    assert lay.type_index("venue") == 2 and lay.relation_index(["paper", "in", "venue"]) == 2
    assert TypedLayout.from_dict(json.loads(json.dumps(lay.to_dict()))) == lay
    with pytest.raises(DatasetError) as exc:
        lay.type_index("nope")
    assert exc.value.field == "node_types"
    bad = {**lay.to_dict(), "node_offsets": [0, 3, 2, 9]}
    with pytest.raises(DatasetError) as exc:
        TypedLayout.from_dict(bad, "meta.json")
    assert exc.value.field == "node_offsets" and "meta.json" in str(exc.value)
    summary = ds.summary()
    assert summary["nodes[paper]"] == 4 and summary["edges[paper,in,venue]"] == 4
    assert (summary["train"], summary["val"], summary["test"]) == (1, 1, 1)


def test_to_homogeneous_by_hand() -> None:
    h = small().to_homogeneous()
    assert isinstance(h, GraphDataset) and h.num_nodes == 9 and h.x is None
    # author 0..3, paper 3..7, venue 7..9; writes, then cites, then in.
    assert h.src.tolist() == [0, 1, 2, 2, 4, 5, 3, 4, 5, 6]
    assert h.dst.tolist() == [3, 3, 4, 6, 3, 4, 7, 8, 8, 7]
    assert h.y.tolist() == [-1, -1, -1, 0, 1, -1, 1, -1, -1]
    assert (h.train_idx.tolist(), h.val_idx.tolist(), h.test_idx.tolist()) == ([3], [4], [6])
    assert h.num_classes == 2 and h.name == "small"
    h.validate()
    assert small(y=None, train_idx=np.zeros(0, np.int64), val_idx=np.zeros(0, np.int64),
                 test_idx=np.zeros(0, np.int64)).to_homogeneous().y is None


def test_add_reverse_by_hand() -> None:
    ds = small().add_reverse()
    assert ds.edge_types == (WRITES, CITES, IN, ("paper", "rev_writes", "author"),
                             ("venue", "rev_in", "paper"))
    assert ds.edges["paper", "rev_writes", "author"][0] is ds.edges[WRITES][1]  # no copy
    assert ds.edges["venue", "rev_in", "paper"][1].tolist() == [0, 1, 2, 3]
    s, d = ds.edges[CITES]  # symmetrised, sorted by (dst, src)
    assert list(zip(s.tolist(), d.tolist(), strict=True)) == [(1, 0), (0, 1), (2, 1), (1, 2)]
    with pytest.raises(DatasetError) as exc:
        small(edges={WRITES: EDGES[WRITES], ("paper", "rev_writes", "author"): ([0], [0])}
              ).add_reverse()
    assert exc.value.field == "edges[paper,rev_writes,author]"


def test_reverse_modes_recognise_stored_reverses() -> None:
    # Reverses stored under a reverse's name (rev_writes) and under another name found by
    # its endpoints (venue -> paper "lists", exactly IN's edges swapped).
    s, d = EDGES[IN]
    stored = small(edges={**EDGES, ("paper", "rev_writes", "author"): EDGES[WRITES][::-1],
                          ("venue", "lists", "paper"): (d, s)})
    auto = stored.with_reverse("auto")
    assert set(auto.edge_types) == set(stored.edge_types)  # nothing added twice
    assert stored.stored_reverse(IN) == ("venue", "lists", "paper")
    assert stored.stored_reverse(WRITES) == ("paper", "rev_writes", "author")
    assert small().with_reverse("auto").edge_types == small().add_reverse().edge_types
    assert stored.with_reverse("none") is stored
    # Same endpoints but other edges: not a reverse, so auto adds one.
    other = small(edges={**EDGES, ("venue", "lists", "paper"): (d, [(v + 1) % 4 for v in s])})
    assert other.stored_reverse(IN) is None
    assert ("venue", "rev_in", "paper") in other.with_reverse("auto").edges
    with pytest.raises(DatasetError) as exc:
        stored.with_reverse("add")
    assert exc.value.field == "edges[paper,rev_writes,author]"
    assert "--reverse auto" in str(exc.value)


def test_save_load_round_trip_memory_maps(tmp_path: Path) -> None:
    ds = small()
    ds.save(tmp_path / "d")
    meta = json.loads((tmp_path / "d" / "dataset.json").read_text())
    assert (meta["format_version"], meta["kind"]) == (4, "hetero")
    assert meta["edge_types"] == [list(WRITES), list(CITES), list(IN)]
    assert sorted(p.name for p in (tmp_path / "d").glob("x_*.npy")) == ["x_1.npy", "x_2.npy"]
    back = TypedGraphDataset.load(tmp_path / "d")
    assert_same(ds, back)
    assert isinstance(back.x["paper"], np.memmap)
    assert isinstance(back.edges[CITES][0], np.memmap)
    assert_same(ds, load_dataset(str(tmp_path / "d"), reverse="none"))  # type: ignore[arg-type]
    # The spec's default, --reverse auto, adds the reverses the graph does not store.
    assert load_dataset(str(tmp_path / "d")).edge_types == (  # type: ignore[union-attr]
        WRITES, CITES, IN, ("paper", "rev_writes", "author"), ("venue", "rev_in", "paper"))
    with pytest.raises(DatasetError) as exc:
        GraphDataset.load(tmp_path / "d")
    assert exc.value.field == "kind" and "TypedGraphDataset.load" in str(exc.value)
    GraphDataset(num_nodes=2, src=np.array([0]), dst=np.array([1])).save(tmp_path / "h")
    with pytest.raises(DatasetError) as exc:
        TypedGraphDataset.load(tmp_path / "h")
    assert exc.value.field == "kind" and "GraphDataset.load" in str(exc.value)


@pytest.mark.parametrize(("changes", "field", "needle"), [
    ({"edges": {WRITES: (np.array([0]), np.array([4]))}}, "edges[author,writes,paper].dst",
     "outside [0, 4)"),
    ({"edges": {("paper", "on", "topic"): (np.array([0]), np.array([0]))}},
     "edges[paper,on,topic]", "'topic'"),
    ({"x": {"paper": np.zeros((3, 2), np.float32)}}, "x[paper]", "expected (4, F)"),
    ({"x": {"paper": np.array([[0, 1], [np.nan, 0], [0, 0], [0, 0]], np.float32)}},
     "x[paper]", "row 1"),
    ({"target": "topic"}, "target", "'topic'"),
    ({"num_nodes": {**NUM_NODES, "venue": 0}}, "num_nodes[venue]", ">= 1"),
    ({"test_idx": np.array([2])}, "test_idx", "unlabelled"),
    ({"edges": {("author", "writes to", "paper"): (np.array([0]), np.array([0]))}},
     "edges[author,writes to,paper]", "not a valid name"),
])
def test_bad_inputs_name_the_field(changes: dict[str, object], field: str, needle: str) -> None:
    with pytest.raises(DatasetError) as exc:
        small(**changes).validate("here.npz")
    assert exc.value.field == field and needle in str(exc.value), str(exc.value)
    assert "here.npz" in str(exc.value) and exc.value.fix


def test_random_split_and_require_node_task() -> None:
    ds = small().random_split((0.5, 0.5, 0.0), seed=3)
    labelled = [0, 1, 3]
    got = ds.train_idx.tolist() + ds.val_idx.tolist() + ds.test_idx.tolist()
    assert sorted(got) == labelled and (len(ds.train_idx), len(ds.val_idx)) == (1, 1)
    again = small().random_split((0.5, 0.5, 0.0), seed=3)
    assert again.train_idx.tolist() == ds.train_idx.tolist()
    assert ds.edges is not small().edges and ds.x["paper"] is not None
    with pytest.raises(DatasetError) as exc:
        small(y=None, test_idx=np.zeros(0, np.int64), train_idx=np.zeros(0, np.int64),
              val_idx=np.zeros(0, np.int64)).require_node_task("spec")
    assert exc.value.field == "y" and exc.value.path == "spec"
    with pytest.raises(DatasetError) as exc:
        small(train_idx=np.zeros(0, np.int64)).require_node_task()
    assert exc.value.field == "train_idx"


# ---------------------------------------------------------------------- PyG
def test_to_pyg_and_back() -> None:
    ds = small()
    data = ds.to_pyg()
    assert isinstance(data, HeteroData)
    assert data.node_types == ["author", "paper", "venue"]
    assert data.edge_types == [WRITES, CITES, IN]
    assert data["author"].num_nodes == 3 and "x" not in data["author"]
    torch.testing.assert_close(data["venue"].x, torch.from_numpy(X_VENUE))
    assert data[IN].edge_index.tolist() == [EDGES[IN][0], EDGES[IN][1]]
    assert data["paper"].y.tolist() == Y.tolist()
    assert data["paper"].test_mask.tolist() == [False, False, False, True]
    assert_same(ds, from_pyg_typed(data, name="small"))
    assert_same(ds, from_pyg(data, name="small"))  # type: ignore[arg-type]
    data["venue"].y = torch.zeros(2, dtype=torch.long)
    with pytest.raises(DatasetError) as exc:
        from_pyg_typed(data)
    assert exc.value.field == "target" and "paper, venue" in str(exc.value)
    assert from_pyg_typed(data, target="paper").target == "paper"


# ---------------------------------------------------------------------- OGB typed layout
def write_small_layout(d: Path, split: str = "time") -> None:
    """The hand-written graph in ogbn-mag's layout."""
    write_typed_layout(d, small(), split)


def test_ogb_typed_layout_through_ogb_twice(tmp_path: Path) -> None:
    write_small_layout(tmp_path / "tiny")
    meta = {"dir_path": "tiny", "split": "time", "num tasks": "1", "num classes": "3",
            "add_inverse_edge": "False", "binary": "False", "is hetero": "True",
            "name": "tinymag"}
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    expected = small(y=np.where(Y < 0, 0, Y), name="tinymag", num_classes=3).add_reverse()
    first = load_dataset(str(tmp_path / "meta.json"))
    assert isinstance(first, TypedGraphDataset)
    assert_same(expected, first)
    assert first.edge_types[-2:] == (("paper", "rev_writes", "author"),
                                     ("venue", "rev_in", "paper"))
    assert (tmp_path / "tiny" / "gnnpar-v1" / "dataset.json").is_file()
    assert not (tmp_path / "tiny" / "processed").exists()
    for f in (tmp_path / "tiny" / "raw").rglob("*.gz"):
        f.unlink()  # the second load reads only the cache
    second = load_ogb("tinymag", meta_dict=tmp_path / "meta.json")
    assert isinstance(second, TypedGraphDataset)
    assert_same(expected, second)
    assert isinstance(second.x["paper"], np.memmap)
    assert isinstance(second.edges["paper", "rev_writes", "author"][0], np.memmap)
    stored = load_ogb("tinymag", meta_dict=tmp_path / "meta.json", add_reverse=False)
    assert_same(small(y=np.where(Y < 0, 0, Y), name="tinymag", num_classes=3), stored)


def test_ogb_typed_binary_layout(tmp_path: Path) -> None:
    raw = tmp_path / "b" / "raw"
    raw.mkdir(parents=True)
    np.savez(raw / "num_nodes_dict.npz", **{t: np.array([n]) for t, n in NUM_NODES.items()})
    np.savez(raw / "num_edges_dict.npz",
             **{"___".join(et): np.array([len(s)]) for et, (s, _) in EDGES.items()})
    np.savez(raw / "edge_index_dict.npz",
             **{"___".join(et): np.array([s, d]) for et, (s, d) in EDGES.items()})
    np.savez(raw / "node_feat.npz", paper=X_PAPER.astype(np.float16), venue=X_VENUE)
    np.savez(raw / "node-label.npz", paper=np.where(Y < 0, np.nan, Y).reshape(-1, 1))
    write_small_layout(tmp_path / "csv")  # borrow its split folder
    (tmp_path / "csv" / "split").rename(tmp_path / "b" / "split")
    meta = {"dir_path": str(tmp_path / "b"), "split": "time", "num tasks": "1",
            "add_inverse_edge": "False", "binary": "True", "is hetero": "True"}
    ds = load_ogb("b", meta_dict=meta, add_reverse=False)
    assert_same(small(name="b"), ds)  # type: ignore[arg-type]


def test_ogbn_mag_name_uses_master_csv(tmp_path: Path) -> None:
    write_small_layout(tmp_path / "ogbn_mag")
    ds = load_ogb("ogbn-mag", root=tmp_path)
    assert isinstance(ds, TypedGraphDataset)
    assert (ds.target, ds.num_classes, ds.name) == ("paper", 349, "ogbn-mag")
    assert len(ds.edge_types) == 5


def test_ogb_typed_layout_missing_split(tmp_path: Path) -> None:
    write_small_layout(tmp_path / "t", split="random")
    meta = {"dir_path": str(tmp_path / "t"), "split": "time", "num tasks": "1",
            "add_inverse_edge": "False", "binary": "False", "is hetero": "True"}
    with pytest.raises(DatasetError) as exc:
        load_ogb("t", meta_dict=meta)
    assert exc.value.field == "split" and "nodetype-has-split.csv.gz" in str(exc.value)


# ---------------------------------------------------------------------- typed npz
def test_typed_npz(tmp_path: Path) -> None:
    arrays = {"num_nodes__author": 3, "num_nodes__paper": 4, "num_nodes__venue": 2,
              "x__paper": X_PAPER, "x__venue": X_VENUE, "target": np.array("paper"),
              "y": Y, **{k: np.array(v) for k, v in SPLIT.items()}}
    arrays.update({f"edge_index__{'__'.join(et)}": np.array([s, d]) for et, (s, d)
                   in EDGES.items()})
    np.savez(tmp_path / "small.npz", **arrays)
    assert_same(small(), from_npz(tmp_path / "small.npz"))  # type: ignore[arg-type]
    bad = {**arrays, "edge_index__author__writes__paper": np.array([[0], [9]])}
    np.savez(tmp_path / "bad.npz", **bad)
    with pytest.raises(DatasetError) as exc:
        load_dataset(str(tmp_path / "bad.npz"))
    assert str(tmp_path / "bad.npz") in str(exc.value)
    assert exc.value.field == "edge_index__author__writes__paper (dst row)"
    del bad["num_nodes__venue"]
    np.savez(tmp_path / "bad.npz", **bad)
    with pytest.raises(DatasetError) as exc:
        from_npz(tmp_path / "bad.npz")
    assert exc.value.field in ("x__venue", "edge_index__paper__in__venue")


# ---------------------------------------------------------------------- spec, config
def test_spec_split_applies_to_the_target(tmp_path: Path) -> None:
    small().save(tmp_path / "d")
    ds = load_dataset(str(tmp_path / "d"), split=(0.34, 0.33, 0.33), split_seed=1)
    assert isinstance(ds, TypedGraphDataset)
    assert sorted([*ds.train_idx, *ds.val_idx, *ds.test_idx]) == [0, 1, 3]
    with pytest.raises(DatasetError) as exc:
        DataConfig(dataset=str(tmp_path / "d")).load()
    assert exc.value.field == "data.dataset" and "to_homogeneous" in str(exc.value)
    assert isinstance(DataConfig(dataset=str(tmp_path / "d")).load_any(), TypedGraphDataset)


# ---------------------------------------------------------------------- synthetic:typed
def test_typed_generator_deterministic_and_spec() -> None:
    ds = typed()
    assert_same(ds, typed())
    assert ds.node_types == ("paper", "author", "venue") and ds.target == "paper"
    assert ds.edge_types == (("author", "writes", "paper"), ("paper", "published_in", "venue"),
                             ("paper", "cites", "paper"), ("paper", "rev_writes", "author"),
                             ("venue", "rev_published_in", "paper"))
    assert ds.feat_dims == {"paper": 32, "author": 0, "venue": 0}
    assert [len(ds.train_idx), len(ds.val_idx), len(ds.test_idx)] == [1800, 600, 600]
    venue = ds.edges["paper", "published_in", "venue"][1]
    assert 0.85 < float(np.mean(venue % 6 == ds.y)) < 0.95  # venue_homophily 0.9 (+ chance)
    assert not np.array_equal(typed(seed=1).y, ds.y)
    small_ds = load_dataset("synthetic:typed?papers=500&authors=100&venues=12&classes=4")
    assert isinstance(small_ds, TypedGraphDataset)
    assert small_ds.num_nodes == {"paper": 500, "author": 100, "venue": 12}


def test_typed_model_beats_homogeneous_on_synthetic_typed() -> None:
    """The generator's claim: relation-specific weights read the label, mean SAGE cannot.

    Featureless types (author, venue) get all-zero input features in both models.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(min(threads, 4))
    try:
        ds = typed()
        typed_acc = R.typed_accuracy(ds, embed=False)
        homo_acc = R.homogeneous_accuracy(ds)
    finally:
        torch.set_num_threads(threads)
    print(f"typed {typed_acc:.3f} homogeneous {homo_acc:.3f}")
    assert typed_acc > 0.8, typed_acc
    assert typed_acc > homo_acc + 0.05, (typed_acc, homo_acc)

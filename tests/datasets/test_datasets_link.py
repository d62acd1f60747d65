"""Link-prediction inputs: OGB link layouts, PyG RandomLinkSplit, .npz, synthetic:sbm?task=link.

Every expected array is the one the test generated itself (or RandomLinkSplit produced),
never one read back through gnnpar.
"""

from __future__ import annotations

import functools
import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.transforms import RandomLinkSplit
from torch_geometric.utils import coalesce, to_undirected

from gnnpar.datasets.graph import GraphDataset
from gnnpar.datasets.link_split import check_link_fields
from gnnpar.datasets.loaders import from_npz
from gnnpar.datasets.ogb import load_ogb
from gnnpar.datasets.pyg import from_pyg_link
from gnnpar.datasets.spec import load_dataset, parse_synthetic, synthetic_keys
from gnnpar.datasets.splits import split_sizes
from gnnpar.datasets.synthetic import sbm
from gnnpar.errors import DatasetError
from tests.helpers.ogb_files import csv_gz

N = 40
NUM_CAND = 6  # citation2-like candidates per positive


def pairs(a: np.ndarray) -> set[tuple[int, int]]:
    return {(int(u), int(v)) for u, v in np.asarray(a).reshape(-1, 2)}


def graph_pairs(ds: GraphDataset) -> set[tuple[int, int]]:
    return pairs(np.stack([np.asarray(ds.src), np.asarray(ds.dst)], 1))


# ---------------------------------------------------------------------- OGB link layouts
def random_pairs(rng: np.random.Generator, k: int, directed: bool) -> np.ndarray:
    """``k`` distinct non-loop pairs (``u < v`` when undirected)."""
    out: dict[tuple[int, int], None] = {}
    while len(out) < k:
        u, v = (int(t) for t in rng.integers(0, N, 2))
        if u == v:
            continue
        out[(u, v) if directed else (min(u, v), max(u, v))] = None
    return np.array(list(out), dtype=np.int64)


def link_meta(dir_path: str, *, add_inverse_edge: bool, binary: bool = False,
              **extra: str) -> dict[str, str]:
    """A meta_dict with every key ogb's LinkPropPredDataset reads."""
    return {"dir_path": dir_path, "split": "time", "add_inverse_edge": str(add_inverse_edge),
            "binary": str(binary), "is hetero": "False", "task type": "link prediction",
            "eval metric": "mrr", "download_name": "unused", "version": "1",
            "additional node files": "None", "additional edge files": "None",
            "has_node_attr": "True", "has_edge_attr": "False", **extra}


def write_link_layout(d: Path, kind: str, seed: int = 0) -> dict[str, Any]:
    """OGB's csv link layout: raw/*.csv.gz and split/time/{train,valid,test}.pt.

    ``kind="citation2"``: directed, the split's train edges are the graph's, negatives are
    ``target_node_neg`` [M, C], saved as numpy arrays (as in the real ogbl-citation2
    files), with edge features.  ``kind="collab"``: the graph is the train edges once
    (OGB adds the reverses), ``edge`` [M, 2] tensors and ``edge_neg`` [M', 2] negatives.
    Returns the generated arrays.
    """
    rng = np.random.default_rng(seed)
    directed = kind == "citation2"
    allp = random_pairs(rng, 90, directed)
    train, val, test = allp[:70], allp[70:80], allp[80:]
    x = rng.standard_normal((N, 4)).astype(np.float32).round(3)
    csv_gz(d / "raw" / "edge.csv.gz", train)
    csv_gz(d / "raw" / "num-node-list.csv.gz", np.array([N]))
    csv_gz(d / "raw" / "num-edge-list.csv.gz", np.array([len(train)]))
    csv_gz(d / "raw" / "node-feat.csv.gz", x)
    out: dict[str, Any] = {"x": x, "train": train, "val": val, "test": test}
    split = d / "split" / "time"
    split.mkdir(parents=True)
    if directed:
        edge_feat = rng.standard_normal((len(train), 2)).astype(np.float32).round(3)
        csv_gz(d / "raw" / "edge-feat.csv.gz", edge_feat)
        out["edge_feat"] = edge_feat
        for name, pos in (("valid", val), ("test", test)):
            neg = rng.integers(0, N, (len(pos), NUM_CAND)).astype(np.int64)
            out[f"{name}_neg"] = neg
            torch.save({"source_node": pos[:, 0].copy(), "target_node": pos[:, 1].copy(),
                        "target_node_neg": neg}, split / f"{name}.pt")
        torch.save({"source_node": train[:, 0].copy(), "target_node": train[:, 1].copy()},
                   split / "train.pt")
    else:
        for name, pos in (("valid", val), ("test", test)):
            neg = random_pairs(rng, 15, directed=False)
            out[f"{name}_neg"] = neg
            torch.save({"edge": torch.from_numpy(pos), "weight": torch.ones(len(pos)),
                        "year": torch.full((len(pos),), 2018), "edge_neg": torch.from_numpy(neg)},
                       split / f"{name}.pt")
        torch.save({"edge": torch.from_numpy(train), "weight": torch.ones(len(train)),
                    "year": torch.full((len(train),), 2017)}, split / "train.pt")
    (d / "RELEASE_v1.txt").write_text("")  # ogb asks interactively without it
    (d / "processed").mkdir()  # ogb's pre_process writes its torch.save cache there
    return out


def ogb_reference(name: str, meta: dict[str, str], monkeypatch: pytest.MonkeyPatch
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(graph, get_edge_split())`` of the real ogb package for the same files.

    ogb 1.3.6's plain ``torch.load`` cannot read numpy arrays under torch >= 2.6's
    weights_only default; these are the test's own files, so it may load them fully.
    """
    from ogb.linkproppred import LinkPropPredDataset

    monkeypatch.setattr(torch, "load", functools.partial(torch.load, weights_only=False))
    dataset = LinkPropPredDataset(name=name, meta_dict=meta)
    split = dataset.get_edge_split()
    monkeypatch.undo()
    return dataset[0], split


def both_ways(e: np.ndarray) -> np.ndarray:
    return np.concatenate([e, e[:, ::-1]])


def check_citation2(ds: GraphDataset, ref: dict[str, Any]) -> None:
    assert ds.num_nodes == N and ds.y is None and ds.num_classes == 0
    np.testing.assert_array_equal(np.stack([ds.src, ds.dst], 1), ref["train"])  # as stored
    np.testing.assert_array_equal(ds.x, ref["x"])
    np.testing.assert_array_equal(ds.edge_attr, ref["edge_feat"])
    assert ds.edge_attr.dtype == np.float32 and ds.x.dtype == np.float32
    np.testing.assert_array_equal(ds.train_edges, ref["train"])
    np.testing.assert_array_equal(ds.val_edges, ref["val"])
    np.testing.assert_array_equal(ds.test_edges, ref["test"])
    np.testing.assert_array_equal(ds.val_neg, ref["valid_neg"])
    np.testing.assert_array_equal(ds.test_neg, ref["test_neg"])
    assert ds.neg_kind == "per_edge" and ds.val_neg.shape == (10, NUM_CAND)
    for fld in ("train_idx", "val_idx", "test_idx"):
        assert len(getattr(ds, fld)) == 0
    for fld in ("train_edges", "val_edges", "test_edges", "val_neg", "test_neg"):
        assert getattr(ds, fld).dtype == np.int64


def test_citation2_like_layout_matches_ogb_and_loads_twice(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "cit"
    ref = write_link_layout(d, "citation2")
    meta = link_meta(str(d), add_inverse_edge=False)
    graph, split = ogb_reference("tiny-citation2", meta, monkeypatch)
    first = load_ogb("tiny-citation2", meta_dict=meta)
    check_citation2(first, ref)
    # ... and it is what ogb's own loader gives for the same files.
    np.testing.assert_array_equal(np.stack([first.src, first.dst]), graph["edge_index"])
    np.testing.assert_array_equal(first.edge_attr, graph["edge_feat"])
    np.testing.assert_array_equal(first.val_neg, np.asarray(split["valid"]["target_node_neg"]))
    np.testing.assert_array_equal(first.test_edges[:, 0], np.asarray(split["test"]["source_node"]))
    assert (d / "gnnpar-v1" / "dataset.json").is_file()
    # The second load reads only the cache (not the raw files, the .pt files, nor ogb's).
    for sub in ("raw", "split", "processed"):
        for f in (d / sub).rglob("*"):
            if f.is_file():
                f.unlink()
    second = load_ogb("tiny-citation2", meta_dict=meta)
    check_citation2(second, ref)
    assert isinstance(second.val_neg, np.memmap) and isinstance(second.edge_attr, np.memmap)


def check_collab(ds: GraphDataset, ref: dict[str, Any]) -> None:
    assert ds.num_nodes == N and ds.y is None and ds.edge_attr is None
    # add_inverse_edge: every stored edge and its reverse, as ogb interleaves them.
    expected = np.stack([ref["train"], ref["train"][:, ::-1]], 1).reshape(-1, 2)
    np.testing.assert_array_equal(np.stack([ds.src, ds.dst], 1), expected)
    np.testing.assert_array_equal(ds.x, ref["x"])
    np.testing.assert_array_equal(ds.train_edges, ref["train"])
    np.testing.assert_array_equal(ds.val_edges, ref["val"])
    np.testing.assert_array_equal(ds.test_edges, ref["test"])
    np.testing.assert_array_equal(ds.val_neg, ref["valid_neg"])
    np.testing.assert_array_equal(ds.test_neg, ref["test_neg"])
    assert ds.neg_kind == "shared" and ds.test_neg.shape == (15, 2)


def test_collab_like_layout_matches_ogb_and_loads_twice(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "col"
    ref = write_link_layout(d, "collab", seed=1)
    meta = link_meta(str(d), add_inverse_edge=True, **{"eval metric": "hits@50"})
    graph, split = ogb_reference("tiny-collab", meta, monkeypatch)
    for _ in range(2):
        ds = load_ogb("tiny-collab", meta_dict=meta)
        check_collab(ds, ref)
        np.testing.assert_array_equal(np.stack([ds.src, ds.dst]), graph["edge_index"])
        np.testing.assert_array_equal(ds.val_neg, split["valid"]["edge_neg"].numpy())
        np.testing.assert_array_equal(ds.test_edges, split["test"]["edge"].numpy())
    assert isinstance(ds.src, np.memmap)  # the second one came from the cache


def test_named_ogbl_dataset_uses_link_master_csv_and_spec(tmp_path: Path) -> None:
    # ogbl-collab's master.csv entry: csv layout, split "time", add_inverse_edge True.
    ref = write_link_layout(tmp_path / "ogbl_collab", "collab", seed=2)
    ds = load_ogb("ogbl-collab", root=tmp_path)
    check_collab(ds, ref)
    assert ds.name == "ogbl-collab"
    again = load_dataset("ogbl-collab", root=tmp_path)  # the spec form
    np.testing.assert_array_equal(again.val_edges, ref["val"])


def test_json_meta_dict_without_task_type_is_recognised_by_its_pt_files(tmp_path: Path) -> None:
    ref = write_link_layout(tmp_path / "cit", "citation2", seed=3)
    meta = link_meta("cit", add_inverse_edge=False)
    del meta["task type"]
    spec = tmp_path / "meta.json"
    spec.write_text(json.dumps({**meta, "name": "mine"}))
    ds = load_dataset(str(spec))
    check_citation2(ds, ref)
    assert ds.name == "mine"


def test_binary_layout_with_split_dict_pt(tmp_path: Path) -> None:
    # ogbl-vessel-style: raw/data.npz, no inverse edges; training negatives are skipped.
    d = tmp_path / "bin"
    rng = np.random.default_rng(4)
    allp = random_pairs(rng, 60, directed=False)
    train, val, test = allp[:40], allp[40:50], allp[50:]
    x = rng.standard_normal((N, 3)).astype(np.float16)
    (d / "raw").mkdir(parents=True)
    np.savez(d / "raw" / "data.npz", edge_index=train.T.copy(), num_nodes_list=np.array([N]),
             num_edges_list=np.array([len(train)]), node_feat=x)
    negs = {p: random_pairs(rng, 8, directed=False) for p in ("train", "valid", "test")}
    (d / "split" / "spatial").mkdir(parents=True)
    torch.save({p: {"edge": torch.from_numpy(e), "edge_neg": torch.from_numpy(negs[p])}
                for p, e in (("train", train), ("valid", val), ("test", test))},
               d / "split" / "spatial" / "split_dict.pt")
    meta = link_meta(str(d), add_inverse_edge=False, binary=True, split="spatial")
    ds = load_ogb("tiny-vessel", meta_dict=meta)
    np.testing.assert_array_equal(np.stack([ds.src, ds.dst], 1), train)
    np.testing.assert_array_equal(ds.x, x.astype(np.float32))
    np.testing.assert_array_equal(ds.train_edges, train)
    np.testing.assert_array_equal(ds.val_edges, val)
    np.testing.assert_array_equal(ds.test_neg, negs["test"])
    assert ds.neg_kind == "shared"


def test_bad_link_split_files_name_the_file_and_field(tmp_path: Path) -> None:
    d = tmp_path / "cit"
    ref = write_link_layout(d, "citation2")
    meta = link_meta(str(d), add_inverse_edge=False)
    valid = d / "split" / "time" / "valid.pt"
    # Candidates for 9 positives of 10.
    torch.save({"source_node": ref["val"][:, 0].copy(), "target_node": ref["val"][:, 1].copy(),
                "target_node_neg": ref["valid_neg"][:9]}, valid)
    with pytest.raises(DatasetError) as exc:
        load_ogb("t", meta_dict=meta)
    assert exc.value.field == "target_node_neg" and exc.value.path == str(valid)
    assert "9 rows for 10 positives" in str(exc.value) and exc.value.fix
    # A missing key.
    torch.save({"source_node": ref["val"][:, 0].copy()}, valid)
    with pytest.raises(DatasetError) as exc:
        load_ogb("t", meta_dict=meta)
    assert exc.value.field == "target_node" and "valid.pt" in str(exc.value)
    # A validation edge that is also a message-passing edge (leaks the answer).
    leak = ref["train"][:10]
    torch.save({"source_node": leak[:, 0].copy(), "target_node": leak[:, 1].copy(),
                "target_node_neg": ref["valid_neg"]}, valid)
    with pytest.raises(DatasetError) as exc:
        load_ogb("t", meta_dict=meta)
    assert exc.value.field == "val_edges" and exc.value.path == str(d / "split" / "time")
    assert not (d / "gnnpar-v1").exists()


class _Payload:
    """Unpickling this runs code: it opens (creates) ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return open, (str(self.marker), "w")


def test_split_file_that_would_run_code_is_refused_unrun(tmp_path: Path) -> None:
    d = tmp_path / "cit"
    ref = write_link_layout(d, "citation2")
    marker = tmp_path / "pwned"
    train = d / "split" / "time" / "train.pt"
    torch.save({"source_node": _Payload(marker), "target_node": ref["train"][:, 1]}, train)
    with pytest.raises(pickle.UnpicklingError):  # a plain unpickler would run it
        torch.load(train, weights_only=True)
    with pytest.raises(DatasetError) as exc:
        load_ogb("t", meta_dict=link_meta(str(d), add_inverse_edge=False))
    assert exc.value.path == str(train) and exc.value.field == "split"
    assert "weights-only" in str(exc.value)
    assert not marker.exists()
    # An object array is refused as well (only numeric numpy arrays pass).
    torch.save({"source_node": np.array([0, "x"], dtype=object),
                "target_node": ref["train"][:, 1]}, train)
    with pytest.raises(DatasetError) as exc:
        load_ogb("t", meta_dict=link_meta(str(d), add_inverse_edge=False))
    assert exc.value.path == str(train)


def test_split_files_of_older_torch_and_numpy_load(tmp_path: Path) -> None:
    # torch's legacy (pre-zip) format, with numpy 1's module name for its arrays, as a
    # 2020 OGB file would have; and tensors next to arrays.
    d = tmp_path / "cit"
    ref = write_link_layout(d, "citation2")
    train = d / "split" / "time" / "train.pt"
    torch.save({"source_node": ref["train"][:, 0].copy(),
                "target_node": torch.from_numpy(ref["train"][:, 1].copy())}, train,
               _use_new_zipfile_serialization=False)
    data = train.read_bytes()
    assert data.count(b"numpy._core.multiarray") == 1
    train.write_bytes(data.replace(b"numpy._core.multiarray", b"numpy.core.multiarray"))
    ds = load_ogb("t", meta_dict=link_meta(str(d), add_inverse_edge=False))
    check_citation2(ds, ref)


def test_knowledge_graphs_are_refused(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as exc:
        load_ogb("ogbl-wikikg2", root=tmp_path)
    assert exc.value.field == "task type" and "knowledge graph" in str(exc.value)
    with pytest.raises(DatasetError) as exc:
        load_ogb("ogbl-biokg", root=tmp_path)
    assert exc.value.field == "is hetero"
    with pytest.raises(DatasetError) as exc:
        load_ogb("ogbl-nope", root=tmp_path)
    assert exc.value.field == "name" and "ogbl-collab" in str(exc.value)
    assert not any(tmp_path.iterdir())


# ---------------------------------------------------------------------- PyG RandomLinkSplit
def random_graph(directed: bool, seed: int = 0, n: int = 60, m: int = 300) -> Data:
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, m), generator=g)
    ei = ei[:, ei[0] != ei[1]]
    ei = coalesce(ei, num_nodes=n) if directed else to_undirected(ei, num_nodes=n)
    attr = torch.stack([(ei[0] + ei[1]).float(), (ei[0] - ei[1]).abs().float()], 1)
    return Data(x=torch.randn(n, 5, generator=g), edge_index=ei, edge_attr=attr,
                y=torch.randint(0, 3, (n,), generator=g), num_nodes=n)


def as_pairs(t: torch.Tensor) -> np.ndarray:
    return t.t().numpy().astype(np.int64)


@pytest.mark.parametrize("undirected", [True, False])
def test_from_pyg_link_loads_random_link_split(undirected: bool) -> None:
    data = random_graph(directed=not undirected)
    torch.manual_seed(0)
    split = RandomLinkSplit(num_val=0.1, num_test=0.2, is_undirected=undirected)
    train, val, test = split(data)
    ds = from_pyg_link(train, val, test, name="rls")
    np.testing.assert_array_equal(np.stack([ds.src, ds.dst]), train.edge_index.numpy())
    np.testing.assert_array_equal(ds.x, data.x.numpy())
    np.testing.assert_array_equal(ds.y, data.y.numpy())
    # edge_attr follows the message-passing edges (its values are a function of the ends).
    np.testing.assert_array_equal(ds.edge_attr, np.stack(
        [ds.src + ds.dst, np.abs(ds.src - ds.dst)], 1).astype(np.float32))
    lab = train.edge_label.numpy()
    assert (lab == 0).any()  # RandomLinkSplit added training negatives; they are dropped
    np.testing.assert_array_equal(ds.train_edges, as_pairs(train.edge_label_index)[lab == 1])
    for part, d in (("val", val), ("test", test)):
        lab = d.edge_label.numpy()
        pairs_ = as_pairs(d.edge_label_index)
        np.testing.assert_array_equal(getattr(ds, f"{part}_edges"), pairs_[lab == 1])
        np.testing.assert_array_equal(getattr(ds, f"{part}_neg"), pairs_[lab == 0])
        assert len(getattr(ds, f"{part}_neg")) == (lab == 1).sum()  # neg_sampling_ratio 1
    assert ds.neg_kind == "shared"
    # Held-out positives are not message-passing edges, and nothing was lost.
    held = pairs(ds.val_edges) | pairs(ds.test_edges)
    assert not held & graph_pairs(ds)
    every = pairs(as_pairs(data.edge_index))
    if undirected:
        every = {(min(u, v), max(u, v)) for u, v in every}
    assert pairs(ds.train_edges) | held == every


def test_from_pyg_link_split_labels_and_no_train_negatives() -> None:
    data = random_graph(directed=False, seed=1)
    torch.manual_seed(1)
    train, val, test = RandomLinkSplit(num_val=0.1, num_test=0.1, is_undirected=True,
                                       split_labels=True,
                                       add_negative_train_samples=False)(data)
    ds = from_pyg_link(train, val, test)
    np.testing.assert_array_equal(ds.train_edges, as_pairs(train.pos_edge_label_index))
    np.testing.assert_array_equal(ds.val_edges, as_pairs(val.pos_edge_label_index))
    np.testing.assert_array_equal(ds.test_neg, as_pairs(test.neg_edge_label_index))
    # Only validation data: no test edges.
    only_val = from_pyg_link(train, val)
    assert only_val.test_edges.shape == (0, 2) and len(only_val.val_edges) == len(ds.val_edges)


def test_from_pyg_link_bad_inputs() -> None:
    x = torch.randn(4, 2)
    train = Data(x=x, edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]]), num_nodes=4)
    leaky = Data(x=x, edge_index=train.edge_index, num_nodes=4,
                 edge_label_index=torch.tensor([[1, 0], [2, 3]]),
                 edge_label=torch.tensor([1.0, 0.0]))
    with pytest.raises(DatasetError) as exc:
        from_pyg_link(train, leaky, name="g")
    assert exc.value.field == "val_edges" and "coalesce" in str(exc.value.fix)
    # Without supervision edges train_data's graph is the training supervision ...
    ds = from_pyg_link(train)
    np.testing.assert_array_equal(ds.train_edges, [[0, 1], [1, 2], [2, 3]])
    # ... but a validation Data must have them.
    with pytest.raises(DatasetError) as exc:
        from_pyg_link(train, Data(x=x, edge_index=train.edge_index, num_nodes=4), name="g")
    assert exc.value.field == "edge_label_index" and "val_data" in str(exc.value)
    bad = Data(x=x, edge_index=train.edge_index, num_nodes=4,
               edge_label_index=torch.tensor([[0], [3]]), edge_label=torch.ones(2))
    with pytest.raises(DatasetError) as exc:
        from_pyg_link(train, bad)
    assert exc.value.field == "edge_label"
    with pytest.raises(DatasetError) as exc:
        from_pyg_link(train, Data(x=torch.randn(5, 2), edge_index=train.edge_index,
                                  edge_label_index=torch.tensor([[0], [3]]), num_nodes=5))
    assert exc.value.field == "num_nodes"


# ---------------------------------------------------------------------- .npz
def test_npz_link_members_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    allp = random_pairs(rng, 50, directed=True)
    graph, val, test = allp[:40], allp[40:45], allp[45:]
    attr = rng.standard_normal(40).astype(np.float64)  # [E]: one feature per edge
    neg = random_pairs(rng, 7, directed=True)
    np.savez(tmp_path / "g.npz", edge_index=graph.T, num_nodes=N, edge_attr=attr,
             train_edges=graph, val_edges=val, test_edges=test, val_neg=neg, test_neg=neg,
             neg_kind=np.array("shared"))
    ds = from_npz(tmp_path / "g.npz")
    np.testing.assert_array_equal(ds.edge_attr, attr.astype(np.float32)[:, None])
    np.testing.assert_array_equal(ds.train_edges, graph)
    np.testing.assert_array_equal(ds.test_edges, test)
    np.testing.assert_array_equal(ds.val_neg, neg)
    assert ds.neg_kind == "shared"
    np.savez(tmp_path / "bad.npz", edge_index=graph.T, neg_kind=np.array("sometimes"))
    with pytest.raises(DatasetError) as exc:
        from_npz(tmp_path / "bad.npz")
    assert exc.value.field == "neg_kind" and "bad.npz" in str(exc.value)
    np.savez(tmp_path / "bad2.npz", edge_index=graph.T, edge_attr=attr[:5])
    with pytest.raises(DatasetError) as exc:
        from_npz(tmp_path / "bad2.npz")
    assert exc.value.field == "edge_attr" and "40 edges" in str(exc.value)


# ---------------------------------------------------------------------- synthetic:sbm?task=link
SPEC = "synthetic:sbm?nodes=2000&task=link&seed=3"


def mrr(pos: np.ndarray, neg: np.ndarray) -> float:
    """OGB's MRR: rank = 1 + (#neg > pos + #neg >= pos) / 2."""
    rank = 1 + ((neg > pos[:, None]).sum(1) + (neg >= pos[:, None]).sum(1)) / 2
    return float((1 / rank).mean())


def test_sbm_link_spec_parses_and_equals_the_generator_call() -> None:
    assert parse_synthetic(SPEC) == ("sbm", {"num_nodes": 2000, "task": "link", "seed": 3})
    assert synthetic_keys("sbm")[-1] == "task"
    ds = load_dataset(SPEC)  # validated, link fields included
    ref = sbm(num_nodes=2000, seed=3, task="link")
    for fld in ("src", "dst", "x", "y", "train_edges", "val_edges", "test_edges", "val_neg",
                "test_neg"):
        np.testing.assert_array_equal(getattr(ds, fld), getattr(ref, fld))
    with pytest.raises(DatasetError) as exc:
        load_dataset("synthetic:sbm?task=edges")
    assert exc.value.field == "task" and "node, link" in str(exc.value)


def test_sbm_link_fields_are_a_valid_split_of_the_sbm() -> None:
    ds = load_dataset(SPEC)
    check_link_fields(ds, SPEC)
    assert ds.has_link_task and ds.neg_kind == "per_edge"
    # The same SBM as the node task with the link task's homophily and noise.
    whole = sbm(num_nodes=2000, seed=3, homophily=0.8, feature_noise=2.0)
    np.testing.assert_array_equal(ds.x, whole.x)
    undirected = {(u, v) for u, v in graph_pairs(whole) if u < v}
    train, val, test = pairs(ds.train_edges), pairs(ds.val_edges), pairs(ds.test_edges)
    assert train | val | test == undirected and not (train & val or train & test or val & test)
    assert (len(train), len(val), len(test)) == split_sizes((0.85, 0.05, 0.1), len(undirected))
    # Held-out edges left the graph in both directions; the graph is the training pairs.
    g = graph_pairs(ds)
    assert not any((u, v) in g or (v, u) in g for u, v in val | test)
    assert g == train | {(v, u) for u, v in train}
    assert ds.val_neg.shape == (len(val), 100) and ds.test_neg.shape == (len(test), 100)
    assert ds.y is not None and len(ds.train_idx)  # the node task is kept


def test_sbm_link_is_deterministic_per_seed() -> None:
    a, b, c = (sbm(num_nodes=1000, task="link", seed=s) for s in (7, 7, 8))
    for fld in ("src", "x", "train_edges", "val_edges", "test_neg"):
        np.testing.assert_array_equal(getattr(a, fld), getattr(b, fld))
    assert not np.array_equal(a.test_edges, c.test_edges)


def test_sbm_link_is_learnable_but_not_trivial() -> None:
    ds = sbm(num_nodes=4096, task="link", seed=0)
    x = np.asarray(ds.x, dtype=np.float64)
    e, neg = ds.test_edges, ds.test_neg

    def score(h: np.ndarray) -> float:
        pos = (h[e[:, 0]] * h[e[:, 1]]).sum(1)
        return mrr(pos, np.einsum("mf,mcf->mc", h[e[:, 0]], h[neg]))

    rng = np.random.default_rng(0)
    chance = mrr(rng.random(len(e)), rng.random(neg.shape))
    raw = score(x)
    # 1-hop mean of the features over the training graph (self included): structure helps.
    h = x.copy()
    np.add.at(h, ds.dst, x[ds.src])
    hop = score(h / (np.bincount(ds.dst, minlength=ds.num_nodes) + 1)[:, None])
    assert 0.045 < chance < 0.06  # ~H(101) / 101
    assert 0.12 < raw < 0.3, raw  # docstring: 0.196 on the defaults
    assert 0.25 < hop < 0.45 and hop > raw + 0.05, (hop, raw)

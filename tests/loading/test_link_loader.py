"""DistLinkNeighborLoader and edge ids in batches, on real gloo ranks (1, 2 and 4).

References are the source dataset's own arrays in the parent process: its ``src``/``dst``
and ``edge_attr`` indexed by edge id and mapped to new global ids through each part's
``orig_ids.npy`` -- never the sampler's or the partition writer's lookups.

Starting ranks costs more than the loaders, so each world size runs once (the ``runs``
fixture): every rank function below is one job of :func:`jobs` on the same process group.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from gnnpar.datasets.graph import GraphDataset
from gnnpar.datasets.synthetic import sbm
from gnnpar.distributed import init, shutdown
from gnnpar.loading.link import DistLinkNeighborLoader
from gnnpar.loading.node import DistNeighborLoader
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.writer import partition_graph
from gnnpar.sampling.fanouts import Fanouts
from gnnpar.sampling.neighbor import DistNeighborSampler
from gnnpar.storage.features import DistFeatureStore
from gnnpar.storage.graph import DistGraph
from gnnpar.testing import run_multiproc

EDGE_DIM = 3


@pytest.fixture(scope="module")
def dataset() -> GraphDataset:
    ds = sbm(num_nodes=500, avg_degree=10, num_classes=4, feat_dim=6, seed=2)
    ds = ds.random_link_split((0.8, 0.1, 0.1), seed=1, num_neg=20)
    rng = np.random.default_rng(0)
    return replace(ds, edge_attr=rng.standard_normal((ds.num_edges, EDGE_DIM)).astype(
        np.float32))


@pytest.fixture(scope="module")
def parts(dataset: GraphDataset, tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    root = tmp_path_factory.mktemp("linkloader")
    for k in (1, 2, 4):
        partition_graph(dataset, root / f"p{k}", PartitionConfig(num_parts=k, seed=0))
    return {k: root / f"p{k}" for k in (1, 2, 4)}


def _new_ids(part_dir: Path, num_parts: int) -> np.ndarray:
    """New global id of every original node, from the parts' orig_ids files."""
    orig = np.concatenate([np.load(part_dir / f"part-{k}" / "orig_ids.npy")
                           for k in range(num_parts)])
    gid = np.empty_like(orig)
    gid[orig] = np.arange(len(orig))
    return gid


def _sampler(graph: DistGraph, ctx: Any, fanouts: list[int], seed: int) -> DistNeighborSampler:
    """A sampler returning edge ids and features (fan-outs capped: collective)."""
    return DistNeighborSampler(graph, ctx, Fanouts.for_graph(fanouts, graph, ctx), seed=seed,
                               with_edges=True)


def _loader(part_dir: str, neg_sampling: str, **kw: Any) -> tuple[Any, DistLinkNeighborLoader]:
    ctx = init()
    graph = DistGraph.load(part_dir, ctx)
    store = DistFeatureStore(graph, ctx)
    loader = DistLinkNeighborLoader(_sampler(graph, ctx, [4, 3], seed=5), store, "train",
                                    batch_size=32, neg_sampling=neg_sampling, num_neg=2, **kw)
    return ctx, loader


def _batches(part_dir: str, neg_sampling: str, epochs: int = 1) -> list[dict[str, Any]]:
    ctx, loader = _loader(part_dir, neg_sampling)
    out = []
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for batch in loader:
            n_id = batch.n_id
            rec = {"epoch": epoch, "n_id": n_id, "edge_index": batch.edge_index,
                   "e_id": batch.e_id, "edge_attr": batch.edge_attr, "x": batch.x,
                   "input_pos": loader.edges.index_select(1, batch.input_id),
                   "gbs": batch.global_batch_size,
                   "num_sampled_nodes": batch.num_sampled_nodes}
            if neg_sampling == "binary":
                rec["pairs"] = n_id[batch.edge_label_index]
                rec["edge_label"] = batch.edge_label
            else:
                rec["pairs"] = torch.stack([n_id[batch.src_index], n_id[batch.dst_pos_index]])
                rec["neg"] = n_id[batch.dst_neg_index]
            out.append(rec)
    return out


def _refused(fn: str, *args: Any) -> str:
    """What rank function ``fn`` raised, as ``"ErrorClass: message"``."""
    try:
        globals()[fn](*args)
    except Exception as exc:  # noqa: BLE001 - the error is the result
        return f"{type(exc).__name__}: {exc}"
    return "no error"


def jobs(todo: dict[str, tuple[str, tuple[Any, ...]]]) -> dict[str, Any]:
    """Run several of this module's rank functions one after another on the same ranks.

    Each calls ``init()``, which joins the process group once and then returns the same
    context; the group is left once, at the end.
    """
    out = {name: globals()[fn](*args) for name, (fn, args) in todo.items()}
    shutdown()
    return out


def _no_seeds_graph() -> GraphDataset:
    """A graph without supervision edges: nothing for a link loader to train on."""
    return sbm(num_nodes=100, avg_degree=4, num_classes=2, feat_dim=2, seed=0)


def _shared_negatives_graph() -> GraphDataset:
    """Fewer shared negative pairs than positives (as ogbl-ddi), all from part 0's nodes."""
    ds = sbm(num_nodes=300, avg_degree=8, num_classes=3, feat_dim=4, seed=5)
    ds = ds.random_link_split((0.5, 0.4, 0.1), seed=0)
    neg = np.array([[0, 1], [2, 3], [4, 5]])  # sources 0, 2, 4: all in part 0 (contiguous)
    return replace(ds, neg_kind="shared", val_neg=neg, test_neg=neg)


def _no_in_edges_graph() -> GraphDataset:
    """Every edge points into part 0 (contiguous): part 1 stores no in-edge."""
    n = 200
    rng = np.random.default_rng(0)
    src = rng.integers(0, n, 2000)
    dst = rng.integers(0, n // 2, 2000)
    keep = src != dst
    ds = GraphDataset(num_nodes=n, src=src[keep], dst=dst[keep],
                      x=rng.standard_normal((n, 6)).astype(np.float32))
    pairs = np.stack([np.arange(100, 140), np.arange(0, 40)], 1)  # sources in part 1
    return replace(ds, train_edges=pairs)


@pytest.fixture(scope="module")
def runs(parts: dict[int, Path], tmp_path_factory: pytest.TempPathFactory
         ) -> dict[int, list[dict[str, Any]]]:
    """Every rank's results of this module's jobs, per world size (one spawn each)."""
    root = tmp_path_factory.mktemp("linkloader-runs")
    partition_graph(_no_seeds_graph(), root / "no-seeds", PartitionConfig(num_parts=1))
    contiguous = PartitionConfig(num_parts=2, partitioner="contiguous")
    partition_graph(_shared_negatives_graph(), root / "shared", contiguous)
    partition_graph(_no_in_edges_graph(), root / "no-in-edges", contiguous)
    p1, p2 = str(parts[1]), str(parts[2])
    state = {k: v.numpy() for k, v in _edge_layers().state_dict().items()}
    todo: dict[int, dict[str, tuple[str, tuple[Any, ...]]]] = {
        1: {"batches": ("_batches", (p1, "binary", 2)),
            "bad_neg_sampling": ("_refused", ("_loader", p1, "pairs")),
            "no_seeds": ("_refused", ("_loader", str(root / "no-seeds"), "binary"))},
        2: {"batches": ("_batches", (p2, "binary", 2)),
            "unexcluded": ("_unexcluded", (p2,)),
            "resumed": ("_resumed", (p2,)),
            "strict_triplets": ("_strict_triplets", (p2,)),
            "node_batches": ("_node_batches", (p2,)),
            "edge_layers": ("_edge_layer_outputs", (p2, state)),
            "scores": ("_scores", (str(root / "shared"), 16)),
            "link_steps": ("_link_steps", (str(root / "no-in-edges"),))},
        4: {"batches": ("_batches", (str(parts[4]), "binary", 2))},
    }
    return {world: run_multiproc(jobs, world, world_jobs)
            for world, world_jobs in todo.items()}


@pytest.mark.parametrize("world", [1, 2, 4])
def test_link_batches_against_the_dataset(world: int, dataset: GraphDataset,
                                          parts: dict[int, Path],
                                          runs: dict[int, list[dict[str, Any]]]) -> None:
    gid = _new_ids(parts[world], world)
    n = dataset.num_nodes
    src, dst = gid[np.asarray(dataset.src)], gid[np.asarray(dataset.dst)]
    train = gid[np.asarray(dataset.train_edges)]
    x_new = np.empty_like(np.asarray(dataset.x))
    x_new[gid] = dataset.x
    results = [r["batches"] for r in runs[world]]
    assert len({len(r) for r in results}) == 1  # the same number of steps on every rank
    for epoch in range(2):
        seen = []
        for rank_batches in results:
            for b in rank_batches:
                if b["epoch"] != epoch:
                    continue
                n_id = b["n_id"].numpy()
                s_local, d_local = b["edge_index"].numpy()
                e_id = b["e_id"].numpy()
                # Every message-passing edge is the dataset's edge e_id, features included.
                assert np.array_equal(src[e_id], n_id[s_local])
                assert np.array_equal(dst[e_id], n_id[d_local])
                assert np.array_equal(b["edge_attr"].numpy(), dataset.edge_attr[e_id])
                assert np.array_equal(b["x"].numpy(), x_new[n_id])
                # The batch's targets and their reverses are hidden from message passing.
                pos = b["input_pos"].numpy()
                hidden = set((pos[0] * n + pos[1]).tolist()) | set((pos[1] * n + pos[0]).tolist())
                mp = (n_id[s_local] * n + n_id[d_local]).tolist()
                assert not hidden.intersection(mp)
                # Binary layout: positives first (label 1), then 2 x B negatives.
                pairs = b["pairs"].numpy()
                k = pos.shape[1]
                assert pairs.shape == (2, 3 * k)
                assert np.array_equal(pairs[:, :k], pos)
                assert b["edge_label"].tolist() == [1.0] * k + [0.0] * (2 * k)
                assert b["num_sampled_nodes"][0] == len(np.unique(pairs))
                seen.append(pos)
        # Every training edge exactly once per epoch over all ranks.
        got = np.concatenate(seen, 1)
        assert got.shape[1] == len(train)
        key = np.sort(got[0] * n + got[1])
        assert np.array_equal(key, np.sort(train[:, 0] * n + train[:, 1]))


def test_targets_are_excluded_but_only_them(dataset: GraphDataset,
                                            runs: dict[int, list[dict[str, Any]]]) -> None:
    """Without exclusion the same batches do pass their targets (the test can fail)."""
    n = dataset.num_nodes
    leaked = 0
    for batches in (r["unexcluded"] for r in runs[2]):
        for pos, mp in batches:
            hidden = set((pos[0] * n + pos[1]).tolist()) | set((pos[1] * n + pos[0]).tolist())
            leaked += len(hidden.intersection(mp.tolist()))
    assert leaked > 0


def _unexcluded(part_dir: str) -> list[tuple[np.ndarray, np.ndarray]]:
    ctx, loader = _loader(part_dir, "binary", exclude="none")
    n = loader.graph.meta.num_nodes
    out = []
    for batch in loader:
        pos = loader.edges.index_select(1, batch.input_id).numpy()
        s, d = batch.n_id[batch.edge_index].numpy()
        out.append((pos, s * n + d))
    return out


def _resumed(part_dir: str) -> list[list[torch.Tensor]]:
    ctx, loader = _loader(part_dir, "triplet", strict=True)
    loader.set_epoch(1)
    full = [[b.n_id, b.edge_index, b.dst_neg_index] for b in loader]
    ctx2, again = _loader(part_dir, "triplet", strict=True)
    again.load_state_dict({"epoch": 1, "step": 2, "num_steps": loader.num_steps, "seed": 5})
    rest = [[b.n_id, b.edge_index, b.dst_neg_index] for b in again]
    return [full[2:], rest]


def test_resume_mid_epoch_gives_the_same_batches(runs: dict[int, list[dict[str, Any]]]
                                                  ) -> None:
    for full, rest in (r["resumed"] for r in runs[2]):
        assert len(full) == len(rest) > 0
        for a, b in zip(full, rest, strict=True):
            assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_triplet_layout_and_strict_negatives(dataset: GraphDataset, parts: dict[int, Path],
                                             runs: dict[int, list[dict[str, Any]]]) -> None:
    gid = _new_ids(parts[2], 2)
    n = dataset.num_nodes
    edges = set((gid[dataset.src] * n + gid[dataset.dst]).tolist())
    for rank_batches in (r["strict_triplets"] for r in runs[2]):
        for b in rank_batches:
            pos, neg = b["pairs"].numpy(), b["neg"].numpy()
            assert neg.shape == (pos.shape[1], 2)
            assert np.array_equal(pos, b["input_pos"].numpy())
            cand = (np.repeat(pos[0], 2) * n + neg.reshape(-1)).tolist()
            assert not edges.intersection(cand)  # strict: never a stored edge


def _strict_triplets(part_dir: str) -> list[dict[str, Any]]:
    ctx, loader = _loader(part_dir, "triplet", strict=True)
    out = []
    for batch in loader:
        n_id = batch.n_id
        out.append({"pairs": torch.stack([n_id[batch.src_index], n_id[batch.dst_pos_index]]),
                    "neg": n_id[batch.dst_neg_index],
                    "input_pos": loader.edges.index_select(1, batch.input_id)})
    return out


def _node_batches(part_dir: str) -> list[tuple[torch.Tensor, ...]]:
    ctx = init()
    graph = DistGraph.load(part_dir, ctx)
    loader = DistNeighborLoader(_sampler(graph, ctx, [5, 5], seed=1),
                                DistFeatureStore(graph, ctx), "train", batch_size=64)
    out = [(b.n_id, b.edge_index, b.e_id, b.edge_attr) for b in loader]
    return out


def test_node_batches_carry_edge_ids_and_features(dataset: GraphDataset,
                                                  parts: dict[int, Path],
                                                  runs: dict[int, list[dict[str, Any]]]
                                                  ) -> None:
    gid = _new_ids(parts[2], 2)
    src, dst = gid[np.asarray(dataset.src)], gid[np.asarray(dataset.dst)]
    count = 0
    for rank_batches in (r["node_batches"] for r in runs[2]):
        for n_id, edge_index, e_id, edge_attr in rank_batches:
            n_id, e = n_id.numpy(), e_id.numpy()
            assert np.array_equal(src[e], n_id[edge_index[0].numpy()])
            assert np.array_equal(dst[e], n_id[edge_index[1].numpy()])
            assert np.array_equal(edge_attr.numpy(), dataset.edge_attr[e])
            count += len(e)
    assert count > 0


def test_bad_arguments(runs: dict[int, list[dict[str, Any]]]) -> None:
    """The loader's own errors on a rank (``_refused``: ``"ErrorClass: message"``)."""
    assert re.search("ConfigError: neg_sampling", runs[1][0]["bad_neg_sampling"])
    # No supervision edges in the partition: the loader says there is nothing to train on.
    assert re.search("no rank owns any seed", runs[1][0]["no_seeds"])


def _edge_layer_outputs(part_dir: str, state: dict[str, Any]) -> list[tuple[torch.Tensor, ...]]:
    """Each layer of ``_edge_layers()`` on node batches sampled with every in-edge."""
    ctx = init()
    graph = DistGraph.load(part_dir, ctx)
    loader = DistNeighborLoader(_sampler(graph, ctx, [10**6], seed=3),
                                DistFeatureStore(graph, ctx), "train", batch_size=50)
    layers = _edge_layers()
    layers.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    layers.eval()
    out = []
    with torch.no_grad():
        for b in loader:
            rows = [conv(b.x, b.edge_index, b.edge_attr)[: b.batch_size] for conv in layers]
            out.append((b.n_id[: b.batch_size], *rows))
    return out


def _edge_layers() -> torch.nn.ModuleList:
    from torch_geometric.nn import GATConv, GINEConv, TransformerConv

    torch.manual_seed(0)
    return torch.nn.ModuleList([
        GINEConv(torch.nn.Linear(6, 8), edge_dim=EDGE_DIM),
        GATConv(6, 8, heads=2, edge_dim=EDGE_DIM),
        TransformerConv(6, 8, heads=2, edge_dim=EDGE_DIM)])


def test_edge_feature_layers_on_batches_equal_the_full_graph(
        dataset: GraphDataset, parts: dict[int, Path],
        runs: dict[int, list[dict[str, Any]]]) -> None:
    """PyG layers that read edge_attr run on batches unchanged: with every in-edge sampled,
    a seed's row equals the layer's on the whole graph."""
    gid = _new_ids(parts[2], 2)
    layers = _edge_layers()
    layers.eval()
    x = torch.from_numpy(np.asarray(dataset.x))
    edge_index = torch.from_numpy(np.stack([dataset.src, dataset.dst]))
    attr = torch.from_numpy(dataset.edge_attr)
    with torch.no_grad():
        full = [conv(x, edge_index, attr) for conv in layers]
    old_of_new = np.argsort(gid)
    checked = 0  # the ranks loaded the weights of _edge_layers() (seeded): these
    for rank_batches in (r["edge_layers"] for r in runs[2]):
        for seeds, *rows in rank_batches:
            orig = torch.from_numpy(old_of_new[seeds.numpy()])
            for want, got in zip(full, rows, strict=True):
                torch.testing.assert_close(got, want[orig], rtol=1e-5, atol=1e-5)
            checked += len(seeds)
    assert checked == len(dataset.train_idx)


def _scores(part_dir: str, chunk: int) -> dict[str, np.ndarray]:
    from gnnpar.evaluation.link import split_scores
    from gnnpar.models.link import LinkDecoder

    ctx = init()
    graph = DistGraph.load(part_dir, ctx)
    h = torch.from_numpy(np.asarray(graph.part.feat, dtype=np.float32))  # embeddings = x
    pos, neg = split_scores(h, LinkDecoder("dot", h.shape[1]), graph, ctx, "val", chunk=chunk)
    out = {"pos": pos.numpy(), "neg": neg.numpy(),
           "val_edges": np.asarray(graph.part.val_edges),
           "val_neg": np.asarray(graph.part.val_neg)}
    return out


def test_shared_negative_scores_by_brute_force(runs: dict[int, list[dict[str, Any]]]
                                               ) -> None:
    """Fewer shared negative pairs than positives (as ogbl-ddi), one rank holding none."""
    ds = _shared_negatives_graph()
    x = np.asarray(ds.x, dtype=np.float32)  # contiguous: new ids are the original ones
    for rank in (r["scores"] for r in runs[2]):
        e, q = rank["val_edges"], rank["val_neg"]
        np.testing.assert_allclose(rank["pos"], (x[e[:, 0]] * x[e[:, 1]]).sum(1), rtol=1e-5)
        np.testing.assert_allclose(rank["neg"], (x[q[:, 0]] * x[q[:, 1]]).sum(1), rtol=1e-5)
        assert len(rank["pos"]) > 16 and len(rank["neg"]) in (0, 3)


def _link_steps(part_dir: str) -> list[int]:
    ctx, loader = _loader(part_dir, "binary")
    sizes = [int(b.edge_index.shape[1]) for b in loader]
    return sizes


def test_a_part_without_in_edges(runs: dict[int, list[dict[str, Any]]]) -> None:
    """Every edge points into part 0: part 1 stores no in-edge (and samples none)."""
    steps = [r["link_steps"] for r in runs[2]]
    assert len(steps[0]) == len(steps[1]) and sum(steps[0]) + sum(steps[1]) > 0

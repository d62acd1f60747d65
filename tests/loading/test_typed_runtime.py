"""Typed partitions, typed sampling and sharded embeddings, on 1, 2 and 4 gloo ranks.

Every batch is checked in the parent against the source
:class:`~gnnpar.datasets.typed.TypedGraphDataset` by brute force (dataset ids through
each part's ``orig_ids.npy``): each sampled edge exists with its relation, each frontier
node has ``min(fan-out, in-degree)`` edges of every relation, features and labels are the
source's, the seeds cover the training set once.  The sharded embeddings are compared
with ``torch.nn.Embedding(sparse=True)`` under ``torch.optim.SparseAdam`` / ``Adagrad``
on the same batches; the relation-wise model with PyG's ``to_hetero(GraphSAGE)``.
The ranks are those of ``tests.helpers.typed_runs`` (shared with ``test_typed_training``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from gnnpar.datasets.synthetic import typed
from gnnpar.datasets.typed import TypedGraphDataset
from gnnpar.errors import PartitionError
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.format import FORMAT_VERSION, PartitionMeta, load_partition
from gnnpar.partition.typed import check_typed_part
from gnnpar.partition.verify import verify_partition
from gnnpar.partition.writer import partition_graph
from gnnpar.testing import run_multiproc
from tests.helpers import typed_workers as W

WORLDS = (1, 2, 4)


@pytest.fixture(scope="module")
def graph(runtime_graph: TypedGraphDataset) -> TypedGraphDataset:
    return runtime_graph


@pytest.fixture(scope="module")
def steps(runtime_steps: list[tuple[np.ndarray, np.ndarray]]
          ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Embedding batches: author ids (homogeneous, with repeats) and upstream gradients."""
    return runtime_steps


@pytest.fixture(scope="module")
def runs(typed_runs: dict[int, dict[str, Any]]) -> dict[int, tuple[str, list[Any]]]:
    """Per world size: the partition, and each rank's ``typed_workers.sample_and_embed``."""
    return {k: (typed_runs[k]["runtime"], [r["runtime"] for r in typed_runs[k]["ranks"]])
            for k in WORLDS}


def _orig_of_new(part_dir: str) -> np.ndarray:
    meta = PartitionMeta.load(part_dir)
    return np.concatenate([load_partition(part_dir, k).orig_ids for k in range(meta.num_parts)])


@pytest.mark.parametrize("world", WORLDS)
def test_typed_partition_round_trips(graph: TypedGraphDataset, runs: Any, world: int) -> None:
    part_dir = runs[world][0]
    report = verify_partition(part_dir, graph)
    assert "typed features" in report.checks and "endpoint types" in report.checks
    meta = PartitionMeta.load(part_dir)
    assert meta.types is not None and meta.format_version == FORMAT_VERSION == 5
    counts = np.array(meta.types.counts)
    assert counts.sum(0).tolist() == list(graph.num_nodes.values())
    owned = np.array([p["num_owned"] for p in meta.parts])
    assert counts.sum(1).tolist() == owned.tolist()


def test_typed_part_checks_relation_order(runs: Any) -> None:
    part_dir = runs[2][0]
    p = load_partition(part_dir, 0)
    meta = p.meta
    assert meta.types is not None and p.etype is not None
    etype = np.array(p.etype)
    row = np.flatnonzero(np.diff(p.indptr) > 1)
    for r in row:  # a row with two relations, swapped
        lo, hi = p.indptr[r], p.indptr[r + 1]
        if len(set(etype[lo:hi].tolist())) > 1:
            etype[lo:hi] = etype[lo:hi][::-1].copy()
            break
    with pytest.raises(PartitionError, match="etype"):
        check_typed_part(Path(part_dir) / "part-0", meta.types, 0, meta.offsets,
                         np.asarray(p.indptr), np.asarray(p.indices), np.asarray(p.halo_gids),
                         np.asarray(p.e_id), etype, np.asarray(p.label), p.type_feat, {})


def test_typed_rows_of_every_type_are_the_source_rows(tmp_path: Path) -> None:
    """One typed store, one exchange per batch for all types: each type's gathered rows are
    the dataset's rows of its batch nodes (brute force), with any cache, several featured
    types of different widths in every batch, remote rows among them."""
    rng = np.random.default_rng(4)
    base = typed(num_papers=300, num_authors=150, num_venues=10, feat_dim=6, seed=3)
    ds = TypedGraphDataset(
        num_nodes=base.num_nodes, edges=base.edges, target=base.target, y=base.y,
        train_idx=base.train_idx, val_idx=base.val_idx, test_idx=base.test_idx,
        x={**base.x, "author": rng.standard_normal((150, 3)).astype(np.float32),
           "venue": rng.standard_normal((10, 5)).astype(np.float32)})
    partition_graph(ds, tmp_path / "p", PartitionConfig(num_parts=2))
    results = run_multiproc(W.typed_rows, 2, str(tmp_path / "p"))
    lay = ds.layout()
    orig = _orig_of_new(str(tmp_path / "p"))
    offset = dict(zip(lay.node_types, lay.node_offsets, strict=False))
    first = {t: int(offset[t]) for t in lay.node_types}
    bounds = PartitionMeta.load(tmp_path / "p").offsets
    for rank, res in enumerate(results):
        assert res["none"]["cached"] == 0 < res["some"]["cached"] < res["all"]["cached"]
        for name in ("none", "some", "all"):
            batches = res[name]["batches"]
            assert len(batches) > 1
            remote = set()
            for b in batches:
                assert set(b["x"]) == {"paper", "author", "venue"}
                for t, x in b["x"].items():
                    ids = orig[b["n_id"][t]] - first[t]
                    assert x.shape == (len(ids), ds.x[t].shape[1])
                    assert np.array_equal(x, ds.x[t][ids]), (rank, name, t)
                    gid = b["n_id"][t]
                    if ((gid < bounds[rank]) | (gid >= bounds[rank + 1])).any():
                        remote.add(t)
            assert len(remote) >= 2, (rank, name, remote)
            # The same batches, whatever the cache.
            for b, ref in zip(batches, res["none"]["batches"], strict=True):
                for t in b["x"]:
                    assert np.array_equal(b["n_id"][t], ref["n_id"][t])


@pytest.mark.parametrize("world", WORLDS)
def test_typed_batches_match_the_source(graph: TypedGraphDataset, runs: Any,
                                        world: int) -> None:
    part_dir, results = runs[world]
    lay = graph.layout()
    orig = _orig_of_new(part_dir)
    offset = dict(zip(lay.node_types, lay.node_offsets, strict=False))
    fan = {r: W.FANOUTS[r[1]] for r in lay.edge_types}
    edge_sets = {r: set(zip(s.tolist(), d.tolist(), strict=True))
                 for r, (s, d) in graph.edges.items()}
    in_deg = {r: np.bincount(d, minlength=graph.num_nodes[r[2]])
              for r, (_, d) in graph.edges.items()}
    seen_seeds = []
    for res in results:
        for b in res["batches"]:
            ids = {t: orig[n] - offset[t] for t, n in b["n_id"].items()}  # per-type ids
            for t, x in b["x"].items():
                assert np.array_equal(x, graph.x[t][ids[t]]), t
            assert set(b["x"]) == set(graph.x)
            seeds = ids["paper"][: b["batch_size"]]
            assert np.array_equal(b["y"], graph.y[seeds])
            seen_seeds.append(seeds)
            for r in lay.edge_types:
                ei = b["edge_index"][r]
                src, dst = ids[r[0]][ei[0]], ids[r[2]][ei[1]]
                assert all(e in edge_sets[r] for e in zip(src.tolist(), dst.tolist(),
                                                          strict=True)), r
                bounds = np.cumsum([0, *b["edges"][r]])
                blocks = np.cumsum([0, *b["nodes"][r[2]]])
                for hop, f in enumerate(fan[r]):
                    # frontier of hop `hop`: the destination type's nodes added at that hop
                    frontier = np.arange(blocks[hop], blocks[hop + 1])
                    got = np.bincount(ei[1, bounds[hop]:bounds[hop + 1]],
                                      minlength=blocks[-1])[frontier]
                    want = np.minimum(f, in_deg[r][ids[r[2]][frontier]])
                    assert np.array_equal(got, want), (r, hop)
    seeds = np.sort(np.concatenate(seen_seeds))
    assert np.array_equal(seeds, np.sort(graph.train_idx))


def test_relation_wise_model_equals_to_hetero(runs: Any) -> None:
    models = runs[1][1][0]["models"]
    np.testing.assert_allclose(models["ours"], models["to_hetero"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(models["trim_trimmed"], models["trim_whole"], rtol=1e-5,
                               atol=1e-6)
    assert all(np.isfinite(models["losses"])) and models["grads_finite"]


def _reference(graph: TypedGraphDataset, steps: list[tuple[np.ndarray, np.ndarray]],
               name: str) -> tuple[list[np.ndarray], torch.nn.Embedding, Any]:
    """``nn.Embedding(sparse=True)`` with torch's optimiser, on all ranks' batches."""
    lay = graph.layout()
    start = lay.node_offsets[lay.type_index("author")]
    n = graph.num_nodes["author"]
    emb = torch.nn.Embedding(n, W.EMBED_DIM, sparse=True)
    with torch.no_grad():
        emb.weight.copy_(W.init_rows(torch.arange(start, start + n)))
    opt = (torch.optim.SparseAdam(emb.parameters(), lr=0.05) if name == "adam"
           else torch.optim.Adagrad(emb.parameters(), lr=0.1))
    outs = []
    for ids, w in steps:
        out = emb(torch.from_numpy(ids - start))
        outs.append(out.detach().numpy().copy())
        opt.zero_grad()
        ((out * torch.from_numpy(w)).sum() / len(ids)).backward()
        opt.step()
    return outs, emb, opt


@pytest.mark.parametrize("name", ["adam", "adagrad"])
@pytest.mark.parametrize("world", WORLDS)
def test_sharded_embeddings_equal_torch(graph: TypedGraphDataset,
                                        steps: list[tuple[np.ndarray, np.ndarray]],
                                        runs: Any, world: int, name: str) -> None:
    outs, emb, opt = _reference(graph, steps, name)
    lay = graph.layout()
    start = lay.node_offsets[lay.type_index("author")]
    state = opt.state[emb.weight]
    for res in runs[world][1]:
        e = res["embeddings"][name]
        for step, rows in enumerate(e["rows"]):  # outputs: the rows before each update
            np.testing.assert_allclose(rows, outs[step][res["rank"]::world], atol=1e-6)
        rows = e["orig"] - start
        np.testing.assert_allclose(e["weight"], emb.weight.detach().numpy()[rows],
                                   rtol=1e-5, atol=1e-6)
        for key, ours in e["state"].items():  # moments / sums: the gradients, exactly
            np.testing.assert_allclose(ours, state[key].numpy()[rows], rtol=1e-5,
                                       atol=1e-7)
        if res["rank"] == 0:  # the checkpoint view: the whole table in dataset-id order
            saved = e["saved"]
            assert np.array_equal(saved["ids"],
                                  np.arange(start, start + graph.num_nodes["author"]))
            np.testing.assert_allclose(saved["weight"],
                                       emb.weight.detach().numpy()[saved["ids"] - start],
                                       rtol=1e-5, atol=1e-6)
        if world == 1:
            assert e["restored"]

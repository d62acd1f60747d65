"""Negative sampling: counter-based draws, PyG layouts, strict mode on real gloo ranks.

True edges are checked in the parent against the source dataset's (src, dst) mapped to
new global ids through each part's ``orig_ids.npy``, not against the sampler's lookup.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from gnnpar.datasets.graph import GraphDataset
from gnnpar.datasets.synthetic import sbm
from gnnpar.distributed import DistContext
from gnnpar.errors import ConfigError
from gnnpar.keys import mix_int
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.format import PartitionMeta, load_partition
from gnnpar.partition.writer import partition_graph
from gnnpar.sampling.negative import DistNegativeSampler, negative_destinations
from gnnpar.shadow import DeviceShadow
from gnnpar.storage.graph import DistGraph
from gnnpar.testing import run_multiproc

B, K, SEED = 200, 5, 7


@pytest.fixture(scope="module")
def dataset() -> GraphDataset:
    # avg degree 30 of 600 nodes: a random pair is an edge with probability ~5%.
    return sbm(num_nodes=600, avg_degree=30, num_classes=4, feat_dim=4, seed=0)


@pytest.fixture(scope="module")
def parts(dataset: GraphDataset, tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    root = tmp_path_factory.mktemp("link")
    for k in (1, 2):
        partition_graph(dataset, root / f"p{k}", PartitionConfig(num_parts=k, seed=0))
    return {k: root / f"p{k}" for k in (1, 2)}


def _edge_keys(ds: GraphDataset, part_dir: Path, num_parts: int) -> np.ndarray:
    """Sorted ``src * N + dst`` of every edge in new global ids, from the dataset."""
    orig = np.concatenate([np.load(part_dir / f"part-{k}" / "orig_ids.npy")
                           for k in range(num_parts)])
    gid = np.empty_like(orig)
    gid[orig] = np.arange(len(orig))
    return np.unique(gid[np.asarray(ds.src)] * ds.num_nodes + gid[np.asarray(ds.dst)])


def _uniform_p(counts: np.ndarray) -> float:
    from scipy.stats import chisquare  # here: the spawned ranks need not import scipy

    return float(chisquare(counts).pvalue)


def _true_edges(s: np.ndarray, d: np.ndarray, keys: np.ndarray, n: int) -> np.ndarray:
    return np.isin(s * n + d, keys)


# ---------------------------------------------------------------------- one process
def test_negative_destinations_counter_based() -> None:
    src = torch.arange(50)
    out = negative_destinations(src, 7, 1000, seed=3, batch_key=5)
    assert out.shape == (50, 7) and out.dtype == torch.int64
    assert int(out.min()) >= 0 and int(out.max()) < 1000
    assert torch.equal(out, negative_destinations(src + 1, 7, 1000, seed=3, batch_key=5))
    # Positional: a shorter batch is a prefix, so a loader resumes by replaying its keys.
    assert torch.equal(out[:10], negative_destinations(src[:10], 7, 1000, 3, 5))
    for other in (negative_destinations(src, 7, 1000, seed=3, batch_key=6),
                  negative_destinations(src, 7, 1000, seed=4, batch_key=5)):
        assert (other != out).float().mean() > 0.9
    assert negative_destinations(src[:0], 7, 1000, 3, 5).shape == (0, 7)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="num_neg"):
            negative_destinations(src, bad, 1000, 3, 5)  # type: ignore[arg-type]


def test_negative_destinations_uniform() -> None:
    n = 97
    draws = torch.cat([negative_destinations(torch.arange(400), 25, n, seed=11, batch_key=key)
                       .view(-1) for key in range(3)])
    counts = np.bincount(draws.numpy(), minlength=n)
    assert _uniform_p(counts) > 1e-4


def _one_process_sampler(part_dir: Path, strict: bool, device: str = "cpu",
                         **kw: Any) -> DistNegativeSampler:
    ctx = DistContext(rank=0, world_size=1, local_rank=0, device=torch.device(device),
                      backend="gloo")  # a world of one issues no collective
    graph = DistGraph.from_partition(load_partition(part_dir, 0), ctx.device)
    return DistNegativeSampler(graph, ctx, seed=SEED, strict=strict, **kw)


def test_layouts_match_pyg(parts: dict[int, Path]) -> None:
    """Our global-id outputs have the shapes, order and labels of PyG's ``edge_sample``."""
    from torch_geometric.sampler import EdgeSamplerInput, NegativeSampling, SamplerOutput
    from torch_geometric.sampler.neighbor_sampler import edge_sample

    def no_neighbours(seed: torch.Tensor, _: Any) -> SamplerOutput:
        empty = seed.new_empty(0)
        return SamplerOutput(node=seed, row=empty, col=empty, edge=None)

    pos = torch.tensor([[0, 5, 9, 9], [3, 7, 1, 2]])
    n, b, k = 600, pos.shape[1], 3
    sampler = _one_process_sampler(parts[1], strict=False)
    # binary: [2, B * (1 + k)], positives first, float labels 1 then 0.
    out = edge_sample(EdgeSamplerInput(None, pos[0], pos[1]), no_neighbours, n, False,
                      neg_sampling=NegativeSampling("binary", amount=k))
    _, pyg_index, pyg_label, _ = out.metadata
    pyg_global = out.node[pyg_index]
    ours, label = sampler.binary(pos, k, batch_key=0)
    assert ours.shape == pyg_global.shape == (2, b * (1 + k)) and ours.dtype == torch.int64
    assert torch.equal(ours[:, :b], pos) and torch.equal(pyg_global[:, :b], pos)
    assert torch.equal(label, pyg_label) and label.dtype == pyg_label.dtype == torch.float32
    # triplet: dst_neg [B, k], row i the negatives of positive i.
    out = edge_sample(EdgeSamplerInput(None, pos[0], pos[1]), no_neighbours, n, False,
                      neg_sampling=NegativeSampling("triplet", amount=k))
    _, src_index, dst_pos_index, dst_neg_index, _ = out.metadata
    assert torch.equal(out.node[src_index], pos[0])
    assert torch.equal(out.node[dst_pos_index], pos[1])
    dst_neg = sampler.triplet(pos[0], pos[1], k, batch_key=0)
    assert dst_neg.shape == out.node[dst_neg_index].shape == (b, k)
    expected = negative_destinations(pos[0], k, n, SEED, mix_int(0, 0))
    assert torch.equal(dst_neg, expected)


def test_strict_one_process(dataset: GraphDataset, parts: dict[int, Path]) -> None:
    keys = _edge_keys(dataset, parts[1], 1)
    src = torch.arange(0, 600, 3)
    loose = _one_process_sampler(parts[1], strict=False).triplet(src, src, K, batch_key=1)
    with DeviceShadow() as shadow:
        strict = _one_process_sampler(parts[1], strict=True, device=str(shadow.device),
                                      rounds=8)
        on_device = src.to(shadow.device)
        with shadow.window() as w:
            neg = strict.triplet(on_device, on_device, K, batch_key=1)
        # One host sync per round (the gathered counts), rounds stop once none is pending.
        assert set(w.syncs) == {"tolist"} and 2 <= w.num_syncs <= 8, w.sites
        plain = _one_process_sampler(parts[1], strict=False, device=str(shadow.device))
        with shadow.window() as w:
            plain.binary(torch.stack([on_device, on_device]), K, 1)
            negative_destinations(on_device, K, 600, SEED, 1)
        assert w.num_syncs == 0, w.sites
        neg = neg.cpu()
    s = np.repeat(src.numpy(), K)
    assert _true_edges(s, loose.view(-1).numpy(), keys, 600).sum() > 0
    assert not _true_edges(s, neg.view(-1).numpy(), keys, 600).any()
    assert not (neg == src[:, None]).any() and int(strict.unresolved) == 0
    with pytest.raises(ConfigError, match="rounds"):
        _one_process_sampler(parts[1], strict=True, rounds=0)


# ---------------------------------------------------------------------- two gloo ranks
def _worker(part_dir: str) -> dict[str, Any]:
    from gnnpar import distributed
    from gnnpar.comm import CommStats

    ctx = distributed.init()
    graph = DistGraph.load(part_dir, ctx)
    lo = graph.first_gid
    pos_src = torch.arange(lo, lo + B) % graph.meta.num_nodes
    pos = torch.stack([pos_src, (pos_src * 7 + 1) % graph.meta.num_nodes])
    res: dict[str, Any] = {"rank": ctx.rank}
    loose = DistNegativeSampler(graph, ctx, seed=SEED, strict=False)
    res["loose"] = loose.binary(pos, K, batch_key=3)[0]
    res["loose_again"] = loose.binary(pos, K, batch_key=3)[0]
    res["loose_next"] = loose.binary(pos, K, batch_key=4)[0]
    res["uniform"] = loose.triplet(torch.zeros(4000, dtype=torch.int64),
                                   torch.zeros(4000, dtype=torch.int64), 10, batch_key=0)
    for name, rounds in (("strict", 3), ("strict8", 8), ("one_round", 1)):
        stats = CommStats()
        sampler = DistNegativeSampler(graph, ctx, seed=SEED, strict=True, stats=stats,
                                      rounds=rounds)
        index, label = sampler.binary(pos, K, batch_key=3)
        out = {"index": index, "label": label, "unresolved": int(sampler.unresolved),
               "stats": stats.as_dict()["negative"]}
        out["dst_neg"] = sampler.triplet(pos[0], pos[1], K, batch_key=3)
        res[name] = {**out, "unresolved_triplet": int(sampler.unresolved)}
    # Lockstep with nothing to send: rank 1 passes an empty batch.
    sampler = DistNegativeSampler(graph, ctx, seed=SEED, strict=True)
    mine = pos if ctx.rank == 0 else pos[:, :0]
    res["uneven"] = sampler.binary(mine, K, batch_key=9)[0]
    res["uneven_unresolved"] = int(sampler.unresolved)
    return res


def test_two_ranks(dataset: GraphDataset, parts: dict[int, Path]) -> None:
    part_dir = parts[2]
    n = dataset.num_nodes
    keys = _edge_keys(dataset, part_dir, 2)
    offsets = np.asarray(PartitionMeta.load(part_dir).offsets)
    res = run_multiproc(_worker, 2, str(part_dir))
    one_round_bytes = 0
    for r in res:
        loose = r["loose"].numpy()
        assert loose.shape == (2, B * (1 + K))
        assert torch.equal(r["loose"], r["loose_again"])
        assert (r["loose_next"][:, B:] != r["loose"][:, B:]).float().mean() > 0.9
        assert _true_edges(loose[0, B:], loose[1, B:], keys, n).sum() > 0  # work for strict
        for name in ("strict", "strict8"):
            out = r[name]
            index = out["index"].numpy()
            assert index.shape == (2, B * (1 + K))
            assert np.array_equal(index[:, :B], loose[:, :B])
            assert torch.equal(out["label"], torch.cat([torch.ones(B), torch.zeros(B * K)]))
            s, d = index[:, B:]
            bad = _true_edges(s, d, keys, n) | (s == d)
            assert bad.sum() == out["unresolved"] <= 2, name  # ~B K p^3 = 0.1 expected
            dst = out["dst_neg"].numpy()
            assert dst.shape == (B, K)
            src, dst_pos = np.repeat(index[0, :B], K), np.repeat(index[1, :B], K)
            bad = _true_edges(src, dst.reshape(-1), keys, n) | (src == dst.reshape(-1)) | (
                dst.reshape(-1) == dst_pos)
            assert bad.sum() == out["unresolved_triplet"] <= 2, name
        assert r["strict8"]["unresolved"] == r["strict8"]["unresolved_triplet"] == 0
        # One round: 16 bytes out per candidate owned elsewhere, 1 byte back.
        d = r["one_round"]["index"].numpy()[1, B:]
        one_round_bytes += 17 * int(((np.searchsorted(offsets, d, "right") - 1)
                                     != r["rank"]).sum())
        s, d = r["uneven"].numpy()
        assert len(s) == (B * (1 + K) if r["rank"] == 0 else 0)
        bad = _true_edges(s[B:], d[B:], keys, n) | (s[B:] == d[B:])
        assert bad.sum() == r["uneven_unresolved"] <= 2
    assert not torch.equal(res[0]["loose"][:, B:], res[1]["loose"][:, B:])
    sent = sum(r["one_round"]["stats"]["bytes_sent"] for r in res)
    recv = sum(r["one_round"]["stats"]["bytes_recv"] for r in res)
    assert sent == recv == one_round_bytes
    # Uniform over every rank's nodes, not only the caller's.
    draws = torch.cat([r["uniform"].view(-1) for r in res]).numpy()
    counts = np.bincount(draws, minlength=n)
    assert counts[:offsets[1]].sum() > 0 and counts[offsets[1]:].sum() > 0
    assert _uniform_p(counts) > 1e-4

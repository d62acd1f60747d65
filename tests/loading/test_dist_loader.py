"""Multi-rank checks of the feature store, the sampler and the loader on real gloo groups.

Every sampled batch is checked in the parent against the source :class:`GraphDataset`
by brute force (original ids through each part's ``orig_ids.npy``): edges exist, per-node
counts are ``min(fanout, in-degree)``, features and labels are those of ``n_id``, seeds
cover the training set once per epoch.  Several checks share one spawned run.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from gnnpar.datasets.graph import GraphDataset
from gnnpar.datasets.synthetic import sbm
from gnnpar.errors import ConfigError
from gnnpar.loading.node import SEED_SLACK, even_split
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.writer import partition_graph
from gnnpar.testing import run_multiproc

FANOUTS = [10, 5]
BATCH = 96


# ---------------------------------------------------------------------- workers (ranks)
def _batches(loader: Any, limit: int | None = None) -> list[dict[str, np.ndarray]]:
    out = []
    for i, b in enumerate(loader):
        out.append({
            "n_id": b.n_id.numpy(), "edge_index": b.edge_index.numpy(), "x": b.x.numpy(),
            "y": b.y.numpy(), "batch_size": b.batch_size, "input_id": b.input_id.numpy(),
            "nodes": list(b.num_sampled_nodes), "edges": list(b.num_sampled_edges),
        })
        if limit is not None and i + 1 == limit:
            break
    return out


def _same(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    return len(a) == len(b) and all(
        all(np.array_equal(x[k], y[k]) for k in x) for x, y in zip(a, b, strict=True))


def _node_loader(graph: Any, store: Any, fanouts: Any, seed: int = 0, replace: bool = False,
                 peers: Any = None, **kw: Any) -> Any:
    """A node loader over a sampler of ``fanouts`` (validated and capped: collective)."""
    from gnnpar.loading.node import DistNeighborLoader
    from gnnpar.sampling.fanouts import Fanouts
    from gnnpar.sampling.neighbor import DistNeighborSampler

    fan = Fanouts.for_graph(fanouts, graph, store.ctx, replace)
    sampler = DistNeighborSampler(graph, store.ctx, fan, replace, seed, store.stats,
                                  peers=peers)
    return DistNeighborLoader(sampler, store, **kw)


def _main_worker(part_dir: str) -> dict[str, Any]:
    """One epoch plus determinism, resume, cache, prefetch, replacement, peers variants."""
    from gnnpar import distributed
    from gnnpar.comm import CommStats
    from gnnpar.loading.node import DistNeighborLoader
    from gnnpar.storage.features import DistFeatureStore
    from gnnpar.storage.graph import DistGraph
    from gnnpar.storage.peers import peer_parts

    ctx = distributed.init()
    graph = DistGraph.load(part_dir, ctx)
    stats = CommStats()
    store = DistFeatureStore(graph, ctx, stats=stats)

    def loader(st: DistFeatureStore = store, **kw: Any) -> DistNeighborLoader:
        args: dict[str, Any] = {"batch_size": BATCH, "seed": 3, **kw}
        loader: DistNeighborLoader = _node_loader(graph, st, FANOUTS, **args)
        return loader

    first = _batches(loader())
    counters = stats.as_dict()
    res: dict[str, Any] = {"epoch": first, "stats": counters, "row_bytes": store.row_bytes}
    res["deterministic"] = _same(first, _batches(loader()))
    partial = loader()
    head = _batches(partial, limit=2)
    state = partial.state_dict()
    resumed = loader()
    resumed.load_state_dict(state)
    res["resume"] = _same(head + _batches(resumed), first) and state["step"] == 2
    res["next_epoch_differs"] = not _same(_batches(resumed), first)
    cached = DistFeatureStore(graph, ctx, cache_bytes=10**9)
    res["cached"] = _batches(loader(cached))
    res["cache_size"] = int(cached.cache_gids.numel())
    small_cache = DistFeatureStore(graph, ctx, cache_bytes=4096)
    res["prefetch"] = _same(_batches(loader(small_cache, prefetch=True)), first)
    # Both ranks share this machine: the peer's rows are read from its part's files.
    peer_stats = CommStats()
    peers = peer_parts(graph, ctx)
    res["peers"] = None if peers is None else peers.ranks
    peer_store = DistFeatureStore(graph, ctx, stats=peer_stats, peers=peers)
    res["peer_epoch"] = _batches(loader(peer_store, prefetch=True, peers=peers))
    res["peer_stats"] = peer_stats.as_dict()
    res["peer_replace"] = _batches(loader(peer_store, replace=True, shuffle=False,
                                          peers=peers), limit=2)
    res["replace"] = _batches(loader(replace=True, shuffle=False), limit=2)
    return res


def _coverage_worker(part_dir: str) -> dict[str, Any]:
    """Epochs with a 20% cache, with drop_last, over given seeds, with co-located parts."""
    from gnnpar import distributed
    from gnnpar.storage.features import DistFeatureStore
    from gnnpar.storage.graph import DistGraph
    from gnnpar.storage.peers import PeerParts, peer_parts

    ctx = distributed.init()
    graph = DistGraph.load(part_dir, ctx)
    store = DistFeatureStore(graph, ctx, cache_bytes=int(0.2 * graph.part.feat.nbytes))
    full = _node_loader(graph, store, FANOUTS, batch_size=BATCH, seed=1)
    epoch = _batches(full)
    dropped = _node_loader(graph, store, FANOUTS, batch_size=BATCH, drop_last=True)
    sizes = [b["batch_size"] for b in _batches(dropped)]
    # Seeds given as a tensor: every rank passes the same 10 ids and keeps the few it owns,
    # so with batch_size 1 the ranks owning fewer than the most end with empty batches.
    given = torch.arange(0, int(graph.offsets[-1]), int(graph.offsets[-1]) // 10)[:10]
    few_loader = _node_loader(graph, store, [3], seeds=given, batch_size=1)
    few = _batches(few_loader)
    global_sizes = {name: [ld.global_batch_size(s) for s in range(len(ld))]
                    for name, ld in (("epoch", full), ("drop_last", dropped),
                                     ("few", few_loader))}
    # Rows of the next rank are read from its files, the others' exchanged (as if only
    # that rank shared this machine), with the 20% cache; any ids, repeats included.
    nxt = (ctx.rank + 1) % ctx.world_size
    peers = PeerParts(Path(part_dir), graph.meta, [nxt], ("x", "y"), ctx.world_size)
    mixed = DistFeatureStore(graph, ctx, cache_bytes=int(0.2 * graph.part.feat.nbytes),
                             peers=peers)
    ids = torch.randint(0, int(graph.offsets[-1]), (500,),
                        generator=torch.Generator().manual_seed(ctx.rank))
    rows = mixed.gather_many(ids)
    # Every rank on this machine: halo rows with complete in-edges sampled here, the
    # rest from their owners' files.
    every = peer_parts(graph, ctx)
    local = DistFeatureStore(graph, ctx, peers=every)
    return {"epoch": epoch, "drop_last_sizes": sizes, "few": few,
            "global_sizes": global_sizes, "mixed_epoch": _batches(_node_loader(
                graph, mixed, FANOUTS, batch_size=BATCH, seed=1)),
            "local_epoch": _batches(_node_loader(graph, local, FANOUTS, batch_size=BATCH,
                                                 seed=1, peers=every)),
            "ids": ids.numpy(), "rows": {k: v.numpy() for k, v in rows.items()}}


def _copies_worker(part_dirs: list[str]) -> dict[str, Any]:
    """Each rank reads its own copy of the partition: no peer is read in place."""
    from gnnpar import distributed
    from gnnpar.storage.graph import DistGraph
    from gnnpar.storage.peers import peer_parts

    ctx = distributed.init()
    graph = DistGraph.load(part_dirs[ctx.rank], ctx)
    shared = DistGraph.load(part_dirs[0], ctx)
    both = peer_parts(shared, ctx)
    return {"copies": peer_parts(graph, ctx) is None,
            "shared": None if both is None else (both.ranks, both.covers_all)}


def _errors_worker(part_dir: str) -> list[str]:
    """Bad arguments raise ConfigError on every rank, and the group stays usable."""
    from gnnpar import distributed
    from gnnpar.storage.features import DistFeatureStore
    from gnnpar.storage.graph import DistGraph

    ctx = distributed.init()
    graph = DistGraph.load(part_dir, ctx)
    store = DistFeatureStore(graph, ctx)
    caught = []
    for kw in ({"fanouts": [10, 0]}, {"batch_size": 0}, {"seeds": "training"},
               {"batch_size": 8 + ctx.rank}, {"seeds": torch.tensor([10**9])},
               {"batch_size": 10**6, "drop_last": True}):
        args: dict[str, Any] = {"fanouts": FANOUTS, "batch_size": BATCH, **kw}
        try:
            _node_loader(graph, store, **args)
            caught.append("no error")
        except ConfigError as exc:
            caught.append(exc.field or "")
    # The group is still in lockstep after the errors: a normal loader runs.
    ok = _node_loader(graph, store, FANOUTS, batch_size=BATCH)
    caught.append(str(sum(1 for _ in ok) == len(ok)))
    return caught


def _seed_split_worker(part_dir: str) -> dict[str, Any]:
    """One epoch with even seed shares (the default) and one with each rank's own seeds."""
    from gnnpar import distributed
    from gnnpar.storage.features import DistFeatureStore
    from gnnpar.storage.graph import DistGraph

    ctx = distributed.init()
    graph = DistGraph.load(part_dir, ctx)
    store = DistFeatureStore(graph, ctx)
    out: dict[str, Any] = {}
    for split in ("even", "owned"):
        loader = _node_loader(graph, store, FANOUTS, batch_size=BATCH, seed_split=split)
        out[split] = {"epoch": _batches(loader), "num_seeds": loader.seeds.gids.numel(),
                      "num_own": loader.seeds.num_own}
    return out


# ---------------------------------------------------------------------- reference checks
def _graph_with_hubs() -> GraphDataset:
    """An SBM plus 4 hubs joined to 400 random nodes each (in-degree > 16 * fanout)."""
    ds = sbm(num_nodes=2400, avg_degree=8, num_classes=4, feat_dim=6, seed=0)
    rng = np.random.default_rng(1)
    hubs = np.repeat(np.arange(4), 400)
    others = rng.integers(4, ds.num_nodes, hubs.size)
    src = np.concatenate([ds.src, others])
    dst = np.concatenate([ds.dst, hubs])
    return GraphDataset(ds.num_nodes, src, dst, ds.x, ds.y, ds.train_idx, ds.val_idx,
                        ds.test_idx, num_classes=ds.num_classes).to_undirected()


@pytest.fixture(scope="module")
def dataset() -> GraphDataset:
    return _graph_with_hubs()


def _orig_of_gid(part_dir: Path, parts: int) -> np.ndarray:
    return np.concatenate([np.load(part_dir / f"part-{k}" / "orig_ids.npy") for k in range(parts)])


def _check_batch(b: dict[str, Any], ds: GraphDataset, orig: np.ndarray, fanouts: list[int],
                 replace: bool = False) -> None:
    """Edges exist, counts are min(fanout, in-degree), rows are the source rows."""
    n_id, (row, col) = b["n_id"], b["edge_index"]
    assert len(np.unique(n_id)) == len(n_id)
    assert b["nodes"][0] == b["batch_size"] and sum(b["nodes"]) == len(n_id)
    assert sum(b["edges"]) == len(row) and len(b["edges"]) == len(fanouts)
    o = orig[n_id]
    np.testing.assert_array_equal(b["x"], np.asarray(ds.x)[o])
    np.testing.assert_array_equal(b["y"], np.asarray(ds.y)[o[: b["batch_size"]]])  # seeds
    n = ds.num_nodes
    all_keys = np.asarray(ds.dst) * n + np.asarray(ds.src)
    assert np.isin(o[col] * n + o[row], all_keys).all(), "a sampled edge is not in the graph"
    indeg = ds.in_degree()
    node_lo, edge_lo = 0, 0
    for h, k in enumerate(fanouts):
        node_hi = node_lo + b["nodes"][h]
        r, c = row[edge_lo:edge_lo + b["edges"][h]], col[edge_lo:edge_lo + b["edges"][h]]
        # PyG order: hop h's destinations are hop h-1's new nodes, sources come no later.
        assert ((c >= node_lo) & (c < node_hi)).all()
        assert (r < node_hi + b["nodes"][h + 1]).all()
        got = np.bincount(c - node_lo, minlength=node_hi - node_lo)
        d = indeg[o[node_lo:node_hi]]
        np.testing.assert_array_equal(got, np.where(d > 0, k, 0) if replace else np.minimum(d, k))
        if not replace:
            assert len(np.unique(c.astype(np.int64) * n + r)) == len(c), "duplicate sample"
        node_lo, edge_lo = node_hi, edge_lo + b["edges"][h]


def _check_epoch(per_rank: list[list[dict[str, Any]]], ds: GraphDataset, orig: np.ndarray) -> None:
    assert len({len(batches) for batches in per_rank}) == 1, "ranks took different step counts"
    seeds = []
    for batches in per_rank:
        for b in batches:
            _check_batch(b, ds, orig, FANOUTS)
            seeds.append(orig[b["n_id"][: b["batch_size"]]])
    seeds_all = np.concatenate(seeds)
    np.testing.assert_array_equal(np.sort(seeds_all), np.sort(np.asarray(ds.train_idx)))


def _sample_bytes(per_rank: list[list[dict[str, Any]]], offsets: np.ndarray) -> int:
    """Bytes all ranks send for sampling: per remote frontier node its id out and a row of
    ``fanout`` neighbour ids back (int64, padded with -1)."""
    total = 0
    for r, batches in enumerate(per_rank):
        for b in batches:
            owner = np.searchsorted(offsets, b["n_id"], side="right") - 1
            lo = 0
            for h, k in enumerate(FANOUTS):
                hi = lo + b["nodes"][h]
                total += 8 * (1 + k) * int((owner[lo:hi] != r).sum())
                lo = hi
    return total


def test_two_ranks_metis(dataset: GraphDataset, tmp_path: Path) -> None:
    import torch_geometric.nn as pyg_nn
    from torch_geometric.data import Data

    part_dir = tmp_path / "metis2"
    meta = partition_graph(dataset, part_dir,
                           PartitionConfig(num_parts=2, partitioner="metis", seed=0))
    orig = _orig_of_gid(part_dir, 2)
    # The compiled CPU kernels where numba is installed (the suite's default is torch's).
    res = run_multiproc(_main_worker, 2, str(part_dir), env={"GNNPAR_KERNELS": "compiled"})
    _check_epoch([r["epoch"] for r in res], dataset, orig)
    _check_epoch([r["cached"] for r in res], dataset, orig)
    _check_epoch([r["peer_epoch"] for r in res], dataset, orig)
    assert [r["peers"] for r in res] == [[1], [0]]
    for r in res:  # the peer's part read from its files: the same batches, no exchange
        assert r["peer_stats"] == {} and _same(r["peer_epoch"], r["epoch"])
        assert _same(r["peer_replace"], r["replace"])
    for r in res:
        assert r["deterministic"] and r["resume"] and r["next_epoch_differs"] and r["prefetch"]
        assert r["cache_size"] > 0
        # Sampling does not depend on the cache: the same nodes and edges.
        for a, b in zip(r["epoch"], r["cached"], strict=True):
            assert np.array_equal(a["n_id"], b["n_id"])
            assert np.array_equal(a["edge_index"], b["edge_index"])
        for b in r["replace"]:
            _check_batch(b, dataset, orig, FANOUTS, replace=True)
    # Byte counters equal an analytic count of what had to move.
    offsets = np.asarray(meta.offsets)
    sent = sum(r["stats"]["sample"]["bytes_sent"] for r in res)
    assert sent == sum(r["stats"]["sample"]["bytes_recv"] for r in res)
    assert sent == _sample_bytes([r["epoch"] for r in res], offsets)
    for rank, r in enumerate(res):
        remote = sum(
            len(np.unique(b["n_id"][(np.searchsorted(offsets, b["n_id"], "right") - 1) != rank]))
            for b in r["epoch"])
        f = r["stats"]["feature"]
        assert f["rows_recv"] == remote and f["bytes_recv"] == remote * 4 * 6  # x only
        assert r["stats"]["feature_ids"]["bytes_sent"] == 8 * remote
        assert r["row_bytes"] == 4 * 6 + 8
    # A PyG GraphSAGE runs on a batch, and trimming per layer changes no seed output.
    b = res[0]["epoch"][0]
    data = Data(x=torch.from_numpy(b["x"]), edge_index=torch.from_numpy(b["edge_index"]))
    model = pyg_nn.GraphSAGE(6, 16, num_layers=2, out_channels=4).eval()
    full = model(data.x, data.edge_index)[: b["batch_size"]]
    trimmed = model(data.x, data.edge_index, num_sampled_nodes_per_hop=b["nodes"],
                    num_sampled_edges_per_hop=b["edges"])[: b["batch_size"]]
    torch.testing.assert_close(trimmed, full)


def test_four_ranks_random_halo2_cache(dataset: GraphDataset, tmp_path: Path) -> None:
    part_dir = tmp_path / "random4"
    partition_graph(dataset, part_dir,
                    PartitionConfig(num_parts=4, partitioner="random", halo_hops=2, seed=0))
    orig = _orig_of_gid(part_dir, 4)
    res = run_multiproc(_coverage_worker, 4, str(part_dir))
    _check_epoch([r["epoch"] for r in res], dataset, orig)
    _check_epoch([r["mixed_epoch"] for r in res], dataset, orig)
    for r in res:
        assert _same(r["local_epoch"], r["epoch"]) and _same(r["mixed_epoch"], r["epoch"])
    for r in res:
        o = orig[r["ids"]]
        np.testing.assert_array_equal(r["rows"]["x"], np.asarray(dataset.x)[o])
        np.testing.assert_array_equal(r["rows"]["y"], np.asarray(dataset.y)[o])
    sizes = [r["drop_last_sizes"] for r in res]
    assert len({len(s) for s in sizes}) == 1 and {x for s in sizes for x in s} == {BATCH}
    few = [r["few"] for r in res]
    assert len({len(f) for f in few}) == 1
    assert min(b["batch_size"] for f in few for b in f) == 0, "no empty padding batch"
    got = np.sort(np.concatenate([b["n_id"][: b["batch_size"]] for f in few for b in f]))
    n = dataset.num_nodes
    np.testing.assert_array_equal(got, np.arange(0, n, n // 10)[:10])
    for f in few:
        for b in f:
            _check_batch(b, dataset, orig, [3])
    # The loader's global batch sizes (no communication) equal the sums over the ranks.
    batches = {"epoch": [[b["batch_size"] for b in r["epoch"]] for r in res],
               "drop_last": sizes, "few": [[b["batch_size"] for b in f] for f in few]}
    for name, per_rank in batches.items():
        summed = np.sum(np.array(per_rank), axis=0).tolist()
        for r in res:
            assert r["global_sizes"][name] == summed, name


def test_ranks_read_peers_only_from_the_directory_they_share(dataset: GraphDataset,
                                                             tmp_path: Path) -> None:
    part_dir = tmp_path / "contig2"
    partition_graph(dataset, part_dir, PartitionConfig(num_parts=2, partitioner="contiguous"))
    copy = tmp_path / "copy"
    shutil.copytree(part_dir, copy)
    res = run_multiproc(_copies_worker, 2, [str(part_dir), str(copy)])
    assert [r["copies"] for r in res] == [True, True]
    assert [r["shared"] for r in res] == [([1], True), ([0], True)]


def test_bad_arguments_raise_on_every_rank(dataset: GraphDataset, tmp_path: Path) -> None:
    part_dir = tmp_path / "contig2"
    partition_graph(dataset, part_dir, PartitionConfig(num_parts=2, partitioner="contiguous"))
    for caught in run_multiproc(_errors_worker, 2, str(part_dir)):
        assert caught == ["fanouts", "batch_size", "seeds", "batch_size", "seeds",
                          "batch_size", "True"]


@pytest.mark.parametrize("counts", [[5, 0, 7], [0, 3, 3], [10, 10, 10, 1], [1], [0, 0, 9, 0],
                                    [4, 4, 5], [1000, 1015, 985], [1000, 1100, 900]])
def test_even_split_moves_the_fewest_seeds(counts: list[int]) -> None:
    moves = np.array(even_split(counts, slack=0.02))
    total, world = sum(counts), len(counts)
    share = moves.sum(axis=0)  # what each rank trains on
    cap = max(-(-total // world), int(total / world * 1.02))  # largest share allowed
    assert share.max() == min(max(counts), cap) and share.sum() == total
    np.testing.assert_array_equal(moves.sum(axis=1), counts)  # every seed goes somewhere
    # Fewest moves: exactly the seeds above the cap (a lower bound for any split under it).
    surplus = sum(max(0, n - cap) for n in counts)
    assert moves.sum() - np.trace(moves) == surplus
    assert (moves >= 0).all() and (np.diag(moves) == np.minimum(counts, cap)).all()


def test_even_seed_split_on_an_unbalanced_partition(tmp_path: Path) -> None:
    """Contiguous parts with most training nodes in part 0: shares equal, fewest moved."""
    base = _graph_with_hubs()
    n = base.num_nodes
    rng = np.random.default_rng(5)
    train = np.sort(np.concatenate([rng.choice(n // 3, 500, replace=False),
                                    n // 3 + rng.choice(n - n // 3, 150, replace=False)]))
    rest = rng.permutation(np.setdiff1d(np.arange(n), train))
    ds = GraphDataset(n, base.src, base.dst, base.x, base.y, train, np.sort(rest[:300]),
                      np.sort(rest[300:600]), num_classes=base.num_classes)
    part_dir = tmp_path / "skewed"
    meta = partition_graph(ds, part_dir, PartitionConfig(num_parts=3, partitioner="contiguous"))
    offsets = np.asarray(meta.offsets)
    owned = np.bincount(np.searchsorted(offsets, train, side="right") - 1, minlength=3)
    assert owned.max() > 2 * owned.min()  # unbalanced indeed
    orig = _orig_of_gid(part_dir, 3)
    res = run_multiproc(_seed_split_worker, 3, str(part_dir))
    for split in ("even", "owned"):
        _check_epoch([r[split]["epoch"] for r in res], ds, orig)  # every seed once, labels
    shares = [r["even"]["num_seeds"] for r in res]
    cap = max(-(-len(train) // 3), int(len(train) / 3 * (1 + SEED_SLACK)))
    assert max(shares) == cap and sum(shares) == len(train)
    moved = sum(r["even"]["num_seeds"] - r["even"]["num_own"] for r in res)
    assert moved == sum(max(0, int(o) - cap) for o in owned)
    for rank, r in enumerate(res):
        assert r["owned"]["num_seeds"] == owned[rank] == r["owned"]["num_own"]
        for split in ("even", "owned"):
            for b in r[split]["epoch"]:
                seeds = b["n_id"][: b["batch_size"]]
                mine = (np.searchsorted(offsets, seeds, side="right") - 1) == rank
                assert not np.any(mine[1:] & ~mine[:-1]), "own seeds are not first"
                if split == "owned":
                    assert mine.all()

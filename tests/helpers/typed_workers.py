"""Rank functions of the typed-graph tests (module-level, so spawned processes import them)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

FANOUTS = {"writes": [3, 2], "rev_writes": [2, 0], "published_in": [1, 1],
           "rev_published_in": [2, 2], "cites": [4, 2]}
"""Per-relation fan-outs of the sampling checks (0: the relation is skipped at that hop)."""
EMBED_DIM = 4


def init_rows(orig: torch.Tensor) -> torch.Tensor:
    """The embedding rows both the test and the reference start from (a function of the id)."""
    return torch.sin(orig.double()[:, None] * 0.37 + torch.arange(EMBED_DIM)).float()


def _numpy(batch: Any) -> dict[str, Any]:
    return {
        "n_id": {t: batch[t].n_id.numpy() for t in batch.node_types},
        "x": {t: batch[t].x.numpy() for t in batch.node_types if "x" in batch[t]},
        "edge_index": {r: batch[r].edge_index.numpy() for r in batch.edge_types},
        "nodes": {t: list(batch[t].num_sampled_nodes) for t in batch.node_types},
        "edges": {r: list(batch[r].num_sampled_edges) for r in batch.edge_types},
        "y": batch["paper"].y.numpy(), "batch_size": int(batch["paper"].batch_size),
    }


def _models_on(batch: Any, layout: Any) -> dict[str, Any]:
    """TypedSAGE (trimmed) vs PyG's to_hetero GraphSAGE (whole batch), same weights; PyG's
    trim_to_layer on the batch's counts; one step of PyG's HGTConv and RGCNConv."""
    from torch_geometric.nn import HeteroConv, HGTConv, RGCNConv, SAGEConv, to_hetero
    from torch_geometric.nn.models import GraphSAGE
    from torch_geometric.utils import trim_to_layer

    from gnnpar.models.typed import TypedSAGE

    torch.manual_seed(0)
    x = {t: batch[t].x if "x" in batch[t] else torch.randn(batch[t].num_nodes, 5)
         for t in batch.node_types}
    meta = (list(batch.node_types), list(batch.edge_types))
    ref = to_hetero(GraphSAGE(-1, 16, 2, 6), meta, aggr="sum").eval()
    ref_out = ref(x, batch.edge_index_dict)["paper"][: batch["paper"].batch_size]
    ours = TypedSAGE(layout, {t: v.shape[1] for t, v in x.items()}, 16, 6, 2).eval()
    ours.load_state_dict({k: v for k, v in ref.state_dict().items()
                          if k in ours.state_dict()})
    out = ours(x, batch.edge_index_dict, batch.num_sampled_nodes_dict,
               batch.num_sampled_edges_dict)
    # PyG's own hierarchical trimming (trim_to_layer) on the batch's per-type counts
    convs = [HeteroConv({r: SAGEConv((-1, -1), 8) for r in meta[1]}, aggr="sum")
             for _ in range(2)]

    def hierarchical(trim: bool) -> torch.Tensor:
        xd, ed = dict(x), dict(batch.edge_index_dict)
        for i, conv in enumerate(convs):
            if trim:
                xd, ed, _ = trim_to_layer(i, batch.num_sampled_nodes_dict,
                                          batch.num_sampled_edges_dict, xd, ed)
            xd = conv(xd, ed)
        return xd["paper"][: batch["paper"].batch_size]

    with torch.no_grad():
        whole, trimmed = hierarchical(False), hierarchical(True)
    hgt = HGTConv({t: v.shape[1] for t, v in x.items()}, 8, meta, heads=2)
    hgt_loss = hgt(x, batch.edge_index_dict)["paper"].square().mean()
    hgt_loss.backward()
    homo = batch.to_homogeneous(node_attrs=[], edge_attrs=[])
    rgcn = RGCNConv(4, 8, num_relations=len(batch.edge_types))
    rgcn_loss = rgcn(torch.randn(homo.num_nodes, 4), homo.edge_index,
                     homo.edge_type).square().mean()
    rgcn_loss.backward()
    return {"ours": out.detach().numpy(), "to_hetero": ref_out.detach().numpy(),
            "trim_whole": whole.numpy(), "trim_trimmed": trimmed.numpy(),
            "losses": [float(hgt_loss), float(rgcn_loss)],
            "grads_finite": all(bool(torch.isfinite(p.grad).all())
                                for m in (hgt, rgcn) for p in m.parameters()
                                if p.grad is not None)}


def _embeddings(graph: Any, ctx: Any, steps: list[tuple[np.ndarray, np.ndarray]],
                new_of_old: np.ndarray) -> dict[str, Any]:
    """Two sharded tables (SparseAdam, SparseAdagrad) trained on this rank's share."""
    from gnnpar.storage.embedding import DistEmbedding, SparseAdagrad, SparseAdam

    author = graph.meta.types.layout.type_index("author")
    out: dict[str, Any] = {}
    for name, cls, lr in (("adam", SparseAdam, 0.05), ("adagrad", SparseAdagrad, 0.1)):
        emb = DistEmbedding(graph, ctx, EMBED_DIM, (author,), name=name)
        emb.weight.copy_(init_rows(emb.orig_ids))
        opt = cls([emb], lr=lr)
        rows = []
        for ids, w in steps:  # ids: homogeneous dataset ids of authors, repeats allowed
            mine = slice(ctx.rank, None, ctx.world_size)
            got = emb(torch.from_numpy(new_of_old[ids[mine]]))
            rows.append(got.detach().numpy().copy())
            loss = (got * torch.from_numpy(w[mine])).sum() * ctx.world_size / len(ids)
            loss.backward()
            opt.step()
        saved = opt.state_dict()  # collective: rank 0 holds the whole table
        out[name] = {"rows": rows, "orig": emb.orig_ids.numpy(),
                     "weight": emb.weight.numpy().copy(),
                     "state": {k: v.numpy().copy() for k, v in opt.state[0].items()},
                     "saved": {k: v.numpy().copy() for k, v in saved[name].items()}}
        before = emb.weight.clone()
        emb.weight.zero_()
        if ctx.world_size == 1:
            opt.load_state_dict(saved)
            out[name]["restored"] = bool(torch.equal(before, emb.weight))
    return out


def sample_and_embed(part_dir: str, steps: list[tuple[np.ndarray, np.ndarray]]
                     ) -> dict[str, Any]:
    """One epoch of typed batches, the model checks (one rank), the embedding runs."""
    from gnnpar import distributed
    from gnnpar.comm import CommStats
    from gnnpar.loading.typed import DistTypedNeighborLoader
    from gnnpar.partition.format import PartitionMeta, load_partition
    from gnnpar.sampling.fanouts import Fanouts
    from gnnpar.sampling.typed import DistTypedNeighborSampler
    from gnnpar.storage.features import DistFeatureStore
    from gnnpar.storage.graph import DistGraph
    from gnnpar.storage.typed import TypedFeatureStore

    ctx = distributed.init()
    graph = DistGraph.load(part_dir, ctx)
    stats = CommStats()
    labels = DistFeatureStore(graph, ctx, arrays={"y": graph.part.label}, stats=stats)
    # a small cache: some paper rows come from it, and must still be the source's
    store = TypedFeatureStore(graph, ctx, cache_bytes=2**12, stats=stats)
    sampler = DistTypedNeighborSampler(graph, ctx, Fanouts.for_graph(FANOUTS, graph, ctx),
                                        stats=stats)
    loader = DistTypedNeighborLoader(sampler, labels, store, "train", batch_size=64)
    raw = list(loader)
    res: dict[str, Any] = {"batches": [_numpy(b) for b in raw], "rank": ctx.rank,
                           "sample_bytes": stats.counters["sample"].bytes_sent}
    if ctx.world_size == 1:
        res["models"] = _models_on(raw[0], graph.meta.types.layout)
    meta = PartitionMeta.load(part_dir)
    old_of_new = np.concatenate([load_partition(part_dir, k, verify=False).orig_ids
                                 for k in range(meta.num_parts)])
    new_of_old = np.argsort(old_of_new)
    res["embeddings"] = _embeddings(graph, ctx, steps, new_of_old)
    return res


def typed_rows(part_dir: str) -> dict[str, Any]:
    """Typed batches of a graph with features on every type, read from one typed store
    with a cache of each size (none, a few rows, every halo row)."""
    from gnnpar import distributed
    from gnnpar.loading.typed import DistTypedNeighborLoader
    from gnnpar.sampling.fanouts import Fanouts
    from gnnpar.sampling.typed import DistTypedNeighborSampler
    from gnnpar.storage.features import DistFeatureStore
    from gnnpar.storage.graph import DistGraph
    from gnnpar.storage.typed import TypedFeatureStore

    ctx = distributed.init()
    graph = DistGraph.load(part_dir, ctx)
    labels = DistFeatureStore(graph, ctx, arrays={"y": graph.part.label})
    sampler = DistTypedNeighborSampler(graph, ctx, Fanouts.for_graph(FANOUTS, graph, ctx),
                                        seed=5)
    out: dict[str, Any] = {}
    for name, cache in (("none", 0), ("some", 2**10), ("all", 2**30)):
        store = TypedFeatureStore(graph, ctx, cache_bytes=cache)
        loader = DistTypedNeighborLoader(sampler, labels, store, "train", batch_size=32,
                                          prefetch=True)
        out[name] = {"batches": [_numpy(b) for b in loader],
                     "cached": int(store.cache_gids.numel())}
    distributed.shutdown()
    return out

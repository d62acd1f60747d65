"""Link-prediction loader: throughput, bytes per step by kind, remote endpoints.

On 2 gloo ranks, one SBM link graph (``sbm(task="link")``: 200k nodes, average degree 12,
64 features; 0.85 / 0.05 / 0.1 of the edges in the train / val / test supervision splits),
fan-outs [15, 10], features included, in the same run:

1. sampled edges per second per rank of ``DistLinkNeighborLoader`` (``"train"`` edges,
   batch 256 positives, ``binary``, ``num_neg=1``, ``exclude="reverse"``: about
   256 * (2 + 2) = 1024 seed endpoints, fewer distinct seed nodes) with and without
   ``strict`` negatives, against ``DistNeighborLoader`` over the training nodes (batch
   1024 nodes) on the same partition: the ratio link / node.  The link loader's sampler
   returns each edge's id (``e_id``, 8 more bytes per sampled edge in the replies);
   ``node e_id`` is the node loader with ``with_edges=True``, the same sampler;
2. bytes each rank sends per step, by ``CommStats`` kind (``sample``, ``feature_ids``,
   ``feature``, ``negative``), from the feature store's ``stats`` that the samplers share
   (with 2 ranks every byte one sends the other receives);
3. the share of the batch's endpoints (positives and negatives) and of its sampled nodes
   that the other rank owns, with METIS and with random parts.

A 1-rank row (one part, no communication) shows what the exchanges cost.

    python benchmarks/bench_link.py [--small] [--nodes N] [--batches N] [--json OUT]
                                    [--workdir DIR]

Only the loader's ``next()`` is timed (the share counting is outside it).  Wall-clock
figures on a shared machine are noisy; the per-CPU-second column is steadier.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_sampling import FANOUTS, make_partitions

from gnnpar.config import ArgumentParser
from gnnpar.testing import run_multiproc

LINK_BATCH = 256
"""Positive edges per link batch: with one negative pair each, 4 endpoints per positive."""
NODE_BATCH = 1024
"""Seed nodes per node-loader batch, the link batch's 256 * 4 endpoints."""
LOADERS: dict[str, dict[str, Any]] = {
    "node": {},
    "node e_id": {"with_edges": True},
    "link": {"strict": False},
    "link strict": {"strict": True},
}
KINDS = ("sample", "feature_ids", "feature", "negative")


def _loader_worker(part_dir: str, num_batches: int, warmup: int) -> dict[str, Any]:
    import torch

    from gnnpar import distributed
    from gnnpar.comm import CommStats
    from gnnpar.loading.link import DistLinkNeighborLoader
    from gnnpar.loading.node import DistNeighborLoader
    from gnnpar.sampling.fanouts import Fanouts
    from gnnpar.sampling.neighbor import DistNeighborSampler
    from gnnpar.storage.features import DistFeatureStore
    from gnnpar.storage.graph import DistGraph

    ctx = distributed.init()
    graph = DistGraph.load(part_dir, ctx, verify=False)
    res: dict[str, Any] = {}
    fanouts = Fanouts.for_graph(FANOUTS, graph, ctx)
    for name, kw in LOADERS.items():
        stats = CommStats()
        store = DistFeatureStore(graph, ctx, stats=stats)
        if name.startswith("node"):
            sampler = DistNeighborSampler(graph, ctx, fanouts, seed=0, **kw)
            loader: Any = DistNeighborLoader(sampler, store, "train", batch_size=NODE_BATCH)
        else:
            sampler = DistNeighborSampler(graph, ctx, fanouts, seed=0, with_edges=True)
            loader = DistLinkNeighborLoader(sampler, store, "train", batch_size=LINK_BATCH,
                                            neg_sampling="binary", num_neg=1,
                                            exclude="reverse", **kw)
        steps = min(warmup + num_batches, len(loader))
        sums = dict.fromkeys(("edges", "seeds", "nodes", "remote_nodes", "endpoints",
                              "remote_endpoints", "pos_endpoints", "remote_pos_endpoints",
                              "remote_seeds", "unresolved", "wall_s", "cpu_s"), 0.0)
        it = iter(loader)
        for i in range(steps):
            if i == warmup:
                stats.reset()
                sums = dict.fromkeys(sums, 0.0)
            wall, cpu = time.perf_counter(), time.process_time()
            batch = next(it)
            sums["wall_s"] += time.perf_counter() - wall
            sums["cpu_s"] += time.process_time() - cpu
            n_id = batch.n_id
            seeds = int(batch.num_sampled_nodes[0])
            sums["edges"] += batch.edge_index.shape[1]
            sums["seeds"] += seeds
            sums["nodes"] += n_id.numel()
            sums["remote_nodes"] += int((~graph.is_owned(n_id)).sum())
            sums["remote_seeds"] += int((~graph.is_owned(n_id[:seeds])).sum())
            if name.startswith("link"):
                ends = n_id[batch.edge_label_index]  # [2, B (1 + k)] global ids
                remote = ~graph.is_owned(ends)
                b = int(batch.input_id.numel())
                sums["endpoints"] += ends.numel()
                sums["remote_endpoints"] += int(remote.sum())
                sums["pos_endpoints"] += 2 * b
                sums["remote_pos_endpoints"] += int(remote[:, :b].sum())
                sums["unresolved"] += int(loader.negatives.unresolved)  # this batch's
        res[name] = {**sums, "steps": steps - warmup, "comm": stats.as_dict()}
        del it
    torch.distributed.barrier()
    distributed.shutdown()
    return res


def _summarise(ranks: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per-rank means of each loader's figures (rates per rank, shares over all ranks)."""
    world, out = len(ranks), {}
    for name in LOADERS:
        rs = [r[name] for r in ranks]
        tot = {k: sum(r[k] for r in rs) for k in rs[0] if k not in ("comm", "steps")}
        steps = rs[0]["steps"]
        row = {
            "steps": steps,
            "edges_per_s": sum(r["edges"] / r["wall_s"] for r in rs) / world,
            "edges_per_cpu_s": sum(r["edges"] / r["cpu_s"] for r in rs) / world,
            "edges_per_step": tot["edges"] / world / steps,
            "seed_nodes_per_step": tot["seeds"] / world / steps,
            "nodes_per_step": tot["nodes"] / world / steps,
            "remote_node_share": tot["remote_nodes"] / tot["nodes"],
            "remote_seed_share": tot["remote_seeds"] / tot["seeds"],
        }
        if name.startswith("link"):
            row["endpoints_per_step"] = tot["endpoints"] / world / steps
            row["remote_endpoint_share"] = tot["remote_endpoints"] / tot["endpoints"]
            row["remote_pos_endpoint_share"] = (tot["remote_pos_endpoints"]
                                                / tot["pos_endpoints"])
            neg = tot["endpoints"] - tot["pos_endpoints"]
            row["remote_neg_endpoint_share"] = ((tot["remote_endpoints"]
                                                 - tot["remote_pos_endpoints"]) / neg)
            row["unresolved_negatives"] = tot["unresolved"]
        for kind in KINDS:
            row[f"{kind}_bytes_sent_per_step"] = sum(
                r["comm"].get(kind, {}).get("bytes_sent", 0) for r in rs) / world / steps
        row["bytes_sent_per_step"] = sum(row[f"{k}_bytes_sent_per_step"] for k in KINDS)
        out[name] = row
    return out


def main() -> None:
    ap = ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="20k nodes instead of --nodes")
    ap.add_argument("--nodes", type=int, default=200_000, help="SBM nodes (avg degree 12)")
    ap.add_argument("--batches", type=int, default=40, help="timed batches per rank")
    ap.add_argument("--json", help="write the figures to this JSON file")
    ap.add_argument("--workdir", help="where partitions are written (reused if present)")
    args = ap.parse_args()
    n = 20_000 if args.small else args.nodes
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="gnnpar-bench-"))
    print(f"graph: SBM link task, {n:,} nodes, avg degree 12, 64 features; fan-outs "
          f"{FANOUTS}; link batch {LINK_BATCH} positive edges (binary, 1 negative, "
          f"exclude reverse), node batch {NODE_BATCH} training nodes")
    parts = {"metis2": (2, "metis", 1), "random2": (2, "random", 1), "one": (1, "metis", 1)}
    ds, _, dirs = make_partitions(workdir, parts, num_nodes=n, avg_degree=12.0, task="link")
    print(f"  {ds.num_nodes:,} nodes, {ds.num_edges:,} stored edges, "
          f"{len(ds.train_edges):,} train edges")
    del ds
    env = {"OMP_NUM_THREADS": "1"}
    res = {name: _summarise(run_multiproc(_loader_worker, parts[name][0], str(d),
                                          args.batches, 3, env=env, timeout=1800))
           for name, d in dirs.items()}

    m = res["metis2"]
    print(f"\nper rank, {args.batches} timed steps {'':14s} {'edges/s':>9s} {'edges/CPU-s':>11s}"
          f" {'vs node':>8s} {'edges/step':>10s} {'seeds/step':>10s}")
    for part, world in (("metis2", 2), ("random2", 2), ("one", 1)):
        ref = res[part]["node"]["edges_per_s"]
        for name in LOADERS:
            r = res[part][name]
            print(f"  {part} ({world} rank{'s' if world > 1 else ''}), {name:12s} "
                  f"{r['edges_per_s'] / 1e6:7.2f} M {r['edges_per_cpu_s'] / 1e6:9.2f} M "
                  f"{r['edges_per_s'] / ref:7.2f}x {r['edges_per_step']:10,.0f} "
                  f"{r['seed_nodes_per_step']:10,.0f}")
    print("\nbytes sent per rank per step (kB), 2 ranks")
    print(f"  {'':22s}" + "".join(f"{k:>12s}" for k in (*KINDS, "all")))
    for part in ("metis2", "random2"):
        for name in LOADERS:
            r = res[part][name]
            print(f"  {part + ', ' + name:22s}" + "".join(
                f"{r[f'{k}_bytes_sent_per_step'] / 1e3:12.1f}" for k in KINDS)
                + f"{r['bytes_sent_per_step'] / 1e3:12.1f}")
    print("\nshare owned by the other rank (link loader, not strict)")
    for part in ("metis2", "random2"):
        r, nd = res[part]["link"], res[part]["node"]
        print(f"  {part}: endpoints {r['remote_endpoint_share']:.1%} (positives "
              f"{r['remote_pos_endpoint_share']:.1%}, negatives "
              f"{r['remote_neg_endpoint_share']:.1%}), distinct seed nodes "
              f"{r['remote_seed_share']:.1%}, sampled nodes {r['remote_node_share']:.1%} "
              f"(node loader: {nd['remote_node_share']:.1%})")
    print(f"strict negatives still rejected after 3 rounds (METIS, all ranks, all steps): "
          f"{m['link strict']['unresolved_negatives']:.0f}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "nodes": n, "avg_degree": 12.0, "feat_dim": 64, "fanouts": FANOUTS,
            "link_batch": LINK_BATCH, "node_batch": NODE_BATCH, "batches": args.batches,
            "cpus": os.cpu_count(), "load_avg": os.getloadavg(), "results": res}, indent=2))


if __name__ == "__main__":
    main()

"""Feature communication and memory of the distributed loader at 4 parts.

1. Remote feature rows fetched per epoch (fan-outs [15, 10], batch 1024, the training
   split as seeds) with METIS parts and with random parts, against the cache budget
   (a fraction of each rank's own feature bytes).  Goal (issue 4): METIS parts with a
   cache of 20% fetch at most 10% of the rows that random parts without a cache fetch.
2. Peak resident memory per rank at 4 parts against one process holding the whole graph:
   the same loader on a 1-part partition, and the graph loaded whole as a PyG ``Data``.
   Goal: at most 0.35x.

    python benchmarks/bench_featstore.py [--small] [--nodes N] [--json OUT] [--workdir DIR]

Each rank samples one epoch once and then gathers the same batches' nodes through stores
of every cache budget, so the curves differ only by the cache.
"""

from __future__ import annotations

import json
import resource
import tempfile
from pathlib import Path
from typing import Any

import torch
from bench_sampling import BATCH, FANOUTS, make_partitions

from gnnpar.config import ArgumentParser
from gnnpar.testing import run_multiproc

CACHE_FRACTIONS = (0.0, 0.05, 0.1, 0.2, 0.5, 1.0)


def _peak_rss_mb() -> float:
    """Peak resident memory of this process image (``VmHWM``; unlike ``ru_maxrss`` it
    does not inherit the parent's peak across the spawn's fork + exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rows_worker(part_dir: str, fractions: tuple[float, ...]) -> dict[str, Any]:
    from gnnpar import distributed
    from gnnpar.comm import CommStats
    from gnnpar.loading.node import DistNeighborLoader
    from gnnpar.sampling.fanouts import Fanouts
    from gnnpar.sampling.neighbor import DistNeighborSampler
    from gnnpar.storage.features import DistFeatureStore
    from gnnpar.storage.graph import DistGraph

    base = _peak_rss_mb()
    ctx = distributed.init()
    graph = DistGraph.load(part_dir, ctx, verify=False)
    stats = CommStats()
    store = DistFeatureStore(graph, ctx, stats=stats)
    sampler = DistNeighborSampler(graph, ctx, Fanouts.for_graph(FANOUTS, graph, ctx), seed=0)
    loader = DistNeighborLoader(sampler, store, batch_size=BATCH)
    nodes, requested = [], 0
    for batch in loader:
        requested += batch.n_id.numel()
        if fractions:  # kept for the cache curves only, not to inflate the memory figure
            nodes.append(batch.n_id)
    out: dict[str, Any] = {
        "steps": len(loader), "rows_requested": requested,
        "peak_rss_mb": _peak_rss_mb(), "rss_after_import_mb": base,
        "feat_bytes": int(graph.part.feat.nbytes), "curve": {},
    }
    for frac in fractions:
        st = CommStats()
        cached = DistFeatureStore(graph, ctx, cache_bytes=int(frac * graph.part.feat.nbytes),
                                  stats=st)
        for n_id in nodes:
            cached.gather_many(n_id)
        out["curve"][frac] = {
            "rows": st.counters["feature"].rows_recv,
            "bytes": st.counters["feature"].bytes_recv,
            "fill_rows": st.counters["cache_fill"].rows_recv,
            "cached_rows": int(cached.cache_gids.numel()),
        }
    return out


def _whole_graph_rss(dataset_dir: str) -> float:
    """Peak RSS of one process that loads the whole graph into memory as a PyG ``Data``."""
    from gnnpar.datasets.graph import GraphDataset

    data = GraphDataset.load(dataset_dir, mmap=False).to_pyg()
    data.csc = data.edge_index[0][torch.argsort(data.edge_index[1])]  # a sampler's CSC
    return _peak_rss_mb()


def _print_rows(res: dict[str, Any], curves: dict[str, dict[float, int]],
                requested: int) -> float:
    """Print the rows-vs-cache table; return METIS + 20% over random without a cache."""
    ref = sum(r["curve"][0.0]["rows"] for r in res["random4"])
    print(f"\nremote feature rows fetched per epoch, all 4 ranks (vs random parts, no cache "
          f"= {ref:,} rows)")
    print(f"{'cache (of own feat bytes)':>26s} {'METIS':>22s} {'METIS, halo_hops=2':>22s} "
          f"{'random':>22s}")
    for frac in CACHE_FRACTIONS:
        line = f"{frac:25.0%} "
        for name in ("metis4", "metis4-halo2", "random4"):
            rows = sum(r["curve"][frac]["rows"] for r in res[name])
            curves.setdefault(name, {})[frac] = rows
            line += f" {rows:12,} ({rows / ref:6.1%})"
        print(line)
    goal = min(curves["metis4"][0.2], curves["metis4-halo2"][0.2]) / ref
    print(f"rows requested by the batches (METIS): {requested:,}; "
          f"best METIS + 20% cache / random no cache = {goal:.1%} (goal <= 10%)")
    return goal


def main() -> None:
    ap = ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="20k nodes instead of --nodes")
    ap.add_argument("--nodes", type=int, default=200_000, help="SBM nodes (avg degree 10)")
    ap.add_argument("--feat-dim", type=int, default=64)
    ap.add_argument("--homophily", type=float, default=0.7,
                    help="SBM share of intra-class edges (higher: more locality for METIS)")
    ap.add_argument("--classes", type=int, default=16, help="SBM classes (communities)")
    ap.add_argument("--memory-only", action="store_true",
                    help="skip the rows-vs-cache curves (for large --nodes)")
    ap.add_argument("--json", help="write the figures to this JSON file")
    ap.add_argument("--workdir", help="where partitions are written (reused if present)")
    args = ap.parse_args()
    n = 20_000 if args.small else args.nodes
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="gnnpar-bench-"))
    print(f"graph: SBM {n:,} nodes, avg degree 10, {args.classes} classes, homophily "
          f"{args.homophily}, {args.feat_dim} features; fan-outs {FANOUTS}, batch {BATCH}, "
          "4 ranks")
    parts = {"metis4": (4, "metis", 1), "whole1": (1, "metis", 1)}
    if not args.memory_only:
        parts.update({"metis4-halo2": (4, "metis", 2), "random4": (4, "random", 1)})
    ds, tag, dirs = make_partitions(
        workdir, parts, num_nodes=n, avg_degree=10.0, feat_dim=args.feat_dim,
        homophily=args.homophily, num_classes=args.classes)
    ds_dir = workdir / f"{tag}-dataset"
    if not (ds_dir / "dataset.json").exists():
        ds.save(ds_dir)
    del ds
    env = {"OMP_NUM_THREADS": "1"}
    fractions = () if args.memory_only else CACHE_FRACTIONS
    res = {name: run_multiproc(_rows_worker, parts[name][0], str(d), fractions, env=env,
                               timeout=3600) for name, d in dirs.items()}
    whole_pyg = run_multiproc(_whole_graph_rss, 1, str(ds_dir), env=env, timeout=3600)[0]
    curves: dict[str, dict[float, int]] = {}
    requested = sum(r["rows_requested"] for r in res["metis4"])
    goal = None
    if not args.memory_only:
        goal = _print_rows(res, curves, requested)
    per_rank = max(r["peak_rss_mb"] for r in res["metis4"])
    base = max(r["rss_after_import_mb"] for r in res["metis4"])
    whole = res["whole1"][0]["peak_rss_mb"]
    print("\npeak resident memory per rank (VmHWM)")
    print(f"  4 parts (METIS), max over ranks   {per_rank:8.0f} MB  (interpreter + torch: "
          f"{base:.0f} MB)")
    print(f"  1 part, same loader               {whole:8.0f} MB  -> ratio {per_rank / whole:.2f}x"
          f"  (above the interpreter: {(per_rank - base) / (whole - base):.2f}x)")
    print(f"  whole graph as PyG Data in RAM    {whole_pyg:8.0f} MB  -> ratio "
          f"{per_rank / whole_pyg:.2f}x  (goal <= 0.35x; above the interpreter: "
          f"{(per_rank - base) / (whole_pyg - base):.2f}x)")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "nodes": n, "feat_dim": args.feat_dim, "homophily": args.homophily,
            "classes": args.classes, "rows_curves": curves,
            "rows_requested": requested, "metis20_over_random0": goal,
            "peak_rss_mb": {"rank_4parts": per_rank, "one_part": whole, "pyg_whole": whole_pyg,
                            "after_import": base},
            "per_rank": res}, indent=2, default=str))


if __name__ == "__main__":
    main()

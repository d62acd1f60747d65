"""Distributed neighbour-sampling throughput: sampled edges per second per rank.

Runs ``DistNeighborSampler`` (and the whole ``DistNeighborLoader``, features included) on
2 gloo ranks over a METIS partition of an SBM graph of 1M nodes / 10M edges, fan-outs
[15, 10], batch 1024, and prints the figures next to PyG's ``NeighborLoader`` — run in
the same process when ``pyg-lib`` or ``torch-sparse`` is importable, else next to the
anchors measured on a 2-core machine (issue 4).  A 1-rank row (whole graph, no
communication) shows what the exchanges cost.  Next to the throughput: per loader batch,
the operations that would make a CUDA host wait for the device and the collectives
(:func:`_measure.sync_budget`).

    python benchmarks/bench_sampling.py [--small] [--json OUT] [--workdir DIR]

Wall-clock figures on a shared machine are noisy; the per-CPU-second column (edges per
second of process CPU time) is steadier.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from _measure import sync_budget

from gnnpar.datasets.synthetic import sbm
from gnnpar.partition.writer import partition_graph
from gnnpar.testing import run_multiproc

ANCHORS = {"PyG NeighborLoader + pyg-lib": 6.0e6, "PyG NeighborLoader + torch-sparse": 1.9e6,
           "DGL 2.1 NeighborSampler": 16.5e6}
FANOUTS = [15, 10]
BATCH = 1024


def make_partitions(workdir: Path, parts: dict[str, tuple[int, str, int]],
                    **sbm_args: Any) -> tuple[Any, str, dict[str, Path]]:
    """Generate an SBM graph (``sbm_args``) once and write each ``name: (num_parts,
    method, halo_hops)`` partition under ``workdir``, reusing partitions already there.

    Returns:
        The dataset, a tag naming it, and the partition directory of each name.
    """
    tag = "sbm-" + "-".join(f"{k}{v}" for k, v in sorted(sbm_args.items()))
    ds = sbm(seed=0, **sbm_args)
    dirs = {}
    for name, (k, method, hops) in parts.items():
        d = workdir / f"{tag}-{name}"
        if not (d / "meta.json").exists():
            t = time.perf_counter()
            partition_graph(ds, k, d, method=method, halo_hops=hops, seed=0, overwrite=True)
            print(f"  partitioned {name}: {k} parts ({method}) in "
                  f"{time.perf_counter() - t:.1f} s")
        dirs[name] = d
    return ds, tag, dirs


def _throughput_worker(part_dir: str, num_batches: int, warmup: int) -> dict[str, Any]:
    from gnnpar import distributed
    from gnnpar.comm import CommStats
    from gnnpar.feature_store import DistFeatureStore
    from gnnpar.graph import DistGraph
    from gnnpar.loader import DistNeighborLoader
    from gnnpar.sampler import DistNeighborSampler

    ctx = distributed.init()
    graph = DistGraph.load(part_dir, ctx, verify=False)
    stats = CommStats()
    sampler = DistNeighborSampler(graph, ctx, FANOUTS, stats=stats)
    gen = torch.Generator().manual_seed(ctx.rank)
    seeds = graph.first_gid + torch.randperm(graph.num_owned, generator=gen)
    res: dict[str, Any] = {}
    edges = 0
    for i in range(warmup + num_batches):
        if i == warmup:
            stats.reset()
            wall, cpu, edges = time.perf_counter(), time.process_time(), 0
        out = sampler.sample(seeds[(i * BATCH) % graph.num_owned:][:BATCH], i)
        edges += out.row.numel()
    res["sampler"] = {"edges": edges, "wall_s": time.perf_counter() - wall,
                      "cpu_s": time.process_time() - cpu, "comm": stats.as_dict()}
    store = DistFeatureStore(graph, ctx)
    loader = DistNeighborLoader(graph, store, FANOUTS, seeds=seeds, batch_size=BATCH)
    edges = 0
    for i, batch in enumerate(loader):
        if i == warmup:
            wall, cpu, edges = time.perf_counter(), time.process_time(), 0
        edges += batch.edge_index.shape[1]
        if i + 1 == warmup + num_batches:
            break
    res["loader"] = {"edges": edges, "wall_s": time.perf_counter() - wall,
                     "cpu_s": time.process_time() - cpu}
    return res


def _pyg_reference(ds: Any, num_batches: int) -> dict[str, float] | None:
    """PyG ``NeighborLoader`` on the whole graph, when a sampling backend is importable."""
    try:
        from torch_geometric.loader import NeighborLoader
        from torch_geometric.typing import WITH_PYG_LIB, WITH_TORCH_SPARSE
    except ImportError:
        return None
    if not (WITH_PYG_LIB or WITH_TORCH_SPARSE):
        return None
    data = ds.to_pyg()
    loader = NeighborLoader(data, FANOUTS, batch_size=BATCH, shuffle=True)
    edges, wall, cpu = 0, time.perf_counter(), time.process_time()
    for i, batch in enumerate(loader):
        edges += batch.edge_index.shape[1]
        if i + 1 == num_batches:
            break
    return {"edges_per_s": edges / (time.perf_counter() - wall),
            "edges_per_cpu_s": edges / (time.process_time() - cpu)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="100k nodes / 1M edges")
    ap.add_argument("--batches", type=int, default=30, help="timed batches per rank")
    ap.add_argument("--json", help="write the figures to this JSON file")
    ap.add_argument("--workdir", help="where partitions are written (reused if present)")
    args = ap.parse_args()
    n = 100_000 if args.small else 1_000_000
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="gnnpar-bench-"))
    print(f"graph: SBM {n:,} nodes, avg degree 10; fan-outs {FANOUTS}, batch {BATCH}")
    ds, _, dirs = make_partitions(workdir, {"1": (1, "metis", 1), "2": (2, "metis", 1)},
                                  num_nodes=n, avg_degree=10.0, feat_dim=8)
    env = {"OMP_NUM_THREADS": "1"}
    rows: list[dict[str, Any]] = []
    for name, world in (("2", 2), ("1", 1)):
        res = run_multiproc(_throughput_worker, world, str(dirs[name]), args.batches, 3,
                            env=env, timeout=1800)
        for what in ("sampler", "loader"):
            per_rank = [r[what] for r in res]
            rows.append({
                "what": f"gnnpar {what}, {world} rank{'s' if world > 1 else ''}",
                "edges_per_s": sum(r["edges"] / r["wall_s"] for r in per_rank) / world,
                "edges_per_cpu_s": sum(r["edges"] / r["cpu_s"] for r in per_rank) / world,
                "edges_per_batch": sum(r["edges"] for r in per_rank) / world / args.batches,
            })
        if world == 2:
            comm = res[0]["sampler"]["comm"].get("sample", {})
            rows[-2]["sample_bytes_sent_per_batch"] = comm.get("bytes_sent", 0) / args.batches
    budget = sync_budget(str(dirs["2"]), 2, FANOUTS, BATCH)
    pyg = _pyg_reference(ds, args.batches)
    ref_name, ref = ("PyG NeighborLoader (measured here)", pyg["edges_per_s"]) if pyg else (
        "PyG NeighborLoader + pyg-lib (anchor)", ANCHORS["PyG NeighborLoader + pyg-lib"])
    print(f"\n{'':40s} {'edges/s/rank':>13s} {'edges/CPU-s':>12s} {'vs ' + ref_name:>10s}")
    for r in rows:
        print(f"{r['what']:40s} {r['edges_per_s'] / 1e6:11.2f} M {r['edges_per_cpu_s'] / 1e6:10.2f}"
              f" M   {r['edges_per_s'] / ref:6.2f}x")
    if "sample_bytes_sent_per_batch" in rows[0]:
        print(f"sampling traffic at 2 ranks: {rows[0]['sample_bytes_sent_per_batch'] / 1e3:.1f} "
              f"kB sent per rank per batch ({rows[0]['edges_per_batch']:.0f} edges per batch)")
    print(f"per loader batch at 2 ranks: {budget['load_syncs']:.1f} host syncs (operations "
          f"that make a CUDA host wait), {budget['load_collectives']:.1f} collectives")
    print("\nreferences (" + ("PyG measured in this run" if pyg else
                              "pyg-lib / torch-sparse not importable: anchors from issue 4") + ")")
    for name, v in ANCHORS.items():
        print(f"  {name:38s} {v / 1e6:5.1f} M edges/s  -> gnnpar sampler at 2 ranks: "
              f"{rows[0]['edges_per_s'] / v:.2f}x")
    if pyg:
        print(f"  PyG NeighborLoader measured here      {pyg['edges_per_s'] / 1e6:5.2f} M edges/s")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"graph_nodes": n, "fanouts": FANOUTS, "batch": BATCH, "rows": rows,
             "pyg": pyg, "anchors": ANCHORS, "per_batch": budget, "cpus": os.cpu_count()},
            indent=2))


if __name__ == "__main__":
    main()

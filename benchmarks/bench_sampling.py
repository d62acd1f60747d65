"""Distributed neighbour-sampling throughput: sampled edges per second per rank.

Runs ``DistNeighborSampler`` (and the whole ``DistNeighborLoader``, features included) on
1 and 2 gloo ranks over METIS partitions of an SBM graph of 1M nodes / 10M edges, fan-outs
[15, 10], batch 1024, with the compiled CPU kernels (:mod:`gnnpar.sampling.compiled`) and with
the torch ones (``GNNPAR_KERNELS=torch``: what runs on a GPU), next to DGL 2.1's
``NeighborSampler`` on the same graph in DGL's own environment (``_distdgl_worker.py
sample``; ``bench_vs_distdgl.py`` builds ``/work/.distdgl-venv``): 1 process, and 2
processes side by side for the per-rank figure at 2 ranks (each samples the whole graph;
no communication, which gnnpar's 2 ranks pay).  PyG's ``NeighborLoader`` runs too when
``pyg-lib`` or ``torch-sparse`` is importable.  Next to the throughput: per loader batch,
the operations that would make a CUDA host wait for the device and the collectives
(:func:`_measure.sync_budget`).  DGL counts the seeds' in-edges again at the second hop
(its blocks' inputs include the seeds): about 10% more edges per batch for the same
sampling, so edges per second slightly favour it.

    python benchmarks/bench_sampling.py [--small] [--json OUT] [--workdir DIR] [--dgl-venv DIR]

Wall-clock figures on a shared machine are noisy; the per-CPU-second column (edges per
second of process CPU time) is steadier.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from _measure import sync_budget

from gnnpar.config import ArgumentParser
from gnnpar.datasets.synthetic import sbm
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.writer import partition_graph
from gnnpar.testing import run_multiproc

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
            partition_graph(ds, d, PartitionConfig(num_parts=k, partitioner=method,
                                                   halo_hops=hops, seed=0), overwrite=True)
            print(f"  partitioned {name}: {k} parts ({method}) in "
                  f"{time.perf_counter() - t:.1f} s")
        dirs[name] = d
    return ds, tag, dirs


def _throughput_worker(part_dir: str, num_batches: int, warmup: int) -> dict[str, Any]:
    from gnnpar import distributed
    from gnnpar.comm import CommStats
    from gnnpar.loading.node import DistNeighborLoader
    from gnnpar.sampling.fanouts import Fanouts
    from gnnpar.sampling.neighbor import DistNeighborSampler
    from gnnpar.storage.features import DistFeatureStore
    from gnnpar.storage.graph import DistGraph

    ctx = distributed.init()
    graph = DistGraph.load(part_dir, ctx, verify=False)
    stats = CommStats()
    fanouts = Fanouts.for_graph(FANOUTS, graph, ctx)
    sampler = DistNeighborSampler(graph, ctx, fanouts, stats=stats)
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
    loader = DistNeighborLoader(DistNeighborSampler(graph, ctx, fanouts), store, seeds=seeds,
                                batch_size=BATCH)
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


def dgl_sampler(venv: Path, dataset: Path, procs: int, batches: int,
                workdir: Path) -> dict[str, float] | None:
    """DGL's ``NeighborSampler`` in ``procs`` processes side by side: per-process means."""
    python = venv / "bin" / "python"
    if not python.is_file():
        return None
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(OMP_NUM_THREADS="1", DGLBACKEND="pytorch")
    worker = Path(__file__).resolve().parent / "_distdgl_worker.py"
    outs = [workdir / f"dgl-sample-{procs}-{i}.json" for i in range(procs)]
    running = [subprocess.Popen(
        [str(python), str(worker), "sample", "--dataset", str(dataset), "--fanouts",
         ",".join(map(str, reversed(FANOUTS))), "--batch-size", str(BATCH), "--batches",
         str(batches), "--seed", str(i), "--result", str(out)], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for i, out in enumerate(outs)]
    for proc in running:
        _, err = proc.communicate()
        if proc.returncode:
            raise SystemExit(f"bench_sampling: DGL's sampler failed:\n{err.decode()[-2000:]}")
    res = [json.loads(out.read_text()) for out in outs]
    return {k: sum(r[k] for r in res) / procs for k in ("edges_per_s", "edges_per_cpu_s")} | {
        "edges_per_batch": sum(r["edges"] for r in res) / procs / batches}


def main() -> None:
    ap = ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="100k nodes / 1M edges")
    ap.add_argument("--batches", type=int, default=30, help="timed batches per rank")
    ap.add_argument("--json", help="write the figures to this JSON file")
    ap.add_argument("--workdir", help="where partitions are written (reused if present)")
    ap.add_argument("--dgl-venv", type=Path, default=Path("/work/.distdgl-venv"),
                    help="DGL 2.1's environment (made by bench_vs_distdgl.py)")
    args = ap.parse_args()
    n = 100_000 if args.small else 1_000_000
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="gnnpar-bench-"))
    print(f"graph: SBM {n:,} nodes, avg degree 10; fan-outs {FANOUTS}, batch {BATCH}")
    ds, tag, dirs = make_partitions(workdir, {"1": (1, "metis", 1), "2": (2, "metis", 1)},
                                    num_nodes=n, avg_degree=10.0, feat_dim=8)
    dataset = workdir / f"{tag}-dataset"
    if not (dataset / "dataset.json").is_file():
        ds.save(dataset, overwrite=True)
    print(f"load average before: {[round(x, 2) for x in os.getloadavg()]}")
    rows: list[dict[str, Any]] = []
    for world in (1, 2):
        for kernel in ("compiled", "torch"):
            env = {"OMP_NUM_THREADS": "1", **({"GNNPAR_KERNELS": "torch"} if kernel == "torch"
                                             else {})}
            res = run_multiproc(_throughput_worker, world, str(dirs[str(world)]),
                                args.batches, 3, env=env, timeout=1800)
            for what in ("sampler", "loader"):
                per_rank = [r[what] for r in res]
                row = {
                    "what": f"gnnpar {what}, {kernel} kernels, {world} rank"
                            f"{'s' if world > 1 else ''}",
                    "world": world,
                    "edges_per_s": sum(r["edges"] / r["wall_s"] for r in per_rank) / world,
                    "edges_per_cpu_s": sum(r["edges"] / r["cpu_s"] for r in per_rank) / world,
                    "edges_per_batch": sum(r["edges"] for r in per_rank) / world / args.batches,
                }
                if world == 2 and what == "sampler":
                    comm = res[0]["sampler"]["comm"].get("sample", {})
                    row["sample_bytes_sent_per_batch"] = comm.get("bytes_sent", 0) / args.batches
                rows.append(row)
        dgl = dgl_sampler(args.dgl_venv, dataset, world, args.batches, workdir)
        if dgl is not None:
            rows.append({"what": f"DGL 2.1 NeighborSampler, {world} process"
                                 f"{'es' if world > 1 else ''}", "world": world, **dgl})
    budget = sync_budget(str(dirs["2"]), 2, FANOUTS, BATCH)
    pyg = _pyg_reference(ds, args.batches)
    print(f"load average after: {[round(x, 2) for x in os.getloadavg()]}")
    print(f"\n{'':48s} {'edges/s/rank':>13s} {'edges/CPU-s':>12s} {'edges/batch':>12s}"
          f" {'vs DGL (wall)':>14s} {'(CPU)':>6s}")
    for r in rows:
        ref = next((d for d in rows if d["what"].startswith("DGL") and
                    d["world"] == r["world"]), None)
        ratio = (f"{r['edges_per_s'] / ref['edges_per_s']:13.2f}x "
                 f"{r['edges_per_cpu_s'] / ref['edges_per_cpu_s']:5.2f}x" if ref else "")
        print(f"{r['what']:48s} {r['edges_per_s'] / 1e6:11.2f} M "
              f"{r['edges_per_cpu_s'] / 1e6:10.2f} M {r['edges_per_batch']:12.0f} {ratio}")
    sent = next(r["sample_bytes_sent_per_batch"] for r in rows
                if "sample_bytes_sent_per_batch" in r)
    print(f"sampling traffic at 2 ranks: {sent / 1e3:.1f} kB sent per rank per batch")
    print(f"per loader batch at 2 ranks: {budget['load_syncs']:.1f} host syncs (operations "
          f"that make a CUDA host wait), {budget['load_collectives']:.1f} collectives")
    if pyg:
        print(f"PyG NeighborLoader measured here: {pyg['edges_per_s'] / 1e6:5.2f} M edges/s")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"graph_nodes": n, "fanouts": FANOUTS, "batch": BATCH, "rows": rows,
             "pyg": pyg, "per_batch": budget, "cpus": os.cpu_count(),
             "load_end": os.getloadavg()},
            indent=2))


if __name__ == "__main__":
    main()

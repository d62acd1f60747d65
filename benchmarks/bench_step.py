r"""``python benchmarks/bench_step.py [--graph sbm|rmat|both] [--json OUT]``: one training
step's forward and backward, gnnpar vs DGL 2.1, on the same batches.

The comparison of ``bench_vs_distdgl.py`` without the rest of a run: the batches gnnpar's
loader sampled (2 ranks, METIS, fan-outs 15,10, batch 1024; rank 0's first ``--batches``)
are written once as ``.npz``, and each system trains GraphSAGE 2x256 (mean, dropout 0.5,
Adam) on exactly those batches, one thread, in a process of its own: DGL's
``dgl.nn.SAGEConv`` on the equivalent blocks in DGL's virtual environment
(``_distdgl_worker.py step``; ``bench_vs_distdgl.py`` builds it), and on gnnpar's side

* the trainer's model (:class:`gnnpar.models.node.SampledGNN` over PyG's ``GraphSAGE``),
* a user's plain PyG ``GraphSAGE`` called with ``trim_to_layer``, on the batch's
  ``EdgeIndex``, as PyG runs it and after :func:`gnnpar.nn.fused.fuse_aggregation`.

Rounds alternate DGL, gnnpar (``--rounds``, each over every batch ``--passes`` times
after one warm-up pass). Reported per step: forward, backward (zero_grad + backward),
and their sum, in wall and process-CPU milliseconds (CPU time is the steadier on a shared
machine), the ratio to DGL, and the load average. The graphs are
``bench_vs_distdgl.py``'s: 100k nodes, average degree 10 made symmetric, 100 features,
16 classes, homophily 0.3.

    python benchmarks/bench_step.py --graph both --rounds 3 --json /tmp/step.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gnnpar.config import ArgumentParser

HERE = Path(__file__).resolve().parent
WORKER = HERE / "_distdgl_worker.py"
FANOUTS = [15, 10]
VARIANTS = ("SampledGNN (trainer)", "PyG GraphSAGE", "PyG GraphSAGE + fuse_aggregation")


def prepare(name: str, work: Path, nodes: int, batches: int) -> Path:
    """The graph's 2-part partition and ``batches`` of rank 0 as ``.npz`` (cached)."""
    from gnnpar.datasets import synthetic
    from gnnpar.partition.config import PartitionConfig
    from gnnpar.partition.writer import partition_graph
    from gnnpar.testing import run_multiproc

    root = work / f"{name}-{nodes}"
    out = root / f"batches-{batches}.npz"
    if out.is_file():
        return out
    parts = root / "parts"
    if not (parts / "meta.json").is_file():
        make = synthetic.sbm if name == "sbm" else synthetic.rmat
        ds = make(num_nodes=nodes, avg_degree=10.0, num_classes=16, feat_dim=100,
                  homophily=0.3, seed=0).to_undirected()
        partition_graph(ds, parts, PartitionConfig(num_parts=2, partitioner="metis", seed=0),
                        overwrite=True)
    res = run_multiproc(_dump_worker, 2, str(parts), batches, env={"OMP_NUM_THREADS": "1"},
                        timeout=1800)
    arrays: dict[str, np.ndarray] = {"count": np.asarray(len(res[0]))}
    for i, b in enumerate(res[0]):
        arrays.update({f"{k}{i}": np.asarray(v) for k, v in b.items()})
    tmp = root / "batches.tmp.npz"
    np.savez(tmp, **arrays)
    tmp.replace(out)
    return out


def _dump_worker(part_dir: str, batches: int) -> list[dict[str, Any]]:
    from gnnpar import distributed
    from gnnpar.loading.node import DistNeighborLoader
    from gnnpar.sampling.fanouts import Fanouts
    from gnnpar.sampling.neighbor import DistNeighborSampler
    from gnnpar.storage.features import DistFeatureStore
    from gnnpar.storage.graph import DistGraph

    ctx = distributed.init()
    graph = DistGraph.load(part_dir, ctx, verify=False)
    sampler = DistNeighborSampler(graph, ctx, Fanouts.for_graph(FANOUTS, graph, ctx))
    loader = DistNeighborLoader(sampler, DistFeatureStore(graph, ctx), "train",
                                batch_size=1024)
    out = []
    for i, b in enumerate(loader):
        if i == batches:
            break
        out.append({"x": b.x, "ei": b.edge_index.as_tensor(), "y": b.y,
                    "nodes": torch.tensor(b.num_sampled_nodes),
                    "edges": torch.tensor(b.num_sampled_edges)})
    return out


def gnnpar_step(path: str, rounds: int, seed: int) -> dict[str, dict[str, float]]:
    """Per-step milliseconds of each gnnpar variant on the batches of ``path``."""
    import torch.nn.functional as F
    from torch_geometric import EdgeIndex
    from torch_geometric.nn import GraphSAGE

    from gnnpar.models.node import SampledGNN, build_model
    from gnnpar.nn.fused import fuse_aggregation
    from gnnpar.train.config import ModelConfig

    torch.set_num_threads(1)
    with np.load(path, allow_pickle=False) as f:
        batches = [{k: torch.from_numpy(f[f"{k}{i}"]) for k in ("x", "ei", "y", "nodes",
                                                                  "edges")}
                   for i in range(int(f["count"]))]
    in_dim = int(batches[0]["x"].shape[1])
    torch.manual_seed(seed)
    trainer = SampledGNN(build_model(ModelConfig(name="sage", hidden=256, layers=2,
                                                 dropout=0.5), in_dim, 16))
    plain = GraphSAGE(in_dim, 256, num_layers=2, out_channels=16, dropout=0.5)
    fused = fuse_aggregation(GraphSAGE(in_dim, 256, num_layers=2, out_channels=16,
                                       dropout=0.5))

    def run_trainer(b: dict[str, Any], n: list[int], e: list[int], ei: Any) -> Any:
        return trainer(b["x"], ei, n, e)

    def run_pyg(model: Any) -> Any:
        def run(b: dict[str, Any], n: list[int], e: list[int], ei: Any) -> Any:
            return model(b["x"], ei, num_sampled_nodes_per_hop=n, num_sampled_edges_per_hop=e)
        return run

    models = dict(zip(VARIANTS, (trainer, plain, fused), strict=True))
    runs = dict(zip(VARIANTS, (run_trainer, run_pyg(plain), run_pyg(fused)), strict=True))
    out: dict[str, dict[str, float]] = {}
    for name, model in models.items():
        opt = torch.optim.Adam(model.parameters(), lr=0.003)
        totals = dict.fromkeys(("forward_ms", "forward_cpu_ms", "backward_ms",
                                "backward_cpu_ms"), 0.0)
        steps = 0
        for r in range(rounds + 1):  # pass 0 warms up
            for b in batches:
                n, e = b["nodes"].tolist(), b["edges"].tolist()
                size = b["x"].shape[0]
                ei = EdgeIndex(b["ei"], sparse_size=(size, size), sort_order="col")
                t0, c0 = time.perf_counter(), time.process_time()
                logits = runs[name](b, n, e, ei)[: n[0]]
                loss = F.cross_entropy(logits, b["y"][: n[0]])
                t1, c1 = time.perf_counter(), time.process_time()
                opt.zero_grad()
                loss.backward()
                t2, c2 = time.perf_counter(), time.process_time()
                opt.step()
                if r:
                    steps += 1
                    for k, v in (("forward_ms", t1 - t0), ("forward_cpu_ms", c1 - c0),
                                 ("backward_ms", t2 - t1), ("backward_cpu_ms", c2 - c1)):
                        totals[k] += 1e3 * v
        out[name] = {k: v / steps for k, v in totals.items()}
    return out


def _run_json(argv: list[str], result: Path, env: dict[str, str]) -> Any:
    res = subprocess.run(argv, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        sys.exit(f"bench_step: {' '.join(argv[:3])} failed:\n{res.stderr[-3000:]}")
    return json.loads(result.read_text())


def main() -> None:
    """Run the comparison; print the table."""
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--graph", choices=["sbm", "rmat", "both"], default="both")
    p.add_argument("--nodes", type=int, default=100_000)
    p.add_argument("--batches", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3, help="DGL, gnnpar, DGL, ... rounds")
    p.add_argument("--passes", type=int, default=2, help="timed passes over the batches")
    p.add_argument("--workdir", type=Path, default=Path("/work/bench-step"))
    p.add_argument("--dgl-venv", type=Path, default=Path("/work/.distdgl-venv"))
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--gnnpar-step", default=None, help=argparse.SUPPRESS)
    p.add_argument("--result", type=Path, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.gnnpar_step:  # the gnnpar side, in a process of its own
        args.result.write_text(json.dumps(gnnpar_step(args.gnnpar_step, args.passes, 0)))
        return
    dgl_python = args.dgl_venv / "bin" / "python"
    if not dgl_python.is_file():
        sys.exit(f"bench_step: no DGL environment at {args.dgl_venv}; run "
                 "benchmarks/bench_vs_distdgl.py once (it builds it) or pass --dgl-venv.")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "DGLBACKEND": "pytorch"}
    dgl_env = {k: v for k, v in env.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    graphs = ["sbm", "rmat"] if args.graph == "both" else [args.graph]
    doc: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M"), "cpus": os.cpu_count(),
                           "load_start": os.getloadavg(), "graphs": {}}
    for name in graphs:
        npz = prepare(name, args.workdir, args.nodes, args.batches)
        rows: dict[str, list[dict[str, float]]] = {"DGL 2.1 SAGEConv": []}
        loads = []
        for _ in range(args.rounds):
            loads.append(round(os.getloadavg()[0], 2))
            out = args.workdir / "dgl-step.json"
            res = _run_json([str(dgl_python), str(WORKER), "step", "--batches", str(npz),
                             "--rounds", str(args.passes), "--classes", "16", "--result",
                             str(out)], out, dgl_env)
            rows["DGL 2.1 SAGEConv"].append(res)
            out = args.workdir / "gnnpar-step.json"
            res = _run_json([sys.executable, __file__, "--gnnpar-step", str(npz), "--passes",
                             str(args.passes), "--result", str(out)], out, env)
            for k, v in res.items():
                rows.setdefault(k, []).append(v)
        med = {k: {m: statistics.median(r[m] for r in runs) for m in runs[0]}
               for k, runs in rows.items()}
        ref = med["DGL 2.1 SAGEConv"]
        print(f"\n== {name}: ms per step, median of {args.rounds} interleaved rounds "
              f"(load before each: {loads}); 1 thread")
        print(f"{'':34s} {'forward':>9s} {'backward':>9s} {'fw+bw':>8s} {'CPU fw+bw':>10s}"
              f" {'vs DGL (CPU)':>13s}")
        for k, m in med.items():
            cpu = m["forward_cpu_ms"] + m["backward_cpu_ms"]
            ref_cpu = ref["forward_cpu_ms"] + ref["backward_cpu_ms"]
            print(f"{k:34s} {m['forward_ms']:9.1f} {m['backward_ms']:9.1f} "
                  f"{m['forward_ms'] + m['backward_ms']:8.1f} {cpu:10.1f} "
                  f"{cpu / ref_cpu:12.2f}x")
        doc["graphs"][name] = {"median_ms": med, "runs": rows, "load_before": loads}
    doc["load_end"] = os.getloadavg()
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()

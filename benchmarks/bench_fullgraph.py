"""Full-graph training with halo exchange vs single-process PyG; communication reducers.

    python benchmarks/bench_fullgraph.py                  # 1M-node SBM (minutes)
    python benchmarks/bench_fullgraph.py --small          # 50k nodes, a quick look
    python benchmarks/bench_fullgraph.py --nodes 200000 --json out.json

Two tables, every figure next to its reference from the same run:

1. **Epoch time**: a 2-layer GCN trained full-graph by single-process PyG with 2 torch
   threads vs by 2 ranks (1 thread each, the same two cores) on METIS parts with exact
   and with stale (PipeGCN) halos; bytes per epoch by kind.  PyG with one thread and
   gnnpar on one rank separate gnnpar's kernels (GCN aggregates with one sparse-dense
   product instead of PyG's gather-scatter) and the threading of a shared 2-core machine
   from the gain of the partitioning.
2. **Halo bytes and accuracy**: halo bytes per epoch on METIS vs random parts, boundary
   sampling (BNS, p=0.1) vs exact; test accuracy after ``--acc-epochs`` epochs of exact,
   BNS and stale training on random parts of a smaller SBM (the largest boundary); halo
   rows of METIS vs random parts as the SBM's community strength (homophily) varies.
"""

from __future__ import annotations

import argparse
import gc
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch_geometric.nn.models import GCN

from gnnpar.config import ArgumentParser
from gnnpar.datasets.graph import GraphDataset
from gnnpar.datasets.synthetic import sbm
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.writer import partition_graph
from gnnpar.testing import run_multiproc

HALO_KINDS = ("halo", "halo_grad")
ENV = {"OMP_NUM_THREADS": "1"}  # one torch thread per rank: 2 ranks use the 2 cores
SWEEP_HOMOPHILY = (0.9, 0.95, 0.98)


def make_graph(nodes: int, feat_dim: int, homophily: float, seed: int = 0) -> GraphDataset:
    return sbm(num_nodes=nodes, avg_degree=10, num_classes=16, feat_dim=feat_dim, seed=seed,
               homophily=homophily)


# ----------------------------------------------------------------- 1. single-process PyG
def single_process_epochs(ds: GraphDataset, hidden: int, epochs: int,
                          threads: int) -> dict[str, Any]:
    """Whole-graph PyG training: fastest and mean of ``epochs`` epochs after a warm-up."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    x = torch.from_numpy(np.asarray(ds.x))
    y = torch.from_numpy(np.asarray(ds.y))
    train = torch.from_numpy(np.asarray(ds.train_idx))
    edge_index = torch.from_numpy(np.stack([ds.src, ds.dst]))
    model = GCN(ds.feat_dim, hidden, 2, ds.num_classes)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    times = []
    for _ in range(epochs + 1):
        t0 = time.perf_counter()
        model.train()
        opt.zero_grad()
        out = model(x, edge_index)
        F.cross_entropy(out[train], y[train]).backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return {"epoch_s": float(np.min(times[1:])), "epoch_s_mean": float(np.mean(times[1:]))}


# ----------------------------------------------------------------- rank workers
def _train(part_dir: str, hidden: int, epochs: int, timed: bool = True,
           **full: Any) -> dict[str, Any]:
    """``epochs`` epochs of ``gnnpar-train --mode full`` (+1 warm-up when timed).

    Runs the same :class:`gnnpar.Trainer` as the command line (DDP, halo exchange, one
    gradient step per epoch) and reads its run record: the fastest and mean epoch time
    (the fastest is the figure least disturbed by other load on a shared machine; the
    single-process run is measured the same way), bytes per epoch by kind, test accuracy.
    """
    import gnnpar.distributed as gdist
    from gnnpar.comm import broadcast_text
    from gnnpar.train.config import (
        Config,
        DataConfig,
        FullConfig,
        ModelConfig,
        RunConfig,
        TrainConfig,
    )
    from gnnpar.train.trainer import Trainer

    ctx = gdist.init()
    torch.set_num_threads(1)
    total = epochs + int(timed)
    with tempfile.TemporaryDirectory(prefix="bench-fullgraph-run-") as tmp:
        out = broadcast_text(ctx, tmp)  # rank 0's: the ranks share this machine's disk
        cfg = Config(data=DataConfig(dataset=part_dir),
                     model=ModelConfig(name="gcn", hidden=hidden, layers=2, dropout=0.0),
                     train=TrainConfig(mode="full", epochs=total, lr=0.01, eval_every=total),
                     full=FullConfig(**full),
                     run=RunConfig(out=out, checkpoint_every=total, progress=False))
        trainer = Trainer(cfg, part_dir, ctx)
        summary = trainer.fit()
        timed_epochs = trainer.record.epochs[int(timed):]
    times = [e["epoch_time_s"] for e in timed_epochs]
    sent = {k: sum(e["comm"].get(k, {}).get("bytes", 0) for e in timed_epochs) / epochs
            for k in (*HALO_KINDS, "grad")}
    return {"epoch_s": min(times), "epoch_s_mean": float(np.mean(times)),
            "bytes_per_epoch": sent, "halo_rows": trainer.graph.num_halo,
            "test_acc": summary["test_acc"]}


def rank_epoch_time(metis_dir: str, random_dir: str, hidden: int, epochs: int
                    ) -> dict[str, Any]:
    """Exact and stale epochs on METIS parts; bytes of one epoch on random parts and BNS."""
    res = {"exact": _train(metis_dir, hidden, epochs),
           "stale": _train(metis_dir, hidden, epochs, stale=True),
           "bns_p0.1": _train(metis_dir, hidden, 1, boundary_p=0.1)}
    gc.collect()
    res["random_parts"] = _train(random_dir, hidden, 1)
    return res


def rank_one(part_dir: str, hidden: int, epochs: int) -> dict[str, Any]:
    """gnnpar's layers on one rank, one thread: the kernels without the parallelism."""
    return _train(part_dir, hidden, epochs)


def rank_accuracy(part_dir: str, hidden: int, epochs: int) -> dict[str, Any]:
    configs = {"exact": {}, "bns_p0.1": {"boundary_p": 0.1}, "stale": {"stale": True}}
    return {name: _train(part_dir, hidden, epochs, timed=False, **cfg)
            for name, cfg in configs.items()}


# ----------------------------------------------------------------- driver
def _mb(b: float) -> str:
    return f"{b / 2**20:9.2f} MiB"


def main() -> None:
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=1_000_000, help="nodes of the main SBM")
    p.add_argument("--homophily", type=float, default=0.95,
                   help="SBM: fraction of intra-class edges (community strength)")
    p.add_argument("--feat-dim", type=int, default=128)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--epochs", type=int, default=5, help="timed epochs (after one warm-up)")
    p.add_argument("--acc-nodes", type=int, default=100_000)
    p.add_argument("--acc-epochs", type=int, default=60)
    p.add_argument("--sweep-nodes", type=int, default=200_000)
    p.add_argument("--small", action="store_true", help="50k-node main graph, 20k others")
    p.add_argument("--json", default=None, help="write the figures here")
    p.add_argument("--plot", default=None, help="draw table 1 (epoch seconds) as a PNG here")
    p.add_argument("--workdir", default=None, help="where partitions are written (removed "
                   "afterwards; default: the system temporary directory)")
    args = p.parse_args()
    if args.small:
        args.nodes, args.acc_nodes, args.acc_epochs = 50_000, 20_000, 30
        args.sweep_nodes = 20_000
    report: dict[str, Any] = {"args": vars(args), "date": time.strftime("%Y-%m-%d"),
                              "machine": "2-core shared CPU VM, no GPU"}
    with tempfile.TemporaryDirectory(prefix="bench_fullgraph-", dir=args.workdir) as tmp:
        run(args, Path(tmp), report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    if args.plot:
        from gnnpar.plot import plot_table

        t = report["epoch_time"]
        rows = {"PyG": {"2 threads": t["pyg_2_threads"]["epoch_s"],
                        "1 thread": t["pyg_1_thread"]["epoch_s"]},
                "gnnpar": {"1 rank": t["gnnpar_1_rank_1_thread"]["epoch_s"],
                           "2 ranks exact": t["exact"]["epoch_s"],
                           "2 ranks stale": t["stale"]["epoch_s"]}}
        print(f"picture: {plot_table('full-graph GCN epoch', rows, args.plot, 's / epoch')}")


def run(args: argparse.Namespace, work: Path, report: dict[str, Any]) -> None:
    """Every table; partitions go to ``work`` (removed afterwards)."""
    ranks = epoch_time_table(args, work, report)
    halo_table(args, work, report, ranks)


def epoch_time_table(args: argparse.Namespace, work: Path,
                     report: dict[str, Any]) -> dict[str, Any]:
    """Table 1: epoch time of PyG vs gnnpar at 1 and 2 ranks, on the main graph."""
    ds = make_graph(args.nodes, args.feat_dim, args.homophily)
    partition_graph(ds, work / "main-1", PartitionConfig(num_parts=1, partitioner="contiguous"))
    for method in ("metis", "random"):
        partition_graph(ds, work / f"main-{method}",
                        PartitionConfig(num_parts=2, partitioner=method, seed=0))
    single = single_process_epochs(ds, args.hidden, args.epochs, threads=2)
    single_1t = single_process_epochs(ds, args.hidden, args.epochs, threads=1)
    del ds
    gc.collect()
    one_rank = run_multiproc(rank_one, 1, str(work / "main-1"), args.hidden, args.epochs,
                             env=ENV, timeout=3600)[0]
    ranks = run_multiproc(rank_epoch_time, 2, str(work / "main-metis"),
                          str(work / "main-random"), args.hidden, args.epochs,
                          env=ENV, timeout=3600)[0]
    report["epoch_time"] = {"pyg_2_threads": single, "pyg_1_thread": single_1t,
                            "gnnpar_1_rank_1_thread": one_rank, **ranks}
    print(f"\n== 1. full-graph epoch, {args.nodes:,}-node SBM (homophily {args.homophily}), "
          f"2-layer GCN hidden {args.hidden}; fastest of {args.epochs} epochs")
    print(f"{'run':36} {'epoch s':>8} {'vs PyG':>7} {'halo bytes/epoch':>17} "
          f"{'grad bytes/epoch':>17}")
    rows = [("PyG, 1 process x 2 threads", single), ("PyG, 1 process x 1 thread", single_1t),
            ("gnnpar, 1 rank x 1 thread", one_rank),
            ("gnnpar, 2 ranks x 1 thread, exact", ranks["exact"]),
            ("gnnpar, 2 ranks x 1 thread, stale", ranks["stale"])]
    for name, r in rows:
        b = r.get("bytes_per_epoch", {"halo": 0, "halo_grad": 0, "grad": 0})
        print(f"{name:36} {r['epoch_s']:8.3f} {r['epoch_s'] / single['epoch_s']:7.2f} "
              f"{_mb(b['halo'] + b['halo_grad']):>17} {_mb(b['grad']):>17}")
    return ranks


def halo_table(args: argparse.Namespace, work: Path, report: dict[str, Any],
               ranks: dict[str, Any]) -> None:
    """Table 2: halo bytes by partitioner and reducer, the reducers' accuracy, a sweep."""
    halo = {name: sum(ranks[name]["bytes_per_epoch"][k] for k in HALO_KINDS)
            for name in ("exact", "bns_p0.1", "random_parts")}
    acc_ds = sbm(num_nodes=args.acc_nodes, feat_dim=args.feat_dim, seed=1)  # GCN ~72%
    partition_graph(acc_ds, work / "acc-random",
                    PartitionConfig(num_parts=2, partitioner="random", seed=0))
    del acc_ds
    acc = run_multiproc(rank_accuracy, 2, str(work / "acc-random"), args.hidden,
                        args.acc_epochs, env=ENV, timeout=3600)[0]
    sweep = {}
    for h in SWEEP_HOMOPHILY:  # halo rows from the partitions' quality reports
        sds = make_graph(args.sweep_nodes, 1, h, seed=3)
        rows = {m: sum(partition_graph(sds, work / f"sweep-{h}-{m}",
                                       PartitionConfig(num_parts=2, partitioner=m, seed=0))
                       .quality["per_part"]["halo"]) for m in ("metis", "random")}
        sweep[str(h)] = {**rows, "ratio": rows["metis"] / rows["random"]}
    report["halo"] = {"bytes_per_epoch": halo, "accuracy": acc, "homophily_sweep": sweep}
    print("\n== 2. halo bytes per epoch (both ranks, forward + backward), same graph")
    print(f"{'METIS parts, exact':34} {_mb(halo['exact'])}  1.00")
    print(f"{'random parts, exact':34} {_mb(halo['random_parts'])}  "
          f"{halo['random_parts'] / halo['exact']:.2f}   (METIS/random = "
          f"{halo['exact'] / halo['random_parts']:.3f})")
    print(f"{'METIS parts, BNS p=0.1':34} {_mb(halo['bns_p0.1'])}  "
          f"{halo['bns_p0.1'] / halo['exact']:.3f}")
    print(f"   accuracy after {args.acc_epochs} epochs, {args.acc_nodes:,}-node SBM "
          "(sbm() defaults: 16 classes, homophily 0.3), random parts:")
    for name, r in acc.items():
        b = sum(r["bytes_per_epoch"][k] for k in HALO_KINDS)
        print(f"   {name:12} test acc {r['test_acc']:.4f}  halo {_mb(b)}/epoch")
    print(f"   halo rows, METIS vs random parts, {args.sweep_nodes:,}-node SBMs:")
    for h, r in sweep.items():
        print(f"   homophily {h:5}  METIS {r['metis']:9,}  random {r['random']:9,}  "
              f"ratio {r['ratio']:.3f}")


if __name__ == "__main__":
    main()

"""3D-parallel (``--grid X,Y,Z``) vs 1D halo-exchange full-graph training, same ranks.

Trains a 2-layer GraphSAGE (or GCN, ``--model gcn``) full-graph with ``gnnpar-train
--nproc 4 --mode full`` (``--nproc``) on an SBM with wide features (default 32,768
nodes, 512 features, hidden 512), once 1D (each rank its part's rows; METIS and random parts) and
once per grid, and reads each run's record: bytes per epoch by kind (1D: ``halo`` +
``halo_grad`` + DDP's ``grad``; 3D: ``grid`` + ``grid_grad`` + ``grad``), the largest
rank's peak host memory (RSS, which includes the ~0.4 GB of a process that has imported
torch and PyG), the epoch time and the full-neighbour test accuracy.  Every ratio is to
1D on METIS parts of the same run.

    python benchmarks/bench_grid.py [--nodes 32768] [--feat 512] [--hidden 512]
                                    [--model gcn] [--grids 2,2,1/4,1,1] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from _measure import train_record  # benchmarks/ is the script directory

from gnnpar.config import ArgumentParser

KINDS_1D = ("halo", "halo_grad", "grad")
KINDS_3D = ("grid", "grid_grad", "grad")


def run(name: str, flags: list[str], spec: str, args: argparse.Namespace,
        root: Path) -> dict[str, Any]:
    s = train_record([spec, "--nproc", str(args.nproc), "--mode", "full", "--model",
                      args.model, "--hidden", str(args.hidden), "--epochs", str(args.epochs),
                      "--root", str(root / "data"), *flags], root / name)["summary"]
    comm = s["comm_per_epoch"]
    kinds = KINDS_3D if "--grid" in flags else KINDS_1D
    return {"name": name, "bytes": {k: comm.get(k, {}).get("bytes", 0) for k in kinds},
            "total_bytes": sum(comm.get(k, {}).get("bytes", 0) for k in kinds),
            "peak_host_bytes": s["peak_memory_bytes"]["host"],
            "epoch_time_s": s["epoch_time_s"], "test_acc": s["test_acc"]}


def main() -> None:
    p = ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=32768)
    p.add_argument("--degree", type=float, default=12.0, help="average degree of the SBM")
    p.add_argument("--feat", type=int, default=512)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--model", default="sage", help="sage or gcn")
    p.add_argument("--nproc", type=int, default=4, help="ranks (every grid's X*Y*Z)")
    p.add_argument("--grids", default="2,2,1/2,1,2/1,2,2/4,1,1/1,1,4")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()
    spec = f"synthetic:sbm?nodes={args.nodes}&avg_degree={args.degree:g}&feat_dim={args.feat}"
    runs = [("1D metis", ["--partitioner", "metis"]), ("1D random", ["--partitioner", "random"])]
    runs += [(f"3D {g}", ["--partitioner", "random", "--grid", g]) for g in args.grids.split("/")]
    with tempfile.TemporaryDirectory() as tmp:
        rows = [run(name, flags, spec, args, Path(tmp)) for name, flags in runs]
    base = rows[0]
    print(f"{spec}, {args.nproc} ranks, {args.model} 2x{args.hidden}, {args.epochs} epochs "
          "(1D = halo exchange; ratios to 1D metis)")
    print(f"{'run':<12} {'MB/epoch':>9} {'x':>6} {'peak RSS MB':>12} {'x':>6} "
          f"{'epoch s':>8} {'test acc':>9}  bytes by kind")
    for r in rows:
        r["bytes_vs_1d"] = r["total_bytes"] / base["total_bytes"]
        r["memory_vs_1d"] = r["peak_host_bytes"] / base["peak_host_bytes"]
        kinds = ", ".join(f"{k} {v / 1e6:.1f}" for k, v in r["bytes"].items())
        print(f"{r['name']:<12} {r['total_bytes'] / 1e6:>9.1f} {r['bytes_vs_1d']:>5.2f}x "
              f"{r['peak_host_bytes'] / 1e6:>12.0f} {r['memory_vs_1d']:>5.2f}x "
              f"{r['epoch_time_s']:>8.2f} {r['test_acc']:>9.4f}  {kinds}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

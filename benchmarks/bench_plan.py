"""The planner (``gnnpar-train --plan``) against every strategy it estimates, measured.

Partitions an SBM (default: the embedded default graph at 256 features, 4 ranks), asks
the planner for its table, then trains every strategy for a few epochs with
``gnnpar-train`` -- full-graph 1D, 3D at every grid, sampled -- and prints, side by side,
the estimated and measured bytes per epoch (the record's ``comm_per_epoch``), memory per
rank (the largest rank's rise of resident memory over its Trainer's start, with
``MALLOC_MMAP_THRESHOLD_`` set so that freed tensors leave the process) and the
estimated epoch cost next to the measured epoch time.

    python benchmarks/bench_plan.py [--nodes 32768] [--feat 256] [--hidden 256]
                                    [--nproc 4] [--model sage] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from _measure import train_record  # benchmarks/ is the script directory

from gnnpar.config import ArgumentParser
from gnnpar.partition.format import PartitionMeta
from gnnpar.train.config import ModelConfig, SampleConfig
from gnnpar.train.plan import GraphStats, format_plan, plan


def run(spec: str, flags: list[str], args: argparse.Namespace, out: Path,
        root: Path) -> dict[str, Any]:
    return train_record([spec, "--nproc", str(args.nproc), "--model", args.model, "--hidden",
                         str(args.hidden), "--epochs", str(args.epochs), "--partitioner",
                         "random", "--root", str(root), *flags], out,
                        env={"MALLOC_MMAP_THRESHOLD_": "65536"})


def main() -> None:
    p = ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=32768)
    p.add_argument("--feat", type=int, default=256)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--nproc", type=int, default=4)
    p.add_argument("--model", default="sage")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()
    spec = f"synthetic:sbm?nodes={args.nodes}&feat_dim={args.feat}"
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        # The first run partitions; the plan reads that partition.
        first = run(spec, ["--mode", "full"], args, root / "full-1d", root)
        meta = PartitionMeta.load(first["partition"]["dir"])
        chosen = plan(GraphStats.from_meta(meta),
                      ModelConfig(name=args.model, hidden=args.hidden), SampleConfig())
        print(format_plan(chosen))
        done = [(e, first if e.name == "full-1d" else run(
            spec, e.flags.split(), args, root / e.name.replace(" ", "-"), root))
            for e in chosen.estimates]
    print(f"\n{spec}, {args.nproc} ranks, {args.model} 2x{args.hidden}, {args.epochs} epochs")
    print(f"{'strategy':<16} {'MB/epoch est':>12} {'measured':>9} {'memory MB est':>13} "
          f"{'measured':>9} {'x':>6} {'cost est':>9} {'epoch s':>8}")
    fastest = min(e.epoch_cost_s for e, _ in done)
    for e, rec in done:
        s = rec["summary"]
        measured = sum(v["bytes"] for v in s["comm_per_epoch"].values())
        grown = s["peak_memory_bytes"]["host_growth"]
        row = {"strategy": e.name, "bytes_est": e.bytes_per_epoch, "bytes": measured,
               "memory_est": e.memory_bytes, "memory": grown,
               "cost_est": e.epoch_cost_s / fastest, "epoch_time_s": s["epoch_time_s"],
               "test_acc": s["test_acc"]}
        rows.append(row)
        print(f"{e.name:<16} {e.bytes_per_epoch / 1e6:>12.2f} {measured / 1e6:>9.2f} "
              f"{e.memory_bytes / 2**20:>13.1f} {grown / 2**20:>9.1f} "
              f"{e.memory_bytes / grown:>5.2f}x {e.epoch_cost_s / fastest:>8.2f}x "
              f"{s['epoch_time_s']:>8.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

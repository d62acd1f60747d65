"""End-to-end minibatch training of 2 workers: epoch time, where it goes, syncs per batch.

Run::

    python benchmarks/bench_train.py                 # 100k nodes / 1M edges, 3 epochs
    python benchmarks/bench_train.py --small         # 20k nodes / 200k edges, 2 epochs
    python benchmarks/bench_train.py --json out.json --workdir /tmp/bench-train

The graph is gnnpar's SBM (``avg_degree=10``: 1M directed edges for 100k nodes, 128
features, 16 classes, half the nodes training seeds), METIS-partitioned into 2 parts;
``gnnpar-train``'s launcher starts 2 workers (GraphSAGE, hidden 256, fan-outs [15, 10],
batch 1024 per worker, sampled evaluation only after the last epoch).  Reported per
epoch, from the run record: the epoch time (mean over the epochs after the first, which
fills caches and warms up) and its per-step breakdown (sample, fetch, forward,
backward, optimizer; the part of sample + fetch spent blocked in exchanges), sampled
edges per second over both workers, the rows and bytes sent by kind, and peak memory.
A second short 2-rank run counts, per batch, the operations that would make a CUDA host
wait for the device and the collectives (:func:`_measure.sync_budget`).

The side-by-side comparison with DistDGL, on the same graph in the same sitting, is
``benchmarks/bench_vs_distdgl.py``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from _measure import sync_budget

from gnnpar.config import ArgumentParser
from gnnpar.datasets.synthetic import sbm
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.writer import partition_graph
from gnnpar.train.cli import launch
from gnnpar.train.config import (
    Config,
    DataConfig,
    ModelConfig,
    RunConfig,
    SampleConfig,
    TrainConfig,
)


def parse_args() -> argparse.Namespace:
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--small", action="store_true", help="20k nodes, 2 epochs")
    p.add_argument("--nodes", type=int, default=None, help="default 100000 (20000 --small)")
    p.add_argument("--avg-degree", type=float, default=10.0)
    p.add_argument("--feat-dim", type=int, default=128)
    p.add_argument("--epochs", type=int, default=None, help="default 3 (2 --small)")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--workdir", default=None, help="keep the graph and runs here")
    p.add_argument("--json", default=None, help="write the figures here")
    p.add_argument("--plot", default=None, help="draw the run (gnnpar-plot) as a PNG here")
    return p.parse_args()


def _size(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def main() -> None:
    args = parse_args()
    nodes = args.nodes or (20_000 if args.small else 100_000)
    epochs = args.epochs or (2 if args.small else 3)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-train-"))
    parts = work / f"sbm-{nodes}-{args.nproc}p"

    t0 = time.perf_counter()
    if not (parts / "meta.json").is_file():
        ds = sbm(num_nodes=nodes, avg_degree=args.avg_degree, num_classes=16,
                 feat_dim=args.feat_dim, seed=0)
        partition_graph(ds, parts, PartitionConfig(num_parts=args.nproc))
    prepare_s = time.perf_counter() - t0

    cfg = Config(
        data=DataConfig(dataset=str(parts)),
        model=ModelConfig(name="sage", hidden=256, layers=2, dropout=0.5),
        train=TrainConfig(epochs=epochs, lr=0.003, eval_every=epochs),
        sample=SampleConfig(fanouts=(15, 10), batch_size=1024),
        run=RunConfig(out=str(work / "run"), overwrite=True, nproc=args.nproc, threads=1,
                      progress=False),
    ).validate()
    t0 = time.perf_counter()
    record = launch(cfg)
    wall_s = time.perf_counter() - t0

    s, env, part = record["summary"], record["env"], record["partition"]
    epoch_s = s["epoch_time_s"]
    budget = sync_budget(str(parts), args.nproc, [15, 10], 1024)
    print(f"graph: {part['num_nodes']:,} nodes, {part['num_edges']:,} edges, "
          f"{args.feat_dim} features; {args.nproc} workers x {env['torch_threads']} threads; "
          f"{s['steps_per_epoch']} steps/epoch; GraphSAGE 2x256, fanouts 15,10, batch 1024")
    times = ", ".join(f"{e['epoch_time_s']:.2f}" for e in record["epochs"])
    print(f"epochs: {times} s (the first warms up); mean after the first {epoch_s:.2f} s")
    t = s["step_time_s"]
    print("per epoch: " + ", ".join(f"{k} {t[k]:.2f} s" for k in t))
    print(f"per batch: {budget['load_syncs']:.1f} host syncs and "
          f"{budget['load_collectives']:.1f} collectives to load, "
          f"{budget['step_syncs']:.1f} syncs and {budget['step_collectives']:.1f} collectives "
          "to train (forward + backward)")
    print(f"sampled edges/s (both workers): {s['sampled_edges_per_s'] / 1e6:.3f} M; "
          f"test accuracy {s['test_acc_sampled']:.4f} sampled, {s['test_acc']:.4f} "
          "full-neighbour")
    print("sent per epoch (all ranks):")
    for kind, c in s["comm_per_epoch"].items():
        print(f"  {kind:<12} {c['rows']:>14,} rows {_size(c['bytes']):>12}")
    mem = s["peak_memory_bytes"]
    print(f"peak memory (largest rank): {_size(mem['host'])} host")
    print(f"prepare (generate + partition) {prepare_s:.1f} s; launch + train + infer "
          f"{wall_s:.1f} s; run record {s['record']}")

    if args.plot:
        from gnnpar.plot import plot_records

        print(f"picture: {plot_records([s['record']], args.plot)}")
    if args.json:
        out: dict[str, Any] = {
            "nodes": part["num_nodes"], "edges": part["num_edges"], "nproc": args.nproc,
            "epochs": [e["epoch_time_s"] for e in record["epochs"]],
            "epoch_time_s": epoch_s, "step_time_s": t, "per_batch": budget,
            "sampled_edges_per_s": s["sampled_edges_per_s"],
            "comm_per_epoch": s["comm_per_epoch"], "test_acc_full": s["test_acc"],
            "peak_memory_bytes": mem,
            "date": time.strftime("%Y-%m-%d"), "machine": "2-core shared CPU VM, no GPU",
        }
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()

"""bf16 against fp32 in sample mode: epoch time and feature bytes, interleaved.

Two partitions of one graph, features stored in fp32 and in bf16 (``gnnpar-partition
--feature-dtype``), and ``gnnpar-train --nproc 2`` on each, alternating fp32 and bf16
(``--precision bf16``) for ``--rounds`` rounds; GraphSAGE 2x256, fan-outs 15,10, batch
1024, 1 thread per worker. Reported: the median epoch (first epoch of each run dropped),
the CPU seconds of an epoch's training steps (both ranks; steadier than the wall time on
a shared machine), the feature bytes per epoch, test accuracy, the 1-minute load before
each run, and whether this CPU computes bf16 natively
(on one that does not, ``--precision bf16`` computes in fp32: the issue's goal is an
epoch within 1.05x fp32's at half the feature bytes).

    python benchmarks/bench_bf16.py [--small] [--rounds 3] [--workdir DIR] [--json OUT]
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from _measure import train_record

from gnnpar.config import ArgumentParser
from gnnpar.datasets.synthetic import sbm
from gnnpar.models.node import native_bf16
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.writer import partition_graph

FLAGS = ["--nproc", "2", "--model", "sage", "--hidden", "256", "--layers", "2", "--fanouts",
         "15,10", "--batch-size", "1024", "--lr", "0.003", "--dropout", "0.5", "--threads",
         "1", "--eval", "sampled"]


def main() -> None:
    """Run both precisions, interleaved; print the comparison."""
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--small", action="store_true", help="20k nodes, 2 rounds")
    p.add_argument("--rounds", type=int, default=None, help="default 3 (2 --small)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--workdir", default=None)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    nodes = 20_000 if args.small else 100_000
    rounds = args.rounds or (2 if args.small else 3)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-bf16-"))
    ds = None
    parts = {}
    for dtype in ("fp32", "bf16"):
        parts[dtype] = work / f"sbm-{nodes}-{dtype}"
        if not (parts[dtype] / "meta.json").is_file():
            ds = ds or sbm(num_nodes=nodes, avg_degree=10.0, num_classes=16, feat_dim=100,
                           homophily=0.3, seed=0).to_undirected()
            partition_graph(ds, parts[dtype], PartitionConfig(num_parts=2, feature_dtype=dtype),
                            overwrite=True)
    runs: dict[str, list[dict[str, Any]]] = {"fp32": [], "bf16": []}
    loads = []
    for r in range(rounds):
        for precision in ("fp32", "bf16"):
            loads.append(round(os.getloadavg()[0], 2))
            rec = train_record([str(parts[precision]), *FLAGS, "--epochs", str(args.epochs),
                                "--precision", precision, "--seed", str(r)],
                               work / f"run-{precision}-{r}", env={"OMP_NUM_THREADS": "1"})
            runs[precision].append(rec)
    out: dict[str, Any] = {"nodes": nodes, "native_bf16_cpu": native_bf16(torch.device("cpu")),
                           "load_before_runs": loads, "date": time.strftime("%Y-%m-%d %H:%M")}
    for precision, recs in runs.items():
        epochs = [e["epoch_time_s"] for rec in recs for e in rec["epochs"][1:]]
        cpu = [sum(e["rank_time_s"]["cpu"]) for rec in recs for e in rec["epochs"][1:]]
        feature = [rec["summary"]["comm_per_epoch"]["feature"]["bytes"] for rec in recs]
        out[precision] = {"epoch_s_median": statistics.median(epochs),
                          "epoch_cpu_s_median": statistics.median(cpu),
                          "feature_bytes_per_epoch": statistics.median(feature),
                          "test_acc_sampled": [rec["summary"]["test_acc_sampled"]
                                               for rec in recs]}
    a, b = out["fp32"], out["bf16"]
    out["round_epoch_ratios"] = [
        round(statistics.median(e["epoch_time_s"] for e in rb["epochs"][1:])
              / statistics.median(e["epoch_time_s"] for e in ra["epochs"][1:]), 3)
        for ra, rb in zip(runs["fp32"], runs["bf16"], strict=True)]
    print(f"SBM {nodes:,} nodes, 100 features, 2 ranks; native bf16 on this CPU: "
          f"{out['native_bf16_cpu']}; load before the runs {loads}")
    print(f"{'':28s} {'fp32':>12s} {'bf16':>12s} {'bf16/fp32':>10s}")
    for label, key, scale in (("epoch, median s", "epoch_s_median", 1.0),
                              ("epoch CPU s, both ranks", "epoch_cpu_s_median", 1.0),
                              ("feature MB per epoch", "feature_bytes_per_epoch", 1e-6)):
        print(f"{label:28s} {a[key] * scale:12.3f} {b[key] * scale:12.3f} "
              f"{b[key] / a[key]:9.2f}x")
    print(f"{'epoch bf16/fp32 per round':28s} {out['round_epoch_ratios']}")
    print(f"{'test acc sampled':28s} {statistics.fmean(a['test_acc_sampled']):12.4f} "
          f"{statistics.fmean(b['test_acc_sampled']):12.4f}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

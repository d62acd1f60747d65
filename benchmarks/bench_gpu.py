"""One GPU: the hot path's rates against its goals, and the trainer against the machine's CPU.

Run by ``benchmarks/gpu_check.sh`` on a machine with a CUDA GPU (never in CI)::

    python benchmarks/bench_gpu.py --out benchmarks/results [--readme benchmarks/README.md]
    python benchmarks/bench_gpu.py --out /tmp/x --device cpu --nodes 20000   # a dry run

The graph is gnnpar's SBM at ogbn-products' scale (2.45M nodes, ``avg_degree=25``: about
61M directed edges, 100 features, 16 classes; 5% of the nodes train, so that an epoch is
about 120 steps of 1,024 seeds), one part (world size 1).

1. **Rates** (in this process, world size 1): sampled edges per second of
   :class:`~gnnpar.DistNeighborSampler` (fan-outs 15,10, batches of 1,024 seeds), feature
   gather bandwidth of :class:`~gnnpar.DistFeatureStore` (1M random rows, bytes returned
   per second), and the device's own copy bandwidth (one 1 GiB device-to-device copy,
   bytes read and written per second), against the goals: >= 300M sampled edges/s,
   gather >= 1 TB/s and within 5x of the copy bandwidth.
2. **Trainer**: the same ``gnnpar-train`` configurations on the GPU (NCCL) and on the CPU of
   the same machine (gloo, every core): minibatch GraphSAGE 2x256, fan-outs 15,10, batch
   1024, in fp32 and — on the GPU — in bf16 (``--precision bf16`` on a ``--feature-dtype
   bf16`` partition); full graph GraphSAGE 2x256 on the GPU.

Reported per run, from the run records: epoch time and its breakdown, sampled edges per
second, test accuracy, peak GPU memory (``torch.cuda.max_memory_allocated``) and peak
host memory; then GPU / CPU ratios.  Figures go to ``OUT/gpu-DATE.json`` and
``OUT/gpu-DATE.md`` (a table), and with ``--readme`` into the section of
``benchmarks/README.md`` between ``<!-- gpu-check -->`` and ``<!-- /gpu-check -->``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import time
from pathlib import Path
from typing import Any

import torch

from gnnpar.config import ArgumentParser
from gnnpar.datasets.synthetic import sbm
from gnnpar.partition import PartitionConfig, partition_graph
from gnnpar.train.cli import launch
from gnnpar.train.config import (
    Config,
    DataConfig,
    ModelConfig,
    RunConfig,
    SampleConfig,
    TrainConfig,
)

MARK = ("<!-- gpu-check -->", "<!-- /gpu-check -->")


def parse_args() -> argparse.Namespace:
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for gpu-DATE.json and .md")
    p.add_argument("--readme", default=None, help="benchmarks/README.md to update")
    p.add_argument("--nodes", type=int, default=2_450_000)
    p.add_argument("--avg-degree", type=float, default=25.0)
    p.add_argument("--device", default="cuda", help="cuda, or cpu for a dry run")
    p.add_argument("--feat-dim", type=int, default=100)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--workdir", default="/tmp/gnnpar-gpu-check")
    return p.parse_args()


def _run(name: str, parts: Path, work: Path, device: str, mode: str, epochs: int,
         precision: str = "fp32") -> dict[str, Any]:
    cfg = Config(
        data=DataConfig(dataset=str(parts)),
        model=ModelConfig(name="sage", hidden=256, layers=2, dropout=0.5),
        train=TrainConfig(mode=mode, epochs=epochs, lr=0.003, eval_every=epochs,
                          precision=precision),
        sample=SampleConfig(fanouts=(15, 10)) if mode == "sample" else SampleConfig(),
        run=RunConfig(out=str(work / name), overwrite=True, nproc=1, device=device,
                      threads=os.cpu_count() if device == "cpu" else None, progress=False,
                      timeout_s=600),
    ).validate()
    t0 = time.perf_counter()
    record = launch(cfg)
    s = record["summary"]
    row = {"name": name, "device": device, "mode": mode, "precision": precision,
           "epoch_time_s": s["epoch_time_s"], "step_time_s": s["step_time_s"],
           "sampled_edges_per_s": s["sampled_edges_per_s"], "test_acc": s["test_acc"],
           "test_acc_sampled": s["test_acc_sampled"], "peak_memory_bytes":
           s["peak_memory_bytes"], "backend": record["env"]["backend"],
           "wall_s": time.perf_counter() - t0}
    print(f"{name:<22} epoch {row['epoch_time_s']:8.3f} s  test acc {row['test_acc']:.4f}  "
          f"GPU peak {_gib(row['peak_memory_bytes']['device'])}  "
          f"({row['backend']}, {row['wall_s']:.0f} s in all)", flush=True)
    return row


GOALS = {"sampled_edges_per_s": 300e6, "gather_bytes_per_s": 1e12, "gather_vs_copy": 0.2}
"""The hot path's goals on one GPU (issue 22): edges/s, gather B/s, gather / copy rate."""


def _timed(device: torch.device, fn: Any, repeats: int) -> float:
    """Seconds per call of ``fn`` after one warm-up call (device work included)."""
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - t0) / repeats


def rates(parts: Path, device: str) -> dict[str, float]:
    """Sampled edges/s, feature gather and device copy bandwidth, at world size 1."""
    import gnnpar

    ctx = gnnpar.init(device=device)
    dev = ctx.device
    graph = gnnpar.DistGraph.load(parts, ctx, verify=False)
    sampler = gnnpar.DistNeighborSampler(graph, ctx, [15, 10])
    store = gnnpar.DistFeatureStore(graph, ctx, arrays={"x": graph.features()})
    gen = torch.Generator().manual_seed(0)
    n = graph.num_owned
    seeds = [torch.randperm(n, generator=gen)[:1024].to(dev) for _ in range(20)]
    edges = [0]

    def sample() -> None:
        for i, s in enumerate(seeds):
            edges[0] += sum(sampler.sample(s, batch_key=i).num_sampled_edges)

    per_call = _timed(dev, sample, 3)
    sampled = edges[0] / 4 / per_call
    ids = torch.randint(0, n, (min(n, 1_000_000),), generator=gen).to(dev)
    rows_bytes = ids.numel() * store.array("x")[0].numel() * store.array("x").element_size()
    gather = rows_bytes / _timed(dev, lambda: store.gather(ids), 5)
    big = torch.empty(2**28, dtype=torch.float32, device=dev)  # 1 GiB
    dst = torch.empty_like(big)
    copy = 2 * big.numel() * 4 / _timed(dev, lambda: dst.copy_(big), 5)  # read + write
    gnnpar.shutdown()
    out = {"sampled_edges_per_s": sampled, "gather_bytes_per_s": gather,
           "copy_bytes_per_s": copy, "gather_vs_copy": gather / copy,
           "gather_rows": ids.numel(), "placement": store.placement}
    print(f"rates: {sampled / 1e6:.1f} M sampled edges/s, gather {gather / 1e9:.1f} GB/s, "
          f"copy {copy / 1e9:.1f} GB/s ({store.placement})", flush=True)
    return out


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**30:.2f} GiB"


def _table(res: dict[str, Any]) -> str:
    rows = res["runs"]
    by = {r["name"]: r for r in rows}
    r = res["rates"]

    def met(key: str) -> str:
        return "met" if r[key] >= GOALS[key] else "**not met**"

    lines = [f"GPU check, {res['date']}: {res['gpu']}, {res['cpus']} CPU cores, torch "
             f"{res['torch']} (CUDA {res['cuda']}); graph {res['nodes']:,} nodes / "
             f"{res['edges']:,} edges, {res['feat_dim']} features, world size 1.", "",
             "| rate | measured | goal | |", "|---|---:|---:|---|",
             f"| sampled edges/s (15,10, batch 1024) | {r['sampled_edges_per_s'] / 1e6:.1f} M "
             f"| 300 M | {met('sampled_edges_per_s')} |",
             f"| feature gather ({r['gather_rows']:,} rows, {r['placement']}) | "
             f"{r['gather_bytes_per_s'] / 1e9:.1f} GB/s | 1,000 GB/s | "
             f"{met('gather_bytes_per_s')} |",
             f"| gather / device copy ({r['copy_bytes_per_s'] / 1e9:.0f} GB/s) | "
             f"{r['gather_vs_copy']:.2f} | >= 0.20 | {met('gather_vs_copy')} |", "",
             "| run | epoch (s) | GPU / CPU | sampled edges/s | test acc | peak GPU | "
             "peak host |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        cpu = by.get(f"{r['mode']}-cpu")
        ratio = f"{r['epoch_time_s'] / cpu['epoch_time_s']:.3f}x" if cpu and r is not cpu \
            else "1x"
        edges = (f"{r['sampled_edges_per_s'] / 1e6:.1f} M" if r["sampled_edges_per_s"]
                 else "-")
        mem = r["peak_memory_bytes"]
        lines.append(f"| {r['name']} | {r['epoch_time_s']:.3f} | {ratio} | {edges} | "
                     f"{r['test_acc']:.4f} | {_gib(mem['device'])} | {_gib(mem['host'])} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    args = parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench_gpu.py needs a CUDA GPU; this torch sees none "
                         "(--device cpu makes a dry run).")
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    ds = sbm(num_nodes=args.nodes, avg_degree=args.avg_degree, num_classes=16,
             feat_dim=args.feat_dim, seed=0, split=(0.05, 0.025, 0.025))
    print(f"generated {ds.num_nodes:,} nodes / {ds.num_edges:,} edges in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)
    parts = {}
    for dtype in ("fp32", "bf16"):
        t0 = time.perf_counter()
        parts[dtype] = work / f"parts-{dtype}"
        partition_graph(ds, 1, parts[dtype],
                        PartitionConfig(partitioner="contiguous", feature_dtype=dtype),
                        overwrite=True, validate=dtype == "fp32")
        print(f"partition ({dtype} features) {time.perf_counter() - t0:.1f} s", flush=True)
    e, dev = args.epochs, args.device
    measured = rates(parts["fp32"], dev)
    runs = [
        _run(f"sample-{dev}", parts["fp32"], work, dev, "sample", e),
        _run(f"sample-{dev}-bf16", parts["bf16"], work, dev, "sample", e, "bf16"),
        _run(f"full-{dev}", parts["fp32"], work, dev, "full", e),
    ]
    if dev == "cuda":
        runs.append(_run("sample-cpu", parts["fp32"], work, "cpu", "sample", 2))
    date = time.strftime("%Y-%m-%d")
    gpu = torch.cuda.get_device_name(0) if dev == "cuda" else "no GPU (dry run)"
    res = {"date": date, "gpu": gpu, "rates": measured, "cpus": os.cpu_count(),
           "torch": torch.__version__, "cuda": torch.version.cuda,
           "python": platform.python_version(), "nodes": ds.num_nodes,
           "edges": ds.num_edges, "feat_dim": args.feat_dim, "runs": runs}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"gpu-{date}.json").write_text(json.dumps(res, indent=2) + "\n")
    table = _table(res)
    (out / f"gpu-{date}.md").write_text(table)
    print("\n" + table)
    if args.readme:
        readme = Path(args.readme)
        text = readme.read_text()
        section = f"{MARK[0]}\n{table}{MARK[1]}"
        pattern = re.escape(MARK[0]) + ".*?" + re.escape(MARK[1])
        if re.search(pattern, text, flags=re.S):
            text = re.sub(pattern, lambda _: section, text, flags=re.S)
        else:
            text += "\n" + section + "\n"
        readme.write_text(text)


if __name__ == "__main__":
    main()

"""One GPU: the hot path's rates against its goals, and the trainer against the machine's CPU.

Run last by ``benchmarks/gpu_check.sh`` on a machine with a CUDA GPU, in the minutes left::

    python benchmarks/bench_gpu.py --out OUT [--budget-s 200] [--readme benchmarks/README.md]
    python benchmarks/bench_gpu.py --out /tmp/x --device cpu --nodes 2000   # a dry run

The graph is gnnpar's SBM at ogbn-products' scale (2.45M nodes, ``avg_degree=25``: about
61M directed edges, 100 features, 16 classes; 5% of the nodes train, so that an epoch is
about 120 steps of 1,024 seeds), one part (world size 1); with ``--budget-s`` it shrinks
so that generating and partitioning it takes at most a third of the budget (at the rate
measured on a 2-core VM: 17 µs per node).

1. **Rates** (in this process, world size 1): sampled edges per second of
   :class:`~gnnpar.DistNeighborSampler` (fan-outs 15,10, batches of 1,024 seeds), feature
   gather bandwidth of :class:`~gnnpar.DistFeatureStore` (1M random rows, bytes returned
   per second), and the device's own copy bandwidth (one 1 GiB device-to-device copy,
   bytes read and written per second), against the goals: >= 300M sampled edges/s,
   gather >= 1 TB/s and >= 0.2 of the copy bandwidth.
2. **Trainer**: ``gnnpar-train --nproc 1`` runs, each bounded by the time left: minibatch
   GraphSAGE 2x256, fan-outs 15,10, batch 1,024 on the device (``sample``); the same on
   this machine's CPU (``sample-cpu``: every core, no final evaluation, the epoch time is
   the figure; goal: the GPU's sampled epoch <= 0.1x the CPU's); on the device again in
   bf16 (``--precision bf16`` on a ``--feature-dtype bf16`` partition) and full-graph.  A
   run cut short still gives the epochs it finished.

Reported per run, from the run records: epoch time and its breakdown, sampled edges per
second, test accuracy, peak GPU memory (``torch.cuda.max_memory_allocated``) and peak
host memory; then GPU / CPU ratios.  ``OUT/gpu-DATE.json`` and ``OUT/gpu-DATE.md`` (a
table) are rewritten after each stage; with ``--readme`` the table also replaces the
section of ``benchmarks/README.md`` between ``<!-- gpu-check -->`` and
``<!-- /gpu-check -->``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import torch
from _measure import command, run_bounded, stop_on_sigterm  # benchmarks/ is the script directory

from gnnpar.artifacts.kinds import RECORD_FILE
from gnnpar.config import ArgumentParser
from gnnpar.datasets.synthetic import sbm
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.writer import partition_graph
from gnnpar.train.record import RunRecord

MARK = ("<!-- gpu-check -->", "<!-- /gpu-check -->")
PREP_S_PER_NODE = 17e-6
"""Seconds per node to generate the graph and write both partitions (2-core VM, 2026-12-04)."""
GOALS = {"sampled_edges_per_s": 300e6, "gather_bytes_per_s": 1e12, "gather_vs_copy": 0.2,
         "epoch_vs_cpu": 0.1}
"""The goals on one GPU (issues 22 and 33): edges/s, gather B/s, gather / copy rate, and
the sampled epoch against the same machine's CPU epoch."""


def parse_args() -> argparse.Namespace:
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for gpu-DATE.json and .md")
    p.add_argument("--readme", default=None, help="benchmarks/README.md to update")
    p.add_argument("--nodes", type=int, default=2_450_000)
    p.add_argument("--avg-degree", type=float, default=25.0)
    p.add_argument("--device", default="cuda", help="cuda, or cpu for a dry run")
    p.add_argument("--feat-dim", type=int, default=100)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--budget-s", type=float, default=None,
                   help="seconds for everything: the graph shrinks to fit, runs are cut")
    p.add_argument("--workdir", default=None, help="graph and runs (default: a new "
                   "temporary folder)")
    return p.parse_args()


class Bench:
    """The results so far, written after each stage, and the time left."""

    def __init__(self, args: argparse.Namespace, res: dict[str, Any]) -> None:
        self.args, self.res = args, res
        self.deadline = time.monotonic() + (args.budget_s or float("inf"))
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def write(self) -> None:
        date = self.res["date"]
        (self.out / f"gpu-{date}.json").write_text(json.dumps(self.res, indent=2) + "\n")
        (self.out / f"gpu-{date}.md").write_text(_table(self.res))

    def run(self, name: str, parts: Path, work: Path, device: str, mode: str, epochs: int,
            flags: tuple[str, ...] = ()) -> None:
        """One ``gnnpar-train`` run, bounded by the time left; its figures join the results."""
        left = self.left() - 5
        if left < 20:
            self.res["skipped"].append(f"{name}: {max(left, 0):.0f} s left")
            self.write()
            return
        out = work / name
        cmd = [*command("gnnpar-train"), str(parts), "--nproc", "1", "--device", device,
               "--mode", mode, "--model", "sage", "--hidden", "256", "--layers", "2",
               "--dropout", "0.5", "--epochs", str(epochs), "--lr", "0.003", "--eval-every",
               str(epochs), "--timeout-s", "600", "--no-progress", "--out", str(out),
               *(["--fanouts", "15,10"] if mode == "sample" else []), *flags]
        o = run_bounded(cmd, cwd=work, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                        timeout_s=left, log=work / f"{name}.log")
        row: dict[str, Any] = {"name": name, "device": device, "mode": mode, "flags": flags,
                               "status": o.status, "wall_s": o.wall_s, "cpu_s": o.cpu_s}
        if (out / RECORD_FILE).is_file():
            r = RunRecord.load(out / RECORD_FILE)
            s = r.summary or {}
            row.update({
                "record_status": r.status, "epochs": len(r.epochs),
                "backend": r.env.get("backend"),
                "epoch_time_s": s.get("epoch_time_s", _after_warmup(r, "epoch_time_s")),
                "step_time_s": s.get("step_time_s"),
                "sampled_edges_per_s": s.get("sampled_edges_per_s",
                                             _after_warmup(r, "sampled_edges_per_s")),
                "test_acc": s.get("test_acc"),
                "peak_memory_bytes": s.get("peak_memory_bytes") or {}})
        if o.status != "ok":
            row["tail"] = o.tail
        print(f"{name:<12} {device:<5} {o.status:<8} "
              f"epoch {_num(row.get('epoch_time_s'), '8.3f')} s  "
              f"test acc {_num(row.get('test_acc'), '.4f')}  GPU peak "
              f"{_gib(row.get('peak_memory_bytes', {}).get('device'))}  ({o.wall_s:.0f} s)",
              flush=True)
        self.res["runs"].append(row)
        self.write()


def _after_warmup(r: RunRecord, key: str) -> float | None:
    """A run cut short: the mean of ``key`` over its finished epochs after the first."""
    done = [e[key] for e in r.epochs if e["epoch"] > 0 and e[key] is not None] or [
        e[key] for e in r.epochs if e[key] is not None]
    return sum(done) / len(done) if done else None


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


def rates(parts: Path, device: str) -> dict[str, Any]:
    """Sampled edges/s, feature gather and device copy bandwidth, at world size 1."""
    import gnnpar
    from gnnpar.sampling.fanouts import Fanouts

    ctx = gnnpar.init(device=device)
    dev = ctx.device
    graph = gnnpar.DistGraph.load(parts, ctx, verify=False)
    sampler = gnnpar.DistNeighborSampler(graph, ctx, Fanouts.for_graph([15, 10], graph, ctx))
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
    big = torch.empty(2**28 if dev.type == "cuda" else 2**22, dtype=torch.float32, device=dev)
    dst = torch.empty_like(big)
    copy = 2 * big.numel() * 4 / _timed(dev, lambda: dst.copy_(big), 5)  # read + write
    gnnpar.shutdown()
    out = {"sampled_edges_per_s": sampled, "gather_bytes_per_s": gather,
           "copy_bytes_per_s": copy, "gather_vs_copy": gather / copy,
           "gather_rows": ids.numel(), "placement": store.placement}
    print(f"rates: {sampled / 1e6:.1f} M sampled edges/s, gather {gather / 1e9:.1f} GB/s, "
          f"copy {copy / 1e9:.1f} GB/s ({store.placement})", flush=True)
    return out


def _num(v: Any, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**30:.2f} GiB"


def _table(res: dict[str, Any]) -> str:
    lines = [f"GPU check, {res['date']}: {res['gpu']}, {res['cpus']} CPU cores, torch "
             f"{res['torch']} (CUDA {res['cuda']}); graph {res['nodes']:,} nodes / "
             f"{res['edges']:,} edges, {res['feat_dim']} features, world size 1.", ""]
    r = res.get("rates")
    if r:
        def met(key: str) -> str:
            return "met" if r[key] >= GOALS[key] else "**not met**"

        lines += ["| rate | measured | goal | |", "|---|---:|---:|---|",
                  f"| sampled edges/s (15,10, batch 1024) | "
                  f"{r['sampled_edges_per_s'] / 1e6:.1f} M | 300 M | "
                  f"{met('sampled_edges_per_s')} |",
                  f"| feature gather ({r['gather_rows']:,} rows, {r['placement']}) | "
                  f"{r['gather_bytes_per_s'] / 1e9:.1f} GB/s | 1,000 GB/s | "
                  f"{met('gather_bytes_per_s')} |",
                  f"| gather / device copy ({r['copy_bytes_per_s'] / 1e9:.0f} GB/s) | "
                  f"{r['gather_vs_copy']:.2f} | >= 0.20 | {met('gather_vs_copy')} |", ""]
    by = {x["name"]: x.get("epoch_time_s") for x in res["runs"]}
    cpu = by.get("sample-cpu")
    lines += ["| run | device | status | epoch (s) | / CPU epoch | sampled edges/s | test acc | "
              "peak GPU | peak host |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for x in res["runs"]:
        t = x.get("epoch_time_s")
        ratio = f"{t / cpu:.3f}x" if cpu and t and x["mode"] == "sample" else "-"
        edges = x.get("sampled_edges_per_s")
        mem = x.get("peak_memory_bytes") or {}
        lines.append(f"| {x['name']} | {x['device']} | {x['status']} | {_num(t, '.3f')} | "
                     f"{ratio} | "
                     f"{'-' if not edges else f'{edges / 1e6:.1f} M'} | "
                     f"{_num(x.get('test_acc'), '.4f')} | {_gib(mem.get('device'))} | "
                     f"{_gib(mem.get('host'))} |")
    gpu = by.get("sample")
    if cpu and gpu:
        lines.append(f"\nSampled epoch on the GPU / on this machine's CPU: {gpu / cpu:.3f} "
                     f"(goal <= {GOALS['epoch_vs_cpu']}: "
                     f"{'met' if gpu / cpu <= GOALS['epoch_vs_cpu'] else '**not met**'}).")
    lines += [f"\nNot run: {s}." for s in res["skipped"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    args = parse_args()
    stop_on_sigterm()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench_gpu.py needs a CUDA GPU; this torch sees none "
                         "(--device cpu makes a dry run).")
    with tempfile.TemporaryDirectory(prefix="gnnpar-bench-gpu-") as tmp:
        work = Path(args.workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        measure(args, work)


def measure(args: argparse.Namespace, work: Path) -> None:
    """The graph, its partitions, the rates and the runs, written as they come."""
    nodes = args.nodes
    if args.budget_s is not None:
        nodes = min(nodes, max(1000, int(args.budget_s / 3 / PREP_S_PER_NODE)))
    dev = args.device
    res: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"), "device": dev,
        "gpu": torch.cuda.get_device_name(0) if dev == "cuda" else "no GPU (dry run)",
        "cpus": os.cpu_count(), "torch": torch.__version__, "cuda": torch.version.cuda,
        "python": platform.python_version(), "nodes": nodes, "edges": 0,
        "feat_dim": args.feat_dim, "budget_s": args.budget_s, "load_avg": os.getloadavg(),
        "rates": None, "runs": [], "skipped": []}
    bench = Bench(args, res)
    t0 = time.perf_counter()
    ds = sbm(num_nodes=nodes, avg_degree=args.avg_degree, num_classes=16,
             feat_dim=args.feat_dim, seed=0, split=(0.05, 0.025, 0.025))
    res["edges"] = ds.num_edges
    print(f"generated {ds.num_nodes:,} nodes / {ds.num_edges:,} edges in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)
    parts = {}
    for dtype in ("fp32", "bf16"):
        t0 = time.perf_counter()
        parts[dtype] = work / f"parts-{dtype}"
        partition_graph(ds, parts[dtype],
                        PartitionConfig(num_parts=1, partitioner="contiguous", feature_dtype=dtype),
                        validate=dtype == "fp32")
        print(f"partition ({dtype} features) {time.perf_counter() - t0:.1f} s", flush=True)
    del ds
    try:  # a failure here must not hide the trainer's figures
        res["rates"] = rates(parts["fp32"], dev)
    except Exception as exc:  # noqa: BLE001 - recorded, and the runs go on
        res["skipped"].append(f"rates: {type(exc).__name__}: {exc}")
        traceback.print_exc()
    bench.write()
    e = args.epochs
    bench.run("sample", parts["fp32"], work, dev, "sample", e)
    # The same run on this machine's CPU, every core: its epoch time is the figure.
    bench.run("sample-cpu", parts["fp32"], work, "cpu", "sample", 2,
              ("--eval", "none", "--threads", str(os.cpu_count() or 1)))
    bench.run("sample-bf16", parts["bf16"], work, dev, "sample", e, ("--precision", "bf16"))
    bench.run("full", parts["fp32"], work, dev, "full", e)
    print("\n" + _table(res))
    if args.readme:
        readme = Path(args.readme)
        text = readme.read_text()
        section = f"{MARK[0]}\n{_table(res)}{MARK[1]}"
        pattern = re.escape(MARK[0]) + ".*?" + re.escape(MARK[1])
        if re.search(pattern, text, flags=re.S):
            text = re.sub(pattern, lambda _: section, text, flags=re.S)
        else:
            text += "\n" + section + "\n"
        readme.write_text(text)


if __name__ == "__main__":
    main()

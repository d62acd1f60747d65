"""Per-rank memory that scales with the part: samplers at a large node count, training peaks.

Two measurements (``docs/memory.md`` states the formulas they check):

* ``sampler``: one part of an SBM graph (100k nodes) is given a partition book that makes
  the whole graph ``--num-nodes`` nodes (default 100M; the other nodes are notional), and
  the three samplers the trainer builds (train / val / test) are constructed on it and
  sample a batch: bytes of the tensors they hold beyond the part itself, resident-set
  growth, and the time to relabel one second hop (fan-outs [15, 10], batch 1024) at
  100k, 10M and 100M nodes;
* ``train SPEC``: ``gnnpar-train SPEC --nproc 2 --epochs 1`` once per ``--eval`` setting,
  and the peak resident set of the largest rank that the run record reports.

    python benchmarks/bench_memory.py sampler [--num-nodes N]
    python benchmarks/bench_memory.py train "synthetic:sbm?nodes=1000000&avg_degree=10&feat_dim=128"
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from gnnpar.config import ArgumentParser
from gnnpar.datasets.synthetic import sbm
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.writer import partition_graph


def _rss() -> int:
    text = Path("/proc/self/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", text).group(1)) * 1024  # type: ignore[union-attr]


def _held(obj: object, skip: set[int]) -> int:
    """Bytes of the tensor storages in ``obj``'s attributes, those in ``skip`` left out."""
    total = 0
    for v in vars(obj).values():
        if isinstance(v, torch.Tensor) and v.untyped_storage().data_ptr() not in skip:
            skip.add(v.untyped_storage().data_ptr())
            total += v.untyped_storage().nbytes()
    return total


def sampler(num_nodes: int) -> None:
    """Three samplers on a part of a notional ``num_nodes``-node graph (one process)."""
    from gnnpar import distributed
    from gnnpar.partition.format import load_partition
    from gnnpar.sampling.fanouts import Fanouts
    from gnnpar.sampling.neighbor import DistNeighborSampler
    from gnnpar.storage.graph import DistGraph

    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="gnnpar-mem-"))
    partition_graph(sbm(num_nodes=100_000, avg_degree=10.0, feat_dim=8, seed=0), work / "p",
                    PartitionConfig(num_parts=1, partitioner="contiguous"))
    part = load_partition(work / "p", 0)
    meta = dataclasses.replace(part.meta, num_nodes=num_nodes, offsets=(0, num_nodes))
    graph = DistGraph.from_partition(dataclasses.replace(part, meta=meta))
    ctx = distributed.init()
    skip = {t.untyped_storage().data_ptr() for t in vars(graph).values()
            if isinstance(t, torch.Tensor)}
    fanouts = Fanouts.for_graph([15, 10], graph, ctx)
    DistNeighborSampler(graph, ctx, fanouts).sample(torch.arange(1024), 0)  # warm-up
    before = _rss()
    samplers = [DistNeighborSampler(graph, ctx, fanouts, seed=s) for s in range(3)]
    built = _rss()
    for s in samplers:
        s.sample(torch.arange(1024), batch_key=0)
    held = sum(_held(s, skip) + _held(s.graph, skip) for s in samplers)
    print(f"3 samplers on a 100k-node part of a {num_nodes:,}-node graph: "
          f"{held / 2**20:.1f} MiB of tensors beyond the part; RSS "
          f"+{(built - before) / 2**20:.1f} MiB built, +{(_rss() - built) / 2**20:.1f} MiB "
          "after a batch each")
    shutil.rmtree(work)
    _relabel_times()
    distributed.shutdown()


def _relabel_times() -> None:
    """Seconds of :func:`~gnnpar.sampling.kernels.relabel` for a second hop, by node count."""
    from gnnpar.sampling.kernels import relabel

    gen = torch.Generator().manual_seed(0)
    for n in (100_000, 10_000_000, 100_000_000):
        node = torch.randperm(n, generator=gen)[:15_000]
        nbr = torch.randint(0, n, (15_000, 10), generator=gen)
        owned = nbr < n // 2
        relabel(nbr, node, owned, n)
        t = time.perf_counter()
        for _ in range(20):
            relabel(nbr, node, owned, n)
        print(f"  relabel of a second hop (150k ids) at {n:>11,} nodes: "
              f"{(time.perf_counter() - t) / 20 * 1e3:.1f} ms")


def train(spec: str, evals: list[str]) -> None:
    """``gnnpar-train SPEC --nproc 2 --epochs 1 --eval E``: peak RSS of the largest rank."""
    exe = shutil.which("gnnpar-train")
    cmd = [exe] if exe else [sys.executable, "-m", "gnnpar.train"]
    work = Path(tempfile.mkdtemp(prefix="gnnpar-mem-"))
    for ev in evals:
        out = work / f"run-{ev}"
        proc = subprocess.run([*cmd, spec, "--nproc", "2", "--epochs", "1", "--eval", ev,
                               "--root", str(work / "data"), "--out", str(out),
                               "--no-progress"], capture_output=True, text=True)
        if proc.returncode:
            sys.exit(proc.stderr[-2000:])
        s = json.loads((out / "record.json").read_text())["summary"]
        print(f"--eval {ev:8s} peak RSS {s['peak_memory_bytes']['host'] / 2**30:.2f} GiB, "
              f"test accuracy {s['test_acc']}, wall {s['wall_time_s']:.0f} s")
    shutil.rmtree(work)


def main() -> None:
    ap = ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    s = sub.add_parser("sampler", help="sampler bytes at a large node count")
    s.add_argument("--num-nodes", type=int, default=100_000_000)
    t = sub.add_parser("train", help="peak RSS of a 2-rank run per --eval setting")
    t.add_argument("spec")
    t.add_argument("--eval", nargs="+", default=["full", "none"])
    args = ap.parse_args()
    if args.what == "sampler":
        sampler(args.num_nodes)
    else:
        train(args.spec, args.eval)


if __name__ == "__main__":
    main()

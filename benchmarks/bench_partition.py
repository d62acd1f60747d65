"""Partition pipeline vs the bare METIS call it wraps: time and peak memory, side by side.

Run::

    python benchmarks/bench_partition.py                 # 1M nodes, 10M undirected edges, 4 parts
    python benchmarks/bench_partition.py --small         # 100k nodes, 1M undirected edges
    python benchmarks/bench_partition.py --repeat 3 --json bench_partition.json

A synthetic SBM graph (``synthetic:sbm``, average degree 20, i.e. ``N * 10`` undirected
edges stored in both directions) is generated once and saved as a dataset directory
(reused from ``--workdir`` when present).  Then, each in its own subprocess so that peak
RSS is clean:

- **bare**: ``pymetis.part_graph`` on the graph METIS sees (the symmetric, self-loop-free
  CSR and the ``nodes,train,edges`` vertex weights, precomputed and loaded into memory),
  with the same seed; timed around the call alone;
- **pipeline**: the whole ``gnnpar-partition DATASET --num-parts K --out DIR`` command
  (interpreter start, load, grouping, METIS, renumbering, writing every part, sha256 of
  every file), timed from process start to exit.

With ``--repeat R`` the two alternate ``R`` times and the minimum of each is reported
(the machine is shared; the minimum is the least disturbed run).  Goal: pipeline <= 1.3x
the bare call's time and <= 1.5x its peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _prepare(workdir: Path, nodes: int, avg_degree: float, feat_dim: int) -> Path:
    """Generate and save the dataset and the bare METIS inputs (once per workdir)."""
    from gnnpar.datasets import GraphDataset, sbm
    from gnnpar.partition.adjacency import group_in_edges, metis_graph
    from gnnpar.partition.assign import DEFAULT_BALANCE, balance_weights

    data = workdir / f"sbm-{nodes}-{avg_degree:g}-{feat_dim}"
    if not (data / "dataset.json").is_file():
        t = time.perf_counter()
        sbm(num_nodes=nodes, avg_degree=avg_degree, num_classes=64, feat_dim=feat_dim,
            seed=0).save(data, overwrite=True)
        print(f"generated {data} in {time.perf_counter() - t:.1f} s", flush=True)
    if not (data / "metis_vweights.npy").is_file():
        ds = GraphDataset.load(data)
        in_edges = group_in_edges(ds.num_nodes, ds.src, ds.dst)
        xadj, adjncy = metis_graph(in_edges)
        vweights, _ = balance_weights(DEFAULT_BALANCE, in_edges.in_degree(),
                                      np.asarray(ds.train_idx))
        np.save(data / "metis_xadj.npy", xadj)
        np.save(data / "metis_adjncy.npy", adjncy)
        np.save(data / "metis_vweights.npy", vweights)
    return data


def _bare(data: Path, parts: int, seed: int) -> None:
    """Child process: the bare METIS call; prints its time as JSON."""
    import resource

    import pymetis

    xadj = np.load(data / "metis_xadj.npy")
    adjncy = np.load(data / "metis_adjncy.npy")
    vweights = np.load(data / "metis_vweights.npy")
    before = resource.getrusage(resource.RUSAGE_SELF)
    t = time.perf_counter()
    result = pymetis.part_graph(parts, pymetis.CSRAdjacency(xadj, adjncy), vweights=vweights,
                                options=pymetis.Options(seed=seed))
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    print(json.dumps({"seconds": wall, "cpu_seconds": cpu, "metis_edge_cuts": result.edge_cuts}))


def _measure(cmd: list[str]) -> tuple[float, float, int, str]:
    """Run ``cmd``; return (wall seconds, CPU seconds, peak RSS bytes, stdout)."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    out, err = proc.stdout.read(), proc.stderr.read()  # type: ignore[union-attr]
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024, out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=1_000_000)
    p.add_argument("--avg-degree", type=float, default=20.0,
                   help="directed edges per node (undirected edges = nodes * degree / 2)")
    p.add_argument("--feat-dim", type=int, default=32)
    p.add_argument("--parts", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--small", action="store_true", help="100k nodes (a quick try)")
    p.add_argument("--workdir", help="keeps the generated dataset between runs")
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--bare", help=argparse.SUPPRESS)  # child mode: dataset directory
    args = p.parse_args()
    if args.bare:
        _bare(Path(args.bare), args.parts, args.seed)
        return
    if args.small:
        args.nodes = 100_000
    with tempfile.TemporaryDirectory() as scratch:
        workdir = Path(args.workdir or scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        data = _prepare(workdir, args.nodes, args.avg_degree, args.feat_dim)
        out = Path(scratch) / "parts"
        bare_cmd = [sys.executable, __file__, "--bare", str(data), "--parts", str(args.parts),
                    "--seed", str(args.seed)]
        pipe_cmd = [sys.executable, "-m", "gnnpar.partition", str(data), "--num-parts",
                    str(args.parts), "--out", str(out), "--seed", str(args.seed),
                    "--overwrite", "--quiet"]
        runs: dict[str, list[dict[str, float]]] = {"bare": [], "pipeline": []}
        for _ in range(args.repeat):
            _, _, rss, text = _measure(bare_cmd)
            bare = json.loads(text)
            runs["bare"].append({"seconds": bare["seconds"], "cpu_seconds": bare["cpu_seconds"],
                                 "peak_rss_bytes": rss})
            wall, cpu, rss, _ = _measure(pipe_cmd)
            runs["pipeline"].append({"seconds": wall, "cpu_seconds": cpu, "peak_rss_bytes": rss})
        meta = json.loads((out / "meta.json").read_text())
    figures = ("seconds", "cpu_seconds", "peak_rss_bytes")
    best = {k: {f: min(r[f] for r in v) for f in figures} for k, v in runs.items()}
    ratio = {f: best["pipeline"][f] / best["bare"][f] for f in figures}
    print(f"\n{args.nodes:,} nodes, {meta['num_edges']:,} directed edges "
          f"({meta['num_edges'] // 2:,} undirected), {args.parts} parts, feat_dim "
          f"{args.feat_dim}; best of {args.repeat}")
    print(f"{'':34}{'wall s':>9}{'CPU s':>9}{'peak RSS MB':>13}{'peak RSS bytes':>16}")
    for name, label in (("bare", "bare pymetis.part_graph"),
                        ("pipeline", "gnnpar-partition (whole command)")):
        b = best[name]
        print(f"{label:34}{b['seconds']:9.2f}{b['cpu_seconds']:9.2f}"
              f"{b['peak_rss_bytes'] / 2**20:13.0f}{int(b['peak_rss_bytes']):16,}")
    print(f"{'ratio pipeline / bare':34}{ratio['seconds']:8.2f}x{ratio['cpu_seconds']:8.2f}x"
          f"{ratio['peak_rss_bytes']:12.2f}x   (goal <= 1.3x time, <= 1.5x memory)")
    q = meta["quality"]
    print(f"METIS edge cut {q['edge_cut']:,} directed edges ({100 * q['edge_cut_share']:.2f}%), "
          f"replication factor {q['replication_factor']:.3f}, imbalance {q['imbalance']}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "nodes": args.nodes, "edges": meta["num_edges"], "parts": args.parts,
            "feat_dim": args.feat_dim, "runs": runs, "best": best, "ratio": ratio,
            "quality": {k: v for k, v in q.items() if k != "per_part"}}, indent=2) + "\n")


if __name__ == "__main__":
    main()

"""Scale: time and peak memory of every partition stage per method, the assignment step
alone beside it, per-rank training memory against the part's bytes, and an extrapolation
to ogbn-products and ogbn-papers100M.

Run (tens of minutes at full size; never in CI)::

    python benchmarks/bench_scale.py                       # 1M, 4M, 10M nodes
    python benchmarks/bench_scale.py --small               # 100k, 400k nodes
    python benchmarks/bench_scale.py --nodes 1e6,4e6 --methods metis,kaminpar,stream \\
        --workdir /data/scale --json scale.json

For each size an SBM with ``--degree`` stored edges per node (both directions of
``degree / 2`` undirected ones) is generated once and saved as a dataset directory (kept
in ``--workdir``). Then, each in its own process so that peak RSS is clean (``wait4``):

- **alone**: the method's assignment call by itself on the undirected graph it reads,
  precomputed on disk (what a partitioner needs at least);
- **pipeline**: the whole ``gnnpar-partition DATASET --partitioner M`` command, with its
  stage table (load, check, group, assign, write: seconds, peak RSS, bytes per stored
  edge), the edge cut and the balance; goal: pipeline peak <= 1.15x the assignment alone,
  and <= 60 B per stored edge with kaminpar;
- **train**: ``gnnpar-train PART --nproc 2 --epochs 1`` on the first size's METIS
  partition: each rank's peak RSS against its part's bytes on disk.

A method is skipped at a size where its assignment alone would not fit in memory (from
the bytes per edge and per node measured at the smaller sizes), and said so. The last
table extrapolates each method's whole-pipeline peak (a fit of ``a * N + b * E`` through
the two largest sizes measured) to ogbn-products and ogbn-papers100M at 16 and 64 parts.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from gnnpar.config import ArgumentParser

OGB = {  # nodes, stored (symmetrised) edges, feature width
    "ogbn-products": (2_449_029, 123_718_280, 100),
    "ogbn-papers100M": (111_059_956, 3_231_371_744, 128),
}
_STAGE_ROW = re.compile(r"^\s*(\w+)\s+([\d.]+)\s+([\d,]+) MiB\s+([\d.]+)")


_WRAPPER = """
import json, resource, subprocess, sys, time
t = time.perf_counter()
proc = subprocess.run(sys.argv[1:], capture_output=True, text=True)
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": proc.returncode, "wall": time.perf_counter() - t,
                  "cpu": usage.ru_utime + usage.ru_stime, "peak": usage.ru_maxrss * 1024,
                  "out": proc.stdout, "err": proc.stderr[-3000:]}))
"""


def _measure(cmd: list[str]) -> tuple[float, float, int, str]:
    """Run ``cmd`` as the only child of a fresh interpreter.

    Returns:
        Wall seconds, CPU seconds, peak RSS in bytes (of the command, or of its largest
        child process), stdout.
    """
    done = subprocess.run([sys.executable, "-c", _WRAPPER, *cmd], capture_output=True,
                          text=True, check=True)
    res = json.loads(done.stdout)
    if res["rc"]:
        raise RuntimeError(f"{' '.join(cmd)} failed ({res['rc']}):\n{res['err']}")
    return res["wall"], res["cpu"], int(res["peak"]), res["out"]


def _dataset(workdir: Path, nodes: int, degree: float, feat_dim: int) -> Path:
    from gnnpar.datasets.synthetic import sbm

    data = workdir / f"sbm-{nodes}-{degree:g}-{feat_dim}"
    if not (data / "dataset.json").is_file():
        t = time.perf_counter()
        sbm(num_nodes=nodes, avg_degree=degree, num_classes=16, feat_dim=feat_dim,
            seed=0).save(data, overwrite=True)
        print(f"generated {data.name} in {time.perf_counter() - t:.0f} s", flush=True)
    return data


def _undirected(data: Path) -> Path:
    """The undirected graph and weights the graph methods read, precomputed on disk."""
    from gnnpar.datasets.graph import GraphDataset
    from gnnpar.partition.adjacency import group_in_edges, metis_graph
    from gnnpar.partition.assign import DEFAULT_BALANCE, balance_weights

    und = data / "undirected"
    if (und / "weights.npy").is_file():
        return und
    und.mkdir(exist_ok=True)
    ds = GraphDataset.load(data)
    ins = group_in_edges(ds.num_nodes, ds.src, ds.dst, und)
    graph = metis_graph(ins, und)
    weights, used = balance_weights(DEFAULT_BALANCE, ins, np.asarray(ds.train_idx))
    np.save(und / "indptr.npy", graph.indptr)
    (und / "in_edges.bin").unlink()
    np.save(und / "weights.npy", weights)
    (und / "meta.json").write_text(json.dumps({"dtype": str(graph.indices.dtype),
                                               "names": list(used)}))
    return und


def _alone(und: Path, method: str, parts: int, threads: int) -> None:
    """Child: the assignment call alone; prints its seconds."""
    from gnnpar.partition.adjacency import CSR
    from gnnpar.partition.assign import metis_assignment

    info = json.loads((und / "meta.json").read_text())
    indptr = np.load(und / "indptr.npy")
    indices = np.memmap(und / "undirected.bin", dtype=info["dtype"], mode="r",
                        shape=(int(indptr[-1]),))
    weights, names = np.load(und / "weights.npy"), tuple(info["names"])
    t = time.perf_counter()
    if method == "kaminpar":
        from gnnpar.partition.kaminpar import kaminpar_assignment

        with tempfile.TemporaryDirectory(dir=und) as scratch:
            kaminpar_assignment(indptr, indices, parts, weights, names, 0, threads,
                                Path(scratch))
    elif method == "stream":
        from gnnpar.partition.stream import stream_assignment

        stream_assignment(indptr, indices, parts, weights, names, 0)
    else:
        metis_assignment(CSR(indptr, indices), parts, weights, names, 0)
    print(json.dumps({"seconds": time.perf_counter() - t}))


def _stages(text: str) -> list[dict[str, Any]]:
    rows = []
    for line in text.splitlines():
        m = _STAGE_ROW.match(line)
        if m:
            rows.append({"stage": m[1], "seconds": float(m[2]),
                         "peak_rss": int(m[3].replace(",", "")) * 2**20,
                         "bytes_per_edge": float(m[4])})
    return rows


def _pipeline(data: Path, out: Path, method: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "gnnpar.partition", str(data), "--num-parts",
           str(args.parts), "--partitioner", method, "--out", str(out), "--overwrite",
           "--no-progress", "--memory-budget", str(args.memory_budget), "--workers",
           str(args.workers), "--partition-threads", str(args.threads)]
    wall, cpu, peak, text = _measure(cmd)
    meta = json.loads((out / "meta.json").read_text())
    q = meta["quality"]
    stages = _stages(text)
    # The stage meter resets the process's high-water mark per stage, so the command's
    # peak is the largest stage's (or a writer's, which the wrapper sees).
    peak = max([peak, *(st["peak_rss"] for st in stages)])
    return {"seconds": wall, "cpu_seconds": cpu, "peak_rss": peak, "stages": stages,
            "edge_cut_share": q["edge_cut_share"], "imbalance": q["imbalance"],
            "edges": meta["num_edges"], "nodes": meta["num_nodes"]}


def _train(data: Path, workdir: Path) -> dict[str, Any]:
    """``gnnpar-train`` on 2 METIS parts of ``data``: each rank's peak RSS and part bytes."""
    parts = workdir / f"train-parts-{data.name}"
    if not (parts / "meta.json").is_file():
        _measure([sys.executable, "-m", "gnnpar.partition", str(data), "--num-parts", "2",
                  "--out", str(parts), "--no-progress"])
    out = workdir / "train-run"
    cmd = [sys.executable, "-m", "gnnpar.train", str(parts), "--nproc", "2", "--epochs", "1",
           "--fanouts", "10,5", "--hidden", "64", "--no-progress", "--out", str(out),
           "--overwrite"]
    wall, _, _, _ = _measure(cmd)
    record = json.loads((out / "record.json").read_text())
    part_bytes = [sum(f.stat().st_size for f in (parts / f"part-{k}").iterdir())
                  for k in range(2)]
    return {"seconds": wall, "peak_memory": record["summary"].get("peak_memory_bytes", {}),
            "part_bytes": part_bytes}


def _fits(method: str, nodes: int, edges: int, fitted: dict[str, tuple[float, float]],
          limit: float) -> bool:
    a, b = fitted.get(method, (0.0, 0.0))
    return a * nodes + b * edges <= limit


def _fit(points: list[tuple[int, int, int]]) -> tuple[float, float]:
    """``(a, b)`` with ``peak ~ a * N + b * E`` through the two largest points (a >= 0)."""
    (n1, e1, p1), (n2, e2, p2) = sorted(points)[-2:]
    m = np.array([[n1, e1], [n2, e2]], dtype=float)
    a, b = np.linalg.lstsq(m, np.array([p1, p2], dtype=float), rcond=None)[0]
    if a < 0:  # the ratio E / N is the same at every size: charge it all to edges
        a, b = 0.0, p2 / e2
    return float(a), float(b)


def main() -> None:
    p = ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", default="1e6,4e6,1e7", help="graph sizes, comma-separated")
    p.add_argument("--methods", default="metis,kaminpar,stream")
    p.add_argument("--degree", type=float, default=20.0, help="stored edges per node")
    p.add_argument("--feat-dim", type=int, default=16)
    p.add_argument("--parts", type=int, default=4)
    p.add_argument("--memory-budget", type=float, default=1.0, help="GB (gnnpar-partition)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=2, help="kaminpar threads")
    p.add_argument("--ram-gb", type=float, default=20.0,
                   help="skip a method whose assignment is predicted above this")
    p.add_argument("--no-train", action="store_true")
    p.add_argument("--no-alone", action="store_true",
                   help="skip the assignment-alone runs (half the time at large sizes)")
    p.add_argument("--small", action="store_true", help="100k and 400k nodes")
    p.add_argument("--workdir", help="keeps the generated datasets between runs")
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--alone", nargs=2, help=argparse.SUPPRESS)  # child: UND_DIR METHOD
    args = p.parse_args()
    if args.alone:
        _alone(Path(args.alone[0]), args.alone[1], args.parts, args.threads)
        return
    sizes = [100_000, 400_000] if args.small else [int(float(s)) for s in args.nodes.split(",")]
    methods = args.methods.split(",")
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="bench-scale-"))
    workdir.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    points: dict[str, list[tuple[int, int, int]]] = {m: [] for m in methods}
    fitted: dict[str, tuple[float, float]] = {}
    train: dict[str, Any] | None = None
    for n in sizes:
        data = _dataset(workdir, n, args.degree, args.feat_dim)
        und = _undirected(data)
        edges = int(np.load(data / "src.npy", mmap_mode="r").shape[0])
        for method in methods:
            if not _fits(method, n, edges, fitted, args.ram_gb * 1e9):
                print(f"{n:,} nodes, {method}: skipped, predicted above {args.ram_gb} GB",
                      flush=True)
                rows.append({"nodes": n, "edges": edges, "method": method, "skipped": True})
                continue
            alone_s, alone_peak = None, None
            if not args.no_alone:
                _, _, alone_peak, text = _measure([
                    sys.executable, __file__, "--alone", str(und), method, "--parts",
                    str(args.parts), "--threads", str(args.threads)])
                alone_s = json.loads(text.strip().splitlines()[-1])["seconds"]
            out = workdir / f"parts-{n}-{method}"
            row = {"nodes": n, "edges": edges, "method": method, "alone_seconds": alone_s,
                   "alone_peak_rss": alone_peak, **_pipeline(data, out, method, args)}
            row["ratio_to_alone"] = row["peak_rss"] / alone_peak if alone_peak else None
            row["bytes_per_edge"] = row["peak_rss"] / edges
            rows.append(row)
            points[method].append((n, edges, row["peak_rss"]))
            if len(points[method]) >= 2:
                fitted[method] = _fit(points[method])
            alone = (f", alone {alone_s:.1f} s, {alone_peak / 2**30:.2f} GiB -> "
                     f"{row['ratio_to_alone']:.2f}x" if alone_peak else "")
            print(f"{n:,} nodes, {edges:,} edges, {method}: pipeline {row['seconds']:.1f} s, "
                  f"peak {row['peak_rss'] / 2**30:.2f} GiB ({row['bytes_per_edge']:.0f} B/edge)"
                  f"{alone}; cut {100 * row['edge_cut_share']:.2f}%, "
                  f"imbalance {row['imbalance']}", flush=True)
            _write(args.json, args, rows, fitted, train, [])
            for st in row["stages"]:
                print(f"    {st['stage']:>7} {st['seconds']:8.1f} s "
                      f"{st['peak_rss'] / 2**20:9,.0f} MiB {st['bytes_per_edge']:7.1f} B/edge")
            if method == "metis" and n == sizes[0] and not args.no_train:
                train = _train(data, workdir)
                print(f"    train 2 ranks: {train}", flush=True)
            if n != sizes[0]:
                shutil.rmtree(out, ignore_errors=True)
    extrapolated = []
    for name, (n, e, f) in OGB.items():
        for k in (16, 64):
            entry: dict[str, Any] = {"graph": name, "parts": k}
            for method, (a, b) in fitted.items():
                entry[method] = a * n + b * e
            entry["part_bytes"] = (e / k) * 8 + (n / k) * (f * 4 + 8 * 6)
            extrapolated.append(entry)
    print("\nextrapolated whole-pipeline peak (GiB) and one part's bytes on disk (GiB):")
    for entry in extrapolated:
        shown = ", ".join(f"{m} {entry[m] / 2**30:.0f}" for m in fitted)
        print(f"  {entry['graph']:>16} K={entry['parts']:<3} {shown}; part "
              f"{entry['part_bytes'] / 2**30:.1f} (owned rows only, halo not counted)")
    _write(args.json, args, rows, fitted, train, extrapolated)


def _write(path: str | None, args: argparse.Namespace, rows: list[dict[str, Any]],
           fitted: dict[str, tuple[float, float]], train: dict[str, Any] | None,
           extrapolated: list[dict[str, Any]]) -> None:
    """Write the figures so far (after every row, so a long run that stops keeps them)."""
    if path:
        Path(path).write_text(json.dumps({
            "date": time.strftime("%Y-%m-%d"), "args": vars(args), "rows": rows,
            "fit": fitted, "train": train, "extrapolated": extrapolated}, indent=2) + "\n")


if __name__ == "__main__":
    main()

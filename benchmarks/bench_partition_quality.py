r"""``python benchmarks/bench_partition_quality.py --cache DIR``: partition quality on real graphs.

Every method of ``gnnpar-partition`` side by side with a bare METIS call on the same graph,
on the real hub-heavy graphs of ``benchmarks/real_graphs.py`` beside the synthetic SBM and
R-MAT graphs of ``gnnpar.datasets.synthetic``::

    python benchmarks/bench_partition_quality.py --cache /work/cache \
        [--graphs debian,pyimports,sbm,rmat] [--parts 2,4,8] [--nodes 100000] \
        [--methods metis,kaminpar-eco,kaminpar-default,kaminpar-strong,stream,random,dgl] \
        [--small] [--json OUT]

Per graph, number of parts and method, in a fresh subprocess: the graph is grouped and its
undirected graph built (not timed), then the assignment is timed (CPU seconds of the
process, threads included) and its peak resident set read (``VmHWM``, reset before):

- ``metis-bare``: ``pymetis.part_graph`` without vertex weights (the reference of the
  ``cut / bare`` column; pymetis's default, recursive bisection up to 8 parts);
- ``metis``, ``kaminpar-PRESET``, ``stream``, ``random``: ``assign_parts`` as
  ``gnnpar-partition`` runs it, default ``--balance`` (nodes, train, sampled), seed 0,
  one thread; KaMinPar with its ``eco``, ``default`` and ``strong`` presets, each the
  best of the default ``--kaminpar-repeats`` (3) runs;
- ``dgl``: ``dgl.distributed.partition_graph`` (METIS, ``balance_ntypes`` = training
  mask, ``balance_edges``) in the DGL venv of ``bench_vs_distdgl.py`` (``--dgl-venv``),
  when it exists; otherwise the row says it was skipped.

Reported per run: edge cut (share of stored edges, and over ``metis-bare``'s), replication
factor (``(owned + halo) / owned``), max/mean over parts of owned nodes, training nodes,
stored in-edges, ``sampled`` work (expected sampled edges of the part's training seeds,
:mod:`gnnpar.partition.work`, fan-outs 10,10) and halo nodes; CPU seconds and peak MiB of
the assignment, and its bytes per stored edge above the process's size before it. The
load average is printed with every graph (the machine is shared).
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
from typing import Any

import numpy as np

from gnnpar.config import ArgumentParser

HERE = Path(__file__).resolve().parent

REAL = ("debian", "pyimports")
SYNTHETIC = ("sbm", "rmat")
METHODS = ("metis-bare", "metis", "kaminpar-eco", "kaminpar-default", "kaminpar-strong",
           "stream", "random", "dgl")
COLUMNS = ("owned", "train", "edges", "sampled", "halo")


# ------------------------------------------------------------------------------- graphs
def dataset_dir(cache: Path, name: str, nodes: int) -> Path:
    """The dataset directory of ``name`` in ``cache`` (built first when absent)."""
    import real_graphs

    from gnnpar.datasets import synthetic

    if name in REAL:
        real_graphs.load(name, cache / "graphs")
        return cache / "graphs" / name
    out = cache / "graphs" / f"{name}-{nodes}"
    if not (out / "dataset.json").is_file():
        make = synthetic.sbm if name == "sbm" else synthetic.rmat
        make(num_nodes=nodes, avg_degree=10, num_classes=16, feat_dim=16, seed=0).save(
            out, overwrite=True)
    return out


# ------------------------------------------------------------------------------ quality
def part_quality(src: np.ndarray, dst: np.ndarray, part: np.ndarray, train_idx: np.ndarray,
                 sampled: np.ndarray, k: int) -> dict[str, Any]:
    """Cut, replication and per-part loads of an assignment, by plain counting."""
    ps, pd = part[src], part[dst]
    cut = ps != pd
    n = len(part)
    halo = np.zeros(k, dtype=np.int64)
    pairs = np.unique(pd[cut] * n + src[cut])
    np.add.at(halo, pairs // n, 1)
    loads = {"owned": np.bincount(part, minlength=k), "train": np.bincount(
        part[train_idx], minlength=k), "edges": np.bincount(pd, minlength=k),
        "sampled": np.bincount(part, weights=sampled, minlength=k), "halo": halo}
    return {"cut_share": float(cut.mean()), "cut": int(cut.sum()),
            "replication": float((n + halo.sum()) / n),
            "max_over_mean": {c: float(v.max() / v.mean()) if v.mean() else 1.0
                              for c, v in loads.items()},
            "per_part": {c: [round(float(x), 1) for x in v] for c, v in loads.items()}}


def _status(field: str) -> int:
    """A ``/proc/self/status`` memory figure (``VmHWM``, ``VmRSS``) in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    return 0


def run_one(data: Path, k: int, method: str, work: Path) -> dict[str, Any]:
    """One assignment in this process: its quality, CPU seconds and peak memory."""
    import pymetis

    from gnnpar.datasets.graph import GraphDataset
    from gnnpar.partition.adjacency import group_in_edges, metis_graph
    from gnnpar.partition.assign import assign_parts
    from gnnpar.partition.config import PartitionConfig
    from gnnpar.partition.work import sampled_weight

    ds = GraphDataset.load(data)
    src, dst = np.asarray(ds.src), np.asarray(ds.dst)
    train = np.asarray(ds.train_idx)
    in_edges = group_in_edges(ds.num_nodes, src, dst, work)
    seeds = np.bincount(train, minlength=ds.num_nodes)
    sampled = sampled_weight(in_edges, seeds)
    graph = metis_graph(in_edges, work) if method == "metis-bare" else None
    Path("/proc/self/clear_refs").write_text("5")
    before = _status("VmRSS")
    t0 = time.process_time()
    if graph is not None:
        adjacency = pymetis.CSRAdjacency(graph.indptr, np.asarray(graph.indices, np.int64))
        part = np.asarray(pymetis.part_graph(k, adjacency, options=pymetis.Options(
            seed=0)).vertex_part, dtype=np.int64)
        info: dict[str, Any] = {}
    else:
        name = method.split("-")[0]
        if name == "kaminpar":
            import gnnpar.partition.kaminpar as kp

            kp._CONTEXT = method.split("-", 1)[1]  # the preset under test
        part, info = assign_parts(in_edges, PartitionConfig(num_parts=k, partitioner=name),
                                  train, work)
    cpu = time.process_time() - t0
    peak = _status("VmHWM")
    return {"cpu_s": round(cpu, 2), "peak_mib": round(peak / 2**20, 1),
            "bytes_per_edge": round((peak - before) / ds.num_edges, 1),
            "info": {k_: v for k_, v in info.items() if k_ != "imbalance"},
            **part_quality(src, dst, part, train, sampled, k)}


def run_dgl(data: Path, k: int, venv: Path, work: Path) -> dict[str, Any]:
    """DGL's ``partition_graph`` through ``_distdgl_worker.py`` (its own quality figures)."""
    python = venv / "bin" / "python"
    if not python.is_file():
        return {"skipped": f"no DGL venv at {venv} (bench_vs_distdgl.py builds one)"}
    out = work / "dgl"
    t0 = time.perf_counter()
    res = subprocess.run([str(python), str(HERE / "_distdgl_worker.py"), "partition",
                          "--dataset", str(data), "--name", "g", "--out", str(out),
                          "--num-parts", str(k)], capture_output=True, text=True,
                         env={**os.environ, "DGLBACKEND": "pytorch"}, cwd=work)
    if res.returncode:
        return {"skipped": f"DGL failed: {res.stderr.strip().splitlines()[-1:]}"}
    doc = json.loads(res.stdout.strip().splitlines()[-1])
    q = doc["quality"]
    return {"wall_s": round(time.perf_counter() - t0, 1), "cut_share": q["edge_cut_share"],
            "cut": q["edge_cut"], "replication": q["replication_factor"],
            "max_over_mean": {"owned": q["imbalance"]["nodes"],
                              "train": q["imbalance"]["train"],
                              "edges": q["imbalance"]["edges"],
                              "halo": q["imbalance"]["halo"]}}


# --------------------------------------------------------------------------------- main
def _child(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(dir=args.cache) as work:
        if args.one_method == "dgl":
            row = run_dgl(Path(args.one_data), args.one_k, args.dgl_venv, Path(work))
        else:
            row = run_one(Path(args.one_data), args.one_k, args.one_method, Path(work))
    print(json.dumps(row))
    return 0


def _row_text(graph: str, k: int, method: str, row: dict[str, Any], bare: int | None) -> str:
    if "skipped" in row:
        return f"| {graph} | {k} | {method} | skipped: {row['skipped']} |"
    mm = row["max_over_mean"]
    ratio = f"{row['cut'] / bare:.3f}x" if bare else "-"
    return (f"| {graph} | {k} | {method} | {100 * row['cut_share']:.2f}% | {ratio} | "
            f"{row['replication']:.3f} | "
            + " | ".join(f"{mm[c]:.3f}" if c in mm else "-" for c in COLUMNS)
            + f" | {row.get('cpu_s', row.get('wall_s', '-'))} | {row.get('peak_mib', '-')} | "
            f"{row.get('bytes_per_edge', '-')} |")


def main(argv: list[str] | None = None) -> int:
    """Run every (graph, parts, method) in a subprocess; print a table, write JSON."""
    p = ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--cache", type=Path, required=True,
                   help="directory for built graphs and scratch (not in git)")
    p.add_argument("--graphs", default="debian,pyimports,sbm,rmat")
    p.add_argument("--parts", default="2,4,8")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--nodes", type=int, default=100_000, help="nodes of SBM and R-MAT")
    p.add_argument("--small", action="store_true", help="SBM / R-MAT of 20k nodes, 2 and "
                   "4 parts, no strong preset")
    p.add_argument("--dgl-venv", type=Path, default=Path("/work/.distdgl-venv"))
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--one-data", help=argparse.SUPPRESS)
    p.add_argument("--one-k", type=int, help=argparse.SUPPRESS)
    p.add_argument("--one-method", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    if args.one_data:
        return _child(args)
    if args.small:
        args.nodes, args.parts = 20_000, "2,4"
        args.methods = args.methods.replace(",kaminpar-strong", "")
    methods = [m for m in args.methods.split(",") if m != "metis-bare"]
    rows: list[dict[str, Any]] = []
    print("| graph | K | method | cut | cut / bare METIS | replication | "
          + " | ".join(f"{c} max/mean" for c in COLUMNS) + " | CPU s | peak MiB | B/edge |")
    print("| " + " | ".join(["---"] * (9 + len(COLUMNS) - 1)) + " |")
    for graph in args.graphs.split(","):
        data = dataset_dir(args.cache, graph, args.nodes)
        print(f"<!-- {graph}: {data}; load average {os.getloadavg()} -->", flush=True)
        for k in (int(x) for x in args.parts.split(",")):
            bare = None
            for method in ["metis-bare", *methods]:
                res = subprocess.run(
                    [sys.executable, __file__, "--cache", str(args.cache), "--one-data",
                     str(data), "--one-k", str(k), "--one-method", method, "--dgl-venv",
                     str(args.dgl_venv)], capture_output=True, text=True)
                if res.returncode:
                    raise SystemExit(f"{graph} K={k} {method} failed:\n{res.stderr}")
                row = json.loads(res.stdout.strip().splitlines()[-1])
                if method == "metis-bare":
                    bare = row["cut"]
                rows.append({"graph": graph, "parts": k, "method": method, **row})
                print(_row_text(graph, k, method, row, bare), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"load_average": os.getloadavg(), "rows": rows},
                                        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

r"""The ``"work"`` balance against each rank's measured CPU per epoch (``rank_time_s``).

``python benchmarks/bench_work_model.py [--graphs sbm,rmat,debian] [--repeats 2]
[--workdir DIR] [--json OUT]``

For each graph (the SBM and R-MAT of ``bench_vs_distdgl.py``, 100k nodes, and the real
Debian package graph of ``real_graphs.py``) it writes 2-part partitions with
``gnnpar-partition``: METIS with the default balance for the training's fan-outs
(``--work-fanouts 15,10``), METIS with the old default (``--balance nodes,train,sampled``
for fan-outs 10,10, as partitions made before the work balance were), random and
contiguous parts.  On each it runs ``gnnpar-train PARTS --nproc 2`` as
``bench_vs_distdgl.py`` does (GraphSAGE 2x256, fan-outs 15,10, batch 1024, 3 epochs, one
thread per rank) and reads every rank's CPU of the steady epochs' training steps
(``rank_time_s.cpu`` of epochs 2-3) from the run record.

The prediction of a rank is its part's expected rows per epoch,
:func:`gnnpar.partition.work.work_weight` summed over the training nodes it owns (and any
it is handed, as the loader's even split hands them), and the steps it takes: CPU =
``a * rows + b * steps`` with ``a``, ``b`` fitted by least squares over every rank-epoch.
It prints, per partition, the measured and predicted max/mean of the ranks' CPU, the
edge cut, and the fit's errors.  Runs one at a time; the load is logged before each.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from gnnpar.config import ArgumentParser

HERE = Path(__file__).resolve().parent
FANOUTS, BATCH = (15, 10), 1024
LAYOUTS = {  # name: gnnpar-partition flags
    "metis-work": ["--work-fanouts", "15,10", "--work-batch-size", str(BATCH)],
    "metis-sampled-10,10": ["--balance", "nodes,train,sampled"],
    "random": ["--partitioner", "random"],
    "contiguous": ["--partitioner", "contiguous"],
}


def _tool(name: str) -> list[str]:
    exe = Path(sys.executable).parent / name
    return [str(exe)] if exe.exists() else [sys.executable, "-m",
                                            {"gnnpar-train": "gnnpar.train",
                                             "gnnpar-partition": "gnnpar.partition"}[name]]


def make_graph(name: str, work: Path) -> Path:
    """The graph's dataset directory (cached)."""
    out = work / name / "dataset"
    if (out / "dataset.json").is_file():
        return out
    if name in ("sbm", "rmat"):
        from gnnpar.datasets import synthetic

        make = synthetic.sbm if name == "sbm" else synthetic.rmat
        make(num_nodes=100_000, avg_degree=10.0, num_classes=16, feat_dim=100,
             homophily=0.3, seed=0).to_undirected().save(out, overwrite=True)
    else:
        sys.path.insert(0, str(HERE))
        import real_graphs

        real_graphs.load(name, work / "real").save(out, overwrite=True)
    return out


def partition(dataset: Path, layout: str, out: Path) -> dict[str, Any]:
    """``gnnpar-partition`` of ``dataset`` into 2 parts with ``layout``'s flags (cached)."""
    if not (out / "meta.json").is_file():
        subprocess.run([*_tool("gnnpar-partition"), str(dataset), "--num-parts", "2",
                        "--out", str(out), "--no-progress", "--overwrite", *LAYOUTS[layout]],
                       check=True, capture_output=True, text=True)
    meta: dict[str, Any] = json.loads((out / "meta.json").read_text())
    return meta


def train(parts: Path, out: Path, seed: int) -> list[dict[str, Any]]:
    """One ``gnnpar-train`` run's steady epochs (their record entries)."""
    argv = [*_tool("gnnpar-train"), str(parts), "--nproc", "2", "--model", "sage",
            "--hidden", "256", "--layers", "2", "--fanouts", ",".join(map(str, FANOUTS)),
            "--batch-size", str(BATCH), "--epochs", "3", "--lr", "0.003", "--dropout", "0.5",
            "--threads", "1", "--seed", str(seed), "--eval", "none", "--out", str(out),
            "--overwrite", "--no-progress"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    subprocess.run(argv, check=True, capture_output=True, text=True, env=env)
    record = json.loads((out / "record.json").read_text())
    epochs: list[dict[str, Any]] = record["epochs"][1:]
    return epochs


def predicted_rows(dataset: Path, parts: Path, workdir: Path) -> tuple[list[float], list[int]]:
    """Each part's expected rows per epoch and its training nodes (as owned)."""
    from gnnpar.loading.node import even_split
    from gnnpar.partition.adjacency import group_in_edges
    from gnnpar.partition.work import ROW_SCALE, work_weight

    meta = json.loads((dataset / "dataset.json").read_text())
    n = int(meta["num_nodes"])
    src, dst = np.load(dataset / "src.npy"), np.load(dataset / "dst.npy")
    seeds = np.bincount(np.load(dataset / "train_idx.npy"), minlength=n)
    rows = work_weight(group_in_edges(n, src, dst, workdir), seeds, FANOUTS, BATCH)
    rows = rows / ROW_SCALE
    part = np.empty(n, dtype=np.int64)
    for k in range(2):
        part[np.load(parts / f"part-{k}" / "orig_ids.npy")] = k
    per = [float(rows[part == k].sum()) for k in range(2)]
    train = [int(seeds[part == k].sum()) for k in range(2)]
    moves = even_split(train)  # seeds handed over carry their mean rows
    mean = [per[k] / max(train[k], 1) for k in range(2)]
    got = [sum(moves[s][d] * mean[s] for s in range(2)) for d in range(2)]
    return got, [sum(moves[s][d] for s in range(2)) for d in range(2)]


def main() -> None:
    """Partition, train, fit and report (module docstring)."""
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--graphs", default="sbm,rmat,debian")
    p.add_argument("--repeats", type=int, default=2, help="runs per partition")
    p.add_argument("--workdir", type=Path, default=Path("/work/bench-work-model"))
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    rows_out: list[dict[str, Any]] = []
    for name in args.graphs.split(","):
        dataset = make_graph(name, args.workdir)
        for layout in LAYOUTS:
            parts = args.workdir / name / f"parts-{layout}"
            meta = partition(dataset, layout, parts)
            scratch = args.workdir / name / f"scratch-{layout}"
            scratch.mkdir(parents=True, exist_ok=True)
            rows, seeds = predicted_rows(dataset, parts, scratch)
            for r in range(args.repeats):
                load = os.getloadavg()[0]
                t0 = time.perf_counter()
                epochs = train(parts, args.workdir / name / "run", seed=r)
                for e in epochs:
                    steps = max(-(-s // BATCH) for s in seeds)
                    rows_out.append({"graph": name, "layout": layout, "round": r,
                                     "epoch": e["epoch"], "cpu": e["rank_time_s"]["cpu"],
                                     "rows": rows, "seeds": seeds, "steps": steps,
                                     "cut": meta["quality"]["edge_cut"], "load": load})
                print(f"{name} {layout} round {r}: {time.perf_counter() - t0:.1f} s, load "
                      f"{load:.2f}, rank CPU {[e['rank_time_s']['cpu'] for e in epochs]}",
                      flush=True)
    a = np.array([[x["rows"][k], x["steps"]] for x in rows_out for k in range(2)])
    y = np.array([x["cpu"][k] for x in rows_out for k in range(2)])
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    pred = a @ coef
    print(f"\nCPU per rank and epoch = {coef[0] * 1e6:.2f} us per row + "
          f"{coef[1] * 1e3:.2f} ms per step; error max {np.abs(pred / y - 1).max():.1%}, "
          f"median {np.median(np.abs(pred / y - 1)):.1%} over {len(y)} rank-epochs")
    print(f"\n{'graph':8} {'partition':22} {'cut':>8} {'rows max/mean':>14} "
          f"{'CPU max/mean: measured (median, range)':>40} {'predicted':>10}")
    summary = []
    for name in args.graphs.split(","):
        for layout in LAYOUTS:
            sel = [x for x in rows_out if x["graph"] == name and x["layout"] == layout]
            if not sel:
                continue
            meas = [max(x["cpu"]) / np.mean(x["cpu"]) for x in sel]
            rows = sel[0]["rows"]
            pr = np.array(rows) * coef[0] + sel[0]["steps"] * coef[1]
            entry = {"graph": name, "layout": layout, "cut": sel[0]["cut"],
                     "rows_max_mean": max(rows) / np.mean(rows),
                     "cpu_max_mean_median": float(np.median(meas)),
                     "cpu_max_mean_range": [float(min(meas)), float(max(meas))],
                     "predicted_max_mean": float(pr.max() / pr.mean())}
            summary.append(entry)
            print(f"{name:8} {layout:22} {entry['cut']:>8,} {entry['rows_max_mean']:>14.3f} "
                  f"{entry['cpu_max_mean_median']:>26.3f} ({min(meas):.3f}-{max(meas):.3f}) "
                  f"{entry['predicted_max_mean']:>10.3f}")
    if args.json is not None:
        args.json.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M"),
                                         "fit_us_per_row": coef[0] * 1e6,
                                         "fit_ms_per_step": coef[1] * 1e3,
                                         "summary": summary, "epochs": rows_out}, indent=1))


if __name__ == "__main__":
    main()

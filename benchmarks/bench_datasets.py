"""Synthetic generation, saving and memory-mapping back: time and peak memory per stage.

Run::

    python benchmarks/bench_datasets.py                    # 1M nodes, avg degree 10 (10M edges)
    python benchmarks/bench_datasets.py --small            # 50k nodes
    python benchmarks/bench_datasets.py --nodes 200000 --avg-degree 16 --json out.json

For each generator (``sbm``, ``rmat``) every stage runs in its own subprocess, so that its
peak RSS (``VmHWM``) is its own; "added peak" is that peak minus the RSS after imports.

- **generate**: ``sbm(...)`` / ``rmat(...)``; reference: the bytes of the arrays it returns
  (the peak / dataset-bytes ratio is the generator's memory overhead);
- **save**: ``GraphDataset.save`` (validation + atomic write), in the same process right
  after generating; reference: bare ``np.save`` of the same arrays;
- **load (mmap)**: ``GraphDataset.load`` (memory-mapped, validated: features are scanned
  for NaN once) and one pass over every array; reference: ``np.load`` of every array into
  memory (no mmap, no validation) and the same pass.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from gnnpar.config import ArgumentParser

ARRAYS = ("src", "dst", "x", "y", "train_idx", "val_idx", "test_idx")
MIB = 1 << 20


def _status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def _cpu_s() -> float:
    """User + system CPU seconds of this process (less disturbed by a shared machine)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _pass_over(arrays: dict[str, np.ndarray]) -> float:
    """Read every byte once (a checksum-like sum), as a trainer's first epoch would."""
    return float(sum(np.asarray(a, dtype=np.float64).sum() if a.ndim == 1 else
                     sum(float(a[i:i + 65536].sum()) for i in range(0, len(a), 65536))
                     for a in arrays.values()))


def _stage(args: argparse.Namespace) -> dict[str, Any]:
    """Child process: run one stage, return its figures."""
    from gnnpar.datasets.graph import GraphDataset
    from gnnpar.datasets.synthetic import rmat, sbm

    base = _status_kib("VmRSS")
    out = Path(args.workdir) / args.gen
    res: dict[str, Any] = {}
    if args.stage == "generate":
        gen = {"sbm": sbm, "rmat": rmat}[args.gen]
        t, cpu = time.perf_counter(), _cpu_s()
        ds = gen(num_nodes=args.nodes, avg_degree=args.avg_degree, num_classes=16,
                 feat_dim=args.feat_dim, seed=0)
        res["generate_s"] = time.perf_counter() - t
        res["generate_cpu_s"] = _cpu_s() - cpu
        res["generate_peak_kib"] = _status_kib("VmHWM") - base
        res["num_edges"] = ds.num_edges
        res["dataset_bytes"] = sum(getattr(ds, a).nbytes for a in ARRAYS)
        t = time.perf_counter()
        ds.save(out, overwrite=True)
        res["save_s"] = time.perf_counter() - t
        res["save_peak_kib"] = _status_kib("VmHWM") - base
        ref = Path(args.workdir) / f"{args.gen}-npsave"
        ref.mkdir(exist_ok=True)
        t = time.perf_counter()
        for a in ARRAYS:
            np.save(ref / f"{a}.npy", getattr(ds, a), allow_pickle=False)
        res["ref_save_s"] = time.perf_counter() - t
    elif args.stage == "load":
        t = time.perf_counter()
        ds = GraphDataset.load(out)
        res["load_s"] = time.perf_counter() - t
        _pass_over({a: getattr(ds, a) for a in ARRAYS})
        res["load_pass_s"] = time.perf_counter() - t
        res["load_peak_kib"] = _status_kib("VmHWM") - base
    else:  # reference load: everything into memory
        t = time.perf_counter()
        arrays = {a: np.load(out / f"{a}.npy", allow_pickle=False) for a in ARRAYS}
        res["ref_load_s"] = time.perf_counter() - t
        _pass_over(arrays)
        res["ref_load_pass_s"] = time.perf_counter() - t
        res["ref_load_peak_kib"] = _status_kib("VmHWM") - base
    return res


def _run_stage(args: argparse.Namespace, gen: str, stage: str) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--stage", stage, "--gen", gen, "--workdir", args.workdir,
           "--nodes", str(args.nodes), "--avg-degree", str(args.avg_degree),
           "--feat-dim", str(args.feat_dim)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise SystemExit(f"stage {gen}/{stage} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _table(results: dict[str, dict[str, Any]]) -> str:
    rows = [("generator / stage", "gnnpar", "reference", "ratio")]
    for gen, r in results.items():
        mib = r["dataset_bytes"] / MIB
        rows += [
            (f"{gen}: edges", f"{r['num_edges']:,}", "", ""),
            (f"{gen}: generate wall s / CPU s", f"{r['generate_s']:.2f}",
             f"{r['generate_cpu_s']:.2f}", ""),
            (f"{gen}: generate added peak MiB / dataset MiB",
             f"{r['generate_peak_kib'] / 1024:.0f}", f"{mib:.0f}",
             f"{r['generate_peak_kib'] * 1024 / r['dataset_bytes']:.2f}"),
            (f"{gen}: save s / np.save s", f"{r['save_s']:.2f}", f"{r['ref_save_s']:.2f}",
             f"{r['save_s'] / r['ref_save_s']:.2f}"),
            (f"{gen}: save added peak MiB (incl. generate)", f"{r['save_peak_kib'] / 1024:.0f}",
             "", ""),
            (f"{gen}: open s (mmap / np.load)", f"{r['load_s']:.3f}", f"{r['ref_load_s']:.3f}",
             f"{r['load_s'] / r['ref_load_s']:.3f}"),
            (f"{gen}: open + one pass s", f"{r['load_pass_s']:.2f}",
             f"{r['ref_load_pass_s']:.2f}", f"{r['load_pass_s'] / r['ref_load_pass_s']:.2f}"),
            (f"{gen}: open + pass added peak MiB", f"{r['load_peak_kib'] / 1024:.0f}",
             f"{r['ref_load_peak_kib'] / 1024:.0f}",
             f"{r['load_peak_kib'] / max(r['ref_load_peak_kib'], 1):.2f}"),
        ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = []
    for row in rows:
        cells = zip(row, widths, strict=True)
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(cells)))
    return "\n".join(lines)


def main() -> None:
    p = ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=1_000_000)
    p.add_argument("--avg-degree", type=float, default=10.0)
    p.add_argument("--feat-dim", type=int, default=128)
    p.add_argument("--small", action="store_true", help="50k nodes")
    p.add_argument("--json", metavar="OUT", help="also write the figures as JSON")
    p.add_argument("--workdir", help="scratch directory (default: a temporary one)")
    p.add_argument("--gen", choices=("sbm", "rmat"), help=argparse.SUPPRESS)
    p.add_argument("--stage", choices=("generate", "load", "ref_load"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.stage:
        print(json.dumps(_stage(args)))
        return
    if args.small:
        args.nodes = 50_000
    own = args.workdir is None
    args.workdir = args.workdir or tempfile.mkdtemp(prefix="bench_datasets-")
    try:
        results = {}
        for gen in ("sbm", "rmat"):
            r: dict[str, Any] = {}
            for stage in ("generate", "load", "ref_load"):
                r.update(_run_stage(args, gen, stage))
            results[gen] = r
    finally:
        if own:
            shutil.rmtree(args.workdir, ignore_errors=True)
    print(f"nodes {args.nodes:,}, avg degree {args.avg_degree:g}, feat_dim {args.feat_dim}, "
          f"16 classes; added peak = VmHWM - RSS after imports")
    print(_table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"nodes": args.nodes, "avg_degree": args.avg_degree, "feat_dim": args.feat_dim,
             "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()

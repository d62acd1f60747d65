"""Start-up verification: how fast a rank reads and checks its part, cold and warm.

Every rank loads its part with ``verify`` before the first collective: the SHA-256 of every
part file, then the checks of :func:`gnnpar.partition.format.check_part` (dtypes, id
ranges, the CSC, finite features, no edge id twice).  This measures, per part of a
partition written here, the seconds and the rate (GB/s of part files) of

* ``cold``: the files evicted from the page cache first (``fsync`` then
  ``posix_fadvise(DONTNEED)``, these files only): disk reads included;
* ``warm``: the same again, from the page cache: the CPU cost alone;

and, warm, the share of each step: checksums, the structural checks, the finite-feature
pass and the edge-id sort.  ``docs/startup.md`` turns the figures into the start-up
time of a large partition (papers100M on 16 ranks).

    python benchmarks/bench_startup.py [--nodes N] [--feat-dim F] [--degree D] [--parts K]
                                       [--workdir DIR] [--json OUT]
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from gnnpar.config import ArgumentParser
from gnnpar.datasets.synthetic import sbm
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.format import (
    PartitionMeta,
    check_part,
    load_partition,
    part_bytes,
    part_dir_name,
    verify_checksums,
)
from gnnpar.partition.writer import partition_graph


def _evict(part: Path) -> None:
    """Drop the page-cache pages of the files of one part (and nothing else)."""
    for f in part.iterdir():
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _timed(fn: Any) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def measure(out: Path, k: int) -> dict[str, Any]:
    """Cold and warm verify of part ``k``, and the warm share of each step."""
    meta = PartitionMeta.load(out)
    nbytes = part_bytes(out, meta)[k]
    d = out / part_dir_name(k)
    _evict(d)
    cold = _timed(lambda: load_partition(out, k, verify=True))
    warm = _timed(lambda: load_partition(out, k, verify=True))
    part = load_partition(out, k, verify=False)
    steps = {
        "checksums": _timed(lambda: verify_checksums(out, meta, [k])),
        "structure": _timed(lambda: check_part(d, part, finite=False)),
    }
    steps["finite and edge ids"] = _timed(lambda: check_part(d, part, finite=True)) - \
        steps["structure"]
    e_id = np.asarray(part.edge_ids())
    steps["of which edge-id sort"] = _timed(lambda: np.sort(e_id))
    return {"part": k, "bytes": nbytes, "edges": len(e_id), "cold_s": cold, "warm_s": warm,
            "cold_gb_per_s": nbytes / cold / 1e9, "warm_gb_per_s": nbytes / warm / 1e9,
            "steps_s": steps}


def main() -> None:
    ap = ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--feat-dim", type=int, default=128)
    ap.add_argument("--degree", type=float, default=16.0)
    ap.add_argument("--parts", type=int, default=2)
    ap.add_argument("--workdir", help="where the partition is written (default: a temp dir)")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="gnnpar-startup-"))
    out = work / f"sbm-{args.nodes}-{args.parts}"
    if not (out / "meta.json").is_file():
        ds = sbm(num_nodes=args.nodes, avg_degree=args.degree, num_classes=8,
                 feat_dim=args.feat_dim, seed=0)
        partition_graph(ds, out, PartitionConfig(num_parts=args.parts, partitioner="random"))
    load = os.getloadavg()
    rows = [measure(out, k) for k in range(args.parts)]
    print(f"partition: {args.nodes:,} nodes, {args.feat_dim} fp32 features, degree "
          f"{args.degree}, {args.parts} parts; machine load {load[0]:.1f} on "
          f"{os.cpu_count()} cores")
    for r in rows:
        shares = ", ".join(f"{k} {v:.2f} s" for k, v in r["steps_s"].items())
        print(f"part {r['part']}: {r['bytes'] / 1e6:,.0f} MB, {r['edges']:,} edges; cold "
              f"{r['cold_s']:.2f} s = {r['cold_gb_per_s']:.2f} GB/s, warm {r['warm_s']:.2f} s "
              f"= {r['warm_gb_per_s']:.2f} GB/s ({shares})")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "date": time.strftime("%Y-%m-%d"), "load": load[0], "cores": os.cpu_count(),
            "nodes": args.nodes, "feat_dim": args.feat_dim, "degree": args.degree,
            "parts": rows}, indent=2))


if __name__ == "__main__":
    main()

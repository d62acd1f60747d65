"""The memory-bounded partition pipeline: chunked grouping against brute force, output bytes
independent of the budget and of the number of writers, and a child process's measured
peak RSS under a small ``--memory-budget``."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import gnnpar.partition.adjacency as adjacency
from gnnpar.datasets.graph import GraphDataset
from gnnpar.datasets.synthetic import rmat, sbm
from gnnpar.partition.adjacency import group_in_edges, metis_graph
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.writer import partition_graph

METHODS = ["metis", "random", "contiguous", "kaminpar", "stream"]


def multigraph(n: int = 700, e: int = 6000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Random edges with repeats, self-loops and isolated nodes (ids >= n - 50 unused)."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n - 50, e)
    dst = rng.integers(0, n - 50, e)
    src[:300], dst[:300] = src[300:600], dst[300:600]  # repeated edges
    dst[600:700] = src[600:700]  # self-loops
    return src, dst


def on_disk(tmp_path: Path, name: str, a: np.ndarray) -> np.ndarray:
    np.save(tmp_path / f"{name}.npy", a)
    return np.load(tmp_path / f"{name}.npy", mmap_mode="r")


@pytest.mark.parametrize("budget", [1 << 12, 1 << 30])
def test_grouping_equals_brute_force(tmp_path: Path, budget: int,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    n = 700
    src, dst = multigraph(n)
    monkeypatch.setattr(adjacency, "_MIN_ENTRIES", 64)  # many chunks and buckets
    monkeypatch.setattr(adjacency, "_OPEN_FILES", 3)  # buckets filled in several passes
    ins = group_in_edges(n, on_disk(tmp_path, "src", src), on_disk(tmp_path, "dst", dst),
                         tmp_path, budget)
    # Reference: every edge once, grouped by destination, sources ascending.
    order = np.lexsort((src, dst))
    np.testing.assert_array_equal(ins.indices, src[order])
    np.testing.assert_array_equal(ins.degree(), np.bincount(dst, minlength=n))
    # A + A^T without the diagonal or repeats, by scipy.
    a = sp.coo_matrix((np.ones(len(src)), (dst, src)), shape=(n, n)).tocsr()
    sym = ((a + a.T) != 0).astype(np.int8).tolil()
    sym.setdiag(0)
    ref = sym.tocsr()
    ref.eliminate_zeros()
    ref.sort_indices()
    und = metis_graph(ins, tmp_path, budget)
    np.testing.assert_array_equal(und.indptr, ref.indptr)
    np.testing.assert_array_equal(und.indices, ref.indices)
    assert not list(tmp_path.glob("*.bucket-*"))  # scratch buckets removed


def digests(out: Path) -> dict[str, str]:
    return {str(f.relative_to(out)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(out.rglob("*")) if f.is_file()}


@pytest.mark.parametrize("method", METHODS)
def test_output_bytes_do_not_depend_on_budget_or_writers(
        tmp_path: Path, method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if method == "kaminpar":
        pytest.importorskip("kaminpar")
    ds = sbm(num_nodes=3000, avg_degree=10, seed=3)
    ds = GraphDataset(num_nodes=ds.num_nodes, src=on_disk(tmp_path, "s", ds.src),
                      dst=on_disk(tmp_path, "d", ds.dst), x=on_disk(tmp_path, "x", ds.x),
                      y=ds.y, train_idx=ds.train_idx, val_idx=ds.val_idx,
                      test_idx=ds.test_idx, name=ds.name)
    partition_graph(ds, tmp_path / "whole",
                    PartitionConfig(num_parts=3, partitioner=method, halo_hops=2))
    monkeypatch.setattr(adjacency, "_MIN_ENTRIES", 64)
    partition_graph(ds, tmp_path / "chunked", PartitionConfig(
        num_parts=3, partitioner=method, halo_hops=2, memory_budget=0.001, workers=3))
    assert digests(tmp_path / "whole") == digests(tmp_path / "chunked")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no scratch left


def test_rmat_with_hubs_same_bytes_in_chunks(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # Hubs whose rows alone exceed a bucket: a bucket then holds that one row.
    ds = rmat(num_nodes=4096, avg_degree=12, seed=5)
    partition_graph(ds, tmp_path / "whole", PartitionConfig(num_parts=2))
    monkeypatch.setattr(adjacency, "_MIN_ENTRIES", 16)
    partition_graph(ds, tmp_path / "chunked",
                    PartitionConfig(num_parts=2, memory_budget=0.001, workers=2))
    assert digests(tmp_path / "whole") == digests(tmp_path / "chunked")


_CHILD = textwrap.dedent("""
    import json, resource, subprocess, sys
    proc = subprocess.run(sys.argv[1:], capture_output=True, text=True)
    print(json.dumps({"rc": proc.returncode, "err": proc.stderr[-2000:], "out": proc.stdout,
                      "peak": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}))
""")


def _peak_of(argv: list[str]) -> tuple[int, str]:
    """Peak RSS (bytes) of a ``gnnpar-partition`` run as the only child of a fresh
    interpreter: the kernel's high-water mark of each stage (the command resets it per
    stage and prints it), or of the process as ``getrusage`` saw it, whichever is larger."""
    done = subprocess.run([sys.executable, "-c", _CHILD, *argv], capture_output=True,
                          text=True, timeout=600, check=True)
    res = json.loads(done.stdout)
    assert res["rc"] == 0, res["err"]
    stages = [int(m[1].replace(",", "")) * 2**20
              for m in re.finditer(r"\s([\d,]+) MiB", res["out"])]
    assert stages, res["out"]
    return max(int(res["peak"]), *stages), str(res["out"])


def test_a_small_budget_bounds_the_measured_peak(tmp_path: Path) -> None:
    """Edges and features 8x the budget: the child's peak RSS stays within the stated bound.

    Baseline (the same command on a 100-node graph) + the O(N) id arrays + one part's
    extraction (O(E / K)) + 2x the budget (slack for the allocator and page granularity).
    """
    n, e, f = 400_000, 4_000_000, 16
    rng = np.random.default_rng(0)
    data = tmp_path / "data"
    data.mkdir()
    src = rng.integers(0, n, e)
    dst = np.sort(rng.integers(0, n, e))
    x = rng.standard_normal((n, f), dtype=np.float32)
    y = rng.integers(0, 4, n)
    GraphDataset(num_nodes=n, src=src, dst=dst, x=x, y=y, train_idx=np.arange(0, n, 2),
                 name="big").save(data / "big")
    del src, dst, x
    tiny = GraphDataset(num_nodes=100, src=np.arange(99), dst=np.arange(1, 100),
                        x=np.zeros((100, f), np.float32), y=np.zeros(100, np.int64),
                        train_idx=np.arange(50), name="tiny")
    tiny.save(data / "tiny")
    budget_gb = 0.008  # 8 MB, against 64 MB of edges and 26 MB of features
    cmd = [sys.executable, "-m", "gnnpar.partition"]
    opts = ["--num-parts", "4", "--partitioner", "random", "--memory-budget", str(budget_gb),
            "--no-progress"]
    baseline, _ = _peak_of([*cmd, str(data / "tiny"), *opts, "--out", str(tmp_path / "t")])
    peak, report = _peak_of([*cmd, str(data / "big"), *opts, "--out", str(tmp_path / "b")])
    id_arrays = 64 * n  # degree, row pointers, part, renumbering both ways, lookups
    one_part = 64 * e // 4  # a part's rows, positions, new ids, local ids, halo
    bound = baseline + id_arrays + one_part + 2 * budget_gb * 1e9
    print(f"peak {peak / 2**20:.0f} MiB, baseline {baseline / 2**20:.0f} MiB, bound "
          f"{bound / 2**20:.0f} MiB\n{report}")
    assert peak <= bound, (peak, baseline, bound, report)
    assert "group" in report and "B/edge" in report  # the stage table is printed

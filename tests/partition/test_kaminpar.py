"""KaMinPar backend: the ParHIP file, partition validity, cut against METIS, balance, errors.

References are independent of the code under test: KaMinPar's own reader for the file,
``pymetis`` for the cut, ``np.bincount`` for the balance, a CSR built from an edge list.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from gnnpar.datasets.graph import GraphDataset
from gnnpar.datasets.synthetic import rmat, sbm
from gnnpar.errors import ConfigError
from gnnpar.partition.adjacency import group_in_edges, metis_graph
from gnnpar.partition.balance import REFINE_SLACK
from gnnpar.partition.kaminpar import kaminpar_assignment, write_parhip

kaminpar = pytest.importorskip("kaminpar")
pymetis = pytest.importorskip("pymetis")

ALL = ("nodes", "train", "edges")
EPSILON = 0.03
BOUND = 1 + EPSILON + REFINE_SLACK  # every column after refinement (1.045)


def edge_list_csr(n: int, u: list[int], v: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric CSR of the undirected edges ``u[i] - v[i]``, neighbours sorted."""
    src = np.array(u + v, dtype=np.int64)
    dst = np.array(v + u, dtype=np.int64)
    order = np.lexsort((dst, src))
    return np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n))]), dst[order]


def cut(xadj: np.ndarray, adjncy: np.ndarray, part: np.ndarray) -> int:
    row = np.repeat(np.arange(len(xadj) - 1), np.diff(xadj))
    return int((part[row] != part[adjncy]).sum()) // 2


def max_over_mean(part: np.ndarray, column: np.ndarray, k: int) -> float:
    loads = np.bincount(part, weights=column, minlength=k)
    return float(loads.max() / loads.mean())


def memmapped_graph(ds: GraphDataset, root: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(xadj, adjncy, weights [N, 3])`` of ``ds``, saved and memory-mapped back."""
    root.mkdir()
    in_edges = group_in_edges(ds.num_nodes, ds.src, ds.dst, root)
    graph = metis_graph(in_edges, root)
    train = np.zeros(ds.num_nodes, dtype=np.int64)
    train[ds.train_idx] = 1
    weights = np.stack([np.ones(ds.num_nodes, dtype=np.int64), train,
                        np.bincount(ds.dst, minlength=ds.num_nodes)], axis=1)
    arrays = {"xadj": graph.indptr, "adjncy": np.asarray(graph.indices, dtype=np.int64),
              "weights": weights}
    for name, array in arrays.items():
        np.save(root / f"{name}.npy", array)
    return tuple(np.load(root / f"{name}.npy", mmap_mode="r") for name in arrays)


@pytest.fixture(scope="module")
def graphs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[np.ndarray, ...]]:
    root = tmp_path_factory.mktemp("graphs")
    # 20,000 nodes, ~100k undirected edges; R-MAT: 31% isolated nodes, max degree 904.
    return {name: memmapped_graph(make(num_nodes=20_000, avg_degree=10, num_classes=8,
                                       feat_dim=1, seed=0), root / name)
            for name, make in (("sbm", sbm), ("rmat", rmat))}


@pytest.fixture()
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "work").mkdir()
    return tmp_path / "work"


@pytest.mark.parametrize("chunk", [1 << 22, 3])
@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("top_weight", [6, 2**40])  # 2**40: the 64-bit weight layout
def test_parhip_file_reads_back_as_the_same_graph(tmp_path: Path, chunk: int, compress: bool,
                                                  top_weight: int) -> None:
    # Nodes 4 and 7 are isolated.
    xadj, adjncy = edge_list_csr(8, [0, 0, 1, 2, 5, 3], [1, 2, 2, 3, 6, 6])
    vwgt = np.array([3, 1, 4, 1, 5, 9, 2, top_weight], dtype=np.int64)
    path = tmp_path / "g.parhip"
    write_parhip(path, xadj, adjncy, vwgt, chunk=chunk)
    graph = kaminpar.load_graph(str(path), kaminpar.GraphFileFormat.PARHIP, compress=compress)
    assert (graph.n(), graph.m()) == (8, len(adjncy))
    assert graph.is_node_weighted() and not graph.is_edge_weighted()
    for u in range(8):
        row = adjncy[xadj[u]:xadj[u + 1]].tolist()
        assert graph.degree(u) == len(row)
        assert sorted(graph.neighbors(u)) == [(v, 1) for v in row]
        assert graph.node_weight(u) == vwgt[u]


@pytest.mark.parametrize("name", ["sbm", "rmat"])
def test_partition_is_valid_and_leaves_no_file(graphs: dict, name: str, workdir: Path) -> None:
    xadj, adjncy, weights = graphs[name]
    part, info = kaminpar_assignment(xadj, adjncy, 8, weights, ALL, seed=0, threads=1,
                                     workdir=workdir, repeats=1)
    assert part.dtype == np.int64 and part.shape == (len(xadj) - 1,)
    assert part.min() >= 0 and part.max() < 8
    assert (np.bincount(part, minlength=8) > 0).all()
    assert json.loads(json.dumps(info)) == info
    assert list(workdir.iterdir()) == []


@pytest.mark.parametrize("name", ["sbm", "rmat"])
def test_cut_within_5_percent_of_metis(graphs: dict, name: str, workdir: Path) -> None:
    # Balancing node counts only, K = 8, measured with the "eco" preset: SBM 55,345 vs
    # METIS 56,701 cut edges (0.976x), R-MAT 42,565 vs 46,992 (0.906x). The "default"
    # preset, 3x faster, cut up to 1.10x METIS's on this R-MAT graph over 6 seeds.
    xadj, adjncy, _ = graphs[name]
    n = len(xadj) - 1
    part, _ = kaminpar_assignment(xadj, adjncy, 8, np.ones((n, 1), dtype=np.int64),
                                  ("nodes",), seed=0, threads=1, workdir=workdir)
    metis = pymetis.part_graph(8, pymetis.CSRAdjacency(np.asarray(xadj), np.asarray(adjncy)),
                               options=pymetis.Options(seed=0))
    assert max_over_mean(part, np.ones(n), 8) <= BOUND
    assert cut(xadj, adjncy, part) <= 1.05 * cut(xadj, adjncy, np.asarray(metis.vertex_part))


def test_balanced_columns_cut_as_few_edges_as_multi_constraint_metis(graphs: dict,
                                                                      workdir: Path) -> None:
    # Measured: 55,328 vs 56,652 cut edges (0.977x), every column within 1.03 (METIS:
    # 1.066). On the R-MAT graph KaMinPar cuts 1.095x METIS's 44,419, but METIS leaves
    # 1.94x the mean edges in a part, KaMinPar 1.012x.
    xadj, adjncy, weights = graphs["sbm"]
    part, _ = kaminpar_assignment(xadj, adjncy, 8, weights, ALL, seed=0, threads=1,
                                  workdir=workdir)
    metis = pymetis.part_graph(8, pymetis.CSRAdjacency(np.asarray(xadj), np.asarray(adjncy)),
                               vweights=np.asarray(weights).reshape(-1),
                               options=pymetis.Options(seed=0))
    assert cut(xadj, adjncy, part) <= 1.05 * cut(xadj, adjncy, np.asarray(metis.vertex_part))


@pytest.mark.parametrize("name", ["sbm", "rmat"])
@pytest.mark.parametrize("k", [4, 16])
def test_every_column_balanced_after_rebalancing(graphs: dict, name: str, k: int,
                                                 workdir: Path) -> None:
    # The module docstring's bound: 1 + epsilon + REFINE_SLACK after refinement, up to
    # 0.003 more where the greedy pass stops in a local minimum. Without the pass the
    # R-MAT parts hold up to 1.69x (K = 4) and 1.63x (K = 16) the mean nodes.
    xadj, adjncy, weights = graphs[name]
    part, info = kaminpar_assignment(xadj, adjncy, k, weights, ALL, seed=0, threads=1,
                                     workdir=workdir, repeats=1)
    for c, quantity in enumerate(ALL):
        ratio = max_over_mean(part, weights[:, c], k)
        assert ratio <= BOUND + 0.003, quantity
        assert info["imbalance"][quantity] == pytest.approx(ratio, abs=1e-6)
    if name == "rmat":
        assert info["rebalanced_moves"] > 0


def test_same_seed_same_partition_with_one_thread(graphs: dict, workdir: Path) -> None:
    xadj, adjncy, weights = graphs["rmat"]
    first, _ = kaminpar_assignment(xadj, adjncy, 8, weights, ALL, seed=5, threads=1,
                                   workdir=workdir)
    again, _ = kaminpar_assignment(xadj, adjncy, 8, weights, ALL, seed=5, threads=1,
                                   workdir=workdir)
    np.testing.assert_array_equal(first, again)


def test_repeats_keep_the_run_that_cuts_fewest_edges(graphs: dict, workdir: Path) -> None:
    # Run r of seed s is KaMinPar seeded 3 * s + r: here the single runs of seeds 0, 1, 2.
    xadj, adjncy, weights = graphs["sbm"]
    single = [kaminpar_assignment(xadj, adjncy, 4, weights, ALL, seed=r, threads=1,
                                  workdir=workdir, repeats=1)[0] for r in range(3)]
    cuts = [cut(xadj, adjncy, part) for part in single]
    assert len(set(cuts)) > 1  # the seeds differ, so the choice matters
    best, info = kaminpar_assignment(xadj, adjncy, 4, weights, ALL, seed=0, threads=1,
                                     workdir=workdir, repeats=3)
    assert info["repeats"] == 3 and info["cuts"] == cuts
    np.testing.assert_array_equal(best, single[int(np.argmin(cuts))])


def test_small_and_edgeless_graphs(workdir: Path) -> None:
    # K = N on a path: one node per part.
    xadj, adjncy = edge_list_csr(10, list(range(9)), list(range(1, 10)))
    part, _ = kaminpar_assignment(xadj, adjncy, 10, np.ones((10, 1), dtype=np.int64),
                                  ("nodes",), seed=0, threads=1, workdir=workdir)
    assert sorted(part.tolist()) == list(range(10))
    # No edges at all: 10 isolated nodes in 3 parts of 3, 3 and 4.
    part, _ = kaminpar_assignment(np.zeros(11, dtype=np.int64), np.zeros(0, dtype=np.int64), 3,
                                  np.ones((10, 1), dtype=np.int64), ("nodes",), seed=0,
                                  threads=1, workdir=workdir)
    assert sorted(np.bincount(part, minlength=3).tolist()) == [3, 3, 4]


def test_one_part_does_not_call_kaminpar(monkeypatch: pytest.MonkeyPatch,
                                         workdir: Path) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("KaMinPar called")

    monkeypatch.setattr(kaminpar, "load_graph", fail)
    monkeypatch.setattr(kaminpar, "KaMinPar", fail)
    xadj, adjncy = edge_list_csr(3, [0, 1], [1, 2])
    part, info = kaminpar_assignment(xadj, adjncy, 1, np.ones((3, 1), dtype=np.int64),
                                     ("nodes",), seed=0, threads=1, workdir=workdir)
    np.testing.assert_array_equal(part, np.zeros(3, dtype=np.int64))
    assert info["imbalance"] == {"nodes": 1.0}


def test_temporary_file_removed_when_loading_fails(monkeypatch: pytest.MonkeyPatch,
                                                   workdir: Path) -> None:
    def fail(path: str, *args: object, **kwargs: object) -> None:
        assert Path(path).parent == workdir and Path(path).stat().st_size > 0
        raise ValueError("Failed to load graph")

    monkeypatch.setattr(kaminpar, "load_graph", fail)
    xadj, adjncy = edge_list_csr(3, [0, 1], [1, 2])
    with pytest.raises(ValueError, match="Failed to load graph"):
        kaminpar_assignment(xadj, adjncy, 2, np.ones((3, 1), dtype=np.int64), ("nodes",),
                            seed=0, threads=1, workdir=workdir)
    assert list(workdir.iterdir()) == []


def test_missing_kaminpar_names_the_fix(monkeypatch: pytest.MonkeyPatch, workdir: Path) -> None:
    monkeypatch.setitem(sys.modules, "kaminpar", None)
    xadj, adjncy = edge_list_csr(3, [0, 1], [1, 2])
    with pytest.raises(ConfigError) as err:
        kaminpar_assignment(xadj, adjncy, 2, np.ones((3, 1), dtype=np.int64), ("nodes",),
                            seed=0, threads=1, workdir=workdir)
    assert err.value.field == "partition.partitioner"
    assert "pip install 'gnnpar[kaminpar]'" in str(err.value)
    assert "--partitioner metis" in str(err.value)


@pytest.mark.parametrize("name", ["threads", "repeats"])
def test_threads_or_repeats_below_one_is_a_config_error(workdir: Path, name: str) -> None:
    xadj, adjncy = edge_list_csr(3, [0, 1], [1, 2])
    with pytest.raises(ConfigError, match=f"{name}=0") as err:
        kaminpar_assignment(xadj, adjncy, 2, np.ones((3, 1), dtype=np.int64), ("nodes",),
                            seed=0, workdir=workdir, **{"threads": 1, "repeats": 1, name: 0})
    assert err.value.field == f"partition.{name}"

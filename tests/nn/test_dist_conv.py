"""DistConv on partitioned graphs equals single-process PyG on the whole graph.

Each world size (1, 2, 4) is one spawned run (the ``nn_run`` fixture) covering two
graphs (a directed multigraph with self-loops and isolated nodes on random parts; a
"feed-forward" graph whose part 0 has no halo), five models (GCNConv with and without
self-loops, SAGEConv, GATConv with 2 heads, PyG's ``models.GCN``) and two dtypes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from gnnpar.partition.format import PartitionMeta, load_partition
from tests.helpers import nn_cases as cases

GRAPHS = ("directed", "feedforward")


def _compare(run: dict[str, Any], graph: str, key: str, ref_kind: str, dtype: str) -> None:
    cache = run.setdefault("reference_cache", {})
    if (graph, ref_kind, dtype) not in cache:
        cache[graph, ref_kind, dtype] = cases.reference(run["datasets"][graph], ref_kind, dtype,
                                                        run["weights"][graph])
    ref_out, ref_grads = cache[graph, ref_kind, dtype]
    tol = cases.TOL[dtype]
    for rank, res in enumerate(run["ranks"]):
        got = res["exact"][graph]["runs"][key]
        orig = res["exact"][graph]["orig_ids"]
        assert got["out"].shape == (len(orig), cases.CLASSES)
        diff = np.abs(got["out"] - ref_out.numpy()[orig]).max(initial=0.0)
        assert diff <= tol, f"{graph} {key} rank {rank}: outputs differ by {diff}"
        assert got["grads"].keys() == ref_grads.keys()
        for name, g in ref_grads.items():
            d = np.abs(got["grads"][name] - g.numpy()).max()
            assert d <= tol, f"{graph} {key} rank {rank}: grad of {name} differs by {d}"


@pytest.mark.parametrize("graph", GRAPHS)
@pytest.mark.parametrize("dtype", sorted(cases.DTYPES))
def test_forward_and_weight_grads_equal_whole_graph_pyg(nn_run: dict[str, Any], graph: str,
                                                        dtype: str) -> None:
    for kind in cases.KINDS:
        _compare(nn_run, graph, f"{kind}/{dtype}", kind, dtype)


@pytest.mark.parametrize("graph", GRAPHS)
def test_boundary_sampling_with_p1_equals_exact(nn_run: dict[str, Any], graph: str) -> None:
    for kind in cases.KINDS:
        _compare(nn_run, graph, f"{kind}/bns_p1", kind, "float64")


def test_partitions_cover_the_edge_cases(nn_run: dict[str, Any]) -> None:
    world, dirs = nn_run["world"], nn_run["dirs"]
    halos = [load_partition(dirs["feedforward"], k).num_halo for k in range(world)]
    assert halos[0] == 0
    if world > 1:
        assert min(halos[1:]) > 0
        assert all(load_partition(dirs["directed"], k).num_halo > 0 for k in range(world))
    directed = nn_run["datasets"]["directed"]
    assert (directed.src == directed.dst).any()
    assert (directed.in_degree()[-6:] == 0).all()


@pytest.mark.parametrize("graph", GRAPHS)
def test_halo_byte_counters_equal_the_analytic_count(nn_run: dict[str, Any],
                                                     graph: str) -> None:
    world, part_dir = nn_run["world"], nn_run["dirs"][graph]
    offsets = np.asarray(PartitionMeta.load(part_dir).offsets)
    halo_gids = [np.asarray(load_partition(part_dir, k).halo_gids) for k in range(world)]
    halo_rows = [len(h) for h in halo_gids]
    send_rows = [sum(int((np.searchsorted(offsets, h, side="right") - 1 == r).sum())
                     for h in halo_gids) for r in range(world)]
    zero = {"bytes_sent": 0, "bytes_recv": 0}
    for key in (f"{k}/{d}" for k in cases.KINDS for d in cases.DTYPES):
        kind, dtype = key.split("/")
        elem = torch.finfo(cases.DTYPES[dtype]).bits // 8
        if "gcn" in kind:  # GCN exchanges lin(x): forward and backward at both layers
            fwd = bwd = cases.HIDDEN + cases.CLASSES
        else:  # the layer inputs; the first one needs no gradient
            fwd, bwd = cases.FEAT + cases.HIDDEN, cases.HIDDEN
        for r, res in enumerate(nn_run["ranks"]):
            stats = res["exact"][graph]["runs"][key]["stats"]
            halo, grad = stats.get("halo", zero), stats.get("halo_grad", zero)
            assert halo["bytes_sent"] == send_rows[r] * fwd * elem, (key, r)
            assert halo["bytes_recv"] == halo_rows[r] * fwd * elem, (key, r)
            assert grad["bytes_sent"] == halo_rows[r] * bwd * elem, (key, r)
            assert grad["bytes_recv"] == send_rows[r] * bwd * elem, (key, r)

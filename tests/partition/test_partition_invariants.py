"""Property-based: every invariant of the partition directory, on random graphs.

Graphs include isolated nodes, self-loops, duplicate edges, directed edges and several
components; K ranges from 1 to N.  Each invariant is rechecked by brute force
(``partition_reference``) and by ``verify_partition``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gnnpar.datasets.graph import GraphDataset
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.format import load_partition
from gnnpar.partition.verify import verify_partition
from gnnpar.partition.writer import partition_graph
from tests.helpers.partition_reference import check_partition


@st.composite
def graphs(draw: st.DrawFn, max_nodes: int = 30, max_edges: int = 90) -> GraphDataset:
    n = draw(st.integers(1, max_nodes))
    num_edges = draw(st.integers(0, max_edges))
    ids = st.integers(0, n - 1)
    src = np.array(draw(st.lists(ids, min_size=num_edges, max_size=num_edges)), dtype=np.int64)
    dst = np.array(draw(st.lists(ids, min_size=num_edges, max_size=num_edges)), dtype=np.int64)
    if draw(st.booleans()):  # undirected: both directions (duplicates and loops stay)
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    if draw(st.booleans()):  # sorted by destination, as saved datasets are
        order = np.lexsort((src, dst))
        src, dst = src[order], dst[order]
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    feat_dim = draw(st.sampled_from([0, 3]))
    x = rng.standard_normal((n, feat_dim)).astype(np.float32) if draw(st.booleans()) else None
    y = rng.integers(0, 3, n) if draw(st.booleans()) else None
    perm = rng.permutation(n)
    cut = sorted(draw(st.lists(st.integers(0, n), min_size=3, max_size=3)))
    return GraphDataset(num_nodes=n, src=src, dst=dst, x=x, y=y,
                        train_idx=np.sort(perm[: cut[0]]), val_idx=np.sort(perm[cut[0]:cut[1]]),
                        test_idx=np.sort(perm[cut[1]:cut[2]]), name="random",
                        num_classes=3 if y is not None else None)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ds=graphs(), data=st.data())
def test_every_invariant_on_random_graphs(ds: GraphDataset, data: st.DataObject) -> None:
    k = data.draw(st.one_of(st.just(1), st.just(ds.num_nodes), st.integers(1, ds.num_nodes)))
    method = data.draw(st.sampled_from(["metis", "random", "contiguous"]))
    hops = data.draw(st.sampled_from([1, 1, 2, 3]))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "parts"
        meta = partition_graph(ds, out,
                               PartitionConfig(num_parts=k, partitioner=method,
                                               halo_hops=hops, seed=3))
        assert meta.num_parts == k and meta.halo_hops == hops
        check_partition(out, ds)
        verify_partition(out, ds)
        part = load_partition(out, k - 1)  # the reader the runtime uses accepts it
        assert part.num_owned == meta.offsets[k] - meta.offsets[k - 1]


@settings(max_examples=25, deadline=None)
@given(ds=graphs(), data=st.data())
def test_precomputed_assignment_is_respected(ds: GraphDataset, data: st.DataObject) -> None:
    k = data.draw(st.integers(1, ds.num_nodes))
    # Every part used at least once, the rest random.
    rest = data.draw(st.lists(st.integers(0, k - 1), min_size=ds.num_nodes - k,
                              max_size=ds.num_nodes - k))
    assignment = np.random.default_rng(len(rest)).permutation(
        np.concatenate([np.arange(k), np.array(rest, dtype=np.int64)]))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "parts"
        meta = partition_graph(ds, out, PartitionConfig(num_parts=k), assignment=assignment)
        assert meta.partitioner == {"method": "precomputed"}
        for p in range(k):
            orig = np.load(out / f"part-{p}" / "orig_ids.npy")
            assert orig.tolist() == np.flatnonzero(assignment == p).tolist()
        check_partition(out, ds)


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ds=graphs(max_nodes=120, max_edges=600), data=st.data())
def test_every_invariant_on_larger_random_graphs(ds: GraphDataset, data: st.DataObject) -> None:
    test_every_invariant_on_random_graphs.hypothesis.inner_test(ds, data)  # type: ignore[attr-defined]

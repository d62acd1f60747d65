"""The ``"sampled"`` and ``"work"`` weights against brute-force counts over a small graph."""

from __future__ import annotations

import numpy as np

from gnnpar.datasets.synthetic import rmat
from gnnpar.partition.adjacency import CSR
from gnnpar.partition.work import ROW_SCALE, sampled_weight, work_weight


def brute_force(n: int, src: list[int], dst: list[int], seeds: list[int],
                fanouts: tuple[int, int]) -> list[float]:
    """Expected edges sampled for each seed alone (no other seed shares its batch)."""
    ins: dict[int, list[int]] = {v: [] for v in range(n)}
    for s, d in zip(src, dst, strict=True):
        ins[d].append(s)
    out = []
    for v in range(n):
        nbrs = ins[v]
        first = min(len(nbrs), fanouts[0])
        # Each in-neighbour is drawn with probability first / len(nbrs), then expanded.
        second = sum(min(len(ins[u]), fanouts[1]) for u in nbrs) * first / max(len(nbrs), 1)
        out.append(seeds[v] * (first + second))
    return out


def test_weight_matches_brute_force_when_batches_share_nothing() -> None:
    ds = rmat(num_nodes=300, avg_degree=6, num_classes=2, feat_dim=1, seed=1)
    indptr, indices = ds.csc()
    seeds = np.bincount(np.asarray(ds.train_idx), minlength=ds.num_nodes)
    # A batch of 1e-9 seeds: every draw alone in its batch, so nothing is deduplicated.
    got = sampled_weight(CSR(indptr, indices), seeds, (5, 3), batch_size=1e-9,  # type: ignore[arg-type]
                         chunk=7)
    want = brute_force(ds.num_nodes, np.asarray(ds.src).tolist(), np.asarray(ds.dst).tolist(),
                       seeds.tolist(), (5, 3))
    np.testing.assert_allclose(got, want, atol=0.5 + 1e-6)  # the weight is rounded
    assert (got[seeds == 0] == 0).all() and got.max() <= 5 * (1 + 3)


def test_shared_batches_cost_less_and_hubs_no_more_than_the_fanouts() -> None:
    ds = rmat(num_nodes=2000, avg_degree=8, num_classes=2, feat_dim=1, seed=0)
    indptr, indices = ds.csc()
    csr = CSR(indptr, indices)
    seeds = np.bincount(np.asarray(ds.train_idx), minlength=ds.num_nodes)
    alone = sampled_weight(csr, seeds, (10, 10), batch_size=1e-9)  # type: ignore[arg-type]
    shared = sampled_weight(csr, seeds, (10, 10), batch_size=512)
    assert (shared <= alone).all() and shared.sum() < 0.9 * alone.sum()
    hub = int(np.argmax(ds.in_degree()))
    assert ds.in_degree()[hub] > 100 and shared[hub] <= 10 * 11


def brute_force_rows(n: int, src: list[int], dst: list[int], seeds: list[int],
                     fanouts: tuple[int, ...]) -> list[float]:
    """Expected distinct nodes of hops 0 .. L-1 for each seed alone in its batch.

    Without replacement each of ``v``'s ``d`` in-neighbours is drawn with probability
    ``min(d, f) / d``; alone in its batch a seed's tree has no repeats to share, so the
    rows are 1 (the seed) plus the expected draws of every hop but the last.
    """
    ins: dict[int, list[int]] = {v: [] for v in range(n)}
    for s, d in zip(src, dst, strict=True):
        ins[d].append(s)

    def rows(v: int, hop: int) -> float:  # v's row and its subtree's, hops hop .. L-1
        if hop == len(fanouts):
            return 0.0
        nbrs = ins[v]
        p = min(len(nbrs), fanouts[hop]) / max(len(nbrs), 1)
        return 1.0 + p * sum(rows(u, hop + 1) for u in nbrs)

    return [seeds[v] * rows(v, 0) for v in range(n)]


def test_work_matches_brute_force_when_batches_share_nothing() -> None:
    ds = rmat(num_nodes=300, avg_degree=6, num_classes=2, feat_dim=1, seed=1)
    indptr, indices = ds.csc()
    seeds = np.bincount(np.asarray(ds.train_idx), minlength=ds.num_nodes)
    for fanouts in ((5, 3), (4, 3, 2)):
        got = work_weight(CSR(indptr, indices), seeds, fanouts, batch_size=1e-9,  # type: ignore[arg-type]
                          chunk=7)
        want = brute_force_rows(ds.num_nodes, np.asarray(ds.src).tolist(),
                                np.asarray(ds.dst).tolist(), seeds.tolist(), fanouts)
        np.testing.assert_allclose(got, np.asarray(want) * ROW_SCALE, atol=0.5 + 1e-6)
        assert (got[seeds == 0] == 0).all()


def test_hub_seeds_weigh_more_work_and_sharing_costs_less() -> None:
    ds = rmat(num_nodes=2000, avg_degree=8, num_classes=2, feat_dim=1, seed=0)
    indptr, indices = ds.csc()
    csr = CSR(indptr, indices)
    seeds = np.ones(ds.num_nodes)
    alone = work_weight(csr, seeds, (10, 10), batch_size=1e-9)  # type: ignore[arg-type]
    shared = work_weight(csr, seeds, (10, 10), batch_size=512)
    assert (shared <= alone).all() and shared.sum() < alone.sum()
    deg = ds.in_degree()
    # Alone in a batch a seed computes 1 + min(d, 10) rows: more for a hub, at most 11.
    hub, leaf = int(np.argmax(deg)), int(np.flatnonzero(deg == 1)[0])
    assert alone[hub] == 11 * ROW_SCALE and alone[leaf] == 2 * ROW_SCALE

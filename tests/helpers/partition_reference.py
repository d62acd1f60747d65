"""Brute-force reference checks of a partition directory, in plain Python over small graphs.

Independent of the writer and of ``gnnpar.partition.verify``: reads the ``.npy`` files with
numpy and recomputes every invariant with Python loops, dicts and Counters.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from gnnpar.datasets.graph import GraphDataset

ARRAYS = ("orig_ids", "halo_gids", "indptr", "indices", "in_degree", "adj_complete", "feat",
          "label", "train_idx", "val_idx", "test_idx")


def read_parts(out: Path) -> tuple[dict, list[dict[str, np.ndarray]]]:
    meta = json.loads((out / "meta.json").read_text())
    parts = [{a: np.load(out / f"part-{k}" / f"{a}.npy", allow_pickle=False) for a in ARRAYS}
             for k in range(meta["num_parts"])]
    return meta, parts


def hop_distances(num_nodes: int, edges: list[tuple[int, int]], start: set[int],
                  max_hops: int) -> dict[int, int]:
    """Hops from every node to ``start`` along edge direction (src -> dst), up to max_hops."""
    preds: dict[int, set[int]] = defaultdict(set)
    for s, d in edges:
        preds[d].add(s)
    dist = {v: 0 for v in start}
    frontier = set(start)
    for h in range(1, max_hops + 1):
        nxt = {u for v in frontier for u in preds[v] if u not in dist}
        for u in nxt:
            dist[u] = h
        frontier = nxt
    return dist


def check_partition(out: Path, ds: GraphDataset) -> None:
    """Assert every invariant of the partition ``out`` of ``ds`` by brute force."""
    meta, parts = read_parts(out)
    n, k_parts, hops = ds.num_nodes, meta["num_parts"], meta["halo_hops"]
    edges = list(zip(np.asarray(ds.src).tolist(), np.asarray(ds.dst).tolist(), strict=True))
    offsets = meta["offsets"]
    # Ownership: offsets cover 0..N monotonically, every part non-empty, orig ids a permutation.
    assert offsets[0] == 0 and offsets[-1] == n and len(offsets) == k_parts + 1
    assert all(offsets[i] < offsets[i + 1] for i in range(k_parts))
    new_to_orig: list[int] = []
    for k, p in enumerate(parts):
        assert len(p["orig_ids"]) == offsets[k + 1] - offsets[k]
        assert list(p["orig_ids"]) == sorted(p["orig_ids"])  # original order kept
        new_to_orig += p["orig_ids"].tolist()
    assert sorted(new_to_orig) == list(range(n))
    orig_to_new = {o: g for g, o in enumerate(new_to_orig)}
    owner = {o: k for k, p in enumerate(parts) for o in p["orig_ids"].tolist()}
    in_deg = Counter(d for _, d in edges)
    in_edges: dict[int, Counter[int]] = defaultdict(Counter)
    for s, d in edges:
        in_edges[d][s] += 1
    stored_edges: Counter[tuple[int, int]] = Counter()
    for k, p in enumerate(parts):
        lo = offsets[k]
        n_owned, halo = len(p["orig_ids"]), p["halo_gids"].tolist()
        n_local = n_owned + len(halo)

        def orig_of_local(i: int, p: dict = p, lo: int = lo, n_owned: int = n_owned,
                          halo: list = halo) -> int:
            return new_to_orig[lo + i] if i < n_owned else new_to_orig[halo[i - n_owned]]

        assert len(p["indptr"]) == n_local + 1 and p["indptr"][0] == 0
        assert p["indptr"][-1] == len(p["indices"])
        assert all(0 <= i < n_local for i in p["indices"].tolist())
        # Halo: exactly the nodes within `hops` hops (halo_hops = 1: the sources of
        # in-edges from other parts); complete exactly within hops - 1.
        dist = hop_distances(n, edges, set(p["orig_ids"].tolist()), hops)
        want_halo = sorted(orig_to_new[v] for v, h in dist.items() if h > 0)
        assert halo == want_halo
        if hops == 1:
            cross = {orig_to_new[s] for s, d in edges if owner[d] == k and owner[s] != k}
            assert set(halo) == cross
        assert p["adj_complete"].tolist() == [True] * n_owned + [
            dist[new_to_orig[g]] < hops for g in halo]
        for i in range(n_local):
            v = orig_of_local(i)
            row = p["indices"][p["indptr"][i]:p["indptr"][i + 1]].tolist()
            srcs = Counter(orig_of_local(j) for j in row)
            assert p["in_degree"][i] == in_deg[v]
            if p["adj_complete"][i]:
                assert srcs == in_edges[v]
            else:
                assert not row
            if i < n_owned:
                for s, c in srcs.items():
                    stored_edges[(s, v)] += c
        # Features, labels and splits, row by row through orig_ids.
        assert p["feat"].dtype == np.float32 and p["feat"].shape == (n_owned, ds.feat_dim)
        for i, o in enumerate(p["orig_ids"].tolist()):
            if ds.x is not None:
                assert np.array_equal(p["feat"][i], np.asarray(ds.x[o], dtype=np.float32))
            assert p["label"][i] == (-1 if ds.y is None else int(ds.y[o]))
    # Every edge exactly once, in its destination owner's CSC.
    assert stored_edges == Counter(edges)
    for split in ("train_idx", "val_idx", "test_idx"):
        got = sorted(int(p["orig_ids"][i]) for p in parts for i in p[split].tolist())
        assert got == sorted(np.asarray(getattr(ds, split)).tolist())

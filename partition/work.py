"""The ``"work"`` and ``"sampled"`` vertex weights: what each training seed's batches cost.

``"work"`` (:func:`work_weight`, the default) counts the rows a seed's share of its
batches computes: the distinct nodes of every hop but the last, each a row of the first
layer, forward and backward.  It is the one quantity that predicted the per-rank CPU of
training epochs measured on the benchmark machine (GraphSAGE 2x256, fan-outs 15,10,
batch 1024, 2 ranks of one thread; SBM and R-MAT of 100k nodes and the Debian package
graph, each under METIS, random and contiguous parts: 18 rank-epochs): CPU per rank and
epoch = 6.3 us per row + 8.5 ms per step, within 9 % of every measurement and within
0.97-1.02 of every measured ratio between two ranks; adding the sampled edges or the
rows a rank serves to the others did not predict better.  On the 100k R-MAT, METIS
parts balanced for 10,10 sampled edges left rank 0 with 1.23x rank 1's rows under
fan-outs 15,10 (and 1.15x its CPU).

``"sampled"`` (:func:`sampled_weight`):

What a rank's minibatch step costs grows with the edges sampled for its seeds (the
forward and backward pass run over them, their sources' features are gathered), not with
the in-degree of the nodes it owns: a hub of degree 20,000 costs a seed ``fanout`` edges
at a hop. So the weight of a training node is the expected number of edges that
:class:`~gnnpar.sampling.neighbor.DistNeighborSampler` draws on its behalf, over the in-edge graph
``A`` (row = destination), with fan-outs ``f_1 .. f_L`` (:data:`FANOUTS`, gnnpar-train's
default) and ``nb = S / B`` batches per epoch (``S`` seeds, ``B`` = :data:`BATCH_SIZE`):

- ``p_h(v) = min(d_v, f_h) / d_v``: the chance that a given in-neighbour of ``v`` is drawn
  at hop ``h`` (``d_v`` the in-degree; 0 for ``d_v = 0``);
- visits: ``a_0 = t`` (a seed's count: 1 per training node, per training edge for link
  prediction), ``a_h = A^T (a_{h-1} p_{h-1})``: how often a node is drawn at hop ``h``
  over the epoch;
- a node drawn ``x = a_h / nb`` times per batch is expanded once per batch (the sampler
  deduplicates each hop's frontier), so each draw costs a share ``r_h = (1 - e^{-x}) / x``
  of its subtree (``r_0 = 1``: seeds are distinct);
- subtree cost, from the last hop back: ``g_h = r_h (min(d, f_h) + p_h A g_{h+1})`` with
  ``g_{L+1} = 0``; the weight is ``t g_1``, rounded (``"work"``: ``g_h = r_h (1 + p_h A
  g_{h+1})``, rows instead of edges).

The weights add up to the expected sampled edges of an epoch (dedup within each batch
estimated, as if the seeds' neighbourhoods mixed at random). It is at most ``f_1 (1 + f_2
(1 + ...))`` per seed, so a hub weighs no more than any other seed: balancing it keeps every
rank's batches equally heavy where ``"edges"`` (the in-degree) would force the hubs' dense
neighbourhoods apart at a large cost in cut edges (``benchmarks/bench_partition_quality.py``).

Cost of either: ``2 L - 2`` passes over the in-edges in blocks of at least ``N`` entries
(so a pass adds ``O(M)`` work, not ``O(N)`` per block), and about ``(3 L + 4) N`` float64
values.
"""

from __future__ import annotations

import numpy as np

from gnnpar.partition.adjacency import InEdges

FANOUTS = (10, 10)
"""Fan-outs the weights assume unless given, seeds outwards (gnnpar-train's default
``--fanouts``; gnnpar-train partitions for its own)."""
BATCH_SIZE = 1024
"""Seeds per batch the weights assume unless given (gnnpar-train's default)."""
_CHUNK = 1 << 22  # in-edge entries read at a time, at least (at least N)


ROW_SCALE = 64
"""Units per expected row in :func:`work_weight` (the weight is an integer)."""
WEIGHT_TOTAL = 1 << 28
"""At most this much :func:`work_weight` over a graph (int32-safe per part for METIS)."""


def _setup(in_edges: InEdges, seeds: np.ndarray, fanouts: tuple[int, ...],
           batch_size: float, chunk: int
           ) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray], list[np.ndarray], int]:
    """What both weights start from: the seeds ``t``, for each hop ``0 .. L-1``.

    The caps ``min(d, f_h)``, the chances ``p_h`` and the draws per batch ``x_h``; and how
    many in-edges are read at once.
    """
    t = np.asarray(seeds, dtype=np.float64)
    d = in_edges.degree().astype(np.float64)
    batches = max(t.sum() / batch_size, 1.0)
    caps = [d if f < 0 else np.minimum(d, f) for f in fanouts]
    keep = [np.divide(c, d, out=np.zeros_like(d), where=d > 0) for c in caps]
    block = max(chunk, len(d))
    visits = [t]
    for h in range(len(fanouts) - 1):
        step = visits[h] * keep[h]
        nxt = np.zeros_like(d)
        for rows, cols in in_edges.entries(block):
            nxt += np.bincount(cols, weights=step[rows], minlength=len(d))
        visits.append(nxt)
    return t, caps, keep, [v / batches for v in visits], block


def _subtree(in_edges: InEdges, setup: tuple[np.ndarray, list[np.ndarray], list[np.ndarray],
                                              list[np.ndarray], int],
             node_cost: float, edge_cost: float) -> np.ndarray:
    """``t g_0``, ``g_h = r_h (node_cost + edge_cost min(d, f_h) + p_h A g_{h+1})``."""
    t, caps, keep, draws, block = setup
    below = np.zeros_like(t)
    for h in reversed(range(len(caps))):
        gathered = np.zeros_like(t)
        if h + 1 < len(caps):
            for rows, cols in in_edges.entries(block):
                gathered += np.bincount(rows, weights=below[cols], minlength=len(t))
        x = draws[h]
        share = np.ones_like(t) if h == 0 else np.divide(  # seeds are distinct
            -np.expm1(-x), x, out=np.ones_like(t), where=x > 0)
        below = share * (node_cost + edge_cost * caps[h] + keep[h] * gathered)
    out: np.ndarray = t * below
    return out


def sampled_weight(in_edges: InEdges, seeds: np.ndarray,
                   fanouts: tuple[int, ...] = FANOUTS, batch_size: float = BATCH_SIZE,
                   chunk: int = _CHUNK) -> np.ndarray:
    """int64 ``[N]``: expected sampled edges of each seed's share of its batches.

    Args:
        in_edges: The in-edges grouped by destination (columns possibly memory-mapped).
        seeds: float or int ``[N]`` seed count of every node (0 for non-seeds).
        fanouts: Neighbours drawn per hop, seeds outwards (``-1``: all).
        batch_size: Seeds per batch.
        chunk: In-edge entries read at a time (at least ``N``).

    Returns:
        The weights (module docstring); zero where ``seeds`` is zero.
    """
    edges = _subtree(in_edges, _setup(in_edges, seeds, fanouts, batch_size, chunk), 0.0, 1.0)
    out: np.ndarray = np.rint(edges).astype(np.int64)
    return out


def work_weight(in_edges: InEdges, seeds: np.ndarray, fanouts: tuple[int, ...] = FANOUTS,
                batch_size: float = BATCH_SIZE, chunk: int = _CHUNK) -> np.ndarray:
    """int64 ``[N]``: the rows each seed's share of its batches computes (``"work"``).

    A batch's first layer computes a row for every distinct node of hops ``0 .. L - 1``
    (the seeds and every hop but the last); a node drawn ``x`` times per batch counts
    ``r_h = (1 - e^{-x}) / x`` per draw, so a seed weighs ``g_0`` with ``g_L = 0`` and
    ``g_h = r_h (1 + p_h A g_{h+1})``: the weights add up to the expected rows of an
    epoch, what a rank's CPU per epoch follows (module docstring).  Scaled by
    :data:`ROW_SCALE` (less where the total would pass :data:`WEIGHT_TOTAL`) and
    rounded.  Arguments as :func:`sampled_weight`.
    """
    rows = _subtree(in_edges, _setup(in_edges, seeds, fanouts, batch_size, chunk), 1.0, 0.0)
    total = float(rows.sum())
    scale = min(ROW_SCALE, WEIGHT_TOTAL / total) if total > 0 else 0.0
    return np.rint(rows * scale).astype(np.int64)

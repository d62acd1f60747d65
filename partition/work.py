"""The ``"sampled"`` vertex weight: expected sampled edges of each training seed's batch share.

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
  ``g_{L+1} = 0``; the weight is ``t g_1``, rounded.

The weights add up to the expected sampled edges of an epoch (dedup within each batch
estimated, as if the seeds' neighbourhoods mixed at random). It is at most ``f_1 (1 + f_2
(1 + ...))`` per seed, so a hub weighs no more than any other seed: balancing it keeps every
rank's batches equally heavy where ``"edges"`` (the in-degree) would force the hubs' dense
neighbourhoods apart at a large cost in cut edges (``benchmarks/bench_partition_quality.py``).

Cost: ``2 L - 1`` passes over the in-edges in blocks of at least ``N`` entries (so a pass
adds ``O(M)`` work, not ``O(N)`` per block), and about ``(3 L + 4) N`` float64 values.
"""

from __future__ import annotations

import numpy as np

from gnnpar.partition.adjacency import InEdges

FANOUTS = (10, 10)
"""Fan-outs the weight assumes, seeds outwards (gnnpar-train's default ``--fanouts``)."""
BATCH_SIZE = 1024
"""Seeds per batch the weight assumes (gnnpar-train's default ``--batch-size``)."""
_CHUNK = 1 << 22  # in-edge entries read at a time, at least (at least N)


def sampled_weight(in_edges: InEdges, seeds: np.ndarray,
                   fanouts: tuple[int, ...] = FANOUTS, batch_size: int = BATCH_SIZE,
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
    below = np.zeros_like(d)
    for h in reversed(range(len(fanouts))):
        x = visits[h] / batches
        share = np.ones_like(d) if h == 0 else np.divide(
            -np.expm1(-x), x, out=np.ones_like(d), where=x > 0)
        gathered = np.zeros_like(d)
        if h + 1 < len(fanouts):
            for rows, cols in in_edges.entries(block):
                gathered += np.bincount(rows, weights=below[cols], minlength=len(d))
        below = share * (caps[h] + keep[h] * gathered)
    return np.rint(t * below).astype(np.int64)

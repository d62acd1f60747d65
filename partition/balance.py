"""Every balanced quantity within ``1 + epsilon`` of its mean, at few cut edges: a post-pass.

METIS balances several vertex weights at once but overshoots on graphs with hubs (on the
Debian dependency graph of ``benchmarks/real_graphs.py``, multi-constraint METIS leaves
a part 1.19x to 1.85x the mean in every column at 2 to 8 parts); KaMinPar balances one
weight only. :func:`balance_partition` takes either's assignment to every column's cap
and then wins back cut edges, in two passes over the undirected graph, each reading the
adjacency in chunks:

1. **Rebalancing** (:func:`rebalance`). Greedy rounds lower the *overload*: the load of
   every part above ``cap = floor((1 + epsilon) * mean)``, summed over parts and columns
   as fractions of the caps. Every node of an overloaded part that weighs in an
   overloaded column gets a destination: the neighbouring part holding most of its
   neighbours that takes it within every cap; failing one, a part drawn in proportion to
   room (isolated nodes spread at no cost); failing that, the part the move overloads
   least. Moves are taken cheapest first (cut edges added per overload removed), as many
   as provably lower the overload together (:func:`_select`). A round is one pass over
   the candidates' adjacency rows, in chunks, with one sort per chunk and no ``[nodes,
   K]`` array; the pass stops when no part is over a cap, when a round finds no move, or
   after ``_ROUNDS`` rounds. The greedy can stop in a local minimum (a part a few edges
   over a cap whose possible destinations are full in nodes), so callers record the
   max/mean reached in every column.
2. **Refinement** (:func:`refine`): size-constrained label propagation, as KaMinPar's
   own refinement, under every column's cap loosened by ``REFINE_SLACK``. Each round
   splits the parts into senders and receivers (a seeded hash of the round and the
   part); every node of a sender part may move to the receiver part holding most of its
   neighbours, if that saves cut edges and fits every cap. Since receivers' nodes stay
   put, a move saves at least the edges it counted (senders' nodes that move too only
   add to it), and the moves into each receiver are taken best first while their
   weights fit its room in every column. The pass stops after ``_REFINE_ROUNDS`` rounds
   or when two rounds in a row save fewer than ``_REFINE_MIN_GAIN`` of the edges.

Deterministic: no threads, ties broken by a hash of node and part.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from gnnpar.artifacts.arrays import copy_rows

EPSILON = 0.03
"""Rebalancing caps every column at ``(1 + EPSILON)`` times its mean (METIS's default)."""
REFINE_SLACK = 0.015
"""Refinement may fill a column up to ``1 + EPSILON + REFINE_SLACK`` (1.045) of its mean:
room to move nodes that save cut edges, which caps met exactly leave none of (two parts
each full in one column block each other's moves)."""
CHUNK = 1 << 22  # adjacency entries read at a time
_ROUNDS = 32  # rebalancing rounds at most
_SELECT_PASSES = 16  # passes of one round's move selection at most
_REFINE_ROUNDS = 24  # refinement rounds at most
_REFINE_MIN_GAIN = 1e-4  # a refinement round saving fewer cut edges / edges is idle
WORK_EPSILON = 0.01
"""The cap of the ``"work"`` column: its max/mean is what one rank's epoch waits for
(``gnnpar.partition.work``), the others' only spread memory and steps."""


def column_epsilon(names: Sequence[str], epsilon: float = EPSILON) -> np.ndarray:
    """float64 ``[ncon]``: each balanced quantity's allowed imbalance.

    ``epsilon``, and at most :data:`WORK_EPSILON` for ``"work"``.
    """
    return np.array([min(epsilon, WORK_EPSILON) if n == "work" else epsilon for n in names])


def balance_partition(xadj: np.ndarray, adjncy: np.ndarray, part: np.ndarray,
                      weights: np.ndarray, num_parts: int,
                      epsilon: float | np.ndarray = EPSILON,
                      chunk: int = CHUNK) -> dict[str, int]:
    """Rebalance every column of ``weights``, then refine the cut under looser caps.

    Every column ends within ``1 + epsilon + REFINE_SLACK`` of its mean unless the
    rebalancing stops in a local minimum above ``1 + epsilon`` (refinement never raises
    a load above its cap).

    Args:
        xadj: int64 ``[N + 1]`` row pointer of the undirected simple graph.
        adjncy: ``[2M]`` neighbour ids, both directions (a memory map is read in chunks).
        part: int64 ``[N]`` part of every node, updated in place.
        weights: int64 ``[N, ncon]`` non-negative vertex weights.
        num_parts: ``K``.
        epsilon: Rebalancing's cap of a column is ``floor((1 + epsilon) * mean)``;
            refinement's ``floor((1 + epsilon + REFINE_SLACK) * mean)``; one value, or
            one per column (:func:`column_epsilon`).
        chunk: Adjacency entries read at a time.

    Returns:
        ``{"rebalanced_moves", "refined_moves", "refined_gain"}``: the moves of each
        pass and the cut edges refinement saved.
    """
    moved = rebalance(xadj, adjncy, part, weights, num_parts, epsilon, chunk)
    refined, gain = refine(xadj, adjncy, part, weights, num_parts, epsilon + REFINE_SLACK,
                           chunk)
    return {"rebalanced_moves": moved, "refined_moves": refined, "refined_gain": gain}


def cut_edges(xadj: np.ndarray, adjncy: np.ndarray, part: np.ndarray,
              chunk: int = CHUNK) -> int:
    """Undirected edges whose ends lie in different parts.

    Args:
        xadj: int64 ``[N + 1]`` row pointer of the undirected simple graph.
        adjncy: ``[2M]`` neighbour ids, both directions (read in chunks).
        part: int ``[N]`` part of every node.
        chunk: Adjacency entries read at a time.
    """
    cut = 0
    for a, b, ptr in _row_blocks(xadj, chunk):
        ends = part[copy_rows(adjncy, int(ptr[0]), int(ptr[-1]))]
        cut += int((np.repeat(part[a:b], np.diff(ptr)) != ends).sum())
    return cut // 2


def _loads(part: np.ndarray, weights: np.ndarray, num_parts: int) -> np.ndarray:
    """int64 ``[K, ncon]`` total weight of every part in every column."""
    loads: np.ndarray = np.stack([np.bincount(part, weights=weights[:, c], minlength=num_parts)
                                  for c in range(weights.shape[1])], axis=1).round()
    return loads.astype(np.int64)


def rebalance(xadj: np.ndarray, adjncy: np.ndarray, part: np.ndarray, weights: np.ndarray,
              num_parts: int, epsilon: float | np.ndarray, chunk: int = CHUNK,
              rounds: int = _ROUNDS) -> int:
    """Move nodes until no part is over ``(1 + epsilon)`` times a column's mean (module docstring).

    Args:
        xadj: int64 ``[N + 1]`` row pointer of the undirected graph.
        adjncy: ``[2M]`` neighbour ids (read in chunks).
        part: int64 ``[N]`` part of every node, updated in place.
        weights: int64 ``[N, ncon]`` vertex weights.
        num_parts: ``K``.
        epsilon: Allowed imbalance (one value, or one per column).
        chunk: Adjacency entries read at a time.
        rounds: Rounds at most.

    Returns:
        Number of moves made.
    """
    loads = _loads(part, weights, num_parts)
    cap = np.maximum((1 + epsilon) * loads.sum(axis=0) // num_parts, 1).astype(np.int64)
    moved = 0
    for _ in range(rounds):
        over = loads > cap
        if not over.any():
            break
        may_move = np.zeros(len(part), dtype=bool)
        for c in np.flatnonzero(over.any(axis=0)):
            may_move |= over[part, c] & (weights[:, c] > 0)
        nodes = np.flatnonzero(may_move)
        del may_move
        target, gain = _best_moves(xadj, adjncy, part, nodes, weights, loads, cap, chunk)
        take = _select(nodes, target, gain, part, weights, loads, cap)
        if not len(take):
            break
        v, dst = nodes[take], target[take]
        w = weights[v]
        np.subtract.at(loads, part[v], w)
        np.add.at(loads, dst, w)
        part[v] = dst
        moved += len(take)
    return moved


def refine(xadj: np.ndarray, adjncy: np.ndarray, part: np.ndarray, weights: np.ndarray,
           num_parts: int, epsilon: float | np.ndarray, chunk: int = CHUNK,
           rounds: int = _REFINE_ROUNDS) -> tuple[int, int]:
    """Move nodes that save cut edges, keeping every column within its cap (module docstring).

    Args:
        xadj: int64 ``[N + 1]`` row pointer of the undirected graph.
        adjncy: ``[2M]`` neighbour ids (read in chunks).
        part: int64 ``[N]`` part of every node, updated in place.
        weights: int64 ``[N, ncon]`` vertex weights.
        num_parts: ``K``.
        epsilon: Allowed imbalance: every column's cap is ``floor((1 + epsilon) * mean)``
            (one value, or one per column).
        chunk: Adjacency entries read at a time.
        rounds: Rounds at most.

    Returns:
        ``(moves, gain)``: the moves made and the cut edges they saved (at least).
    """
    if num_parts < 2:
        return 0, 0
    loads = _loads(part, weights, num_parts)
    cap = np.maximum((1 + epsilon) * loads.sum(axis=0) // num_parts, 1).astype(np.int64)
    least = max(1, int(_REFINE_MIN_GAIN * int(xadj[-1]) / 2))
    ids = np.arange(num_parts, dtype=np.int64)
    moved = saved = idle = 0
    for r in range(rounds):
        receivers = _hash(ids + (r + 1) * num_parts) < 0.5
        if receivers.all() or not receivers.any():
            receivers = ids % 2 == r % 2
        nodes = np.flatnonzero(~receivers[part])
        target, gain = _best_moves(xadj, adjncy, part, nodes, weights, loads, cap, chunk,
                                   receivers)
        take = np.flatnonzero(gain > 0)
        take = take[np.lexsort((nodes[take], -gain[take], target[take]))]
        w = weights[nodes[take]]
        room = cap - loads[target[take]]
        fits = (_cumsum_by_group(w, target[take]) <= room).all(axis=1)
        take = take[fits]
        v, dst = nodes[take], target[take]
        np.subtract.at(loads, part[v], weights[v])
        np.add.at(loads, dst, weights[v])
        part[v] = dst
        moved += len(take)
        round_gain = int(gain[take].sum())
        saved += round_gain
        idle = idle + 1 if round_gain < least else 0
        if idle == 2:
            break
    return moved, saved


def _row_blocks(xadj: np.ndarray, max_entries: int) -> Iterator[tuple[int, int, np.ndarray]]:
    """Consecutive row ranges ``(a, b, xadj[a:b + 1])`` covering all rows.

    Each holds at most ``max_entries`` rows and as many entries (more only where one row
    alone holds more).
    """
    n = len(xadj) - 1
    a = 0
    while a < n:
        ptr = np.asarray(xadj[a:min(n, a + max_entries) + 1], dtype=np.int64)
        b = a + max(1, int(np.searchsorted(ptr, ptr[0] + max_entries, side="right")) - 1)
        yield a, b, ptr[:b - a + 1]
        a = b


def _best_moves(xadj: np.ndarray, adjncy: np.ndarray, part: np.ndarray, nodes: np.ndarray,
                weights: np.ndarray, loads: np.ndarray, cap: np.ndarray,
                chunk: int, receivers: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """The destination of each of ``nodes``, and the cut edges the move saves.

    The destination is the neighbouring part (among ``receivers``, when given) that can
    take the node without going over a cap and holds most of its neighbours (ties to a
    hash of node and part); failing one, a part drawn by :func:`_spread`, or with
    ``receivers`` the node's own part (gain 0). One pass over the nodes' adjacency rows,
    which are counted per neighbouring part by one sort of ``row * K + part`` keys per
    chunk.

    Args:
        xadj: Row pointer.
        adjncy: Neighbour ids.
        part: int64 ``[N]`` current parts.
        nodes: int64 ``[n]`` sorted ids of the nodes that may move.
        weights: int64 ``[N, ncon]`` vertex weights.
        loads: int64 ``[K, ncon]`` part loads.
        cap: int64 ``[ncon]`` the most a part may hold.
        chunk: Adjacency entries read at a time.
        receivers: bool ``[K]``, the parts that may take nodes (refinement); ``None``:
            any part, with :func:`_spread` as the fallback (rebalancing).

    Returns:
        ``(target, gain)``: int64 ``[n]`` destinations and int64 ``[n]`` the node's
        neighbours there minus its neighbours in its own part.
    """
    k = len(loads)
    target = (_spread(nodes, part[nodes], weights[nodes], loads, cap, chunk)
              if receivers is None else part[nodes])
    gain = np.zeros(len(nodes), dtype=np.int64)
    for a, b, ptr in _row_blocks(xadj, chunk):
        lo, hi = np.searchsorted(nodes, [a, b])
        if lo == hi:
            continue
        keys, count = _part_counts(adjncy, part, ptr, nodes[lo:hi] - a, k)
        if not len(keys):
            continue
        row, dst = np.divmod(keys, k)
        v = nodes[lo + row]
        own = part[v] == dst
        home = np.zeros(hi - lo, dtype=np.int64)
        home[row[own]] = count[own]
        fits = ~own & (loads[dst] + weights[v] <= cap).all(axis=1)
        if receivers is not None:
            fits &= receivers[dst]
        score = np.where(fits, count + 0.5 * _hash(keys), -1.0)
        new_row = np.concatenate([[True], row[1:] != row[:-1]])
        best = np.maximum.reduceat(score, np.flatnonzero(new_row))[np.cumsum(new_row) - 1]
        top = np.flatnonzero(fits & (score == best))
        top = top[np.unique(row[top], return_index=True)[1]]
        target[lo + row[top]] = dst[top]
        want = np.arange(hi - lo) * k + target[lo:hi]
        pos = np.minimum(np.searchsorted(keys, want), len(keys) - 1)
        gain[lo:hi] = np.where(keys[pos] == want, count[pos], 0) - home
    return target, gain


def _part_counts(adjncy: np.ndarray, part: np.ndarray, ptr: np.ndarray, rows: np.ndarray,
                 k: int) -> tuple[np.ndarray, np.ndarray]:
    """How many neighbours some rows of a block have in each part.

    Args:
        adjncy: Neighbour ids.
        part: int64 ``[N]`` current parts.
        ptr: int64 row pointer of the block (``xadj[a:b + 1]``).
        rows: int64 sorted rows of interest, relative to the block's first row.
        k: ``K``.

    Returns:
        ``(keys, count)``: sorted distinct ``i * K + p`` for the ``i``-th row of ``rows``
        having neighbours in part ``p``, and how many.
    """
    local = np.full(len(ptr) - 1, -1, dtype=np.int64)
    local[rows] = np.arange(len(rows))
    owner = np.repeat(local, np.diff(ptr))
    keep = owner >= 0
    keys = owner[keep] * k + part[copy_rows(adjncy, int(ptr[0]), int(ptr[-1]))[keep]]
    del owner, keep
    keys.sort()
    if not len(keys):
        return keys, keys
    first = _run_starts(keys)
    return keys[first], np.diff(np.append(first, len(keys)))


def _spread(nodes: np.ndarray, own: np.ndarray, w: np.ndarray, loads: np.ndarray,
            cap: np.ndarray, chunk: int) -> np.ndarray:
    """A destination for each node, other than its own part, spread over the parts with room.

    Args:
        nodes: int64 ``[n]`` node ids.
        own: int64 ``[n]`` their parts.
        w: int64 ``[n, ncon]`` their weights.
        loads: int64 ``[K, ncon]`` part loads (``K >= 2``).
        cap: int64 ``[ncon]`` the most a part may hold.
        chunk: Bounds the entries of one temporary.

    Returns:
        int64 ``[n]``: a part drawn by a hash of the node id with probability
        proportional to its room (its smallest over the columns the node weighs in, as a
        fraction of the cap); where that part cannot take the node, the part the move
        overloads least among those with most room in some column.
    """
    free = (cap - loads) / cap
    short = np.unique(np.argsort(-np.column_stack([free, free.min(axis=1)]), axis=0,
                                 kind="stable")[:2])
    base = np.maximum(loads[short] - cap, 0)
    target = np.empty(len(nodes), dtype=np.int64)
    step = max(1, chunk // (len(short) * w.shape[1]))
    for a in range(0, len(nodes), step):
        add = np.maximum(loads[short] + w[a:a + step, None] - cap, 0) - base
        damage = add @ (1 / cap)
        damage[short == own[a:a + step, None]] = np.inf
        target[a:a + step] = short[np.argmin(damage, axis=1)]
    carries = w > 0
    codes = carries @ (1 << np.arange(w.shape[1]))
    for code in np.unique(codes):
        sel = np.flatnonzero(codes == code)
        cum = np.cumsum(np.maximum(free[:, carries[sel[0]]].min(axis=1), 0))
        if cum[-1] > 0:
            draw = np.searchsorted(cum, _hash(nodes[sel]) * cum[-1], side="right")
            draw = np.minimum(draw, len(cum) - 1)
            fits = (draw != own[sel]) & (loads[draw] + w[sel] <= cap).all(axis=1)
            target[sel] = np.where(fits, draw, target[sel])
    return target


def _run_starts(values: np.ndarray) -> np.ndarray:
    """Indices where runs of equal values begin in ``values`` (non-empty, grouped)."""
    return np.flatnonzero(np.concatenate([[True], values[1:] != values[:-1]]))


def _hash(x: np.ndarray) -> np.ndarray:
    """Deterministic pseudo-random floats in ``[0, 1)`` of int64 keys (Fibonacci hashing)."""
    bits: np.ndarray = x.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) >> np.uint64(11)
    return bits / 2.0**53


def _select(nodes: np.ndarray, target: np.ndarray, gain: np.ndarray, part: np.ndarray,
            weights: np.ndarray, loads: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """Positions (into ``nodes``) of the moves of one round, which lower the total overload.

    Overload is counted per column in weight units and summed as fractions of the caps.
    Moves are ranked by the cut edges they add per overload they alone remove. Of a set
    of moves, the overload a move removes from its source is counted after the moves out
    of that part ranked before it, the overload it adds to its destination after the
    moves into that part ranked before it; both counts are bounds for any subset of the
    set, and overload is convex in a part's load, so the moves that remove more than
    they add lower the total overload together. Starting from the moves that do so
    alone, the set shrinks to those until it holds (``_SELECT_PASSES`` times at most).

    Args:
        nodes: int64 ``[n]`` candidate nodes.
        target: int64 ``[n]`` their destinations.
        gain: int64 ``[n]`` cut edges each move saves (negative: adds).
        part: int64 ``[N]`` current parts.
        weights: int64 ``[N, ncon]`` vertex weights.
        loads: int64 ``[K, ncon]`` part loads.
        cap: int64 ``[ncon]`` the most a part may hold.
    """
    inv = 1 / cap
    src = part[nodes]
    w = weights[nodes]
    excess = np.maximum(loads - cap, 0)
    alone = np.minimum(w, excess[src])
    over = loads[target] + w - cap
    added = np.maximum(over, 0) - np.maximum(over - w, 0)
    cand = np.flatnonzero((alone - added) @ inv > 0)
    cost = -gain[cand] / (alone[cand] @ inv)
    by_src = cand[np.lexsort((nodes[cand], cost, src[cand]))]
    by_dst = cand[np.lexsort((nodes[cand], cost, target[cand]))]
    member = np.zeros(len(nodes), dtype=bool)
    member[cand] = True
    removed = np.zeros_like(w)
    excess = excess[src]
    for _ in range(_SELECT_PASSES):
        out = by_src[member[by_src]]
        total = _cumsum_by_group(w[out], src[out])
        removed[out] = np.minimum(total, excess[out]) - np.minimum(total - w[out], excess[out])
        into = by_dst[member[by_dst] & removed[by_dst].any(axis=1)]
        over = loads[target[into]] + _cumsum_by_group(w[into], target[into]) - cap
        add = np.maximum(over, 0) - np.maximum(over - w[into], 0)
        good = (removed[into] - add) @ inv > 0
        if good.all():
            break
        member[into[~good]] = False
    moves: np.ndarray = into[good]
    return moves


def _cumsum_by_group(values: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Inclusive running sums of ``values`` (along axis 0) within runs of equal ``groups``."""
    total = np.cumsum(values, axis=0)
    if not len(groups):
        return total
    first = _run_starts(groups)
    run = np.repeat(np.arange(len(first)), np.diff(np.append(first, len(groups))))
    sums: np.ndarray = total - (total - values)[first][run]
    return sums

"""Which part owns each node, by KaMinPar (shared-memory multilevel graph partitioning).

KaMinPar (https://github.com/KaHIP/KaMinPar, ``pip install 'gnnpar[kaminpar]'``) partitions
the undirected simple graph of :func:`~gnnpar.partition.adjacency.metis_graph` on several
threads, in a third of METIS's memory, with fewer cut edges. It balances one
vertex weight only, so the quantities of ``balance`` (see :mod:`gnnpar.partition.assign`)
are kept in two steps:

1. **One weight** (:func:`combined_weight`). Each column is scaled to the total of the
   largest, the scaled columns are summed per node and rounded (at least 1), and
   KaMinPar keeps every part within ``1 + epsilon`` times the mean of that sum. A node
   without neighbours weighs 1: wherever it goes it cuts no edge, so step 2 places it.
2. **Rebalancing** (:func:`rebalance`). A balanced sum leaves single columns unbalanced
   (a part of hubs is heavy in edges, a part of isolated nodes in nodes). Greedy rounds
   lower the *overload*: the load of every part above ``cap = floor((1 + epsilon) *
   mean)``, summed over parts and columns as fractions of the caps. Every node of an
   overloaded part that weighs in an overloaded column gets a destination: the
   neighbouring part holding most of its neighbours that takes it within every cap;
   failing one, a part drawn in proportion to room (isolated nodes spread at no cost);
   failing that, the part the move overloads least. Moves are taken cheapest first (cut
   edges added per overload removed), as many as provably lower the overload together
   (:func:`_select`). A round is one pass over the candidates' adjacency rows, in chunks,
   with one sort per chunk and no ``[nodes, K]`` array; the pass stops when no part is
   over a cap, when a round finds no move, or after ``_ROUNDS`` rounds.

The greedy can stop in a local minimum (a part a few edges over a cap whose possible
destinations are full in nodes), so ``info["imbalance"]`` records the max/mean reached
in every column.

Measured at ``epsilon = 0.03``, balancing nodes, train and edges on 20,000-node graphs of
average degree 10 (:mod:`gnnpar.datasets.synthetic`, 3 seeds, ``K`` from 2 to 64, one
thread). SBM: KaMinPar alone is up to 1.12x the mean in a column; the pass moves at most
170 nodes, adds under 0.1% to the cut and leaves every column within 1.03. R-MAT, 31%
of whose nodes are isolated: KaMinPar alone leaves up to 2.5x the mean nodes in a part
at ``K = 8`` (7x at 64); the pass moves up to 20% of the nodes and adds no cut edge for
``K <= 8`` (every column within 1.03), 1.4% to 2.7% for ``K`` from 16 to 64 (within
1.0314). Against METIS (``pymetis``, ``K = 8``): balancing nodes only, 0.976x (SBM) and
0.906x (R-MAT) METIS's cut edges; balancing all three, 0.977x multi-constraint METIS's on
SBM, whose parts reach 1.07x the mean, and 1.095x on R-MAT, whose parts reach 1.94x the
mean edges (and 1.19x the mean nodes).

``_CONTEXT`` is KaMinPar's "eco" preset. Its "default" cuts as few edges as METIS on
SBM but up to 1.10x more on R-MAT (over 6 seeds, nodes only); "eco" takes about 3x its
time at 20,000 nodes and 9x on a 300,000-node SBM (11.4 s against 1.3 s, METIS 2.9 s,
one thread), for 0.97x multi-constraint METIS's cut edges there instead of 1.02x;
"strong" cuts about as many as "eco" in twice its time.

The graph reaches KaMinPar as a ParHIP binary file written in chunks of ``_CHUNK``
entries from the (possibly memory-mapped) CSR into ``workdir`` and removed once loaded:
three little-endian uint64 words ``version, n, m`` (``m`` counting both directions of an
edge), then ``n + 1`` row offsets given as *byte* offsets into the file (``24 + (n + 1) *
offset_width + xadj[v] * id_width``), the ``m`` neighbour ids and the ``n`` node weights.
A set bit 0 of ``version`` says there are no edge weights, bit 1 no node weights, bits 2,
3 and 4 that offsets, ids and node weights are 32-bit; each array is written 32-bit where
its values fit, which halves the file and suits 32- and 64-bit builds of KaMinPar alike.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from gnnpar.errors import ConfigError
from gnnpar.io import copy_rows
from gnnpar.partition.assign import check_num_parts, column_imbalance, fill_empty_parts

_CHUNK = 1 << 22  # array entries read or written at a time
_ROUNDS = 32  # rebalancing rounds at most
_SELECT_PASSES = 16  # passes of one round's move selection at most
_CONTEXT = "eco"  # KaMinPar preset (measured against the others in the module docstring)
_HEADER_BYTES = 24
_MAX_32 = np.iinfo(np.int32).max  # below it, ids and weights are stored as uint32
# Bits of the ParHIP version word (KaMinPar's kaminpar-io/parhip_parser.cc); bit 1, no node
# weights, stays clear.
_NO_EDGE_WEIGHTS, _OFFSETS_32, _IDS_32, _WEIGHTS_32 = 1 << 0, 1 << 2, 1 << 3, 1 << 4


def kaminpar_assignment(xadj: np.ndarray, adjncy: np.ndarray, num_parts: int,
                        weights: np.ndarray, names: tuple[str, ...], seed: int,
                        threads: int, workdir: Path, compress: bool = False,
                        epsilon: float = 0.03) -> tuple[np.ndarray, dict[str, object]]:
    """Partition with KaMinPar, then rebalance every weight column (module docstring).

    With ``threads=1`` the same arguments give the same array on every run. With more
    threads KaMinPar's parallel coarsening and refinement depend on the thread schedule,
    so runs differ (in tests, every time), with the same balance and cut edges within
    about 2% of each other.

    Args:
        xadj: int64 ``[N + 1]`` row pointer of the undirected simple graph.
        adjncy: ``[2M]`` integer neighbour ids (both directions, sorted per row); a
            memory map is read in chunks.
        num_parts: ``K``, in ``1..N``.
        weights: int64 ``[N, ncon]`` non-negative vertex weights, one column per name.
        names: The quantity of each column (``"nodes"``, ``"train"``, ``"edges"``).
        seed: KaMinPar random seed (taken modulo ``2**31``).
        threads: KaMinPar threads, at least 1.
        workdir: Directory for the temporary ParHIP file (about ``4 * (N + 2M)`` bytes).
        compress: Let KaMinPar compress the graph in memory (less memory, slower).
        epsilon: Allowed imbalance: every part within ``(1 + epsilon)`` times the mean of
            every column.

    Returns:
        ``(part, info)``: int64 ``[N]`` part of every node, every part non-empty, and the
        settings with the moves of the rebalancing pass and the max/mean of every column,
        for ``meta.json``.

    Raises:
        ConfigError: ``kaminpar`` missing, ``threads < 1``, ``epsilon < 0``, ``num_parts``
            out of range, ``weights`` of the wrong shape, or a graph too large for a
            32-bit build of KaMinPar.
    """
    try:
        import kaminpar
    except ImportError as exc:
        raise ConfigError("is 'kaminpar', whose Python package is not installed.",
                          field="partition.partitioner",
                          fix="pip install 'gnnpar[kaminpar]' (or choose --partitioner metis)."
                          ) from exc
    n = len(xadj) - 1
    if threads < 1:
        raise ConfigError(f"got threads={threads}; KaMinPar needs at least one thread.",
                          field="partition.threads", fix="pass threads >= 1 (CLI: --threads).")
    if not epsilon >= 0:
        raise ConfigError(f"got epsilon={epsilon}; the allowed imbalance must be >= 0.",
                          field="partition.epsilon", fix="pass e.g. epsilon=0.03.")
    if weights.shape != (n, len(names)):
        raise ConfigError(f"has shape {weights.shape}; expected ({n}, {len(names)}), one "
                          f"column per quantity of {list(names)}.", field="weights",
                          fix="pass the [N, ncon] vertex weights of balance_weights.")
    check_num_parts(num_parts, n)
    zero = [name for name, total in zip(names, weights.sum(axis=0), strict=True) if not total]
    if zero:
        raise ConfigError(f"column {zero[0]!r} of weights is zero everywhere.", field="weights",
                          fix="drop the quantities with zero total (balance_weights does).")
    info: dict[str, object] = {"context": _CONTEXT, "threads": threads, "epsilon": epsilon,
                               "compress": compress}
    if num_parts == 1:
        part = np.zeros(n, dtype=np.int64)
        return part, {**info, "rebalanced_moves": 0, "imbalance": dict.fromkeys(names, 1.0)}

    vwgt = combined_weight(weights, xadj)
    m = int(xadj[-1])
    if not kaminpar.__64bit__ and (np.dtype("<u8") in _parhip_dtypes(n, m, vwgt)
                                   or int(vwgt.sum()) > _MAX_32):
        raise ConfigError(f"the graph ({n} nodes, {m} arcs, total weight {int(vwgt.sum())}) "
                          "needs the 64-bit build of KaMinPar.", field="partition.partitioner",
                          fix="pip install the kaminpar wheel from PyPI (64-bit ids and weights).")
    fd, name = tempfile.mkstemp(prefix="kaminpar-", suffix=".parhip", dir=workdir)
    os.close(fd)
    try:
        write_parhip(Path(name), xadj, adjncy, vwgt)
        del vwgt
        graph = kaminpar.load_graph(name, kaminpar.GraphFileFormat.PARHIP, compress=compress)
    finally:
        os.unlink(name)
    kaminpar.reseed(int(seed) % 2**31)
    solver = kaminpar.KaMinPar(threads, kaminpar.context_by_name(_CONTEXT))
    part = np.asarray(solver.compute_partition(graph, num_parts, epsilon), dtype=np.int64)
    del graph, solver

    moves = rebalance(xadj, adjncy, part, weights, num_parts, epsilon)
    part = fill_empty_parts(part, num_parts)
    return part, {**info, "rebalanced_moves": moves,
                  "imbalance": dict(zip(names, column_imbalance(part, weights, num_parts),
                                        strict=True))}


def combined_weight(weights: np.ndarray, xadj: np.ndarray, chunk: int = _CHUNK) -> np.ndarray:
    """int64 ``[N]``: the one vertex weight KaMinPar balances.

    The columns are scaled to a common total (the largest), summed and rounded, at least
    1; a node without neighbours weighs 1 (it is placed by :func:`rebalance`, at no cost
    in cut edges).

    Args:
        weights: int64 ``[N, ncon]`` non-negative vertex weights, no column all zero.
        xadj: int64 ``[N + 1]`` row pointer.
        chunk: Rows converted at a time.
    """
    totals = weights.sum(axis=0)
    scale = totals.max() / totals
    out = np.empty(len(weights), dtype=np.int64)
    for a in range(0, len(weights), chunk):
        w = np.maximum(np.rint(weights[a:a + chunk] @ scale), 1)
        w[np.diff(np.asarray(xadj[a:a + chunk + 1])) == 0] = 1
        out[a:a + chunk] = w
    return out


def _parhip_dtypes(n: int, m: int, vwgt: np.ndarray) -> tuple[np.dtype, np.dtype, np.dtype]:
    """``(offset, id, weight)`` dtypes of the file: little-endian uint32 where values fit."""
    u4, u8 = np.dtype("<u4"), np.dtype("<u8")
    ids = u4 if n <= _MAX_32 else u8
    last_offset = _HEADER_BYTES + (n + 1) * u4.itemsize + m * ids.itemsize
    offsets = u4 if last_offset <= np.iinfo(np.uint32).max else u8
    weight = u4 if int(vwgt.max(initial=0)) <= _MAX_32 else u8
    return offsets, ids, weight


def write_parhip(path: Path, xadj: np.ndarray, adjncy: np.ndarray, vwgt: np.ndarray,
                 chunk: int = _CHUNK) -> None:
    """Write the node-weighted graph as a ParHIP binary file (module docstring), in chunks.

    Args:
        path: File to write.
        xadj: int64 ``[N + 1]`` row pointer.
        adjncy: ``[2M]`` neighbour ids (a memory map is read in chunks).
        vwgt: int64 ``[N]`` node weights, at least 1.
        chunk: Entries of one array read and written at a time.
    """
    n, m = len(xadj) - 1, int(xadj[-1])
    offsets, ids, weight = _parhip_dtypes(n, m, vwgt)
    version = (_NO_EDGE_WEIGHTS | _OFFSETS_32 * (offsets.itemsize == 4)
               | _IDS_32 * (ids.itemsize == 4) | _WEIGHTS_32 * (weight.itemsize == 4))
    base = _HEADER_BYTES + (n + 1) * offsets.itemsize
    with open(path, "wb") as f:
        np.array([version, n, m], dtype="<u8").tofile(f)
        for a in range(0, n + 1, chunk):
            (np.asarray(xadj[a:a + chunk], dtype=np.int64) * ids.itemsize + base
             ).astype(offsets).tofile(f)
        for array, dtype in ((adjncy, ids), (vwgt, weight)):
            for a in range(0, len(array), chunk):
                copy_rows(array, a, a + chunk).astype(dtype).tofile(f)


def _loads(part: np.ndarray, weights: np.ndarray, num_parts: int) -> np.ndarray:
    """int64 ``[K, ncon]`` total weight of every part in every column."""
    return np.stack([np.bincount(part, weights=weights[:, c], minlength=num_parts)
                     for c in range(weights.shape[1])], axis=1).round().astype(np.int64)


def rebalance(xadj: np.ndarray, adjncy: np.ndarray, part: np.ndarray, weights: np.ndarray,
              num_parts: int, epsilon: float, chunk: int = _CHUNK,
              rounds: int = _ROUNDS) -> int:
    """Move nodes until no part is over ``(1 + epsilon)`` times a column's mean (module docstring).

    Args:
        xadj: int64 ``[N + 1]`` row pointer of the undirected graph.
        adjncy: ``[2M]`` neighbour ids (read in chunks).
        part: int64 ``[N]`` part of every node, updated in place.
        weights: int64 ``[N, ncon]`` vertex weights.
        num_parts: ``K``.
        epsilon: Allowed imbalance.
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
                chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """The destination of each of ``nodes``, and the cut edges the move saves.

    The destination is the neighbouring part that can take the node without going over a
    cap and holds most of its neighbours (ties to a hash of node and part); failing one,
    a part drawn by :func:`_spread`. One pass over the nodes' adjacency rows, which are
    counted per neighbouring part by one sort of ``row * K + part`` keys per chunk.

    Args:
        xadj: Row pointer.
        adjncy: Neighbour ids.
        part: int64 ``[N]`` current parts.
        nodes: int64 ``[n]`` sorted ids of the nodes that may move.
        weights: int64 ``[N, ncon]`` vertex weights.
        loads: int64 ``[K, ncon]`` part loads.
        cap: int64 ``[ncon]`` the most a part may hold.
        chunk: Adjacency entries read at a time.

    Returns:
        ``(target, gain)``: int64 ``[n]`` destinations and int64 ``[n]`` the node's
        neighbours there minus its neighbours in its own part.
    """
    k = len(loads)
    target = _spread(nodes, part[nodes], weights[nodes], loads, cap, chunk)
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
    return (x.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) >> np.uint64(11)) / 2.0**53


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
    return into[good]


def _cumsum_by_group(values: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Inclusive running sums of ``values`` (along axis 0) within runs of equal ``groups``."""
    total = np.cumsum(values, axis=0)
    if not len(groups):
        return total
    first = _run_starts(groups)
    run = np.repeat(np.arange(len(first)), np.diff(np.append(first, len(groups))))
    return total - (total - values)[first][run]

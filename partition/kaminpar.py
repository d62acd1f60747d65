"""Which part owns each node, by KaMinPar (shared-memory multilevel graph partitioning).

KaMinPar (https://github.com/KaHIP/KaMinPar, ``pip install 'gnnpar[kaminpar]'``) partitions
the undirected simple graph of :func:`~gnnpar.partition.adjacency.metis_graph` on several
threads, in a third of METIS's memory, with fewer cut edges. It balances one
vertex weight only, so the quantities of ``balance`` (see :mod:`gnnpar.partition.assign`)
are kept in two steps, over several runs of which the best is kept:

1. **One weight** (:func:`combined_weight`). Each column is scaled to the total of the
   largest, the scaled columns are summed per node and rounded (at least 1), and
   KaMinPar keeps every part within ``1 + epsilon / 3`` times the mean of that sum (a
   tighter sum leaves the columns less to rebalance: on the Debian dependency graph of
   ``benchmarks/real_graphs.py`` at 2 parts, 1.08-1.10x METIS's cut edges after step 2
   instead of 1.15-1.16x). A node without neighbours weighs 1: wherever it goes it cuts
   no edge, so step 2 places it.
2. **Balancing** (:func:`~gnnpar.partition.balance.balance_partition`). A balanced sum
   leaves single columns unbalanced (a part of hubs is heavy in edges, a part of
   isolated nodes in nodes): greedy moves take every column to within ``1 + epsilon`` of
   its mean, then label propagation wins back cut edges within ``1 + epsilon + 0.015``.
   ``info["imbalance"]`` records the max/mean reached in every column.
3. **Repeats**. KaMinPar's cut varies with its seed more than the steps above can even
   out (on the Debian graph at 2 parts, 1.057-1.100x a bare METIS call's cut over seeds
   0 to 5, and 1.067-1.103x after step 2), so it runs ``repeats`` times
   (:data:`~gnnpar.partition.assign.KAMINPAR_REPEATS`, ``--kaminpar-repeats``) with
   seeds ``repeats * seed + r``, every run is balanced, and the one that cuts fewest
   edges is kept (``info["cuts"]``: every run's). All runs are made before any is
   balanced, so the graph is freed first and the memory peak is one run's plus 4 bytes
   per node per run.

Measured before step 2 had its refinement (rebalancing to 1.03 only), at ``epsilon =
0.03``, balancing nodes, train and edges on 20,000-node graphs of
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
from pathlib import Path

import numpy as np

from gnnpar.artifacts.arrays import check_written, copy_rows
from gnnpar.errors import ConfigError
from gnnpar.partition.assign import (
    KAMINPAR_REPEATS,
    check_num_parts,
    column_imbalance,
    fill_empty_parts,
)
from gnnpar.partition.balance import balance_partition, column_epsilon, cut_edges

_CHUNK = 1 << 22  # array entries read or written at a time
_CONTEXT = "eco"  # KaMinPar preset (measured against the others in the module docstring)
_HEADER_BYTES = 24
_MAX_32 = np.iinfo(np.int32).max  # below it, ids and weights are stored as uint32
# Bits of the ParHIP version word (KaMinPar's kaminpar-io/parhip_parser.cc); bit 1, no node
# weights, stays clear.
_NO_EDGE_WEIGHTS, _OFFSETS_32, _IDS_32, _WEIGHTS_32 = 1 << 0, 1 << 2, 1 << 3, 1 << 4


def kaminpar_assignment(xadj: np.ndarray, adjncy: np.ndarray, num_parts: int,
                        weights: np.ndarray, names: tuple[str, ...], seed: int,
                        threads: int, workdir: Path, compress: bool = False,
                        epsilon: float = 0.03, repeats: int = KAMINPAR_REPEATS
                        ) -> tuple[np.ndarray, dict[str, object]]:
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
        epsilon: Allowed imbalance: KaMinPar's own weight within ``1 + epsilon / 3`` of
            its mean, then every column within ``1 + epsilon`` and, after refinement,
            ``1 + epsilon + REFINE_SLACK`` (:mod:`~gnnpar.partition.balance`).
        repeats: KaMinPar runs, seeded ``repeats * seed + r``; the run that cuts fewest
            edges after balancing is kept (ties: the first).

    Returns:
        ``(part, info)``: int64 ``[N]`` part of every node, every part non-empty, and the
        settings with the cut edges of every run, the moves of the kept run's balancing
        passes and the max/mean of every column, for ``meta.json``.

    Raises:
        ConfigError: ``kaminpar`` missing, ``threads < 1``, ``repeats < 1``, ``epsilon <
            0``, ``num_parts`` out of range, ``weights`` of the wrong shape, or a graph
            too large for a 32-bit build of KaMinPar.
    """
    try:
        import kaminpar
    except ImportError as exc:
        raise ConfigError("is 'kaminpar', whose Python package is not installed.",
                          field="partition.partitioner",
                          fix="pip install 'gnnpar[kaminpar]' (or choose --partitioner metis)."
                          ) from exc
    n = len(xadj) - 1
    for name, value, flag in (("threads", threads, "--partition-threads"),
                              ("repeats", repeats, "--kaminpar-repeats")):
        if value < 1:
            raise ConfigError(f"got {name}={value}; KaMinPar needs at least 1.",
                              field=f"partition.{name}",
                              fix=f"pass {name} >= 1 (CLI: {flag}).")
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
                               "compress": compress, "repeats": repeats}
    if num_parts == 1:
        part = np.zeros(n, dtype=np.int64)
        return part, {**info, "cuts": [0], "rebalanced_moves": 0, "refined_moves": 0,
                      "refined_gain": 0, "imbalance": dict.fromkeys(names, 1.0)}

    vwgt = combined_weight(weights, xadj)
    m = int(xadj[-1])
    # kaminpar 3.7's __init__.pyi omits __64bit__, which its __init__.py exports
    # (unused-ignore: without kaminpar installed, mypy types the module as Any).
    wide: bool = kaminpar.__64bit__  # type: ignore[attr-defined, unused-ignore]
    if not wide and (np.dtype("<u8") in _parhip_dtypes(n, m, vwgt)
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
    runs = []
    for r in range(repeats):  # all runs first: the graph is freed before any balancing
        kaminpar.reseed((repeats * int(seed) + r) % 2**31)
        solver = kaminpar.KaMinPar(threads, kaminpar.context_by_name(_CONTEXT))
        runs.append(np.asarray(solver.compute_partition(graph, num_parts, epsilon / 3),
                               dtype=np.int32 if num_parts <= _MAX_32 else np.int64))
        del solver
    del graph

    cuts: list[int] = []
    for run in runs:
        candidate = run.astype(np.int64)
        passes = balance_partition(xadj, adjncy, candidate, weights, num_parts,
                                   column_epsilon(names, epsilon))
        cut = cut_edges(xadj, adjncy, candidate)
        if not cuts or cut < min(cuts):
            part, moves = candidate, passes
        cuts.append(cut)
        del candidate
    del runs
    part = fill_empty_parts(part, num_parts)
    return part, {**info, "cuts": cuts, **moves,
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
    check_written(path, _HEADER_BYTES + (n + 1) * offsets.itemsize + m * ids.itemsize
                  + n * weight.itemsize)

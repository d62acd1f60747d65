"""Which part owns each node: METIS, KaMinPar, streaming, random, contiguous, or given.

Every method returns an int64 array ``part[v]`` in ``[0, K)`` in which every part owns at
least one node, and is deterministic: the same graph, arguments and seed give the same
array on every machine.

METIS (the default), KaMinPar (:mod:`~gnnpar.partition.kaminpar`, multi-threaded) and the
streaming partitioner (:mod:`~gnnpar.partition.stream`, for graphs whose CSR does not fit
in memory) partition the undirected simple graph of
:func:`~gnnpar.partition.adjacency.metis_graph`, built on disk, with one vertex weight per
balanced quantity, so that each part gets about ``1/K`` of every quantity in ``balance``:

- ``"nodes"``: every node weighs 1 (memory for features, labels, ids);
- ``"train"``: training nodes weigh 1 (minibatches per epoch, so every rank takes the
  same number of steps without idling);
- ``"work"``: a training node weighs the rows its share of its batches computes
  (:func:`~gnnpar.partition.work.work_weight`, for the training's fan-outs and batch size:
  ``work_fanouts``, ``work_batch_size``), what a rank's CPU per epoch follows, so every
  rank's epoch is equally long, hubs' parts included; it is held to
  ``1 + WORK_EPSILON`` (1.01) where the others are held to 1.03;
- ``"sampled"``: a training node weighs the edges expected to be sampled for it
  (:func:`~gnnpar.partition.work.sampled_weight`: at most ``f_1 (1 + f_2)``);
- ``"edges"``: a node weighs its in-degree (stored adjacency; the aggregation work of
  full-graph training: ``gnnpar-train --mode full`` balances ``nodes, train, edges``
  where ``--balance`` is left at its default).

The default is ``nodes, train, work``: memory, steps and what a sampled minibatch
epoch's CPU depends on. ``edges`` is not in it because on graphs with hubs a part's
in-degree sum follows its dense core, and evening it out costs cut edges: on the Debian
dependency graph of ``benchmarks/real_graphs.py`` both METIS and KaMinPar cut 1.4-1.6x
the edges of a node-balanced METIS at 2 parts to balance in-degree alone
(``benchmarks/README.md``).

METIS balances several weights at once but overshoots on such graphs (max/mean up to 1.85
there), and KaMinPar balances one weight only; so both end with
:func:`~gnnpar.partition.balance.balance_partition`, which takes every column to within
``1 + EPSILON`` of its mean and then wins back cut edges within ``1 + EPSILON +
REFINE_SLACK`` (1.045): the partitioner arguments in ``meta.json`` record the max/mean
reached in every column. The streaming method keeps every column within 1.03 itself.

A quantity that is zero everywhere (a graph without training nodes, or without edges)
is dropped from the constraints; the partitioner arguments in ``meta.json`` record the
quantities actually balanced.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from gnnpar.artifacts.arrays import copy_rows, release
from gnnpar.errors import ConfigError, PartitionError
from gnnpar.partition.adjacency import CSR, InEdges, metis_graph
from gnnpar.partition.balance import balance_partition, column_epsilon
from gnnpar.partition.work import BATCH_SIZE, FANOUTS

if TYPE_CHECKING:
    from gnnpar.partition.config import PartitionConfig

METHODS = ("metis", "kaminpar", "stream", "random", "contiguous")
GRAPH_METHODS = ("metis", "kaminpar", "stream")
BALANCE_QUANTITIES = ("nodes", "train", "work", "sampled", "edges")
DEFAULT_BALANCE = ("nodes", "train", "work")
KAMINPAR_REPEATS = 3
"""KaMinPar runs (seeds) per partition; the one that cuts fewest edges after balancing is
kept (:func:`~gnnpar.partition.kaminpar.kaminpar_assignment`)."""
RANDOM_STREAM = 0x5EED_9A27
"""Second seed word of the random partitioner (see :func:`random_assignment`)."""


def check_num_parts(num_parts: int, num_nodes: int) -> None:
    """Raise :class:`ConfigError` unless ``1 <= num_parts <= num_nodes``."""
    if not 1 <= num_parts <= num_nodes:
        raise ConfigError(f"got {num_parts} parts for a graph of {num_nodes} nodes; every "
                          "part must own at least one node.", field="partition.num_parts",
                          fix=f"choose a number of parts in 1..{num_nodes} (--num-parts K, "
                          "or num_parts=K in Python).")


def check_balance(balance: Sequence[str]) -> tuple[str, ...]:
    """Validate the balanced quantities; return them as a tuple without repeats."""
    out = tuple(dict.fromkeys(balance))
    bad = [b for b in out if b not in BALANCE_QUANTITIES]
    if bad or not out:
        raise ConfigError(f"got {list(balance)}; each must be one of {list(BALANCE_QUANTITIES)}, "
                          "at least one.", field="balance",
                          fix="pass e.g. balance=('nodes', 'train', 'work') "
                          "(CLI: --balance nodes,train,work).")
    return out


TYPE_COLUMN_MIN = 64
"""A node type gets its own balance column from this many nodes per part on; a smaller
one is counted in the largest type's column (METIS cannot hold a handful of nodes per
part within its 3 % tolerance, and trying unbalances every other constraint)."""


def balance_weights(balance: Sequence[str], in_edges: InEdges, train_idx: np.ndarray,
                    node_offsets: Sequence[int] | None = None, num_parts: int = 1,
                    fanouts: tuple[int, ...] = FANOUTS, batch_size: int = BATCH_SIZE
                    ) -> tuple[np.ndarray, tuple[str, ...]]:
    """Vertex weights for the quantities in ``balance``.

    Args:
        balance: Quantities to balance (see the module docstring).
        in_edges: The in-edges grouped by destination (degrees; ``"sampled"`` reads the
            columns, in chunks).
        train_idx: Training node ids (repeats count: the sources of training edges).
        node_offsets: A typed graph's ``T + 1`` node-type id boundaries: ``"nodes"`` is
            then one column per type (``nodes:TYPE_INDEX``), so every part gets about
            ``1/K`` of each type (a type with fewer than :data:`TYPE_COLUMN_MIN` nodes per
            part counts in the largest type's column).
        num_parts: ``K`` (for the typed columns).
        fanouts: Fan-outs of training, seeds outwards (``"work"`` and ``"sampled"``).
        batch_size: Seeds per batch of training (``"work"`` and ``"sampled"``).

    Returns:
        ``(weights, used)``: int64 ``[N, ncon]``, one column per quantity kept (those not
        zero everywhere, ``nodes`` when none is), and the quantities' names.
    """
    in_degree = in_edges.degree()
    n = len(in_degree)
    train = np.bincount(np.asarray(train_idx), minlength=n).astype(np.int64)
    columns: dict[str, np.ndarray] = {}
    for name in check_balance(balance):
        if name == "nodes" and node_offsets is not None:
            sizes = np.diff(np.asarray(node_offsets))
            largest = int(np.argmax(sizes))
            for t, (lo, hi) in enumerate(zip(node_offsets[:-1], node_offsets[1:],
                                             strict=True)):
                own = sizes[t] >= TYPE_COLUMN_MIN * num_parts or t == largest
                column = columns.setdefault(f"nodes:{t if own else largest}",
                                            np.zeros(n, dtype=np.int64))
                column[lo:hi] = 1
        elif name == "nodes":
            columns[name] = np.ones(n, dtype=np.int64)
        elif name == "train" and len(train_idx):  # a repeated id weighs more (link sources)
            columns[name] = train
        elif name == "work" and len(train_idx):
            from gnnpar.partition.work import work_weight

            columns[name] = work_weight(in_edges, train, fanouts, batch_size)
        elif name == "sampled" and len(train_idx) and int(in_degree.sum()):
            from gnnpar.partition.work import sampled_weight

            columns[name] = sampled_weight(in_edges, train, fanouts, batch_size)
        elif name == "edges" and int(in_degree.sum()):
            columns[name] = in_degree.astype(np.int64, copy=False)
    if not columns:
        columns["nodes"] = np.ones(n, dtype=np.int64)
    return np.stack(list(columns.values()), axis=1), tuple(columns)


def metis_assignment(graph: CSR, num_parts: int, weights: np.ndarray,
                     names: tuple[str, ...], seed: int) -> tuple[np.ndarray, dict[str, object]]:
    """Partition with METIS (``pymetis.part_graph``), seeded, multi-constraint, then balance.

    Args:
        graph: The undirected simple graph (:func:`metis_graph`).
        num_parts: ``K``.
        weights: int64 ``[N, ncon]`` vertex weights from :func:`balance_weights`.
        names: Their quantities.
        seed: METIS random seed.

    Returns:
        int64 ``[N]`` part of every node, and the moves of the balancing pass
        (:func:`~gnnpar.partition.balance.balance_partition`) with the max/mean reached in
        every column.
    """
    import pymetis

    n = graph.num_nodes
    if num_parts == 1:
        return np.zeros(n, dtype=np.int64), {}
    vweights = None if names == ("nodes",) else weights.reshape(-1)
    adjacency = pymetis.CSRAdjacency(graph.indptr, np.asarray(graph.indices, dtype=np.int64))
    result = pymetis.part_graph(num_parts, adjacency, vweights=vweights,
                                options=pymetis.Options(seed=int(seed)))
    del adjacency
    release(graph.indices)
    part = np.asarray(result.vertex_part, dtype=np.int64)
    moves = balance_partition(graph.indptr, graph.indices, part, weights, num_parts,
                              column_epsilon(names))
    release(graph.indices)
    part = fill_empty_parts(part, num_parts)
    return part, {**moves, "imbalance": dict(zip(
        names, column_imbalance(part, weights, num_parts), strict=True))}


def column_imbalance(part: np.ndarray, weights: np.ndarray, num_parts: int,
                     chunk: int = 1 << 20) -> list[float]:
    """Max over mean part weight of every column of ``weights``, rounded to 6 digits.

    ``weights`` (``[N, ncon]``, possibly a memory map) is read in chunks of rows; a column
    that is zero everywhere gives 1.0.
    """
    loads = np.zeros((num_parts, weights.shape[1]))
    for a in range(0, len(part), chunk):
        w = np.asarray(copy_rows(weights, a, a + chunk), dtype=np.float64)
        for c in range(w.shape[1]):
            loads[:, c] += np.bincount(part[a:a + chunk], w[:, c], minlength=num_parts)
    mean = loads.mean(axis=0)
    return [round(float(mx / mu), 6) if mu else 1.0
            for mx, mu in zip(loads.max(axis=0), mean, strict=True)]


def fill_empty_parts(part: np.ndarray, num_parts: int) -> np.ndarray:
    """Give every empty part one node, taken from the largest part (highest id first).

    METIS may leave parts empty when ``K`` is close to ``N``.
    """
    sizes = np.bincount(part, minlength=num_parts)
    empty = np.flatnonzero(sizes == 0)
    if not len(empty):
        return part
    members = np.argsort(part, kind="stable")
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    largest = [(-int(size), k) for k, size in enumerate(sizes)]
    heapq.heapify(largest)
    for k in empty.tolist():
        neg_size, donor = heapq.heappop(largest)
        sizes[donor] -= 1
        part[members[starts[donor] + sizes[donor]]] = k
        heapq.heappush(largest, (neg_size + 1, donor))
    return part


def random_assignment(num_nodes: int, num_parts: int, seed: int) -> np.ndarray:
    """Uniformly random parts of equal size (sizes differ by at most one), seeded.

    The generator is seeded with ``(seed, RANDOM_STREAM)``, not ``seed`` alone: a
    dataset's random split draws ``default_rng(seed).permutation`` of its nodes too, and
    with equal seeds (both default to 0) the first 60% of that order -- the training
    nodes -- went mostly to the first parts (2 parts of the Debian graph: 31,718 and
    6,343 training nodes).
    """
    part = np.empty(num_nodes, dtype=np.int64)
    part[np.random.default_rng((seed, RANDOM_STREAM)).permutation(num_nodes)] = (
        np.arange(num_nodes, dtype=np.int64) * num_parts // num_nodes)
    return part


def contiguous_assignment(num_nodes: int, num_parts: int) -> np.ndarray:
    """Equal-size ranges of node ids (for graphs already ordered by locality)."""
    return np.arange(num_nodes, dtype=np.int64) * num_parts // num_nodes


def check_assignment(assignment: np.ndarray, num_nodes: int, num_parts: int) -> np.ndarray:
    """Validate a precomputed assignment; return it as int64.

    Args:
        assignment: ``[N]`` part of every node.
        num_nodes: ``N``.
        num_parts: ``K``.

    Raises:
        PartitionError: Wrong shape or dtype, a part outside ``[0, K)``, or an empty part.
    """
    a = np.asarray(assignment)
    fix = f"pass one part id in 0..{num_parts - 1} per node, every part used at least once."
    if a.ndim != 1 or len(a) != num_nodes or not np.issubdtype(a.dtype, np.integer):
        raise PartitionError(f"has dtype {a.dtype} and shape {a.shape}; expected an integer "
                             f"array of shape ({num_nodes},).", field="assignment", fix=fix)
    a = a.astype(np.int64)
    if len(a) and (int(a.min()) < 0 or int(a.max()) >= num_parts):
        bad = int(a.min()) if int(a.min()) < 0 else int(a.max())
        raise PartitionError(f"holds part {bad}, outside [0, {num_parts}).",
                             field="assignment", fix=fix)
    empty = np.flatnonzero(np.bincount(a, minlength=num_parts) == 0)
    if len(empty):
        raise PartitionError(f"leaves part {int(empty[0])} without nodes "
                             f"({len(empty)} empty parts).", field="assignment", fix=fix)
    return a


def check_method(method: str) -> None:
    """Raise :class:`ConfigError` unless ``method`` is a known partitioner (:data:`METHODS`)."""
    if method not in METHODS:
        raise ConfigError(f"got partitioner {method!r}; need one of {', '.join(METHODS)}.",
                          field="partition.partitioner",
                          fix=f"pass --partitioner {METHODS[0]} (PartitionConfig(partitioner="
                          f"{METHODS[0]!r}) in Python).")


def assign_parts(in_edges: InEdges, config: PartitionConfig, train_idx: np.ndarray,
                 workdir: Path, assignment: np.ndarray | None = None,
                 node_offsets: Sequence[int] | None = None
                 ) -> tuple[np.ndarray, dict[str, object]]:
    """The part of every node, by ``config.partitioner`` or from ``assignment``.

    Checks the partitioner (unless ``assignment`` is given) and the balanced quantities.

    Args:
        in_edges: The grouped source graph.
        config: The partition settings: ``num_parts`` (``K``, already checked against
            ``N``), the partitioner (ignored when ``assignment`` is given), the balanced
            quantities (see :func:`balance_weights`), the seed (every method but
            ``contiguous``), the memory budget for building the undirected graph and
            KaMinPar's threads, compression and repeats.
        train_idx: Training node ids (for the ``"train"`` weight).
        workdir: Scratch directory for the undirected graph the graph methods read.
        assignment: A precomputed ``[N]`` part array.
        node_offsets: A typed graph's node-type boundaries (see :func:`balance_weights`).

    Returns:
        ``(part, partitioner)``: int64 ``[N]`` and the method with its arguments, for
        ``meta.json``.
    """
    n, num_parts = in_edges.num_nodes, config.require_parts()
    method, seed = config.partitioner, config.seed
    if assignment is not None:
        return check_assignment(assignment, n, num_parts), {"method": "precomputed"}
    check_method(method)
    if method == "random":
        return random_assignment(n, num_parts, seed), {"method": method, "seed": seed}
    if method == "contiguous":
        return contiguous_assignment(n, num_parts), {"method": method}
    fanouts = config.work_fanouts or FANOUTS
    batch_size = config.work_batch_size or BATCH_SIZE
    weights, used = balance_weights(config.balance, in_edges, train_idx, node_offsets,
                                    num_parts, fanouts, batch_size)
    work: dict[str, object] = ({"work_fanouts": fanouts, "work_batch_size": batch_size}
                               if {"work", "sampled"} & set(used) else {})
    graph = metis_graph(in_edges, workdir, int(config.memory_budget * 1e9))
    if method == "kaminpar":
        from gnnpar.partition.kaminpar import kaminpar_assignment

        part, extra = kaminpar_assignment(graph.indptr, graph.indices, num_parts, weights,
                                          used, seed, config.threads, workdir,
                                          config.compress, repeats=config.repeats)
    elif method == "stream":
        from gnnpar.partition.stream import stream_assignment

        part, extra = stream_assignment(graph.indptr, graph.indices, num_parts, weights,
                                        used, seed)
    else:
        part, extra = metis_assignment(graph, num_parts, weights, used, seed)
    return part, {"method": method, "seed": seed, "balance": list(used), **work, **extra}

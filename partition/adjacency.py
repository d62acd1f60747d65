"""The source graph grouped by destination, and the undirected graph METIS partitions, on disk.

Both are compressed sparse rows (CSR; rows = destinations, columns = sources) built by an
external bucket sort whose working set is bounded by a byte budget, whatever the graph's
size:

1. one pass over the edges in chunks counts each row's entries;
2. rows are cut into buckets of contiguous rows holding at most the budget's share of
   entries; a second pass appends each chunk's entries, as ``row * N + col`` keys, to
   their bucket's file (sequential writes);
3. each bucket is read back, sorted (and, for the simple graph, deduplicated), and its
   columns are appended to the output file in row order (sequential again).

Only the row pointers (``8 (N + 1)`` bytes) and one chunk or bucket are in memory; the
columns live in a file under the work directory and are read as a memory map whose
pages :func:`~gnnpar.io.release` drops after each use. A graph that fits the budget is
one bucket, sorted in memory, with the same result.

- :class:`InEdges` holds every edge of the source graph exactly once (duplicates
  repeated, self-loops kept), sources sorted within each destination;
- :func:`metis_graph` is the pattern of ``A + A^T`` without its diagonal: symmetric,
  self-loop-free and deduplicated, as METIS requires, neighbours sorted.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gnnpar.io import copy_rows, release

DEFAULT_BUDGET = 2 << 30  # bytes of working set, gnnpar-partition --memory-budget
# Working bytes per entry: a chunk of the edge list (two ids read, key, bucket, order,
# reordered key) and a bucket being sorted (key, columns, output cast).
_CHUNK_BYTES_PER_EDGE = 64
_BUCKET_BYTES_PER_EDGE = 32
_MIN_ENTRIES = 1 << 10
_OPEN_FILES = 256  # bucket files written at a time

Chunks = Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]]


@dataclass(frozen=True)
class CSR:
    """Rows of column ids: ``indices[indptr[v]:indptr[v + 1]]`` are row ``v``'s, sorted.

    Attributes:
        indptr: int64 ``[N + 1]`` row pointer (in memory).
        indices: ``[nnz]`` column ids (int32 when ``N < 2**31``, else int64), usually a
            read-only memory map.
    """

    indptr: np.ndarray
    indices: np.ndarray

    @property
    def num_nodes(self) -> int:
        """Number of rows ``N``."""
        return len(self.indptr) - 1

    def degree(self) -> np.ndarray:
        """int64 ``[N]`` entries of each row."""
        return np.diff(self.indptr)

    def rows(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rows of ``nodes``, in that order, as a CSR over their positions.

        Args:
            nodes: int64 ``[n]`` row ids.

        Returns:
            ``(indptr, cols)``: int64 ``[n + 1]`` and int64 ``[nnz]``, row ``nodes[i]``
            being ``cols[indptr[i]:indptr[i + 1]]``.
        """
        return take_rows(self.indptr, self.indices, nodes)


InEdges = CSR
"""In-edges grouped by destination: row ``v`` holds the sources of ``v``'s in-edges,
one entry per edge (an edge given ``m`` times appears ``m`` times)."""


def take_rows(indptr: np.ndarray, indices: np.ndarray,
              rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``rows`` of a compressed matrix, concatenated in that order.

    Args:
        indptr: int64 ``[R + 1]`` row pointer.
        indices: ``[nnz]`` column ids (a memory map's pages are released after).
        rows: int64 ``[n]`` rows to take.

    Returns:
        ``(sub_indptr [n + 1] int64, sub_indices int64)``.
    """
    start = indptr[rows]
    count = indptr[rows + 1] - start
    sub_ptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(count, out=sub_ptr[1:])
    pos = np.arange(int(sub_ptr[-1]), dtype=np.int64)
    pos += np.repeat(start - sub_ptr[:-1], count)
    out = indices[pos].astype(np.int64, copy=False)
    release(indices)
    return sub_ptr, out


def _index_dtype(num_nodes: int) -> type:
    return np.int32 if num_nodes < np.iinfo(np.int32).max else np.int64


def _edge_chunks(src: np.ndarray, dst: np.ndarray, budget: int) -> Chunks:
    """``(rows, cols) = (dst, src)`` of the edge list, chunk by chunk."""
    step = max(_MIN_ENTRIES, budget // _CHUNK_BYTES_PER_EDGE)

    def chunks() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for a in range(0, len(src), step):
            yield (copy_rows(dst, a, a + step).astype(np.int64, copy=False),
                   copy_rows(src, a, a + step).astype(np.int64, copy=False))
    return chunks


def _csr_chunks(csr: CSR, budget: int) -> Chunks:
    """``(row, col)`` of every entry of ``csr``, then ``(col, row)``: ``A`` and ``A^T``."""
    step = max(_MIN_ENTRIES, budget // _CHUNK_BYTES_PER_EDGE)
    bounds = _cuts(csr.indptr, step)

    def chunks() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            lo, hi = int(csr.indptr[a]), int(csr.indptr[b])
            row = np.repeat(np.arange(a, b, dtype=np.int64), np.diff(csr.indptr[a:b + 1]))
            col = copy_rows(csr.indices, lo, hi).astype(np.int64, copy=False)
            yield row, col
            yield col, row
    return chunks


def _cuts(indptr: np.ndarray, per_cut: int) -> list[int]:
    """Row boundaries ``0 = r_0 < ... < r_m = N``, about ``per_cut`` entries apart.

    More entries lie between two boundaries only where one row alone holds more.
    """
    n = len(indptr) - 1
    total = int(indptr[-1])
    targets = np.arange(per_cut, total, per_cut, dtype=np.int64)
    cuts = np.searchsorted(indptr, targets, side="right") - 1
    return sorted({0, n, *(int(c) for c in cuts if 0 < c < n)})


def group(num_nodes: int, chunks: Chunks, row_bound: np.ndarray, simple: bool,
          out: Path, budget: int) -> CSR:
    """Sort the entries that ``chunks`` yields into a CSR on disk (the module's bucket sort).

    Args:
        num_nodes: ``N`` (rows and columns).
        chunks: Yields ``(rows, cols)`` int64 arrays; called again for each group of
            :data:`_OPEN_FILES` buckets when the entries need more than one.
        row_bound: int64 ``[N]`` at least the number of entries of each row (exact
            without ``simple``).
        simple: Drop diagonal entries and repeats (the simple graph), else keep all.
        out: File to write the columns to (raw, no header).
        budget: Bytes of working set.

    Returns:
        The CSR, ``indices`` a read-only memory map of ``out``.
    """
    n = num_nodes
    dtype = _index_dtype(n)
    bound_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(row_bound, out=bound_ptr[1:])
    cuts = _cuts(bound_ptr, max(_MIN_ENTRIES, budget // _BUCKET_BYTES_PER_EDGE))
    del bound_ptr
    indptr = np.zeros(n + 1, dtype=np.int64)
    buckets = [out.with_name(f"{out.name}.bucket-{i}") for i in range(len(cuts) - 1)]
    try:
        if len(buckets) > 1:
            _scatter(chunks, cuts, simple, n, buckets)
        with open(out, "wb") as f:
            for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:], strict=True)):
                if len(buckets) > 1:
                    keys = np.fromfile(buckets[i], dtype=np.int64)
                    os.unlink(buckets[i])
                else:
                    keys = np.concatenate([_keys(r, c, simple, n) for r, c in chunks()]
                                          or [np.zeros(0, np.int64)])
                keys.sort()
                if simple and len(keys):
                    keep = np.ones(len(keys), dtype=bool)
                    np.not_equal(keys[1:], keys[:-1], out=keep[1:])
                    keys = keys[keep]
                    del keep
                row_start = np.searchsorted(keys, np.arange(a, b + 1, dtype=np.int64) * n)
                indptr[a + 1:b + 1] = indptr[a] + row_start[1:]
                np.remainder(keys, n, out=keys)
                keys.astype(dtype).tofile(f)
                del keys
    finally:
        for path in buckets:
            path.unlink(missing_ok=True)
    nnz = int(indptr[-1])
    indices = (np.memmap(out, dtype=dtype, mode="r", shape=(nnz,)) if nnz
               else np.zeros(0, dtype=dtype))
    return CSR(indptr, indices)


def _keys(rows: np.ndarray, cols: np.ndarray, simple: bool, n: int) -> np.ndarray:
    """int64 ``row * N + col`` of each entry (diagonal dropped when ``simple``)."""
    if simple:
        keep = rows != cols
        rows, cols = rows[keep], cols[keep]
    keys = rows * n
    keys += cols
    return keys


def _scatter(chunks: Chunks, cuts: list[int], simple: bool, n: int,
             buckets: list[Path]) -> None:
    """Append every entry's key to the file of the bucket holding its row.

    At most :data:`_OPEN_FILES` bucket files are open at a time: with more buckets, one
    pass over the chunks fills each group of them (a small budget on a large graph costs
    passes, not file handles).
    """
    for g0 in range(0, len(buckets), _OPEN_FILES):
        g1 = min(g0 + _OPEN_FILES, len(buckets))
        lo, hi = cuts[g0] * n, cuts[g1] * n
        inner = np.asarray(cuts[g0 + 1:g1], dtype=np.int64) * n
        files = [open(path, "wb") for path in buckets[g0:g1]]  # noqa: SIM115 - closed below
        try:
            for rows, cols in chunks():
                keys = _keys(rows, cols, simple, n)
                del rows, cols
                if g0 or g1 < len(buckets):
                    keys = keys[(keys >= lo) & (keys < hi)]
                which = np.searchsorted(inner, keys, side="right")
                order = np.argsort(which, kind="stable")
                keys, which = keys[order], which[order]
                del order
                ends = np.searchsorted(which, np.arange(1, len(files) + 1))
                start = 0
                for f, end in zip(files, ends.tolist(), strict=True):
                    if end > start:
                        keys[start:end].tofile(f)
                    start = end
        finally:
            for f in files:
                f.close()


def group_in_edges(num_nodes: int, src: np.ndarray, dst: np.ndarray, workdir: Path,
                   budget: int = DEFAULT_BUDGET) -> InEdges:
    """Group the edges ``src[i] -> dst[i]`` by destination, on disk under ``workdir``.

    Args:
        num_nodes: ``N``.
        src: ``[E]`` integer source ids in ``[0, N)`` (a memory map is read in chunks).
        dst: ``[E]`` integer destination ids in ``[0, N)``.
        workdir: Directory for the columns file (``in_edges.bin``) and the buckets.
        budget: Bytes of working set.

    Returns:
        The in-edges, with every edge exactly once, sources sorted per destination.
    """
    chunks = _edge_chunks(src, dst, budget)
    degree = np.zeros(num_nodes, dtype=np.int64)
    for rows, _ in chunks():
        degree += np.bincount(rows, minlength=num_nodes)
    return group(num_nodes, chunks, degree, simple=False, out=workdir / "in_edges.bin",
                 budget=budget)


def metis_graph(in_edges: InEdges, workdir: Path, budget: int = DEFAULT_BUDGET) -> CSR:
    """The undirected simple graph METIS partitions: ``A + A^T``, no self-loops, no repeats.

    Args:
        in_edges: The grouped source graph.
        workdir: Directory for the columns file (``undirected.bin``) and the buckets.
        budget: Bytes of working set.

    Returns:
        The CSR (``xadj = indptr``, ``adjncy = indices``), each undirected edge stored in
        both directions, neighbours sorted.
    """
    n = in_edges.num_nodes
    bound = in_edges.degree()
    out_degree = np.zeros(n, dtype=np.int64)
    step = max(_MIN_ENTRIES, budget // _CHUNK_BYTES_PER_EDGE)
    for a in range(0, len(in_edges.indices), step):
        out_degree += np.bincount(copy_rows(in_edges.indices, a, a + step), minlength=n)
    bound += out_degree
    del out_degree
    return group(n, _csr_chunks(in_edges, budget), bound, simple=True,
                 out=workdir / "undirected.bin", budget=budget)

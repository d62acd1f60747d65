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
pages :func:`~gnnpar.artifacts.arrays.release` drops after each use. A graph that fits the budget is
one bucket, sorted in memory, with the same result.

- :class:`InEdges` holds every edge of the source graph exactly once (duplicates
  repeated, self-loops kept), sources sorted within each destination (repeats of one
  edge in edge-id order), and each entry's edge id -- its position in the input edge
  list -- in a second file, ``edge_ids``, aligned with the columns;
- :func:`metis_graph` is the pattern of ``A + A^T`` without its diagonal: symmetric,
  self-loop-free and deduplicated, as METIS requires, neighbours sorted.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gnnpar.artifacts.arrays import check_written, copy_rows, release

DEFAULT_BUDGET = 2 << 30  # bytes of working set where a caller gives none (the config: GB)
# Working bytes per entry: a chunk of the edge list (two ids read, key, bucket, order,
# reordered key) and a bucket being sorted (key, columns, output cast).
_CHUNK_BYTES_PER_EDGE = 64
_BUCKET_BYTES_PER_EDGE = 32
_ID_BYTES_PER_EDGE = 32  # more of both with edge ids (id, its reordered copy, the order)
_MIN_ENTRIES = 1 << 10
_OPEN_FILES = 256  # bucket files written at a time

Chunks = Callable[[], Iterator[tuple[np.ndarray, np.ndarray, np.ndarray | None]]]
"""Yields ``(rows, cols, ids)`` int64 arrays per chunk (``ids`` ``None``: no edge ids)."""


@dataclass(frozen=True)
class CSR:
    """Rows of column ids: ``indices[indptr[v]:indptr[v + 1]]`` are row ``v``'s, sorted.

    Attributes:
        indptr: int64 ``[N + 1]`` row pointer (in memory).
        indices: ``[nnz]`` column ids (int32 when ``N < 2**31``, else int64), usually a
            read-only memory map.
        edge_ids: int64 ``[nnz]`` the input edge id of each entry (a read-only memory
            map), or ``None`` (the undirected graph has none).
    """

    indptr: np.ndarray
    indices: np.ndarray
    edge_ids: np.ndarray | None = None

    @property
    def num_nodes(self) -> int:
        """Number of rows ``N``."""
        return len(self.indptr) - 1

    def degree(self) -> np.ndarray:
        """int64 ``[N]`` entries of each row."""
        return np.diff(self.indptr)

    def entries(self, max_entries: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield ``(row, col)`` int64 arrays of every entry, blocks of whole rows in order.

        A block holds about ``max_entries`` entries (more only where one row alone does);
        the columns' memory-map pages are read once per block.
        """
        bounds = _cuts(self.indptr, max(1, max_entries))
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            lo, hi = int(self.indptr[a]), int(self.indptr[b])
            row = np.repeat(np.arange(a, b, dtype=np.int64), np.diff(self.indptr[a:b + 1]))
            yield row, copy_rows(self.indices, lo, hi).astype(np.int64, copy=False)

    def rows(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """The rows of ``nodes``, in that order, as a CSR over their positions.

        Args:
            nodes: int64 ``[n]`` row ids.

        Returns:
            ``(indptr, cols, ids)``: int64 ``[n + 1]``, int64 ``[nnz]`` and the entries'
            int64 edge ids (``None`` without), row ``nodes[i]`` being
            ``cols[indptr[i]:indptr[i + 1]]``.
        """
        return take_rows(self.indptr, self.indices, nodes, self.edge_ids)


InEdges = CSR
"""In-edges grouped by destination: row ``v`` holds the sources of ``v``'s in-edges,
one entry per edge (an edge given ``m`` times appears ``m`` times)."""


def take_rows(indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray,
              ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Rows ``rows`` of a compressed matrix, concatenated in that order.

    Args:
        indptr: int64 ``[R + 1]`` row pointer.
        indices: ``[nnz]`` column ids (a memory map's pages are released after).
        rows: int64 ``[n]`` rows to take.
        ids: ``[nnz]`` a second array aligned with ``indices`` (edge ids), or ``None``.

    Returns:
        ``(sub_indptr [n + 1] int64, sub_indices int64, sub_ids int64 or None)``.
    """
    start = indptr[rows]
    count = indptr[rows + 1] - start
    sub_ptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(count, out=sub_ptr[1:])
    pos = np.arange(int(sub_ptr[-1]), dtype=np.int64)
    pos += np.repeat(start - sub_ptr[:-1], count)
    out = indices[pos].astype(np.int64, copy=False)
    release(indices)
    if ids is None:
        return sub_ptr, out, None
    out_ids = ids[pos].astype(np.int64, copy=False)
    release(ids)
    return sub_ptr, out, out_ids


def _index_dtype(num_nodes: int) -> type:
    return np.int32 if num_nodes < np.iinfo(np.int32).max else np.int64


def _edge_chunks(src: np.ndarray, dst: np.ndarray, budget: int) -> Chunks:
    """``(rows, cols, ids) = (dst, src, edge id)`` of the edge list, chunk by chunk."""
    step = max(_MIN_ENTRIES, budget // (_CHUNK_BYTES_PER_EDGE + _ID_BYTES_PER_EDGE))

    def chunks() -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
        for a in range(0, len(src), step):
            rows = copy_rows(dst, a, a + step).astype(np.int64, copy=False)
            yield (rows, copy_rows(src, a, a + step).astype(np.int64, copy=False),
                   np.arange(a, a + len(rows), dtype=np.int64))
    return chunks


def _csr_chunks(csr: CSR, budget: int) -> Chunks:
    """``(row, col)`` of every entry of ``csr``, then ``(col, row)``: ``A`` and ``A^T``."""
    step = max(_MIN_ENTRIES, budget // _CHUNK_BYTES_PER_EDGE)

    def chunks() -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
        for row, col in csr.entries(step):
            yield row, col, None
            yield col, row, None
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
          out: Path, budget: int, with_ids: bool = False) -> CSR:
    """Sort the entries that ``chunks`` yields into a CSR on disk (the module's bucket sort).

    Args:
        num_nodes: ``N`` (rows and columns).
        chunks: Yields ``(rows, cols, ids)`` int64 arrays; called again for each group of
            :data:`_OPEN_FILES` buckets when the entries need more than one.
        row_bound: int64 ``[N]`` at least the number of entries of each row (exact
            without ``simple``).
        simple: Drop diagonal entries and repeats (the simple graph), else keep all.
        out: File to write the columns to (raw, no header).
        budget: Bytes of working set.
        with_ids: Keep each entry's id (``chunks`` yields them; not with ``simple``) in
            ``out.ids``, aligned with the columns; equal entries stay in id order.

    Returns:
        The CSR, ``indices`` (and ``edge_ids``) read-only memory maps of the files.
    """
    n = num_nodes
    dtype = _index_dtype(n)
    bound_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(row_bound, out=bound_ptr[1:])
    per_entry = _BUCKET_BYTES_PER_EDGE + (_ID_BYTES_PER_EDGE if with_ids else 0)
    cuts = _cuts(bound_ptr, max(_MIN_ENTRIES, budget // per_entry))
    del bound_ptr
    indptr = np.zeros(n + 1, dtype=np.int64)
    buckets = [out.with_name(f"{out.name}.bucket-{i}") for i in range(len(cuts) - 1)]
    id_out = out.with_name(f"{out.name}.ids")
    id_buckets = [p.with_name(f"{p.name}.ids") for p in buckets] if with_ids else []
    try:
        if len(buckets) > 1:
            _scatter(chunks, cuts, simple, n, buckets, id_buckets)
        with open(out, "wb") as f, open(id_out, "wb") if with_ids else _no_file() as f_ids:
            for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:], strict=True)):
                ids = None
                if len(buckets) > 1:
                    keys = np.fromfile(buckets[i], dtype=np.int64)
                    os.unlink(buckets[i])
                    if with_ids:
                        ids = np.fromfile(id_buckets[i], dtype=np.int64)
                        os.unlink(id_buckets[i])
                else:
                    parts = [(_keys(r, c, simple, n), e) for r, c, e in chunks()]
                    keys = np.concatenate([k for k, _ in parts] or [np.zeros(0, np.int64)])
                    if with_ids:
                        ids = np.concatenate([e for _, e in parts if e is not None]
                                             or [np.zeros(0, np.int64)])
                    del parts
                if ids is not None:  # stable: repeats of an entry keep their id order
                    assert f_ids is not None, "ids are read only when with_ids opened id_out"
                    order = np.argsort(keys, kind="stable")
                    keys, ids = keys[order], ids[order]
                    del order
                    ids.tofile(f_ids)
                    del ids
                else:
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
        for path in buckets + id_buckets:
            path.unlink(missing_ok=True)
    nnz = int(indptr[-1])

    def mapped(path: Path, kind: type) -> np.ndarray:
        check_written(path, nnz * np.dtype(kind).itemsize)  # a full disk's short write
        return np.memmap(path, dtype=kind, mode="r", shape=(nnz,)) if nnz else np.zeros(0, kind)

    return CSR(indptr, mapped(out, dtype), mapped(id_out, np.int64) if with_ids else None)


@contextlib.contextmanager
def _no_file() -> Iterator[None]:
    yield None


def _keys(rows: np.ndarray, cols: np.ndarray, simple: bool, n: int) -> np.ndarray:
    """int64 ``row * N + col`` of each entry (diagonal dropped when ``simple``)."""
    if simple:
        keep = rows != cols
        rows, cols = rows[keep], cols[keep]
    keys = rows * n
    keys += cols
    return keys


def _scatter(chunks: Chunks, cuts: list[int], simple: bool, n: int,
             buckets: list[Path], id_buckets: list[Path]) -> None:
    """Append every entry's key (and id, to ``id_buckets``) to its row's bucket file.

    At most :data:`_OPEN_FILES` bucket files are open at a time: with more buckets, one
    pass over the chunks fills each group of them (a small budget on a large graph costs
    passes, not file handles).
    """
    for g0 in range(0, len(buckets), _OPEN_FILES):
        g1 = min(g0 + _OPEN_FILES, len(buckets))
        lo, hi = cuts[g0] * n, cuts[g1] * n
        inner = np.asarray(cuts[g0 + 1:g1], dtype=np.int64) * n
        files = [open(path, "wb") for path in buckets[g0:g1]]  # noqa: SIM115 - closed below
        id_files = [open(path, "wb") for path in id_buckets[g0:g1]]  # noqa: SIM115
        try:
            for rows, cols, ids in chunks():
                if simple:
                    keep = rows != cols
                    rows, cols = rows[keep], cols[keep]
                    ids = None if ids is None else ids[keep]
                keys = _keys(rows, cols, False, n)
                del rows, cols
                if g0 or g1 < len(buckets):
                    inside = (keys >= lo) & (keys < hi)
                    keys = keys[inside]
                    ids = None if ids is None else ids[inside]
                which = np.searchsorted(inner, keys, side="right")
                order = np.argsort(which, kind="stable")
                keys, which = keys[order], which[order]
                if id_files:
                    assert ids is not None, "with_ids: chunks must yield the ids"
                    ids = ids[order]
                else:
                    ids = None  # no id buckets to write them to
                del order
                ends = np.searchsorted(which, np.arange(1, len(files) + 1))
                start = 0
                for j, end in enumerate(ends.tolist()):
                    if end > start:
                        keys[start:end].tofile(files[j])
                        if ids is not None:  # id_files holds a file per bucket
                            ids[start:end].tofile(id_files[j])
                    start = end
        finally:
            for f in files + id_files:
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
        The in-edges, with every edge exactly once, sources sorted per destination, and
        their edge ids (positions in ``src``/``dst``).
    """
    chunks = _edge_chunks(src, dst, budget)
    degree = np.zeros(num_nodes, dtype=np.int64)
    for rows, _, _ in chunks():
        degree += np.bincount(rows, minlength=num_nodes)
    return group(num_nodes, chunks, degree, simple=False, out=workdir / "in_edges.bin",
                 budget=budget, with_ids=True)


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

"""The source graph grouped by destination, and the undirected graph METIS partitions.

Both are ``scipy.sparse`` CSR matrices with rows = destinations and columns = sources,
built by scipy's counting sort in C (or taken as is when the edges are already sorted,
as saved datasets usually are), so grouping tens of millions of edges needs no
comparison sort, and taking the rows of a part is one C loop:

- :class:`InEdges` holds every edge of the source graph exactly once (duplicates
  repeated, self-loops kept), plus its deduplicated pattern;
- :func:`metis_graph` is the pattern of ``A + A^T`` without its diagonal: symmetric,
  self-loop-free and deduplicated, as METIS requires, in the int64 CSR that ``pymetis``
  hands to METIS without a copy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp


@dataclass(frozen=True)
class InEdges:
    """In-edges of every node, grouped by destination.

    Attributes:
        matrix: ``[N, N]`` CSR whose row ``v`` holds the sources of ``v``'s in-edges, one
            entry per edge (an edge given ``m`` times appears ``m`` times), sorted.
        pattern: The same without repeated entries (``matrix`` itself when the graph has
            no duplicate edges).
    """

    matrix: sp.csr_matrix
    pattern: sp.csr_matrix

    @property
    def num_nodes(self) -> int:
        """Number of nodes ``N``."""
        return int(self.matrix.shape[0])

    def in_degree(self) -> np.ndarray:
        """int64 ``[N]`` number of in-edges of each node."""
        return np.asarray(np.diff(self.matrix.indptr), dtype=np.int64)

    def rows(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The in-edges of ``nodes``, as a CSC over their positions in ``nodes``.

        Args:
            nodes: int64 ``[n]`` node ids, in the order wanted.

        Returns:
            ``(indptr, src)``: int64 ``[n + 1]`` and int ``[nnz]``, the sources of
            ``nodes[i]`` being ``src[indptr[i]:indptr[i + 1]]``.
        """
        return _csr_rows(self.matrix, nodes)


def group_in_edges(num_nodes: int, src: np.ndarray, dst: np.ndarray) -> InEdges:
    """Group the edges ``src[i] -> dst[i]`` by destination.

    Args:
        num_nodes: ``N``.
        src: ``[E]`` integer source ids in ``[0, N)`` (a memory map is read once).
        dst: ``[E]`` integer destination ids in ``[0, N)``.

    Returns:
        The in-edges, with every edge exactly once.
    """
    shape = (num_nodes, num_nodes)
    idx = np.int32 if max(num_nodes, len(src)) < np.iinfo(np.int32).max else np.int64
    if len(dst) < 2 or bool((dst[1:] >= dst[:-1]).all()):
        # Already grouped by destination (e.g. saved sorted): no sort of the edge list.
        indptr = np.zeros(num_nodes + 1, dtype=idx)
        np.cumsum(np.bincount(dst, minlength=num_nodes), out=indptr[1:])
        indices = np.array(src, dtype=idx)
        if len(dst) < 2 or bool(((dst[1:] > dst[:-1]) | (indices[1:] > indices[:-1])).all()):
            # Sorted by (dst, src) without repeats: already canonical.
            matrix = sp.csr_matrix((np.ones(len(indices), np.int8), indices, indptr),
                                   shape=shape)
            matrix.has_canonical_format = True
            return InEdges(matrix, matrix)
        pattern = sp.csr_matrix((np.ones(len(indices), np.int32), indices, indptr), shape=shape)
    else:
        pattern = sp.csr_matrix((np.ones(len(src), np.int32), (dst, src)), shape=shape)
    pattern.sum_duplicates()
    multiplicity = pattern.data
    if int(multiplicity.max(initial=0)) <= 1:
        return InEdges(pattern, pattern)
    cum = np.zeros(len(multiplicity) + 1, dtype=np.int64)
    np.cumsum(multiplicity, out=cum[1:])
    matrix = sp.csr_matrix((np.ones(int(cum[-1]), np.int8), np.repeat(pattern.indices,
                            multiplicity), cum[pattern.indptr]), shape=shape)
    return InEdges(matrix, pattern)


def take_rows(indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray,
              num_cols: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``rows`` of a compressed matrix, concatenated in that order.

    Args:
        indptr: ``[R + 1]`` row pointer.
        indices: ``[nnz]`` column ids in ``[0, num_cols)``.
        rows: ``[n]`` rows to take.
        num_cols: Number of columns.

    Returns:
        ``(sub_indptr [n + 1] int64, sub_indices)``.
    """
    matrix = sp.csr_matrix((np.ones(len(indices), np.int8), indices, indptr),
                           shape=(len(indptr) - 1, num_cols))
    return _csr_rows(matrix, rows)


def _csr_rows(matrix: sp.csr_matrix, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``rows`` of ``matrix`` as ``(indptr [n + 1] int64, indices)``, in that order."""
    sub = matrix[rows]
    return sub.indptr.astype(np.int64, copy=False), sub.indices


def metis_graph(in_edges: InEdges) -> tuple[np.ndarray, np.ndarray]:
    """The undirected simple graph METIS partitions: ``A + A^T``, no self-loops, no repeats.

    Args:
        in_edges: The grouped source graph.

    Returns:
        ``(xadj [N + 1], adjncy [2M])``, int64, each undirected edge stored in both
        directions, neighbours sorted.
    """
    a = in_edges.pattern
    n = in_edges.num_nodes
    indices, indptr = a.indices, a.indptr
    if a.diagonal().any():
        # The pattern is deduplicated: at most one self-loop per row.
        row = np.repeat(np.arange(n, dtype=indices.dtype), np.diff(indptr))
        loop = indices == row
        dropped = np.zeros(n + 1, dtype=indptr.dtype)
        np.cumsum(np.bincount(row[loop], minlength=n), out=dropped[1:])
        indices, indptr = indices[~loop], indptr - dropped
        del row, loop
    simple = sp.csr_matrix((np.ones(len(indices), np.int8), indices, indptr), shape=(n, n))
    transposed = simple.T.tocsr()
    if not (np.array_equal(transposed.indptr, simple.indptr)
            and np.array_equal(transposed.indices, simple.indices)):
        simple = (simple + transposed).tocsr()
        simple.sum_duplicates()
    del transposed
    return simple.indptr.astype(np.int64), simple.indices.astype(np.int64)

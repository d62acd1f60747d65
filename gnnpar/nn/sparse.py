"""Sparse aggregation: one sparse-dense product instead of PyG's gather and scatter.

PyG's ``MessagePassing`` materialises a message per edge (``x[src]``, ``[E, F]``) and
scatters it into the destinations; a CSR matrix product (MKL on CPU, cuSPARSE on CUDA)
computes the same weighted sums reading each source row where it lies.  On a sampled
GraphSAGE batch (100 features, 97k edges) the forward aggregation takes 3 ms instead of
24 ms on one CPU thread.  The transpose needed for the gradient of the sources is built
only when they require a gradient (not for the input features).

:class:`SparseAdjacency` is the matrix ``A[d, s]`` = weight of edge ``s -> d``; ``A @ h``
is differentiable in ``h``.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

from gnnpar.ops import count


def _csr(rowptr: Tensor, col: Tensor, values: Tensor, shape: tuple[int, int]) -> Tensor:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support")
        warnings.filterwarnings("ignore", message="Sparse invariant checks")
        return torch.sparse_csr_tensor(rowptr, col, values, shape, check_invariants=False)


def _rowptr(rows: Tensor, num_rows: int) -> Tensor:
    """CSR row pointer of entries sorted by row."""
    ptr = torch.zeros(num_rows + 1, dtype=torch.int64, device=rows.device)
    torch.cumsum(count(rows, num_rows), 0, out=ptr[1:])
    return ptr


class _SpMM(torch.autograd.Function):
    """``A @ h`` with a fixed sparse ``A``; the backward is ``A^T @ grad``."""

    @staticmethod
    def forward(fctx: torch.autograd.function.FunctionCtx, h: Tensor,
                adj: SparseAdjacency) -> Tensor:
        fctx.adj = adj  # type: ignore[attr-defined]
        out: Tensor = torch.sparse.mm(adj.a, h)
        return out

    @staticmethod
    def backward(fctx: torch.autograd.function.FunctionCtx,
                 grad: Tensor) -> tuple[Tensor | None, None]:
        return torch.sparse.mm(fctx.adj.transposed(), grad), None  # type: ignore[attr-defined]


class SparseAdjacency:
    """A fixed weighted adjacency in CSR form; its transpose is built on first use.

    Duplicate edges add their weights, as PyG's ``"add"`` aggregation does.

    Args:
        src: ``[E]`` source of each edge (a column of ``A``).
        dst: ``[E]`` destination of each edge (a row), **sorted** ascending.
        weight: ``[E]`` weight of each edge.
        num_dst: Rows of ``A``.
        num_src: Columns of ``A``.

    Attributes:
        a: ``[num_dst, num_src]`` sparse CSR, ``a[d, s]`` = weight of edge ``s -> d``.
    """

    def __init__(self, src: Tensor, dst: Tensor, weight: Tensor, num_dst: int,
                 num_src: int) -> None:
        self.a = _csr(_rowptr(dst, num_dst), src, weight, (num_dst, num_src))
        self._src, self._dst, self._weight = src, dst, weight
        self._t: Tensor | None = None
        self._cast: dict[torch.dtype, SparseAdjacency] = {}

    @classmethod
    def from_edges(cls, edge_index: Tensor, weight: Tensor, num_dst: int,
                   num_src: int) -> SparseAdjacency:
        """Build from ``[2, E]`` (source, destination) edges in any order."""
        order = torch.argsort(edge_index[1], stable=True)
        return cls(edge_index[0, order], edge_index[1, order], weight[order], num_dst, num_src)

    def transposed(self) -> Tensor:
        """``A^T``, ``[num_src, num_dst]`` sparse CSR (built once)."""
        if self._t is None:
            order = torch.argsort(self._src, stable=True)
            num_dst, num_src = self.a.shape
            self._t = _csr(_rowptr(self._src[order], num_src), self._dst[order],
                           self._weight[order], (num_src, num_dst))
        return self._t

    def __matmul__(self, h: Tensor) -> Tensor:
        """``[num_dst, F]`` weighted sums of the rows ``h [num_src, F]`` (autograd).

        Any floating dtype of ``h``: MKL has no 16-bit sparse product, so on a CPU those
        are computed in float32 and returned in ``h``'s dtype; on CUDA the matrix is
        cast to ``h``'s dtype.  Autocast does not apply inside.
        """
        with torch.autocast(h.device.type, enabled=False):
            if h.is_cpu and h.dtype in (torch.float16, torch.bfloat16):
                return (self._as(torch.float32) @ h.float()).to(h.dtype)
            adj = self._as(h.dtype)
            if not h.requires_grad:
                out: Tensor = torch.sparse.mm(adj.a, h)
                return out
            res: Tensor = _SpMM.apply(h, adj)  # type: ignore[no-untyped-call]
            return res

    def _as(self, dtype: torch.dtype) -> SparseAdjacency:
        """This matrix with weights of ``dtype`` (itself when they are)."""
        if self.a.dtype == dtype:
            return self
        if dtype not in self._cast:
            num_dst, num_src = self.a.shape
            self._cast[dtype] = SparseAdjacency(self._src, self._dst, self._weight.to(dtype),
                                                num_dst, num_src)
        return self._cast[dtype]

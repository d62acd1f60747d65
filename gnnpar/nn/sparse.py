"""Sparse aggregation: one sparse-dense product instead of PyG's gather and scatter.

PyG's ``MessagePassing`` materialises a message per edge (``x[src]``, ``[E, F]``) and
scatters it into the destinations; a CSR matrix product computes the same weighted sums
reading each source row where it lies.  On a CPU the product runs torch's own
row-parallel kernel (``torch.sparse.mm(a, h, "sum")``), not the generic sparse ``addmm``:
on one thread of the benchmark machine the generic one took 60x longer for the backward
of a sampled GraphSAGE layer (``[10k, 1k]`` with 10k entries times ``[1k, 256]``: 96 ms
instead of 1.6 ms, its time growing with the output's rows, not with the entries) and
1.6x longer for the forward of the first (``[10k, 59k]`` with 97k entries times
``[59k, 100]``).  On CUDA it is cuSPARSE's.  Indices are int32 whenever the sizes allow
(another 1.3-1.6x on a CPU).  The transpose needed for the gradient of the sources is
built only when they require a gradient (not for the input features), by one sort of the
entries, and the backward is the same kernel on it (torch's own backward of the reduced
product scatters, 10x slower).

:class:`SparseAdjacency` is the matrix ``A[d, s]`` = weight of edge ``s -> d``; ``A @ h``
is differentiable in ``h``.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

from gnnpar.device import accelerated
from gnnpar.ops import count


def index_dtype(*sizes: int) -> torch.dtype:
    """int32 when every size (rows, columns, entries) fits it, else int64."""
    return torch.int32 if max(sizes, default=0) < 2**31 else torch.int64


def _csr(rowptr: Tensor, col: Tensor, values: Tensor, shape: tuple[int, int]) -> Tensor:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support")
        warnings.filterwarnings("ignore", message="Sparse invariant checks")
        return torch.sparse_csr_tensor(rowptr, col, values, shape, check_invariants=False)


def _rowptr(rows: Tensor, num_rows: int, dtype: torch.dtype) -> Tensor:
    """CSR row pointer (of ``dtype``) of entries sorted by row."""
    ptr = torch.zeros(num_rows + 1, dtype=dtype, device=rows.device)
    torch.cumsum(count(rows, num_rows, dtype), 0, dtype=dtype, out=ptr[1:])
    return ptr


def spmm(a: Tensor, h: Tensor) -> Tensor:
    """``a @ h`` for a sparse CSR ``a`` and a dense ``h`` of ``a``'s dtype (no autograd).

    On a CPU torch's row-parallel reduction kernel, on an accelerator (CUDA, or the
    device shadow that stands in for it) cuSPARSE's product (module docstring).
    """
    out: Tensor = (torch.sparse.mm(a, h) if accelerated(h.device)
                   else torch.sparse.mm(a, h.contiguous(), "sum"))
    return out


class _SpMM(torch.autograd.Function):
    """``A @ h`` with a fixed sparse ``A``; the backward is ``A^T @ grad``."""

    @staticmethod
    def forward(fctx: torch.autograd.function.FunctionCtx, h: Tensor,
                adj: SparseAdjacency) -> Tensor:
        fctx.adj = adj  # type: ignore[attr-defined]
        return spmm(adj.a, h)

    @staticmethod
    def backward(fctx: torch.autograd.function.FunctionCtx,
                 grad: Tensor) -> tuple[Tensor | None, None]:
        return spmm(fctx.adj.transposed(), grad), None  # type: ignore[attr-defined]


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
        a: ``[num_dst, num_src]`` sparse CSR, ``a[d, s]`` = weight of edge ``s -> d``
            (int32 indices when the sizes fit).
    """

    def __init__(self, src: Tensor, dst: Tensor, weight: Tensor, num_dst: int,
                 num_src: int) -> None:
        index = index_dtype(num_dst, num_src, src.numel())
        self._init(_rowptr(dst, num_dst, index), src.to(index), weight, num_src)

    def _init(self, rowptr: Tensor, src: Tensor, weight: Tensor, num_src: int) -> None:
        self._index = src.dtype
        self._src, self._weight = src, weight
        self.a = _csr(rowptr, src, weight, (rowptr.numel() - 1, num_src))
        self._t: Tensor | None = None
        self._cast: dict[torch.dtype, SparseAdjacency] = {}

    @classmethod
    def from_csr(cls, rowptr: Tensor, src: Tensor, weight: Tensor,
                 num_src: int) -> SparseAdjacency:
        """Build from a CSR row pointer ``[num_dst + 1]`` and each entry's column and weight.

        ``rowptr`` and ``src`` of one index dtype (:func:`index_dtype` of the sizes).
        """
        adj = cls.__new__(cls)
        adj._init(rowptr, src, weight, num_src)
        return adj

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
            rowptr = self.a.crow_indices()
            dst = torch.repeat_interleave(torch.arange(num_dst, dtype=self._index,
                                                       device=rowptr.device),
                                          rowptr.diff(), output_size=self._src.numel())
            self._t = _csr(_rowptr(self._src.index_select(0, order), num_src, self._index),
                           dst.index_select(0, order), self._weight.index_select(0, order),
                           (num_src, num_dst))
        return self._t

    def __matmul__(self, h: Tensor) -> Tensor:
        """``[num_dst, F]`` weighted sums of the rows ``h [num_src, F]`` (autograd).

        Any floating dtype of ``h``: 16-bit ones are computed in float32 on a CPU and
        returned in ``h``'s dtype; on CUDA the matrix is cast to ``h``'s dtype.
        Autocast does not apply inside.
        """
        with torch.autocast(h.device.type, enabled=False):
            if h.is_cpu and h.dtype in (torch.float16, torch.bfloat16):
                return (self._as(torch.float32) @ h.float()).to(h.dtype)
            adj = self._as(h.dtype)
            if not h.requires_grad:
                return spmm(adj.a, h)
            res: Tensor = _SpMM.apply(h, adj)  # type: ignore[no-untyped-call]
            return res

    def _as(self, dtype: torch.dtype) -> SparseAdjacency:
        """This matrix with weights of ``dtype`` (itself when they are)."""
        if self.a.dtype == dtype:
            return self
        if dtype not in self._cast:
            self._cast[dtype] = SparseAdjacency.from_csr(
                self.a.crow_indices(), self._src, self._weight.to(dtype), self.a.size(1))
        return self._cast[dtype]

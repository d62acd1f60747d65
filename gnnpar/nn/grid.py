"""The ``[X, Y, Z]`` process grid of 3D-parallel full-graph layers and its collectives.

Plexus (arXiv 2505.04083) runs each GNN layer as a 3D matrix multiply (Agarwal's
algorithm) on a virtual grid of ``X * Y * Z`` ranks.  A layer gives the three axes the
roles ``(o, i, d)``; layer ``l`` takes the ``l mod 3``-th cyclic rotation of ``(x, y, z)``
-- ``(x, y, z)``, ``(z, x, y)``, ``(y, z, x)`` -- so that each layer's output is laid out
as the next layer's input with no redistribution.  With roles ``(o, i, d)``, the rank at
grid coordinates ``(c_o, c_i, c_d)`` holds:

* the input ``H``: node block ``c_o`` of ``o`` (sub-block ``c_d`` of ``d`` of it), feature
  chunk ``c_i`` of ``i`` -- each element on one rank;
* the adjacency block ``A[c_d, c_o]``: destinations in node block ``c_d`` of ``d``, sources
  in node block ``c_o`` of ``o`` (the same on every ``c_i``);
* the weight ``W[c_o, c_i]`` (output chunk ``c_o``, input chunk ``c_i``), chunk ``c_d`` of
  its inputs: a ``DTensor`` on the layer's mesh ``(o, i, d)``,
  ``[Shard(0), Shard(1), Shard(1)]``.

and computes, forward (the backward runs the adjoint of each collective in reverse)::

    H[c_o, c_i]   = all_gather_d(H)            # rows of node block c_o
    AGG[c_d, c_i] = all_reduce_o(A[c_d, c_o] @ H[c_o, c_i])
    OUT           = reduce_scatter_i(AGG @ all_gather_d(W)[c_o, c_i]^T) + b[c_o]

``OUT`` holds node block ``c_d`` of ``d``, sub-block ``c_i`` of ``i``, output chunk ``c_o``:
the input layout of the next rotation ``(d, o, i)``.  No rank holds a whole row block of
features or a whole weight.  Every split -- of nodes, of features, of sub-blocks -- is
``torch.chunk``'s (:func:`chunk_sizes`), as DTensor's ``Shard`` is, so that a parameter's
local shard is the block the layer multiplies with.

The collectives are paired autograd functions (Megatron ``mappings.py`` shape) on the
axis groups of the layer's mesh; each counts its bytes into
:class:`~gnnpar.comm.CommStats` as the ring algorithm moves them (kinds ``"grid"`` for the
forward, ``"grid_grad"`` for the backward).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed.device_mesh import DeviceMesh

from gnnpar.comm import CommStats, ring_bytes
from gnnpar.distributed import skips_collectives
from gnnpar.errors import ConfigError
from gnnpar.parallel_dims import GRID_DIMS, ParallelDims

ROLES = ("o", "i", "d")
ROTATIONS = ((0, 1, 2), (2, 0, 1), (1, 2, 0))
"""Grid axes taking the roles ``(o, i, d)`` in layer ``l``: ``ROTATIONS[l % 3]``."""

# torch >= 2.13 renames all_gather_into_tensor and reduce_scatter_tensor (and deprecates
# the old names).
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def chunk_sizes(n: int, k: int) -> list[int]:
    """Sizes of ``torch.chunk``'s ``k`` chunks of ``n`` (``ceil(n / k)`` each, the tail less).

    DTensor's ``Shard`` splits the same way, so a tensor dimension and the rows or columns
    of the blocks a layer multiplies agree.  Trailing chunks may be empty.
    """
    size = -(-n // k) if n else 0
    return [max(0, min(size, n - j * size)) for j in range(k)]


def chunk_range(n: int, k: int, j: int) -> tuple[int, int]:
    """``[lo, hi)`` of chunk ``j`` of :func:`chunk_sizes` ``(n, k)``."""
    sizes = chunk_sizes(n, k)
    lo = sum(sizes[:j])
    return lo, lo + sizes[j]


def parse_grid(text: str) -> tuple[int, int, int]:
    """``"X,Y,Z"`` as three positive integers; :class:`ConfigError` naming the fix otherwise."""
    parts = [p.strip() for p in str(text).replace("x", ",").split(",")]
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ConfigError(f"grid {text!r} is not three positive integers X,Y,Z.",
                          field="full.grid", fix="pass --grid X,Y,Z, e.g. --grid 2,1,2.")
    return int(parts[0]), int(parts[1]), int(parts[2])


Coords = tuple[int, int, int]


def grid_coords(dims: tuple[int, int, int], rank: int) -> Coords:
    """Coordinates of ``rank`` on a ``dims`` grid: ``(r // (Y Z), r // Z mod Y, r mod Z)``."""
    _, y, z = dims
    return rank // (y * z), rank // z % y, rank % z


@dataclass(frozen=True)
class GridShape:
    """Which rows and columns every grid position holds, for one model: arithmetic only.

    Attributes:
        dims: ``(X, Y, Z)``.
        num_nodes: Nodes of the whole graph.
        widths: Feature width of each layer's input, then the output width.
    """

    dims: tuple[int, int, int]
    num_nodes: int
    widths: tuple[int, ...]

    @property
    def layers(self) -> int:
        """Layers of the model."""
        return len(self.widths) - 1

    def coords_of(self, rank: int) -> Coords:
        """Grid coordinates of ``rank`` (:func:`grid_coords`)."""
        return grid_coords(self.dims, rank)

    def node_block(self, axis: int, c: int) -> tuple[int, int]:
        """Global ids ``[lo, hi)`` of node block ``c`` of grid axis ``axis``."""
        return chunk_range(self.num_nodes, self.dims[axis], c)

    def rows(self, layer: int, c: Coords, output: bool = False) -> tuple[int, int]:
        """Global ids of the rows of ``layer``'s input (or output) held at ``c``."""
        o, i, d = ROTATIONS[layer % 3]
        outer, inner = (d, i) if output else (o, d)
        lo, hi = self.node_block(outer, c[outer])
        a, b = chunk_range(hi - lo, self.dims[inner], c[inner])
        return lo + a, lo + b

    def cols(self, layer: int, c: Coords, output: bool = False) -> tuple[int, int]:
        """Columns of ``layer``'s input (or output) held at ``c``."""
        o, i, _ = ROTATIONS[layer % 3]
        axis = o if output else i
        width = self.widths[layer + 1] if output else self.widths[layer]
        return chunk_range(width, self.dims[axis], c[axis])


@dataclass
class ProcessGrid:
    """This rank's place on the ``[X, Y, Z]`` grid and one device mesh per layer rotation.

    Rank ``r`` sits at ``(r // (Y Z), r // Z mod Y, r mod Z)``: a ``z`` group is ``Z``
    adjacent ranks (on GPUs: the GPUs of one machine).  The axes' groups (one NCCL
    communicator each on GPUs) are the ``x``, ``y``, ``z`` groups of the run's
    :class:`~gnnpar.parallel_dims.ParallelDims`; each rotation's mesh names those three in
    its role order.

    Attributes:
        dims: ``(X, Y, Z)``.
        coords: This rank's ``(c_x, c_y, c_z)``.
        meshes: Rotation ``k`` -> its mesh ``(o, i, d)`` (built for the rotations used).
        stats: Byte counters of the layers' collectives.
    """

    dims: tuple[int, int, int]
    coords: tuple[int, int, int]
    meshes: dict[int, DeviceMesh]
    stats: CommStats | None = None
    _groups: dict[tuple[int, str], Any] = field(default_factory=dict, repr=False)

    @classmethod
    def build(cls, parallel: ParallelDims, num_layers: int, stats: CommStats | None = None
              ) -> ProcessGrid:
        """The grid of ``parallel``'s ``grid`` mesh: its ``x``, ``y``, ``z`` groups."""
        axes = parallel.get_mesh("grid")
        dims = parallel.grid
        assert dims is not None  # the mesh exists
        ranks = axes.mesh
        coords = grid_coords(dims, parallel.ctx.rank)
        # One communicator per axis, shared by the rotations: each layer's mesh names the
        # same three groups in its own role order.
        groups = [axes.get_group(name) for name in GRID_DIMS]
        meshes = {k: DeviceMesh.from_group([groups[a] for a in ROTATIONS[k]],
                                           parallel.ctx.device.type,
                                           ranks.permute(*ROTATIONS[k]).contiguous(),
                                           mesh_dim_names=ROLES)
                  for k in range(min(num_layers, 3))}
        return cls(dims, coords, meshes, stats)

    def roles(self, layer: int) -> tuple[int, int, int]:
        """Grid axes (0 = x, 1 = y, 2 = z) in the roles ``(o, i, d)`` of ``layer``."""
        return ROTATIONS[layer % 3]

    def mesh(self, layer: int) -> DeviceMesh:
        """Mesh ``(o, i, d)`` of ``layer``."""
        return self.meshes[layer % 3]

    def size(self, axis: int) -> int:
        """Ranks along grid axis ``axis``."""
        return self.dims[axis]

    def coord(self, axis: int) -> int:
        """This rank's coordinate along grid axis ``axis``."""
        return self.coords[axis]

    def group(self, layer: int, role: str) -> Any:
        """Process group of ``role`` (``"o"``, ``"i"``, ``"d"``) in ``layer``'s mesh."""
        return self.mesh(layer).get_group(role)

    def axis_group(self, layer: int, role: str) -> AxisGroup:
        """The group of ``role`` in ``layer`` with its size, this rank's index and counters."""
        axis = self.roles(layer)[ROLES.index(role)]
        return AxisGroup(self.group(layer, role), self.size(axis), self.coord(axis),
                         self.stats)


@dataclass(frozen=True)
class AxisGroup:
    """One grid axis as a collective sees it.

    Attributes:
        group: The process group (ranks differing only in this axis).
        size: Ranks in it.
        index: This rank's position in it.
        stats: Byte counters (``None``: not counted).
    """

    group: Any
    size: int
    index: int
    stats: CommStats | None

    def count(self, kind: str, tensor: Tensor, collective: str) -> None:
        """Add one ring ``collective`` of ``tensor`` (its full size) to the counters."""
        if self.stats is not None and self.size > 1:
            rows = round(ring_bytes(tensor.numel(), self.size, collective))
            nbytes = rows * tensor.element_size()
            self.stats.record(kind, rows, rows, nbytes, nbytes)


def _pad_rows(x: Tensor, rows: int) -> Tensor:
    return x if x.size(0) == rows else torch.cat([x, x.new_zeros(rows - x.size(0), *x.shape[1:])])


def gather_rows(x: Tensor, axis: AxisGroup, sizes: list[int], kind: str) -> Tensor:
    """Concatenate every rank's ``x`` (``sizes[j]`` rows on rank ``j``) along dim 0.

    Ranks of fewer rows are padded to the largest, so that one ``all_gather`` serves.
    """
    if skips_collectives(axis.size):
        return x
    top = max(sizes)
    out = x.new_empty(axis.size * top, *x.shape[1:])
    send = _pad_rows(x.contiguous(), top)
    axis.count(kind, out, "all_gather")
    _all_gather_single(out, send, group=axis.group)
    if top * axis.size == sum(sizes):
        return out
    return torch.cat([out[j * top: j * top + s] for j, s in enumerate(sizes)])


def scatter_sum_rows(x: Tensor, axis: AxisGroup, sizes: list[int], kind: str) -> Tensor:
    """Sum ``x`` over the ranks of ``axis`` and keep this rank's rows (``sizes``' chunk)."""
    if skips_collectives(axis.size):
        return x
    top = max(sizes)
    parts = torch.split(x, sizes)
    send = torch.cat([_pad_rows(p, top) for p in parts]) if top * axis.size != x.size(0) \
        else x.contiguous()
    out = x.new_empty(top, *x.shape[1:])
    axis.count(kind, send, "reduce_scatter")
    _reduce_scatter_single(out, send, group=axis.group)
    return out[: sizes[axis.index]]


Collective = Callable[[Tensor, "AxisGroup", list[int], str], Tensor]


class _Paired(torch.autograd.Function):
    """Forward: one collective over an axis; backward: its adjoint on the gradient."""

    @staticmethod
    def forward(fctx: Any, x: Tensor, forward: Collective, adjoint: Collective,
                axis: AxisGroup, sizes: list[int]) -> Tensor:
        fctx.adjoint, fctx.axis, fctx.sizes = adjoint, axis, sizes
        return forward(x.contiguous(), axis, sizes, "grid")

    @staticmethod
    def backward(fctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        return (fctx.adjoint(grad.contiguous(), fctx.axis, fctx.sizes, "grid_grad"),
                None, None, None, None)


def sum_all(x: Tensor, axis: AxisGroup, sizes: list[int], kind: str) -> Tensor:
    """The sum of ``x`` over ``axis`` on every rank of it (a copy; ``sizes`` unused)."""
    return _all_reduce(x.clone(), axis, kind)


def _all_reduce(x: Tensor, axis: AxisGroup, kind: str) -> Tensor:
    if not skips_collectives(axis.size):
        axis.count(kind, x, "all_reduce")
        dist.all_reduce(x, group=axis.group)
    return x


class _GatherColumns(torch.autograd.Function):
    """Forward: all-gather column chunks over an axis; backward: keep this rank's columns.

    For a result that every rank of the axis then uses identically (the logits of the
    loss), so the gradient of a chunk is the one its own rank computes (Megatron's
    ``gather_from_tensor_model_parallel_region``).
    """

    @staticmethod
    def forward(fctx: Any, x: Tensor, axis: AxisGroup, sizes: list[int]) -> Tensor:
        fctx.lo, fctx.hi = sum(sizes[: axis.index]), sum(sizes[: axis.index + 1])
        return gather_rows(x.t().contiguous(), axis, sizes, "grid").t()

    @staticmethod
    def backward(fctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        return grad[:, fctx.lo: fctx.hi], None, None


class _ReplicatedGrad(torch.autograd.Function):
    """Identity forward; backward sums the gradient over axes (a parameter they replicate)."""

    @staticmethod
    def forward(fctx: Any, x: Tensor, *axes: AxisGroup) -> Tensor:
        fctx.axes = axes
        return x.view_as(x)

    @staticmethod
    def backward(fctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        grad = grad.clone()
        for axis in fctx.axes:
            _all_reduce(grad, axis, "grad")
        return (grad, *([None] * len(fctx.axes)))


def _paired(x: Tensor, forward: Collective, adjoint: Collective, axis: AxisGroup,
            sizes: list[int]) -> Tensor:
    out: Tensor = _Paired.apply(x, forward, adjoint, axis, sizes)  # type: ignore[no-untyped-call]
    return out


def all_gather_rows(x: Tensor, axis: AxisGroup, sizes: list[int]) -> Tensor:
    """Rows of every rank of ``axis`` in rank order (rank ``j`` holds ``sizes[j]``); autograd."""
    return _paired(x, gather_rows, scatter_sum_rows, axis, sizes)


def reduce_scatter_rows(x: Tensor, axis: AxisGroup, sizes: list[int]) -> Tensor:
    """The sum of ``x`` over ``axis``, this rank's rows (chunk ``sizes[index]``); autograd."""
    return _paired(x, scatter_sum_rows, gather_rows, axis, sizes)


def all_reduce(x: Tensor, axis: AxisGroup) -> Tensor:
    """The sum of ``x`` over ``axis`` on every rank of it; autograd."""
    return _paired(x, sum_all, sum_all, axis, [])


def gather_columns(x: Tensor, axis: AxisGroup, sizes: list[int]) -> Tensor:
    """Column chunks of every rank of ``axis`` side by side, for replicated use; autograd."""
    out: Tensor = _GatherColumns.apply(x, axis, sizes)  # type: ignore[no-untyped-call]
    return out


def replicated(x: Tensor, *axes: AxisGroup) -> Tensor:
    """``x``, its gradient summed over ``axes`` (a parameter replicated along them)."""
    out: Tensor = _ReplicatedGrad.apply(x, *axes)  # type: ignore[no-untyped-call]
    return out

"""3D-parallel full-graph GCN and GraphSAGE on a process grid (Plexus).

:class:`GridGraph` moves a partition onto the grid of :mod:`gnnpar.nn.grid`: every rank
loads its part (one part per rank, as in every mode) and, in one exchange per layer
rotation, sends each in-edge to the ranks whose adjacency block holds it; features,
degrees, labels and splits go, in one exchange each, straight from their owners to the
ranks whose blocks need them (:func:`fetch_blocks`: every rank computes what every other
rank needs, so nothing is requested).  :class:`GridGNN` is the PyG model's layers on
that grid, its weights ``DTensor`` shards of the PyG parameters under the same names, so
a checkpoint (saved whole) is one of the replicated model.

A layer is ``sum_k (S_k H) W_k + b``: ``GCNConv`` has one operator, PyG's normalised
adjacency with one self-loop per node (``D^-1/2 (A + I) D^-1/2``, self-loops of the
graph replaced, degrees of the whole graph); mean ``SAGEConv`` has two, the mean
adjacency (``lin_l``, with the bias) and the identity (``lin_r``), aggregated together in
one all-reduce.  (GCN then runs its linear map after the aggregation: the same product,
within fp32 rounding.)  Dropout and the activation act element-wise on a layout that holds
each element once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch_geometric.nn import GCNConv
from torch_geometric.nn.models import GCN, GraphSAGE
from torch_geometric.nn.models.basic_gnn import BasicGNN

from gnnpar.comm import CommStats, all_to_all_v
from gnnpar.distributed import DistContext
from gnnpar.errors import ConfigError
from gnnpar.nn.grid import (
    ROTATIONS,
    GridShape,
    ProcessGrid,
    all_gather_rows,
    all_reduce,
    chunk_sizes,
    gather_columns,
    reduce_scatter_rows,
    replicated,
)
from gnnpar.nn.sage import is_mean_sage
from gnnpar.nn.sparse import SparseAdjacency
from gnnpar.storage.graph import DistGraph

Want = tuple[int, int, int, int]
"""Rows ``[lo, hi)`` (global node ids) and columns ``[c0, c1)`` a rank needs."""

SPLIT_CODES = {"train": 1, "val": 2, "test": 3}


def fetch_blocks(ctx: DistContext, offsets: list[int], owned: Tensor,
                 wants_of: Callable[[int], list[Want]], stats: CommStats | None = None,
                 kind: str = "grid_setup") -> list[Tensor]:
    """The blocks of owned rows every rank needs, sent by their owners (collective).

    Args:
        ctx: Distributed context (rank ``r`` owns global ids ``offsets[r]..offsets[r+1]``).
        offsets: Partition book.
        owned: ``[num_owned, W]`` this rank's rows (any device; sent from ``ctx.device``).
        wants_of: Rank -> the blocks it needs; the same function on every rank.
        stats: Counters of the exchange.
        kind: Counter name.

    Returns:
        This rank's blocks, ``[hi - lo, c1 - c0]`` each, in ``wants_of(rank)`` order.
    """
    me, lo_me, hi_me = ctx.rank, offsets[ctx.rank], offsets[ctx.rank + 1]
    pieces, counts = [], []
    for q in range(ctx.world_size):
        n = 0
        for lo, hi, c0, c1 in wants_of(q):
            a, b = max(lo, lo_me), min(hi, hi_me)
            if a < b and c1 > c0:
                pieces.append(owned[a - lo_me: b - lo_me, c0:c1].reshape(-1))
                n += (b - a) * (c1 - c0)
        counts.append(n)
    send = torch.cat(pieces).to(ctx.device) if pieces else owned.new_zeros(0).to(ctx.device)
    recv, got = all_to_all_v(ctx, send, counts, stats=stats, kind=kind)
    wants = wants_of(me)
    blocks: list[list[Tensor]] = [[] for _ in wants]
    start = 0
    for r in range(ctx.world_size):
        lo_r, hi_r = offsets[r], offsets[r + 1]
        for k, (lo, hi, c0, c1) in enumerate(wants):
            a, b = max(lo, lo_r), min(hi, hi_r)
            if a < b and c1 > c0:
                size = (b - a) * (c1 - c0)
                blocks[k].append(recv[start: start + size].view(b - a, c1 - c0))
                start += size
        assert start == sum(got[: r + 1]), "fetch_blocks: counts disagree"
    return [torch.cat(b) if b else recv.new_zeros(hi - lo, max(c1 - c0, 0))
            for b, (lo, hi, c0, c1) in zip(blocks, wants, strict=True)]


@dataclass(frozen=True)
class GridGraph:
    """The partitioned graph laid out on a process grid, for one model's layers.

    Attributes:
        grid: The process grid.
        shape: Which rows and columns each grid position holds.
        x: ``[rows, F_0 chunk]`` input features of this rank (layer 0's input layout).
        ops: Rotation -> this rank's adjacency block's operators (``S_k``, see the module
            docstring).
        y: ``[out rows]`` labels of the rows of the last layer's output (``-1``: none).
        split: ``[out rows]`` int8 split of those rows (0 none, 1 train, 2 val, 3 test).
        counts_rows: Whether this rank counts its output rows in sums over ranks (the
            rows are replicated over the last layer's ``o`` axis; one copy counts).
    """

    grid: ProcessGrid
    shape: GridShape
    x: Tensor
    ops: dict[int, list[SparseAdjacency]]
    y: Tensor
    split: Tensor
    counts_rows: bool

    @classmethod
    def build(cls, graph: DistGraph, ctx: DistContext, grid: ProcessGrid, kind: str,
              widths: tuple[int, ...], stats: CommStats | None = None) -> GridGraph:
        """Lay ``graph`` out on ``grid`` for a ``kind`` (``gcn``/``sage``) model (collective).

        Args:
            graph: This rank's part.
            ctx: Distributed context.
            grid: The process grid.
            kind: ``"gcn"`` or ``"sage"``: which operators each block holds.
            widths: Input width of every layer, then the output width.
            stats: Counters of the setup exchanges (kind ``grid_setup``).
        """
        offsets = [int(v) for v in graph.meta.offsets]
        n, layers = offsets[-1], len(widths) - 1
        part = graph.part
        first, owned = graph.first_gid, graph.num_owned
        ptr = graph.indptr[: owned + 1].cpu()
        dst = first + torch.repeat_interleave(torch.arange(owned), ptr[1:] - ptr[:-1])
        src = graph.local_gids.cpu()[graph.indices[: int(ptr[-1])].cpu()]
        loops = count_rows(dst[src == dst] - first, owned)
        in_deg = ptr[1:] - ptr[:-1]
        # GCN: in-edges other than self-loops plus one; mean SAGE: all in-edges.
        degree = (in_deg - loops + 1) if kind == "gcn" else in_deg
        split = np.zeros(owned, dtype=np.int64)
        for name, code in SPLIT_CODES.items():
            split[np.asarray(getattr(part, f"{name}_idx"))] = code
        labels = torch.stack([torch.from_numpy(np.array(part.label, dtype=np.int64)),
                              torch.from_numpy(split)], 1)
        shape = GridShape(grid.dims, n, tuple(widths))
        rotations = sorted(grid.meshes)

        def blocks_of(q: int) -> list[Want]:  # rows and columns of each rotation's block
            c, out = shape.coords_of(q), []
            for k in rotations:
                o, _, d = grid.roles(k)
                out += [(*shape.node_block(d, c[d]), 0, 1), (*shape.node_block(o, c[o]), 0, 1)]
            return out

        def features_of(q: int) -> list[Want]:
            return [(*shape.rows(0, shape.coords_of(q)), *shape.cols(0, shape.coords_of(q)))]

        def labels_of(q: int) -> list[Want]:
            return [(*shape.rows(layers - 1, shape.coords_of(q), output=True), 0, 2)]

        x = fetch_blocks(ctx, offsets, graph.features(), features_of, stats)[0]
        y = fetch_blocks(ctx, offsets, labels, labels_of, stats)[0]
        deg = fetch_blocks(ctx, offsets, degree[:, None], blocks_of, stats)
        ops = {}
        c = grid.coords
        for j, k in enumerate(rotations):
            o, _, d = grid.roles(k)
            edges = _route_edges(ctx, shape, k, src, dst, stats)
            ops[k] = _operators(kind, edges, shape.node_block(d, c[d]), shape.node_block(o, c[o]),
                                deg[2 * j][:, 0], deg[2 * j + 1][:, 0], ctx.device)
        return cls(grid, shape, x.to(torch.float32), ops, y[:, 0], y[:, 1].to(torch.int8),
                   c[grid.roles(layers - 1)[0]] == 0)


def count_rows(ids: Tensor, n: int) -> Tensor:
    """How often each of ``0..n-1`` occurs in ``ids``."""
    return torch.bincount(ids, minlength=n)[:n]


def _route_edges(ctx: DistContext, shape: GridShape, k: int, src: Tensor, dst: Tensor,
                 stats: CommStats | None) -> Tensor:
    """Send each owned in-edge to the ranks whose rotation-``k`` block holds it.

    Returns:
        ``[2, M]`` (source, destination) global ids of this rank's block.
    """
    o, i, d = ROTATIONS[k]
    dims = shape.dims

    def block_of(gids: Tensor, axis: int) -> Tensor:
        ends = torch.tensor(np.cumsum(chunk_sizes(shape.num_nodes, dims[axis])))
        return torch.searchsorted(ends, gids, right=True)

    coord = torch.zeros(3, src.numel(), dtype=torch.int64)
    coord[d], coord[o] = block_of(dst, d), block_of(src, o)
    ranks = []
    for ci in range(dims[i]):
        coord[i] = ci
        ranks.append((coord[0] * dims[1] + coord[1]) * dims[2] + coord[2])
    dest = torch.cat(ranks)
    order = torch.argsort(dest, stable=True)
    pairs = torch.stack([src, dst], 1).repeat(dims[i], 1)[order]
    counts = torch.bincount(dest, minlength=ctx.world_size)
    recv, _ = all_to_all_v(ctx, pairs.to(ctx.device), counts, stats=stats, kind="grid_setup")
    return recv.t().cpu()


def _operators(kind: str, edges: Tensor, rows: tuple[int, int], cols: tuple[int, int],
               row_deg: Tensor, col_deg: Tensor, device: torch.device) -> list[SparseAdjacency]:
    """The block's ``S_k``: ``[rows, cols]`` sparse matrices (see the module docstring)."""
    src, dst = edges[0] - cols[0], edges[1] - rows[0]
    n_rows, n_cols = rows[1] - rows[0], cols[1] - cols[0]
    a, b = max(rows[0], cols[0]), min(rows[1], cols[1])
    diag = torch.arange(a, max(a, b))
    eye = torch.stack([diag - cols[0], diag - rows[0]])
    if kind == "gcn":
        keep = edges[0] != edges[1]  # PyG's add_remaining_self_loops: one loop per node
        index = torch.cat([torch.stack([src[keep], dst[keep]]), eye], 1)
        row_inv = row_deg.cpu().to(torch.float32).rsqrt()
        col_inv = col_deg.cpu().to(torch.float32).rsqrt()
        weight = col_inv[index[0]] * row_inv[index[1]]
        return [SparseAdjacency.from_edges(index.to(device), weight.to(device), n_rows, n_cols)]
    inv = 1.0 / row_deg.cpu().clamp(min=1).to(torch.float32)
    mean = SparseAdjacency.from_edges(torch.stack([src, dst]).to(device),
                                      inv[dst].to(device), n_rows, n_cols)
    identity = SparseAdjacency.from_edges(eye.to(device), torch.ones(eye.size(1), device=device),
                                          n_rows, n_cols)
    return [mean, identity]


def model_kind(gnn: nn.Module) -> str:
    """``"gcn"`` or ``"sage"`` for a model the grid layers compute exactly; else raise."""
    ok = isinstance(gnn, BasicGNN) and gnn.jk_mode is None and not gnn.act_first and all(
        isinstance(n, nn.Identity) for n in gnn.norms)
    if ok and isinstance(gnn, GCN) and all(
            isinstance(c, GCNConv) and c.normalize and c.add_self_loops and not c.improved
            and c.bias is not None for c in gnn.convs):
        return "gcn"
    if ok and isinstance(gnn, GraphSAGE) and all(is_mean_sage(c) and c.lin_l.bias is not None
                                                for c in gnn.convs):
        return "sage"
    raise ConfigError(f"3D-parallel layers run PyG's GCN and mean GraphSAGE (default layer "
                      f"settings, no norms or jumping knowledge), not {type(gnn).__name__}.",
                      field="model.name", fix="pass --model gcn or --model sage with --grid.")


class GridLinear(nn.Module):
    """A PyG ``Linear``'s weight ``[out, in]`` (and bias) as shards on a layer's mesh.

    ``weight``: ``[Shard(0), Shard(1), Shard(1)]`` on ``(o, i, d)``; ``bias``:
    ``[Shard(0), Replicate(), Replicate()]``.  Made from the full tensors, the same on
    every rank (no communication).
    """

    def __init__(self, weight: Tensor, bias: Tensor | None, grid: ProcessGrid, layer: int
                 ) -> None:
        super().__init__()
        self.weight = nn.Parameter(distribute_tensor(
            weight.detach(), grid.mesh(layer), [Shard(0), Shard(1), Shard(1)], src_data_rank=None))
        self.bias = None if bias is None else shard_bias(bias, grid, layer)


def shard_bias(bias: Tensor, grid: ProcessGrid, layer: int) -> nn.Parameter:
    """``bias [out]`` as ``[Shard(0), Replicate(), Replicate()]`` on ``layer``'s mesh."""
    return nn.Parameter(distribute_tensor(bias.detach(), grid.mesh(layer),
                                          [Shard(0), Replicate(), Replicate()],
                                          src_data_rank=None))


def _local(p: nn.Parameter) -> Tensor:
    return p.to_local() if isinstance(p, DTensor) else p


class GridConv(nn.Module):
    """One 3D-parallel layer: ``sum_k (S_k H) W_k + b`` with the collectives of ``grid``.

    Args:
        conv: The PyG layer (``GCNConv`` or mean ``SAGEConv``) whose weights it takes.
        graph: The grid layout.
        layer: Its index (selects the rotation).

    Shapes:
        input: ``[rows(layer), cols(layer)]``; output ``[rows(layer, output=True),
        cols(layer, output=True)]`` (:class:`GridGraph`).
    """

    def __init__(self, conv: nn.Module, graph: GridGraph, layer: int) -> None:
        super().__init__()
        grid = graph.grid
        self.graph, self.layer = graph, layer
        self.names = ("lin",) if isinstance(conv, GCNConv) else ("lin_l", "lin_r")
        for name in self.names:
            lin = getattr(conv, name)
            self.add_module(name, GridLinear(lin.weight, getattr(lin, "bias", None), grid,
                                             layer))
        if isinstance(conv, GCNConv):  # PyG's GCNConv keeps its bias on the layer
            self.bias = shard_bias(conv.bias, grid, layer)
        self.o, self.i, self.d = (grid.axis_group(layer, r) for r in ("o", "i", "d"))
        o_axis, _, d_axis = grid.roles(layer)
        lo, hi = graph.shape.node_block(o_axis, grid.coord(o_axis))
        self.in_rows = chunk_sizes(hi - lo, self.d.size)
        lo, hi = graph.shape.node_block(d_axis, grid.coord(d_axis))
        self.out_rows = chunk_sizes(hi - lo, self.i.size)
        c0, c1 = graph.shape.cols(layer, grid.coords)
        self.in_cols = chunk_sizes(c1 - c0, self.d.size)

    def forward(self, h: Tensor) -> Tensor:
        """The layer's output block from its input block (collective on the grid)."""
        h = all_gather_rows(h, self.d, self.in_rows)
        ops = self.graph.ops[self.layer % 3]
        agg = all_reduce(torch.cat([s @ h for s in ops], 1), self.o)
        width = h.size(1)
        out = sum(agg[:, k * width: (k + 1) * width] @ all_gather_rows(
            _local(getattr(self, name).weight).t(), self.d, self.in_cols)
            for k, name in enumerate(self.names))
        assert isinstance(out, Tensor)
        out = reduce_scatter_rows(out, self.i, self.out_rows)
        return out + replicated(_local(self.bias_param), self.i, self.d)

    @property
    def bias_param(self) -> nn.Parameter:
        """The bias (``GCNConv``'s own, ``SAGEConv``'s ``lin_l.bias``)."""
        owner: nn.Module = self if self.names == ("lin",) else self.get_submodule("lin_l")
        bias = owner.bias
        assert isinstance(bias, nn.Parameter)
        return bias


class GridGNN(nn.Module):
    """A PyG ``GCN`` / ``GraphSAGE`` run 3D-parallel on the whole graph.

    Its state dict has the PyG model's names and shapes (as DTensors); the forward takes
    this rank's input block and returns the logits of its output rows, all classes.

    Args:
        gnn: The model (same initial weights on every rank); its activation and dropout
            are used as they are.
        graph: The grid layout built for it.
    """

    def __init__(self, gnn: BasicGNN, graph: GridGraph) -> None:
        super().__init__()
        model_kind(gnn)
        self.graph = graph
        self.convs = nn.ModuleList(GridConv(c, graph, j) for j, c in enumerate(gnn.convs))
        self.act, self.dropout = gnn.act, gnn.dropout
        last = len(self.convs) - 1
        self.classes = graph.grid.axis_group(last, "o")
        self.class_sizes = chunk_sizes(graph.shape.widths[-1], self.classes.size)

    def forward(self, x: Tensor) -> Tensor:
        """``[out rows, C]`` logits of this rank's rows of the last layer (collective)."""
        for j, conv in enumerate(self.convs):
            x = conv(x)
            if j < len(self.convs) - 1:
                if self.act is not None:
                    x = self.act(x)
                x = self.dropout(x)
        return gather_columns(x, self.classes, self.class_sizes)

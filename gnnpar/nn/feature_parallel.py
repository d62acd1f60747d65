"""Feature-parallel first layer (P3): split wide inputs by columns, not rows.

With wide input features (``F`` much larger than the hidden width ``H``) fetching the
remote rows a rank needs costs ``F`` numbers per row.  P3 instead splits the feature
matrix by *columns*: rank ``r`` holds columns ``c_r`` of **every** node
(:func:`shard_columns`, one exchange at load time; the same memory as a row split).  The
first layer ``X W^T`` is then a sum over the column blocks,
``X[ids] W^T = sum_r X[ids, c_r] W[:, c_r]^T``: each rank computes its block's partial
product for the nodes *every* rank needs and an all-to-all sums the partials into the
rank that needs them (a variable-size ``reduce_scatter``).  Per step a rank receives
``(W-1) * M * H`` numbers instead of ``M_remote * F``; the backward pass sends the output
gradients the other way (an all-gather), and each rank forms the weight gradient of its
own columns.

The weight is held whole and replicated (so it all-reduces with the rest of the model):
each rank's gradient fills only its own columns, and the sum (or average) over the ranks
is the full gradient.

Usage in a minibatch step, in place of fetching remote feature rows::

    x_cols = shard_columns(ctx, x_owned)           # once: [num_nodes, F / W]
    lin = FeatureParallelLinear(F, H, ctx)         # replicated weight [H, F]
    h = lin(x_cols, batch.n_id)                    # [len(n_id), H] == X[n_id] @ W.T + b
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from gnnpar.comm import CommStats, all_to_all_v
from gnnpar.distributed import DistContext
from gnnpar.errors import ConfigError


def column_ranges(feat_dim: int, world_size: int) -> list[tuple[int, int]]:
    """Contiguous, balanced column blocks: rank ``r`` holds ``range(*blocks[r])``."""
    bounds = [feat_dim * r // world_size for r in range(world_size + 1)]
    return [(bounds[r], bounds[r + 1]) for r in range(world_size)]


def shard_columns(ctx: DistContext, x_owned: Tensor, stats: CommStats | None = None) -> Tensor:
    """Turn a row split of the features into a column split (collective, once).

    Args:
        ctx: Distributed context; rank ``r`` owns a contiguous range of node ids, ranks in
            id order (the partition book).
        x_owned: ``[num_owned, F]`` features of the nodes this rank owns.
        stats: Counters (kind ``"fp_shard"``).

    Returns:
        ``[num_nodes, F_r]``: this rank's columns (:func:`column_ranges`) of every node,
        row = global node id.
    """
    width = x_owned.size(1)
    blocks = column_ranges(width, ctx.world_size)
    send = torch.cat([x_owned[:, a:b].reshape(-1) for a, b in blocks])
    counts = torch.tensor([x_owned.size(0) * (b - a) for a, b in blocks], dtype=torch.int64)
    recv, recv_counts = all_to_all_v(ctx, send, counts, stats=stats, kind="fp_shard")
    a, b = blocks[ctx.rank]
    parts = recv.split_with_sizes(recv_counts)
    return torch.cat([part.view(-1, b - a) for part in parts])


class _SumToOwners(torch.autograd.Function):
    """Partial rows for every rank's nodes -> this rank's rows summed over the ranks."""

    @staticmethod
    def forward(fctx: torch.autograd.function.FunctionCtx, partial: Tensor, counts: Tensor,
                num_rows: int, ctx: DistContext, stats: CommStats | None) -> Tensor:
        fctx.counts, fctx.num_rows, fctx.ctx, fctx.stats = (  # type: ignore[attr-defined]
            counts, num_rows, ctx, stats)
        mine = torch.full((ctx.world_size,), num_rows, dtype=torch.int64)
        recv, _ = all_to_all_v(ctx, partial, counts, mine, stats=stats, kind="fp_partial")
        return recv.view(ctx.world_size, num_rows, recv.size(1)).sum(0)

    @staticmethod
    def backward(fctx: torch.autograd.function.FunctionCtx,
                 grad: Tensor) -> tuple[Tensor | None, ...]:
        ctx: DistContext = fctx.ctx  # type: ignore[attr-defined]
        n: int = fctx.num_rows  # type: ignore[attr-defined]
        mine = torch.full((ctx.world_size,), n, dtype=torch.int64)
        g, _ = all_to_all_v(ctx, grad.repeat(ctx.world_size, 1), mine,
                            fctx.counts, stats=fctx.stats, kind="fp_grad")  # type: ignore[attr-defined]
        return g, None, None, None, None


class FeatureParallelLinear(nn.Module):
    """``y = X[ids] W^T + b`` with ``X`` split by columns across the ranks.

    Args:
        in_channels: Input width ``F``.
        out_channels: Output width ``H``.
        ctx: Distributed context (fixes this rank's column block).
        bias: Learn an additive bias.
        stats: Counters (kinds ``"fp_ids"``, ``"fp_partial"``, ``"fp_grad"``).

    Shapes:
        input: ``x_cols [num_nodes, F_r]`` from :func:`shard_columns`, ``ids [M]`` global
        node ids this rank needs (any number per rank, repeats allowed);
        output: ``[M, H]``.
    """

    def __init__(self, in_channels: int, out_channels: int, ctx: DistContext,
                 bias: bool = True, stats: CommStats | None = None) -> None:
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.ctx = ctx
        self.stats = stats
        self.cols = column_ranges(in_channels, ctx.world_size)[ctx.rank]
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels))
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initialise as ``torch.nn.Linear`` does."""
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_channels) if self.in_channels > 0 else 0.0
            nn.init.uniform_(self.bias, -bound, bound)

    @classmethod
    def from_linear(cls, linear: nn.Linear, ctx: DistContext,
                    stats: CommStats | None = None) -> FeatureParallelLinear:
        """The same layer as ``linear`` (weights copied), computed feature-parallel."""
        layer = cls(linear.in_features, linear.out_features, ctx, linear.bias is not None,
                    stats).to(device=linear.weight.device, dtype=linear.weight.dtype)
        with torch.no_grad():
            layer.weight.copy_(linear.weight)
            if layer.bias is not None and linear.bias is not None:
                layer.bias.copy_(linear.bias)
        return layer

    def forward(self, x_cols: Tensor, ids: Tensor) -> Tensor:
        """First-layer rows of the nodes ``ids`` (collective: every rank calls it).

        Args:
            x_cols: ``[num_nodes, F_r]`` this rank's feature columns of every node.
            ids: ``[M]`` int64 global ids of the nodes this rank needs.

        Returns:
            ``[M, H]``.
        """
        a, b = self.cols
        if x_cols.dim() != 2 or x_cols.size(1) != b - a:
            raise ConfigError(f"x_cols has shape {tuple(x_cols.shape)} but rank "
                              f"{self.ctx.rank} holds columns {a}..{b} of {self.in_channels}.",
                              field="x_cols", fix="pass shard_columns(ctx, x_owned).")
        ids = ids.to(torch.int64).reshape(-1)
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= x_cols.size(0)):
            raise ConfigError(f"node ids must lie in [0, {x_cols.size(0)}).", field="ids",
                              fix="pass global node ids of the partition.")
        world = self.ctx.world_size
        m = ids.numel()
        all_ids, counts = all_to_all_v(
            self.ctx, ids.repeat(world),
            torch.full((world,), m, dtype=torch.int64), stats=self.stats, kind="fp_ids")
        rows = x_cols[all_ids.to(x_cols.device)].to(self.weight.device, self.weight.dtype)
        partial = rows @ self.weight[:, a:b].t()
        out: Tensor = _SumToOwners.apply(  # type: ignore[no-untyped-call]
            partial, counts, m, self.ctx, self.stats)
        return out + self.bias if self.bias is not None else out

    def extra_repr(self) -> str:
        """Widths, this rank's columns and the bias switch, for ``repr``."""
        return (f"{self.in_channels}, {self.out_channels}, columns={self.cols[0]}..{self.cols[1]}"
                f", bias={self.bias is not None}")

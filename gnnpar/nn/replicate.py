"""Replicated weights: broadcast them once, all-reduce their gradients every step.

Full-graph training splits the *graph*, not the model: every rank holds all the weights,
computes gradients from the loss of its own nodes, and the gradients are summed over the
ranks.  With the loss of each rank normalised by the *global* number of training nodes,
the sum is exactly the gradient of the whole-graph loss.  One flat ``all_reduce`` per
dtype carries all the gradients (DDP's buckets in one piece, without DDP's averaging).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.distributed as dist
from torch import Tensor, nn

from gnnpar.comm import CommStats, record_all_reduce
from gnnpar.distributed import DistContext


def _by_dtype(tensors: Iterable[Tensor]) -> dict[torch.dtype, list[Tensor]]:
    groups: dict[torch.dtype, list[Tensor]] = {}
    for t in tensors:
        groups.setdefault(t.dtype, []).append(t)
    return groups


def broadcast_parameters(module: nn.Module, ctx: DistContext, src: int = 0) -> None:
    """Copy rank ``src``'s parameters and buffers to every rank (collective).

    Args:
        module: The replicated model.
        ctx: Distributed context.
        src: Rank whose values win.
    """
    if ctx.world_size == 1:
        return
    tensors = [t.data for t in (*module.parameters(), *module.buffers())]
    for group in _by_dtype(tensors).values():
        flat = torch.cat([t.reshape(-1) for t in group])
        dist.broadcast(flat, src=src, group=ctx.group)
        for t, part in zip(group, flat.split_with_sizes([t.numel() for t in group]),
                           strict=True):
            t.copy_(part.view_as(t))


def all_reduce_gradients(module: nn.Module, ctx: DistContext, *,
                         stats: CommStats | None = None) -> None:
    """Sum the gradients of ``module``'s parameters over the ranks, in place.

    A parameter without a gradient on this rank contributes zeros (and then holds the
    summed gradient), so every rank reduces the same layout.

    Args:
        module: The replicated model.
        ctx: Distributed context.
        stats: Counters; kind ``"grad"`` counts a ring all-reduce's traffic
            (:func:`gnnpar.comm.record_all_reduce`).
    """
    params = [p for p in module.parameters() if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    if ctx.world_size == 1:
        return
    for group in _by_dtype(p.grad for p in params if p.grad is not None).values():
        flat = torch.cat([g.reshape(-1) for g in group])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=ctx.group)
        for g, part in zip(group, flat.split_with_sizes([g.numel() for g in group]),
                           strict=True):
            g.copy_(part.view_as(g))
        if stats is not None:
            record_all_reduce(stats, "grad", flat, ctx.world_size)

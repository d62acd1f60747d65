"""One epoch of partition-parallel full-graph training, and all-reduced evaluation.

Every rank runs the model on its owned nodes (the halo-exchange layers make each layer
equal to the whole-graph layer), takes the loss of its own training nodes divided by the
*global* number of training nodes, and the summed gradients are then exactly those of
the whole-graph loss.  Accuracies are counts all-reduced over the ranks, so every rank
reports the whole graph's figures.

Usage::

    data = NodeData.load(dist_graph, ctx)
    graph = HaloGraph.build(dist_graph, ctx, stats=stats)
    model = distribute_convs(torch_geometric.nn.models.GCN(...), graph)
    for epoch in range(epochs):
        loss = train_epoch(model, graph, data, optimizer, ctx, epoch=epoch)
        acc = evaluate(model, graph, data, ctx)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gnnpar.comm import CommStats, all_reduce_sum
from gnnpar.distributed import DistContext
from gnnpar.graph import SPLITS, DistGraph, global_split_sizes
from gnnpar.nn.dist_conv import HaloGraph
from gnnpar.nn.replicate import all_reduce_gradients


@dataclass(frozen=True)
class NodeData:
    """Features, labels and split ids of this rank's owned nodes.

    Attributes:
        x: ``[num_owned, F]`` features.
        y: ``[num_owned]`` int64 labels (``-1`` = unlabelled).
        splits: ``{"train", "val", "test"} -> `` int64 local ids of owned nodes.
        num_global: Global size of each split (for the loss normalisation).
    """

    x: Tensor
    y: Tensor
    splits: dict[str, Tensor]
    num_global: dict[str, int]

    @classmethod
    def load(cls, graph: DistGraph, ctx: DistContext, dtype: torch.dtype = torch.float32,
             num_global: dict[str, int] | None = None) -> NodeData:
        """Read this rank's rows from the partition onto ``ctx.device``.

        Args:
            graph: This rank's part.
            ctx: Distributed context.
            dtype: Feature dtype.
            num_global: The global split sizes, when the caller already has them from
                :func:`~gnnpar.graph.global_split_sizes`; otherwise they are computed
                here (collective).
        """
        part = graph.part
        dev = ctx.device
        splits = {s: torch.from_numpy(np.array(getattr(part, f"{s}_idx"))).to(dev)
                  for s in SPLITS}
        if num_global is None:
            num_global = global_split_sizes(graph, ctx)
        return cls(x=torch.from_numpy(np.array(part.feat)).to(dev, dtype),
                   y=torch.from_numpy(np.array(part.label)).to(dev),
                   splits=splits, num_global=num_global)


def train_epoch(model: nn.Module, graph: HaloGraph, data: NodeData,
                optimizer: torch.optim.Optimizer, ctx: DistContext, *, epoch: int,
                stats: CommStats | None = None) -> float:
    """One full-graph gradient step (collective).

    Args:
        model: The replicated model, its layers wrapped by ``distribute_convs``.
        graph: This rank's part.
        data: This rank's nodes.
        optimizer: Optimizer over ``model``'s parameters.
        ctx: Distributed context.
        epoch: Epoch number (draws the boundary sample under BNS).
        stats: Counters for the gradient all-reduce (kind ``"grad"``).

    Returns:
        The whole graph's mean training loss.
    """
    graph.set_epoch(epoch)
    model.train()
    optimizer.zero_grad(set_to_none=True)
    out = model(data.x, graph.edge_index)
    idx = data.splits["train"]
    loss = F.cross_entropy(out[idx], data.y[idx], reduction="sum") / data.num_global["train"]
    loss.backward()  # type: ignore[no-untyped-call]
    all_reduce_gradients(model, ctx, stats=stats)
    optimizer.step()
    return float(all_reduce_sum(ctx, loss.detach().to(torch.float64).reshape(1)))


@torch.no_grad()
def evaluate(model: nn.Module, graph: HaloGraph, data: NodeData,
             ctx: DistContext) -> dict[str, float]:
    """Whole-graph accuracy of each split (collective; exact halo exchange).

    Returns:
        ``{"train_acc", "val_acc", "test_acc"}``; a split empty everywhere gives ``nan``.
    """
    model.eval()
    pred = model(data.x, graph.edge_index).argmax(-1)
    correct = torch.stack([(pred[i] == data.y[i]).sum() for i in data.splits.values()])
    correct = all_reduce_sum(ctx, correct.cpu())
    return {f"{s}_acc": float(c) / data.num_global[s] if data.num_global[s] else float("nan")
            for s, c in zip(SPLITS, correct.tolist(), strict=True)}


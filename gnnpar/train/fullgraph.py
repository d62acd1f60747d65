"""Full-graph mode (``--mode full``) and the exact full-neighbour evaluation of both modes.

Every rank holds the replicated model and computes every layer for the nodes it owns; the
halo-exchange layers (:func:`gnnpar.nn.dist_conv.distribute_convs`) make each layer
equal to the same PyG layer on the whole graph.  One epoch is one gradient step: each rank's loss is
the sum over its own training nodes divided by the *global* number of training nodes,
times the world size that DDP's gradient averaging divides by, so the update is exactly
that of the whole-graph mean loss (single-process PyG training).  BNS-GCN boundary
sampling and PipeGCN stale halos are switches on the halo exchange
(:class:`~gnnpar.nn.halo.HaloExchange`); evaluation is always exact.  A checkpoint holds the
weights and the optimizer, not the stale halo rows in flight, so a resumed stale run
starts with one exact epoch (an uninterrupted one only with the first).

Each epoch's evaluation (:func:`exact_accuracy`) is one forward pass of the training
module. The final evaluation of both modes,
:func:`~gnnpar.evaluation.node.full_neighbour_accuracy`, gives the same figures layer by
layer in chunks of owned nodes under a memory budget (:mod:`gnnpar.nn.inference`): no
``[E, F]`` tensor over the part's edges is ever made (``docs/memory.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gnnpar.comm import CommStats
from gnnpar.distributed import DistContext
from gnnpar.evaluation.node import labels_and_splits, split_accuracy
from gnnpar.models.node import COMPUTE_DTYPES, autocast
from gnnpar.nn.dist_conv import HaloGraph, distribute_convs
from gnnpar.parallel_dims import ParallelDims
from gnnpar.storage.graph import DistGraph
from gnnpar.train.config import Config
from gnnpar.train.engine import WholeGraphEngine

EPOCH_HOST_SYNCS = 2
"""Host reads of a full-graph epoch (its one step): the loss and the correct count."""


@dataclass(frozen=True)
class NodeData:
    """Features, labels and split ids of this rank's owned nodes, on its device.

    Attributes:
        x: ``[num_owned, F]`` features.
        y: ``[num_owned]`` int64 labels (``-1`` = unlabelled).
        splits: ``{"train", "val", "test"} ->`` int64 local ids of owned nodes.
        num_global: Global size of each split (from
            :func:`~gnnpar.storage.graph.global_split_sizes`).
    """

    x: Tensor
    y: Tensor
    splits: dict[str, Tensor]
    num_global: dict[str, int]

    @classmethod
    def load(cls, graph: DistGraph, device: torch.device, num_global: dict[str, int],
             dtype: torch.dtype = torch.float32) -> NodeData:
        """Read this rank's rows from the partition onto ``device``, features as ``dtype``."""
        y, splits = labels_and_splits(graph, device)
        return cls(x=graph.features().to(device, dtype, copy=True), y=y, splits=splits,
                   num_global=num_global)


@torch.no_grad()
def exact_accuracy(model: nn.Module, halo: HaloGraph, data: NodeData, ctx: DistContext,
                   precision: str = "fp32") -> dict[str, float]:
    """Whole-graph accuracy of each split in one forward pass (collective; exact halos).

    Args:
        model: The model, its message-passing layers wrapped by ``distribute_convs``.
        halo: This rank's part of the full graph.
        data: This rank's nodes (features in ``precision``'s compute dtype).
        ctx: Distributed context.
        precision: ``fp32`` or ``bf16`` (autocast).

    Returns:
        ``{"train_acc", "val_acc", "test_acc"}``; a split empty everywhere gives ``nan``.
    """
    model.eval()
    with autocast(ctx.device, precision):
        pred = model(data.x, halo.edge_index).argmax(-1)
    return split_accuracy(pred, data.y, data.splits, data.num_global, ctx)


class FullGraphEngine(WholeGraphEngine):
    """One gradient step on the whole partitioned graph per epoch.

    Args:
        cfg: The run's configuration (``full`` section: the reducers).
        graph: This rank's part.
        dims: The run's process groups (:class:`~gnnpar.parallel_dims.ParallelDims`).
        model: The replicated PyG model; its layers are wrapped in place.
        num_global: Global size of each split.
        stats: Byte counters (kinds ``halo``, ``halo_grad``, ``halo_setup``).

    Attributes:
        halo: This rank's part of the full graph, with the reducers.
        data: This rank's nodes.
        module: The distributed model (what DDP wraps).
        halo_plan: The halo routing, which the exact final inference reuses.
    """

    def __init__(self, cfg: Config, graph: DistGraph, dims: ParallelDims, model: nn.Module,
                 num_global: dict[str, int], stats: CommStats) -> None:
        self.cfg, self.dims, self.graph, self.model = cfg, dims, graph, model
        self.num_global, self.stats = num_global, stats
        self.halo = HaloGraph.build(graph, dims.ctx, stats=stats, boundary_p=cfg.full.boundary_p,
                                    stale=cfg.full.stale, seed=cfg.train.seed)
        self.precision = cfg.train.precision
        self.data = NodeData.load(graph, dims.ctx.device, num_global,
                                  COMPUTE_DTYPES[self.precision])
        self.module = distribute_convs(model, self.halo)
        self.halo_plan = self.halo.exchange.plan

    def forward_loss(self, ddp: nn.Module, epoch: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """See :meth:`WholeGraphEngine.forward_loss` (DDP divides by the world size)."""
        self.halo.set_epoch(epoch)
        data, idx = self.data, self.data.splits["train"]
        with autocast(self.ctx.device, self.precision):
            out = ddp(data.x, self.halo.edge_index)[idx]
            loss = F.cross_entropy(out, data.y[idx], reduction="sum")
        return loss, loss * (self.ctx.world_size / data.num_global["train"]), out, data.y[idx]

    def evaluate(self) -> dict[str, float]:
        """Exact validation and test accuracy (collective)."""
        acc = exact_accuracy(self.module, self.halo, self.data, self.ctx, self.precision)
        return {"val_acc": acc["val_acc"], "test_acc": acc["test_acc"]}

    def final_metrics(self, last: dict[str, Any], outputs: Path | None,
                      source: dict[str, Any]) -> dict[str, Any]:
        """Exact layer-wise figures on the training's halo routing (``--eval``; collective)."""
        from gnnpar.train.final import node_final_metrics  # it imports this module

        return node_final_metrics(self.cfg, self.module, self.model, self.graph, self.ctx,
                                  self.num_global, self.stats, last, outputs, source,
                                  self.halo_plan)

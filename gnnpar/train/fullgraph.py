"""Full-graph mode (``--mode full``) and the exact full-neighbour evaluation of both modes.

Every rank holds the replicated model and computes every layer for the nodes it owns; the
halo-exchange layers (:func:`gnnpar.nn.distribute_convs`) make each layer equal to the
same PyG layer on the whole graph.  One epoch is one gradient step: each rank's loss is
the sum over its own training nodes divided by the *global* number of training nodes,
times the world size that DDP's gradient averaging divides by, so the update is exactly
that of the whole-graph mean loss (single-process PyG training).  BNS-GCN boundary
sampling and PipeGCN stale halos are switches on the halo exchange
(:class:`~gnnpar.nn.HaloExchange`); evaluation is always exact.  A checkpoint holds the
weights and the optimizer, not the stale halo rows in flight, so a resumed stale run
starts with one exact epoch (an uninterrupted one only with the first).

:func:`exact_accuracy` — every in-neighbour of every node, layer by layer — is also the
final evaluation of minibatch training.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gnnpar.comm import CommStats, all_reduce_sum
from gnnpar.distributed import DistContext
from gnnpar.graph import SPLITS, DistGraph
from gnnpar.nn import HaloGraph, distribute_convs, flush_pipelines
from gnnpar.train.config import Config
from gnnpar.train.minibatch import SUMS, StepHook
from gnnpar.train.models import COMPUTE_DTYPES, autocast


@dataclass(frozen=True)
class NodeData:
    """Features, labels and split ids of this rank's owned nodes, on its device.

    Attributes:
        x: ``[num_owned, F]`` features.
        y: ``[num_owned]`` int64 labels (``-1`` = unlabelled).
        splits: ``{"train", "val", "test"} ->`` int64 local ids of owned nodes.
        num_global: Global size of each split (from
            :func:`~gnnpar.graph.global_split_sizes`).
    """

    x: Tensor
    y: Tensor
    splits: dict[str, Tensor]
    num_global: dict[str, int]

    @classmethod
    def load(cls, graph: DistGraph, device: torch.device, num_global: dict[str, int],
             dtype: torch.dtype = torch.float32) -> NodeData:
        """Read this rank's rows from the partition onto ``device``, features as ``dtype``."""
        part = graph.part
        splits = {s: torch.from_numpy(np.array(getattr(part, f"{s}_idx"))).to(device)
                  for s in SPLITS}
        return cls(x=graph.features().to(device, dtype, copy=True),
                   y=torch.from_numpy(np.array(part.label)).to(device),
                   splits=splits, num_global=num_global)


@torch.no_grad()
def exact_accuracy(model: nn.Module, halo: HaloGraph, data: NodeData, ctx: DistContext,
                   precision: str = "fp32") -> dict[str, float]:
    """Whole-graph accuracy of each split (collective; exact halo exchange).

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
    correct = torch.stack([(pred[i] == data.y[i]).sum() for i in data.splits.values()])
    correct = all_reduce_sum(ctx, correct).cpu()
    return {f"{s}_acc": float(c) / data.num_global[s] if data.num_global[s] else float("nan")
            for s, c in zip(SPLITS, correct.tolist(), strict=True)}


def full_neighbour_accuracy(model: nn.Module, graph: DistGraph, ctx: DistContext,
                            num_global: dict[str, int], stats: CommStats | None = None,
                            precision: str = "fp32") -> dict[str, float]:
    """Exact accuracy of a trained replicated model on the whole partitioned graph.

    A copy of ``model`` has its message-passing layers wrapped in ``DistConv`` (halo
    exchange before each layer), so the result equals the PyG model on the whole graph.
    """
    import copy

    halo = HaloGraph.build(graph, ctx, stats=stats)
    data = NodeData.load(graph, ctx.device, num_global, COMPUTE_DTYPES[precision])
    return exact_accuracy(distribute_convs(copy.deepcopy(model), halo), halo, data, ctx,
                          precision)


class FullGraphEngine:
    """One gradient step on the whole partitioned graph per epoch.

    Args:
        cfg: The run's configuration (``full`` section: the reducers).
        graph: This rank's part.
        ctx: Distributed context.
        model: The replicated PyG model; its layers are wrapped in place.
        num_global: Global size of each split.
        stats: Byte counters (kinds ``halo``, ``halo_grad``, ``halo_setup``).

    Attributes:
        halo: This rank's part of the full graph, with the reducers.
        data: This rank's nodes.
        module: The distributed model (what DDP wraps).
    """

    def __init__(self, cfg: Config, graph: DistGraph, ctx: DistContext, model: nn.Module,
                 num_global: dict[str, int], stats: CommStats) -> None:
        self.cfg = cfg
        self.ctx = ctx
        self.halo = HaloGraph.build(graph, ctx, stats=stats, boundary_p=cfg.full.boundary_p,
                                    stale=cfg.full.stale, seed=cfg.train.seed)
        self.precision = cfg.train.precision
        self.data = NodeData.load(graph, ctx.device, num_global, COMPUTE_DTYPES[self.precision])
        self.module = distribute_convs(model, self.halo)
        self.steps_per_epoch = 1

    def train_epoch(self, ddp: nn.Module, optimizer: torch.optim.Optimizer, epoch: int,
                    seed_step: Callable[[int, int], None], acc: dict[str, float],
                    save: Callable[[dict[str, float]], None], hook: StepHook | None,
                    progress: bool) -> dict[str, float]:
        """The epoch's gradient step (collective).

        Args: as :meth:`~gnnpar.train.minibatch.MinibatchEngine.train_epoch` (``acc`` and
        ``save`` are unused: an epoch is one step; ``hook`` gets ``batch=None``).

        Returns:
            This rank's sums: ``loss``, ``correct``, ``seeds``, ``edges`` (0), ``time``.
        """
        seed_step(epoch, 0)
        t0 = time.perf_counter()
        self.halo.set_epoch(epoch)
        ddp.train()
        data, idx = self.data, self.data.splits["train"]
        optimizer.zero_grad(set_to_none=True)
        with autocast(self.ctx.device, self.precision):
            out = ddp(data.x, self.halo.edge_index)[idx]
            loss = F.cross_entropy(out, data.y[idx], reduction="sum")
        t1 = time.perf_counter()
        scaled = loss * (self.ctx.world_size / data.num_global["train"])
        scaled.backward()  # type: ignore[no-untyped-call]
        t2 = time.perf_counter()
        optimizer.step()
        t3 = time.perf_counter()
        correct = (out.argmax(-1) == data.y[idx]).sum()
        sums = {**dict.fromkeys(SUMS, 0.0), "loss": float(loss.detach()),
                "correct": float(correct), "seeds": float(idx.numel()),
                "time": time.perf_counter() - t0, "t_forward": t1 - t0, "t_backward": t2 - t1,
                "t_optimizer": t3 - t2}
        if hook is not None:
            hook(epoch, 0, None)
        return sums

    def evaluate(self) -> dict[str, float]:
        """Exact validation and test accuracy (collective)."""
        acc = exact_accuracy(self.module, self.halo, self.data, self.ctx, self.precision)
        return {"val_acc": acc["val_acc"], "test_acc": acc["test_acc"]}

    def final_accuracy(self) -> dict[str, float]:
        """Exact accuracy of every split after training (collective)."""
        flush_pipelines(self.module)
        return exact_accuracy(self.module, self.halo, self.data, self.ctx, self.precision)

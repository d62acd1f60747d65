"""3D-parallel full-graph mode (``--mode full --grid X,Y,Z``): one exact step per epoch.

The run's PyG model becomes a :class:`~gnnpar.nn.grid_gnn.GridGNN` on the process grid:
its weights are ``DTensor`` shards (the optimizer steps them, checkpoints hold them
whole, under the PyG names), and its layers' collectives synchronise everything, so no
``DistributedDataParallel`` wraps it.  The loss of an epoch is the sum over the training
rows of each rank divided by the global number of training nodes; a rank's rows are
replicated over the last layer's ``o`` axis and each copy's gradient reaches only that
copy's class columns, so the update is exactly that of the whole-graph mean loss.
Evaluation is the same forward pass, exact.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gnnpar.comm import CommStats
from gnnpar.distributed import DistContext
from gnnpar.graph import SPLITS, DistGraph
from gnnpar.nn.grid import ProcessGrid, parse_grid
from gnnpar.nn.grid_gnn import SPLIT_CODES, GridGNN, GridGraph, model_kind
from gnnpar.train.config import Config
from gnnpar.train.fullgraph import split_accuracy
from gnnpar.train.minibatch import SUMS, StepHook
from gnnpar.train.sync import LocalSGD


class GridEngine:
    """One gradient step on the whole graph per epoch, 3D-parallel.

    Args:
        cfg: The run's configuration (``full.grid``: the grid).
        graph: This rank's part.
        ctx: Distributed context.
        model: The PyG model (the same initial weights on every rank).
        num_global: Global size of each split.
        stats: Byte counters (kinds ``grid``, ``grid_grad``, ``grid_setup``, ``grad``).

    Attributes:
        grid: The process grid.
        layout: The graph on the grid.
        module: The :class:`~gnnpar.nn.grid_gnn.GridGNN` (what the optimizer steps).
    """

    def __init__(self, cfg: Config, graph: DistGraph, ctx: DistContext, model: nn.Module,
                 num_global: dict[str, int], stats: CommStats) -> None:
        kind = model_kind(model)
        assert cfg.full.grid is not None
        dims = parse_grid(cfg.full.grid)
        layers = cfg.model.layers
        self.ctx, self.num_global = ctx, num_global
        self.grid = ProcessGrid.build(ctx, dims, layers, stats)
        widths = (graph.meta.feat_dim, *[cfg.model.hidden] * (layers - 1), graph.meta.num_classes)
        self.layout = GridGraph.build(graph, ctx, self.grid, kind, widths, stats)
        self.module = GridGNN(model, self.layout)
        self.steps_per_epoch = 1
        self.sync = LocalSGD()
        split = self.layout.split.long()
        self.rows = {s: torch.nonzero(split == SPLIT_CODES[s]).flatten() for s in SPLITS}

    def train_epoch(self, ddp: nn.Module, optimizer: torch.optim.Optimizer, epoch: int,
                    seed_step: Callable[[int, int], None], acc: dict[str, float],
                    save: Callable[[dict[str, float]], None], hook: StepHook | None,
                    progress: bool) -> dict[str, float]:
        """The epoch's gradient step (collective); arguments as the 1D full-graph engine's."""
        seed_step(epoch, 0)
        t0 = time.perf_counter()
        module, y, idx = self.module, self.layout.y, self.rows["train"]
        module.train()
        optimizer.zero_grad(set_to_none=True)
        out = module(self.layout.x)[idx]
        loss = F.cross_entropy(out, y[idx], reduction="sum")
        t1 = time.perf_counter()
        (loss / self.num_global["train"]).backward()  # type: ignore[no-untyped-call]
        t2 = time.perf_counter()
        optimizer.step()
        t3 = time.perf_counter()
        mine = float(self.layout.counts_rows)
        correct = (out.argmax(-1) == y[idx]).sum()
        sums = {**dict.fromkeys(SUMS, 0.0), "loss": mine * float(loss.detach()),
                "correct": mine * float(correct), "seeds": mine * idx.numel(),
                "time": time.perf_counter() - t0, "t_forward": t1 - t0, "t_backward": t2 - t1,
                "t_optimizer": t3 - t2}
        if hook is not None:
            hook(epoch, 0, None)
        return sums

    @torch.no_grad()
    def accuracy(self) -> dict[str, float]:
        """Exact accuracy of every split (collective: the forward and one all-reduce)."""
        self.module.eval()
        pred: Tensor = self.module(self.layout.x).argmax(-1)
        rows = self.rows if self.layout.counts_rows else {  # one copy of each row counts
            s: i[:0] for s, i in self.rows.items()}
        return split_accuracy(pred, self.layout.y, rows, self.num_global, self.ctx)

    def evaluate(self) -> dict[str, float]:
        """Exact validation and test accuracy (collective)."""
        acc = self.accuracy()
        return {"val_acc": acc["val_acc"], "test_acc": acc["test_acc"]}


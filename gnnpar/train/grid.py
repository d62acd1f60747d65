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

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gnnpar.comm import CommStats
from gnnpar.evaluation.node import split_accuracy
from gnnpar.nn.grid import ProcessGrid
from gnnpar.nn.grid_gnn import SPLIT_CODES, GridGNN, GridGraph, model_kind
from gnnpar.parallel_dims import ParallelDims
from gnnpar.storage.graph import SPLITS, DistGraph
from gnnpar.train.config import Config
from gnnpar.train.engine import FINAL_FIELDS, WholeGraphEngine, recorded_final


class GridEngine(WholeGraphEngine):
    """One gradient step on the whole graph per epoch, 3D-parallel.

    Args:
        cfg: The run's configuration (``full.grid``: the grid).
        graph: This rank's part.
        dims: The run's process groups (:class:`~gnnpar.parallel_dims.ParallelDims`).
        model: The PyG model (the same initial weights on every rank).
        num_global: Global size of each split.
        stats: Byte counters (kinds ``grid``, ``grid_grad``, ``grid_setup``, ``grad``).

    Attributes:
        grid: The process grid.
        layout: The graph on the grid.
        module: The :class:`~gnnpar.nn.grid_gnn.GridGNN` (what the optimizer steps).
    """

    replicated = False  # sharded weights, synchronised by the layers

    def __init__(self, cfg: Config, graph: DistGraph, dims: ParallelDims, model: nn.Module,
                 num_global: dict[str, int], stats: CommStats) -> None:
        kind = model_kind(model)
        layers = cfg.model.layers
        self.cfg, self.dims, self.num_global = cfg, dims, num_global
        self.grid = ProcessGrid.build(dims, layers, stats)
        widths = (graph.meta.feat_dim, *[cfg.model.hidden] * (layers - 1), graph.meta.num_classes)
        self.layout = GridGraph.build(graph, self.ctx, self.grid, kind, widths, stats)
        self.module = GridGNN(model, self.layout)
        split = self.layout.split.long()
        self.rows = {s: torch.nonzero(split == SPLIT_CODES[s]).flatten() for s in SPLITS}

    def forward_loss(self, ddp: nn.Module, epoch: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """See :meth:`WholeGraphEngine.forward_loss` (no DDP: the layers sum the gradients)."""
        y, idx = self.layout.y, self.rows["train"]
        out = self.module(self.layout.x)[idx]
        loss = F.cross_entropy(out, y[idx], reduction="sum")
        return loss, loss / self.num_global["train"], out, y[idx]

    def counted_share(self) -> float:
        """1 on the ranks whose rows count, 0 on their copies along the grid."""
        return float(self.layout.counts_rows)

    @torch.no_grad()
    def exact_accuracy(self) -> dict[str, float]:
        """Exact accuracy of every split (collective: the forward and one all-reduce)."""
        self.module.eval()
        pred: Tensor = self.module(self.layout.x).argmax(-1)
        rows = self.rows if self.layout.counts_rows else {  # one copy of each row counts
            s: i[:0] for s, i in self.rows.items()}
        return split_accuracy(pred, self.layout.y, rows, self.num_global, self.ctx)

    def evaluate(self) -> dict[str, float]:
        """Exact validation and test accuracy (collective)."""
        acc = self.exact_accuracy()
        return {"val_acc": acc["val_acc"], "test_acc": acc["test_acc"]}

    def final_metrics(self, last: dict[str, Any], outputs: Path | None,
                      source: dict[str, Any]) -> dict[str, Any]:
        """Exact figures of every split from one forward pass (``--eval``; collective).

        ``--eval sampled`` / ``none`` without outputs: the last evaluation's, or none.
        """
        t = self.cfg.train
        if t.eval != "full" and outputs is None:
            return recorded_final(t.eval, last)
        return {**dict.fromkeys(FINAL_FIELDS), **self.exact_accuracy()}

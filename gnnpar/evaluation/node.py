"""Node-classification evaluation: accuracy of each split over all ranks, full-neighbour.

- :func:`full_neighbour_accuracy` — the final evaluation of both training modes: a
  trained replicated model's exact outputs on the whole partitioned graph
  (:func:`full_neighbour_logits`, layer by layer in chunks of owned nodes under a memory
  budget, :func:`~gnnpar.nn.inference.layerwise_inference`: no ``[E, F]`` tensor over
  the part's edges is ever made, ``docs/memory.md``), scored by :func:`split_accuracy`;
- :func:`accuracy` — one split's accuracy of given outputs (e.g.
  :func:`~gnnpar.nn.inference.inference`'s), for a loop of one's own.

Every function is collective: all ranks call it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor
from torch_geometric.nn.models.basic_gnn import BasicGNN

from gnnpar.comm import CommStats, all_reduce_sum
from gnnpar.distributed import DistContext
from gnnpar.models.node import COMPUTE_DTYPES, autocast
from gnnpar.nn.halo import HaloPlan
from gnnpar.nn.inference import BUDGET_MB, layerwise_inference
from gnnpar.storage.graph import SPLITS, DistGraph


def labels_and_splits(graph: DistGraph, device: torch.device
                      ) -> tuple[Tensor, dict[str, Tensor]]:
    """This rank's labels ``[num_owned]`` and split ids (local), read onto ``device``."""
    part = graph.part
    splits = {s: torch.from_numpy(np.array(getattr(part, f"{s}_idx"))).to(device)
              for s in SPLITS}
    return torch.from_numpy(np.array(part.label)).to(device), splits


def split_accuracy(pred: Tensor, y: Tensor, splits: dict[str, Tensor],
                   num_global: dict[str, int], ctx: DistContext) -> dict[str, float]:
    """Accuracy of each split over all ranks (collective: one all-reduce).

    Returns:
        ``{"train_acc", "val_acc", "test_acc"}``; a split empty everywhere gives ``nan``.
    """
    correct = torch.stack([(pred[i] == y[i]).sum() for i in splits.values()])
    correct = all_reduce_sum(ctx, correct).cpu()
    return {f"{s}_acc": float(c) / num_global[s] if num_global[s] else float("nan")
            for s, c in zip(SPLITS, correct.tolist(), strict=True)}


def full_neighbour_logits(model: BasicGNN, graph: DistGraph, ctx: DistContext,
                          stats: CommStats | None = None, precision: str = "fp32",
                          budget_bytes: int = int(BUDGET_MB * 2**20), plan: HaloPlan | None = None,
                          x: Tensor | None = None,
                          emit: Callable[[int, Tensor], None] | None = None) -> Tensor:
    """``[num_owned, C]`` outputs of a trained replicated model on the whole partitioned graph.

    Layer by layer, each layer in chunks of owned nodes of at most ``budget_bytes``
    (:func:`~gnnpar.nn.inference.layerwise_inference`), so the result equals the PyG
    model on the whole graph while no ``[E, F]`` tensor over the part's edges exists.
    The features are read from the partition where they are stored (no copy when stored
    in the compute dtype on a CPU), unless ``x`` gives the owned nodes' input rows
    (learnable embeddings); ``plan``: the halo routing, if already built; ``emit``: gets
    every layer's output rows (``layerwise_inference``'s).
    """
    x = (graph.features() if x is None else x).to(ctx.device, COMPUTE_DTYPES[precision])
    with autocast(ctx.device, precision):
        return layerwise_inference(model, graph, ctx, x, budget_bytes, stats, plan, emit)


def full_neighbour_accuracy(model: BasicGNN, graph: DistGraph, ctx: DistContext,
                            num_global: dict[str, int], stats: CommStats | None = None,
                            precision: str = "fp32", budget_bytes: int = int(BUDGET_MB * 2**20),
                            plan: HaloPlan | None = None,
                            x: Tensor | None = None) -> dict[str, float]:
    """Exact accuracy of each split from :func:`full_neighbour_logits` (collective)."""
    logits = full_neighbour_logits(model, graph, ctx, stats, precision, budget_bytes, plan, x)
    return split_accuracy(logits.argmax(-1), *labels_and_splits(graph, ctx.device),
                          num_global, ctx)


def accuracy(logits: Tensor, graph: DistGraph, ctx: DistContext, split: str = "test") -> float:
    """Accuracy of ``logits`` on a split over all ranks' nodes (collective: one all-reduce).

    Args:
        logits: ``[num_owned, C]`` outputs of the owned nodes (e.g. :func:`inference`'s).
        graph: This rank's part (its labels and split).
        ctx: Distributed context.
        split: ``"train"``, ``"val"`` or ``"test"``.

    Returns:
        Correct predictions over the split's labelled nodes of all ranks (``nan`` when
        the split is empty everywhere).
    """
    idx = torch.from_numpy(np.asarray(getattr(graph.part, f"{split}_idx"), dtype=np.int64))
    y = torch.from_numpy(np.asarray(graph.part.label[idx.numpy()], dtype=np.int64))
    pred = logits.argmax(-1).index_select(0, idx.to(logits.device)).cpu()
    counts = torch.tensor([float((pred == y).sum()), float(idx.numel())], dtype=torch.float64,
                          device=ctx.device)
    right, total = all_reduce_sum(ctx, counts).tolist()
    return right / total if total else float("nan")

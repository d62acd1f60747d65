"""The rows a trained model leaves: exact logits, classes and embeddings of owned nodes.

Shared by the trainer (``--save-predictions``, ``--save-embeddings [LAYER]``) and
``gnnpar-predict``: each rank runs the exact full-neighbour inference on its part and
streams its owned rows into a :class:`~gnnpar.train.predictions.PredictionWriter`:

* homogeneous graphs: :func:`write_node_outputs` -- the logits and classes
  (layer-wise inference, :mod:`gnnpar.nn.inference`), the embeddings of one layer
  written as that layer is made, and each split's accuracy from these logits;
* link prediction: :func:`write_node_outputs` without logits -- the encoder's
  embeddings (layer ``--layers`` by default), from which any pair scores;
* typed graphs: the target type's logits, classes and embeddings from full
  neighbourhoods (:meth:`~gnnpar.train.typed.TypedEngine.predict`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch_geometric.nn.models.basic_gnn import BasicGNN

from gnnpar.artifacts.kinds import PREDICTIONS_DIR
from gnnpar.comm import CommStats
from gnnpar.distributed import DistContext
from gnnpar.errors import ConfigError
from gnnpar.evaluation.node import full_neighbour_logits, labels_and_splits, split_accuracy
from gnnpar.nn.halo import HaloPlan
from gnnpar.storage.graph import DistGraph, global_split_sizes
from gnnpar.train.config import Config
from gnnpar.train.predictions import PredictionWriter


def embedding_layer(cfg: Config) -> int | None:
    """The layer whose output ``--save-embeddings`` writes (``None``: no embeddings).

    Without a layer: the encoder's output for link prediction, else the last hidden
    layer (the first, for a one-layer model).
    """
    layer = cfg.run.save_embeddings
    if layer is None or layer > 0:
        return layer
    return cfg.model.layers if cfg.data.task == "link" else max(1, cfg.model.layers - 1)


def wants_outputs(cfg: Config) -> bool:
    """Whether the run writes predictions or embeddings."""
    return cfg.run.save_predictions or cfg.run.save_embeddings is not None


def predictions_dir(out: str | Path) -> Path:
    """Where a run directory's predictions go: ``OUT/predictions``."""
    return Path(out) / PREDICTIONS_DIR


def write_node_outputs(out: Path, cfg: Config, model: BasicGNN, graph: DistGraph,
                       ctx: DistContext, stats: CommStats | None = None,
                       plan: HaloPlan | None = None, x: Tensor | None = None,
                       logits: bool = True, source: dict[str, Any] | None = None
                       ) -> dict[str, float] | None:
    """Exact inference of a homogeneous graph, its rows written to ``out`` (collective).

    Args:
        out: The predictions directory.
        cfg: The run's settings (the layer of the embeddings, the precision, the budget).
        model: The trained PyG model (node task) or encoder (link task).
        graph: This rank's part.
        ctx: Distributed context.
        stats: Byte counters of the inference.
        plan: The halo routing, if already built.
        x: The owned nodes' input rows, when not the features (learnable embeddings).
        logits: Write the logits and classes (node classification).
        source: Recorded in the index (the run, the partition).

    Returns:
        Each split's accuracy from these logits (``{"train_acc", "val_acc",
        "test_acc"}``), or ``None`` without logits or labels.
    """
    t = cfg.train
    meta = graph.meta
    writer = PredictionWriter(out, ctx, graph.part.orig_ids, cfg.data.task, None,
                              meta.num_nodes)
    result = full_neighbour_logits(model, graph, ctx, stats, t.precision,
                                   int(t.eval_budget_mb * 2**20), plan, x,
                                   layer_writer(writer, embedding_layer(cfg)))
    accuracy = None
    if logits:
        pred = result.argmax(-1)
        writer.write("logits", result)
        writer.write("pred", pred)
        if meta.num_classes and cfg.data.task == "node":
            accuracy = split_accuracy(pred, *labels_and_splits(graph, ctx.device),
                                      global_split_sizes(graph, ctx), ctx)
    writer.close(accuracy=accuracy, source=source or {})
    return accuracy


def write_typed_outputs(out: Path, cfg: Config, engine: Any, graph: DistGraph,
                        ctx: DistContext, source: dict[str, Any] | None = None) -> None:
    """The target type's exact logits, classes and embeddings of a typed run (collective).

    Args:
        out: The predictions directory.
        cfg: The run's settings (``--eval-batch-size`` seeds per batch).
        engine: The run's :class:`~gnnpar.train.typed.TypedEngine`.
        graph: This rank's part.
        ctx: Distributed context.
        source: Recorded in the index.
    """
    book = graph.meta.types
    if book is None:
        raise ConfigError("the partition is of a homogeneous graph.", field="graph",
                          fix="write its outputs with write_node_outputs, or partition a "
                          "typed graph.")
    lay = book.layout
    t = lay.type_index(lay.target)
    lo, hi = book.part_bounds(graph.rank)[t:t + 2]
    ids = np.asarray(graph.part.orig_ids[int(lo):int(hi)], dtype=np.int64) - \
        lay.node_offsets[t]
    writer = PredictionWriter(out, ctx, ids, "node", lay.target,
                              lay.node_offsets[t + 1] - lay.node_offsets[t])
    layer = embedding_layer(cfg)
    rows = torch.empty((len(ids), graph.meta.num_classes), dtype=torch.float32)
    hidden = None if layer is None else torch.empty(
        (len(ids), graph.meta.num_classes if layer == cfg.model.layers else cfg.model.hidden))

    def put(first: int, batch: Tensor, embeddings: Tensor | None) -> None:
        rows[first:first + batch.shape[0]] = batch.float().cpu()
        if hidden is not None and embeddings is not None:
            hidden[first:first + batch.shape[0]] = embeddings.float().cpu()

    engine.predict(put, cfg.sample.eval_batch_size, layer)
    writer.write("logits", rows)
    writer.write("pred", rows.argmax(-1))
    if hidden is not None:
        writer.write("embeddings", hidden, layer=layer)
    writer.close(source=source or {})


def layer_writer(writer: PredictionWriter, layer: int | None
                 ) -> Callable[[int, Tensor], None]:
    """An ``emit`` for layer-wise inference that writes layer ``layer``'s rows."""
    def emit(i: int, rows: Tensor) -> None:
        if i == layer:
            writer.write("embeddings", rows, layer=i)
    return emit

"""Which engine trains a run, and the model it trains: one table.

=================== ================================================ =======================
key (task, mode)    engine                                           model (:data:`MODELS`)
=================== ================================================ =======================
``node, sample``    :class:`~gnnpar.train.minibatch.MinibatchEngine` the PyG model
``node, full``      :class:`~gnnpar.train.fullgraph.FullGraphEngine` the PyG model
``node, grid``      :class:`~gnnpar.train.grid.GridEngine`           the PyG model
``link, sample``    :class:`~gnnpar.train.link.LinkEngine`           encoder and decoder
``typed, sample``   :class:`~gnnpar.train.typed.TypedEngine`         relation-wise SAGE
=================== ================================================ =======================

The task is ``typed`` on a typed partition, else ``--task``; the mode is ``grid`` for
``--mode full --grid X,Y,Z``, else ``--mode`` (the configuration refuses the pairs that
have no engine before any rank starts).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from gnnpar.comm import CommStats
from gnnpar.models.link import LinkDecoder
from gnnpar.models.node import build_model
from gnnpar.parallel_dims import ParallelDims
from gnnpar.storage.graph import DistGraph
from gnnpar.train.config import Config
from gnnpar.train.engine import Engine
from gnnpar.train.fullgraph import FullGraphEngine
from gnnpar.train.grid import GridEngine
from gnnpar.train.link import LinkEngine, LinkModule
from gnnpar.train.minibatch import MinibatchEngine
from gnnpar.train.typed import TypedEngine, build_typed_model

EngineFactory = Callable[[Config, DistGraph, ParallelDims, nn.Module, dict[str, int],
                          CommStats], Engine]
"""An engine's constructor: ``(cfg, graph, dims, model, num_global, stats)``."""


def _node_model(cfg: Config, graph: DistGraph) -> nn.Module:
    width = graph.meta.feat_dim or cfg.model.embedding_width()  # featureless: embeddings
    model: nn.Module = build_model(cfg.model, width, graph.meta.num_classes)
    return model


def _link_model(cfg: Config, graph: DistGraph) -> nn.Module:
    width = graph.meta.feat_dim or cfg.model.embedding_width()
    encoder = build_model(cfg.model, width, cfg.model.hidden)
    return LinkModule(encoder, LinkDecoder(cfg.link.decoder, cfg.model.hidden,
                                           dropout=cfg.model.dropout))


def _typed_model(cfg: Config, graph: DistGraph) -> nn.Module:
    return build_typed_model(cfg.model, graph, graph.meta.num_classes)


MODELS: dict[str, Callable[[Config, DistGraph], nn.Module]] = {
    "node": _node_model, "link": _link_model, "typed": _typed_model}
"""What each task trains (the optimizer steps it, checkpoints hold it)."""

ENGINES: dict[tuple[str, str], EngineFactory] = {
    ("node", "sample"): MinibatchEngine,
    ("node", "full"): FullGraphEngine,
    ("node", "grid"): GridEngine,
    ("link", "sample"): LinkEngine,
    ("typed", "sample"): TypedEngine,
}
"""The engine of each ``(task, mode)`` (see the module docstring)."""


def engine_key(cfg: Config, graph: DistGraph) -> tuple[str, str]:
    """The run's ``(task, mode)`` key of :data:`ENGINES`."""
    task = "typed" if graph.meta.types is not None else cfg.data.task
    mode = "grid" if cfg.train.mode == "full" and cfg.full.grid is not None else cfg.train.mode
    return task, mode


def build_engine(cfg: Config, graph: DistGraph, dims: ParallelDims,
                 num_global: dict[str, int], stats: CommStats) -> tuple[nn.Module, Engine]:
    """The run's model (the same initial weights on every rank) and its engine.

    Args:
        cfg: The run's configuration.
        graph: This rank's part.
        dims: The run's process groups.
        num_global: Global size of each split.
        stats: Byte counters of the training steps.

    Returns:
        The model as built (on ``dims.ctx.device``), and the engine that trains it.
    """
    task, mode = engine_key(cfg, graph)
    torch.manual_seed(cfg.train.seed)
    model = MODELS[task](cfg, graph).to(dims.ctx.device)
    return model, ENGINES[task, mode](cfg, graph, dims, model, num_global, stats)

"""Typed graphs in sample mode: typed minibatches, relation-wise GraphSAGE, sharded embeddings.

:class:`TypedEngine` is the :class:`~gnnpar.train.minibatch.MinibatchEngine` of a typed
partition: the loaders are :class:`~gnnpar.loading.typed.DistTypedNeighborLoader` s (fan-outs
``--fanouts`` for every relation, ``--relation-fanouts`` for some), the model a
:class:`~gnnpar.models.typed.TypedSAGE` (what ``to_hetero(GraphSAGE)`` computes), node
types with features read them from their feature store, and the featureless types learn a
row each in one :class:`~gnnpar.storage.embedding.DistEmbedding` (``--embed-dim``), updated
by a sparse optimiser (``--sparse-optimizer``, ``--sparse-lr``) after every step.  Loss
scaling, steps, local SGD, checkpoints (the embedding table and its optimiser state
included) and the run record are the minibatch engine's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.data import HeteroData

from gnnpar.comm import CommStats, all_gather_ints
from gnnpar.errors import ConfigError
from gnnpar.loading.typed import DistTypedNeighborLoader
from gnnpar.models.node import COMPUTE_DTYPES, autocast
from gnnpar.models.typed import TypedSAGE
from gnnpar.parallel_dims import ParallelDims
from gnnpar.sampling.fanouts import Fanouts, FanoutSpec, resolve_relation
from gnnpar.sampling.typed import DistTypedNeighborSampler
from gnnpar.storage.embedding import SPARSE_OPTIMIZERS, DistEmbedding, SparseOptimizer
from gnnpar.storage.features import DistFeatureStore
from gnnpar.storage.graph import SPLITS, DistGraph
from gnnpar.storage.typed import TypedFeatureStore
from gnnpar.train.config import Config, ModelConfig
from gnnpar.train.engine import recorded_final
from gnnpar.train.minibatch import MinibatchEngine
from gnnpar.train.outputs import write_typed_outputs
from gnnpar.typed import EdgeType


def build_typed_model(cfg: ModelConfig, graph: DistGraph, out_channels: int) -> TypedSAGE:
    """The typed model of ``cfg`` for a typed partition (``--model sage`` only)."""
    book = graph.meta.types
    assert book is not None
    if cfg.name != "sage":
        raise ConfigError(f"typed graphs train relation-wise GraphSAGE, not {cfg.name}.",
                          field="model.name", fix="pass --model sage.")
    lay = book.layout
    widths = {t: f or cfg.embedding_width()
              for t, f in zip(lay.node_types, lay.feat_dims, strict=True)}
    return TypedSAGE(lay, widths, cfg.hidden, out_channels, cfg.layers, cfg.dropout)


def relation_fanouts(cfg: Config, graph: DistGraph) -> FanoutSpec:
    """``--fanouts`` for every relation, overridden by ``--relation-fanouts``."""
    s = cfg.sample
    if s.relation_fanouts is None:
        return list(s.fanouts)
    book = graph.meta.types
    assert book is not None
    merged: dict[EdgeType | str, Sequence[int]] = {r: list(s.fanouts)
                                                   for r in book.layout.edge_types}
    for key, hops in s.relations().items():
        merged[resolve_relation(key, book.layout)] = hops
    return merged


class TypedEngine(MinibatchEngine):
    """The loaders, model, embeddings and sparse optimiser of one rank on a typed graph.

    Args:
        cfg: The run's configuration.
        graph: This rank's part of a typed partition.
        dims: The run's process groups (:class:`~gnnpar.parallel_dims.ParallelDims`).
        model: The :class:`TypedSAGE` (:func:`build_typed_model`).
        num_global: Global size of each split.
        stats: Byte counters (kinds ``feature``, ``sample``, ``embedding``,
            ``embedding_grad``, ...).

    Attributes:
        embedding: The featureless types' table, or ``None`` when every type has features.
        sparse: Its optimiser (or ``None``).
    """

    def __init__(self, cfg: Config, graph: DistGraph, dims: ParallelDims, model: nn.Module,
                 num_global: dict[str, int], stats: CommStats) -> None:
        s, seed = cfg.sample, cfg.train.seed
        book = graph.meta.types
        assert book is not None
        self.cfg, self.dims, self.layout, self.graph = cfg, dims, book.layout, graph
        self.model, self.num_global, self.stats = model, num_global, stats
        self.module = model
        labels = DistFeatureStore(graph, dims.ctx, stats=stats, arrays={"y": graph.part.label})
        self.features = labels
        self.type_features = TypedFeatureStore(graph, dims.ctx, int(s.cache_mb * 2**20),
                                               stats=stats)
        featureless = tuple(t for t, f in enumerate(self.layout.feat_dims) if f == 0)
        self.embedding: DistEmbedding | None = None
        self.sparse: SparseOptimizer | None = None
        if featureless:
            self.embedding = DistEmbedding(graph, dims.ctx, cfg.model.embedding_width(),
                                           featureless, seed=seed, stats=stats)
            self.sparse = SPARSE_OPTIMIZERS[cfg.train.sparse_optimizer](
                [self.embedding], lr=cfg.train.sparse_lr)
        fanouts = Fanouts.for_graph(relation_fanouts(cfg, graph), graph, dims.ctx)
        self.loader = DistTypedNeighborLoader(
            DistTypedNeighborSampler(graph, dims.ctx, fanouts, seed=seed, stats=stats), labels,
            self.type_features, "train", s.batch_size, shuffle=True, prefetch=s.prefetch,
            seed_split=s.seed_split)
        eval_sampler = DistTypedNeighborSampler(graph, dims.ctx, fanouts, seed=seed + 1,
                                                 stats=stats)
        self.eval_loaders = {
            split: DistTypedNeighborLoader(eval_sampler, labels, self.type_features, split,
                                            s.eval_batch_size, shuffle=False,
                                            seed_split=s.seed_split)
            for split in SPLITS[1:] if num_global[split] > 0}
        self.steps_per_epoch = len(self.loader)

    def batch_edges(self, batch: HeteroData) -> int:
        """Sampled edges of a typed batch, all relations."""
        return sum(sum(v) for v in batch.num_sampled_edges_dict.values())

    def inputs(self, batch: HeteroData) -> dict[str, Tensor]:
        """Each node type's input rows: features, or embedding rows (collective).

        The featureless types' rows come from one embedding gather for all of them (one
        exchange, one host read), their own-first runs laid end to end.
        """
        dtype = COMPUTE_DTYPES[self.precision]
        names = self.layout.node_types
        x = {name: batch[name].x.to(dtype) for t, name in enumerate(names)
             if self.layout.feat_dims[t]}
        learnt = [name for t, name in enumerate(names) if not self.layout.feat_dims[t]]
        if learnt:
            assert self.embedding is not None
            stores = [batch[name] for name in learnt]
            owned = ([c for s in stores for c in s.num_owned_nodes]
                     if all("num_owned_nodes" in s for s in stores) else None)
            rows = self.embedding(torch.cat([s.n_id for s in stores]), owned,
                                  [c for s in stores for c in s.num_sampled_nodes])
            sizes = [s.n_id.numel() for s in stores]
            x.update(zip(learnt, (r.to(dtype) for r in torch.split(rows, sizes)), strict=True))
        return x

    def logits(self, module: nn.Module, batch: HeteroData) -> tuple[Tensor, Tensor]:
        """The target seeds' logits and labels."""
        target = batch[self.layout.target]
        out: Tensor = module(self.inputs(batch), batch.edge_index_dict,
                             batch.num_sampled_nodes_dict, batch.num_sampled_edges_dict)
        return out[: target.batch_size], target.y

    @torch.no_grad()
    def predict(self, write: Callable[[int, Tensor, Tensor | None], None], batch_size: int,
                layer: int | None = None) -> None:
        """Exact full-neighbour logits of every owned target node, in local order (collective).

        Batches of the owned target nodes in ascending order, each relation's fan-out at
        least its largest in-degree (the sampler then takes every in-edge: the full
        neighbourhood, hop by hop), the model in eval mode; ``write(first, logits,
        embeddings)`` gets each batch's rows, ``first`` the row of its first seed.

        Args:
            write: Receives the rows of each batch: the logits, and the output of layer
                ``layer`` (``None`` without ``layer``).
            batch_size: Seeds per batch (their full neighbourhoods must fit a rank).
            layer: The layer (from 1) whose output rows ``write`` also gets.
        """
        graph, lay = self.graph, self.layout
        book = graph.meta.types
        assert book is not None  # the constructor checked
        t = lay.type_index(lay.target)
        lo, hi = book.part_bounds(graph.rank)[t:t + 2]
        seeds = torch.arange(int(lo), int(hi)) + graph.first_gid
        degrees = all_gather_ints(self.ctx, graph.relation_max_degrees).max(dim=0).values
        every: FanoutSpec = {rel: [max(1, int(k))] * self.cfg.model.layers
                             for rel, k in zip(lay.edge_types, degrees, strict=True)}
        sampler = DistTypedNeighborSampler(graph, self.ctx,
                                            Fanouts.for_graph(every, graph, self.ctx),
                                            stats=self.features.stats)
        loader = DistTypedNeighborLoader(sampler, self.features, self.type_features, seeds,
                                          batch_size, shuffle=False, seed_split="owned")
        self.module.eval()
        first = 0
        model = self.module
        assert isinstance(model, TypedSAGE)
        for batch in loader:
            batch = batch.to(self.ctx.device)
            seeds = batch[lay.target].batch_size
            with autocast(self.ctx.device, self.precision):
                rows = model.layer_outputs(self.inputs(batch), batch.edge_index_dict,
                                           batch.num_sampled_nodes_dict,
                                           batch.num_sampled_edges_dict)
            write(first, rows[-1][:seeds], None if layer is None else rows[layer - 1][:seeds])
            first += seeds
        self.module.train()

    def final_metrics(self, last: dict[str, Any], outputs: Path | None,
                      source: dict[str, Any]) -> dict[str, Any]:
        """The last sampled evaluation's figures (collective where it writes).

        Writes the target type's exact rows where ``--save-predictions`` /
        ``--save-embeddings`` ask (:meth:`predict`).
        """
        if outputs is not None:
            write_typed_outputs(outputs, self.cfg, self, self.graph, self.ctx, source)
        return recorded_final(self.cfg.train.eval, last)

"""Link-prediction training (``--task link``): edge-seeded minibatches, exact evaluation.

The minibatch loop of :class:`~gnnpar.train.minibatch.MinibatchEngine` with link batches
(:class:`~gnnpar.loading.link.DistLinkNeighborLoader`): each rank's training supervision edges,
``num_neg`` uniform random negative pairs per positive, the batch's targets (and their
reverses) hidden from its message passing.  The model is the trainer's PyG GNN as an
encoder whose output width is the hidden width, and a :class:`~gnnpar.models.link.LinkDecoder`
(``dot`` or ``mlp``); a step's loss is the binary cross-entropy of the pairs' logits,
summed and divided by the number of pairs of all ranks in the step, as DDP averages.

Evaluation is exact every time (``--eval-every`` and after the last epoch): the encoder's
full-neighbour embeddings of every node, layer by layer on the partitioned graph, then
each split's positives ranked against their fixed negatives across the ranks
(:func:`~gnnpar.evaluation.link.link_metrics`: MRR and Hits@K as ``ogb.linkproppred.Evaluator``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.data import Data

from gnnpar.comm import CommStats
from gnnpar.evaluation.link import KS, embeddings, link_metrics
from gnnpar.loading.link import DistLinkNeighborLoader
from gnnpar.models.link import LinkDecoder, LinkPredictor, bce_sum
from gnnpar.models.node import COMPUTE_DTYPES, SampledGNN, autocast
from gnnpar.parallel_dims import ParallelDims
from gnnpar.sampling.fanouts import Fanouts
from gnnpar.sampling.neighbor import DistNeighborSampler
from gnnpar.storage.features import DistFeatureStore
from gnnpar.storage.graph import SPLITS, DistGraph
from gnnpar.train.config import Config
from gnnpar.train.engine import LINK_FIELDS, recorded_final
from gnnpar.train.minibatch import MinibatchEngine, degree_arrays
from gnnpar.train.outputs import write_node_outputs


class LinkModule(nn.Module):
    """What a link run trains and checkpoints: the encoder GNN and the decoder."""

    def __init__(self, gnn: nn.Module, decoder: LinkDecoder) -> None:
        super().__init__()
        self.gnn = gnn
        self.decoder = decoder


class LinkEngine(MinibatchEngine):
    """The link loader, the sampled predictor and exact link evaluation of one rank.

    Args:
        cfg: The run's configuration (``sample`` and ``link`` sections).
        graph: This rank's part (format version 3).
        dims: The run's process groups (:class:`~gnnpar.parallel_dims.ParallelDims`).
        model: The trained :class:`LinkModule` (replicated).
        num_global: Global number of supervision edges of each split.
        stats: Byte counters of the loader.
    """

    def __init__(self, cfg: Config, graph: DistGraph, dims: ParallelDims, model: nn.Module,
                 num_global: dict[str, int], stats: CommStats) -> None:
        s, lk, seed = cfg.sample, cfg.link, cfg.train.seed
        assert isinstance(model, LinkModule)
        self.cfg, self.dims, self.graph, self.link_module = cfg, dims, graph, model
        self.model, self.num_global, self.stats = model, num_global, stats
        encoder = SampledGNN(model.gnn, gcn_norm=s.gcn_norm)
        self.module = LinkPredictor(encoder, model.decoder)
        arrays: dict[str, Any] = {"x": graph.features()}
        self._degrees = encoder.needs_degrees
        if self._degrees:
            arrays.update(degree_arrays(graph))
        self.features = DistFeatureStore(graph, dims.ctx, cache_bytes=int(s.cache_mb * 2**20),
                                         stats=stats, arrays=arrays)
        fanouts = Fanouts.for_graph(list(s.fanouts), graph, dims.ctx)
        sampler = DistNeighborSampler(graph, dims.ctx, fanouts, seed=seed, stats=stats,
                                      with_edges=True)
        self.loader = DistLinkNeighborLoader(
            sampler, self.features, "train", batch_size=s.batch_size, neg_sampling="binary",
            num_neg=lk.num_neg, strict=lk.strict, exclude=lk.exclude, shuffle=True,
            prefetch=s.prefetch, node_attrs=tuple(arrays))
        self.eval_loaders = {}
        self.steps_per_epoch = len(self.loader)

    def loss(self, ddp: nn.Module, batch: Data) -> tuple[Tensor, Tensor, int, int]:
        """Summed BCE of the batch's pairs, correct signs, pairs, and pairs of all ranks."""
        src, dst = batch.edge_label_index
        degrees = ({"in_degree": batch.in_degree, "self_loops": batch.self_loops}
                   if self._degrees else {})
        score = ddp(batch.x.to(COMPUTE_DTYPES[self.precision]), batch.edge_index,
                    batch.num_sampled_nodes, batch.num_sampled_edges, src, dst, **degrees)
        label = batch.edge_label
        right = ((score > 0) == (label > 0.5)).sum()
        pairs = self.cfg.link.num_neg + 1
        return bce_sum(score, label), right, label.numel(), batch.global_batch_size * pairs

    @torch.no_grad()
    def evaluate(self) -> dict[str, Any]:
        """Exact MRR / Hits@K of the validation and test edges (collective).

        Returns:
            ``{"val_mrr", "test_mrr", "val_hits", "test_hits"}`` (``hits``: ``{"hits@K":
            value}``; ``mrr`` ``None`` with shared negatives).
        """
        t, lk = self.cfg.train, self.cfg.link
        splits = [s for s in SPLITS[1:] if self.num_global[s] > 0]
        with autocast(self.ctx.device, t.precision):
            h = embeddings(self.link_module.gnn, self.graph, self.ctx,
                           int(t.eval_budget_mb * 2**20), self.features.stats,
                           COMPUTE_DTYPES[t.precision])
        metrics = link_metrics(h, self.link_module.decoder, self.graph, self.ctx, splits,
                               KS, self.features.stats, lk.eval_chunk)
        out: dict[str, Any] = {}
        for split in SPLITS[1:]:
            out[f"{split}_mrr"] = metrics.get(f"{split}_mrr")
            hits = {k.split("_", 1)[1]: v for k, v in metrics.items()
                    if k.startswith(f"{split}_hits@")}
            out[f"{split}_hits"] = hits or None
        return out

    def final_metrics(self, last: dict[str, Any], outputs: Path | None,
                      source: dict[str, Any]) -> dict[str, Any]:
        """The last evaluation's figures (exact, after the last epoch; collective).

        Writes the encoder's embeddings where ``--save-embeddings`` asks.
        """
        if outputs is not None:
            write_node_outputs(outputs, self.cfg, self.link_module.gnn, self.graph, self.ctx,
                               self.stats, logits=False, source=source)
        return recorded_final(self.cfg.train.eval, last, LINK_FIELDS)

"""Minibatch mode (``--mode sample``): distributed neighbour sampling, DistDGL-style.

Each rank serves its feature rows (:class:`~gnnpar.storage.features.DistFeatureStore`) and
samples minibatches of its own training nodes across part boundaries
(:class:`~gnnpar.loading.node.DistNeighborLoader`).  Every rank takes the same number of steps.
A step's loss is the sum over the rank's seeds divided by the number of seeds of *all*
ranks in that step (the batch's ``global_batch_size``, known without communicating),
scaled by the world size that DDP's averaging divides by: the update is that of the mean
loss over the global batch, also when a rank's batch is smaller or empty.  Validation and
test accuracy are taken on batches sampled with the training fan-outs (the same
neighbourhoods at every evaluation), counts all-reduced over the ranks.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data

from gnnpar.comm import CommStats, all_reduce_sum
from gnnpar.distributed import DistContext
from gnnpar.loading.node import DistNeighborLoader
from gnnpar.loading.schedule import Loader
from gnnpar.models.node import SampledGNN, autocast, forward_batch, sampled_precision
from gnnpar.ops import from_mmap
from gnnpar.parallel_dims import ParallelDims
from gnnpar.sampling.fanouts import Fanouts
from gnnpar.sampling.neighbor import DistNeighborSampler
from gnnpar.storage.embedding import SPARSE_OPTIMIZERS, DistEmbedding, SparseOptimizer
from gnnpar.storage.features import DistFeatureStore
from gnnpar.storage.graph import SPLITS, DistGraph
from gnnpar.storage.peers import STORED_ARRAYS, peer_parts
from gnnpar.train.config import Config
from gnnpar.train.engine import Step
from gnnpar.train.final import node_final_metrics


def degree_arrays(graph: DistGraph) -> dict[str, Tensor]:
    """The graph's in-degree and self-loop count of each owned node (global GCN).

    Computed on the host from the part's memory maps: per-node arrays for a feature store
    to place.

    Returns:
        ``{"in_degree": [num_owned], "self_loops": [num_owned]}``, int64 host tensors.
    """
    part, n = graph.part, graph.num_owned
    indptr = from_mmap(part.indptr[: n + 1]).long()
    nnz = int(indptr[-1])
    dst = torch.repeat_interleave(torch.arange(n), indptr.diff(), output_size=nnz)
    loops = torch.zeros(n, dtype=torch.int64).index_add_(
        0, dst, (from_mmap(part.indices[:nnz]).long() == dst).long())
    return {"in_degree": from_mmap(part.in_degree[:n]).long(), "self_loops": loops}


class MinibatchEngine:
    """The loaders and the sampled model of one rank.

    Args:
        cfg: The run's configuration (``sample`` section).
        graph: This rank's part.
        dims: The run's process groups (:class:`~gnnpar.parallel_dims.ParallelDims`).
        model: The replicated PyG model.
        num_global: Global size of each split.
        stats: Byte counters of the loaders (kinds ``feature``, ``feature_ids``,
            ``sample``, ``cache_fill``).

    Attributes:
        model: The PyG model (what the exact final inference runs).
        loader: The training loader (its position is part of every checkpoint).
        eval_loaders: Loaders of the non-empty validation and test splits.
        module: The sampled model (what DDP wraps).
        embedding: A graph without features: every node's learnable input row
            (:class:`~gnnpar.storage.embedding.DistEmbedding`, ``--embed-dim``), else
            ``None``.
        sparse: Its optimiser (``--sparse-optimizer``), stepped after every step.
    """

    embedding: DistEmbedding | None = None
    sparse: SparseOptimizer | None = None
    replicated = True

    def __init__(self, cfg: Config, graph: DistGraph, dims: ParallelDims, model: nn.Module,
                 num_global: dict[str, int], stats: CommStats) -> None:
        s, seed = cfg.sample, cfg.train.seed
        self.cfg, self.dims, self.graph, self.model = cfg, dims, graph, model
        self.num_global, self.stats = num_global, stats
        self.module: nn.Module = SampledGNN(model, gcn_norm=s.gcn_norm)
        arrays: dict[str, Any] = {"x": graph.features(), "y": graph.part.label}
        attrs: tuple[str, ...] = ("x",) if graph.meta.feat_dim else ()
        if self.module.needs_degrees:
            arrays.update(degree_arrays(graph))
            attrs = (*attrs, "in_degree", "self_loops")
        if not graph.meta.feat_dim:  # featureless: a learnable row per node
            self.embedding = DistEmbedding(graph, dims.ctx, cfg.model.embedding_width(),
                                           seed=seed, stats=stats)
            self.sparse = SPARSE_OPTIMIZERS[cfg.train.sparse_optimizer](
                [self.embedding], lr=cfg.train.sparse_lr)
        # Ranks on this machine read each other's parts (rows the store holds only if
        # they are a part's own arrays, not the degrees of a global GCN).
        peers = peer_parts(graph, dims.ctx) if s.peer_reads else None
        self.features = DistFeatureStore(
            graph, dims.ctx, cache_bytes=int(s.cache_mb * 2**20), stats=stats, arrays=arrays,
            peers=peers if set(arrays) <= set(STORED_ARRAYS) else None)
        fanouts = Fanouts.for_graph(list(s.fanouts), graph, dims.ctx)
        edges = graph.meta.edge_dim > 0
        self.loader: Loader[Any, Any] = DistNeighborLoader(
            DistNeighborSampler(graph, dims.ctx, fanouts, seed=seed, stats=stats, with_edges=edges,
                                peers=peers),
            self.features, "train", s.batch_size, shuffle=True, prefetch=s.prefetch,
            node_attrs=attrs, seed_split=s.seed_split)
        eval_sampler = DistNeighborSampler(graph, dims.ctx, fanouts, seed=seed + 1, stats=stats,
                                           with_edges=edges, peers=peers)
        self.eval_loaders: dict[str, Loader[Any, Any]] = {
            split: DistNeighborLoader(eval_sampler, self.features, split, s.eval_batch_size,
                                      shuffle=False, node_attrs=attrs, seed_split=s.seed_split)
            for split in SPLITS[1:] if num_global[split] > 0}
        self.steps_per_epoch = len(self.loader)

    @property
    def ctx(self) -> DistContext:
        """The run's distributed context (the ``data`` group's)."""
        return self.dims.ctx

    def start_epoch(self, epoch: int) -> None:
        """Shuffle the training seeds of ``epoch`` (the loader starts at its first step)."""
        self.loader.set_epoch(epoch)

    def batches(self, epoch: int) -> Iterator[tuple[int, Any]]:
        """The training loader's batches from its position, with their step numbers."""
        return enumerate(self.loader, self.loader.state_dict()["step"])

    def step(self, ddp: nn.Module, batch: Data, epoch: int) -> Step:
        """The seeds' loss of ``batch`` (no host read: the sums stay on the device)."""
        with autocast(self.ctx.device, self.precision):
            loss, right, count, global_count = self.loss(ddp, batch)
        return Step(loss, loss * (self.ctx.world_size / global_count), right, count,
                    self.batch_edges(batch))

    def io_seconds(self) -> dict[str, float]:
        """The loader's sampling and fetching seconds this epoch, and the exchanges' waits."""
        stats = self.features.stats
        waited = sum(c.wait_s for c in stats.counters.values()) if stats is not None else 0.0
        return {"sample": self.loader.seconds["sample"],
                "fetch": self.loader.seconds["fetch"], "wait": waited}

    @property
    def precision(self) -> str:
        """The precision the sampled model computes in (:func:`sampled_precision`)."""
        return sampled_precision(self.cfg.train.precision, self.ctx.device)

    def after_step(self) -> None:
        """Update the touched embedding rows, if any (collective: gradients to owners)."""
        if self.sparse is not None:
            self.sparse.step()

    def position(self, next_epoch: int) -> dict[str, int]:
        """The training loader's position (``next_epoch`` is implied by it)."""
        return self.loader.state_dict()

    def extra_state(self) -> dict[str, Any]:
        """The embedding table and its optimiser state for a checkpoint (collective)."""
        return {} if self.sparse is None else {"embeddings": self.sparse.state_dict()}

    def restore(self, position: dict[str, int], extra: dict[str, Any]) -> None:
        """Continue at ``position`` with what :meth:`extra_state` saved."""
        if self.sparse is not None:
            self.sparse.load_state_dict(extra["embeddings"])
        self.loader.load_state_dict({**position, "num_steps": len(self.loader),
                                     "seed": self.cfg.train.seed})

    def input_rows(self) -> Tensor | None:
        """Every owned node's learnt input row (featureless graphs), else ``None``."""
        return None if self.embedding is None else self.embedding.weight

    def final_metrics(self, last: dict[str, Any], outputs: Path | None,
                      source: dict[str, Any]) -> dict[str, Any]:
        """Exact full-neighbour figures, or the last sampled ones (``--eval``; collective)."""
        if self.features.peers is not None:
            self.features.peers.release()  # the inference reads no peer row
        return node_final_metrics(self.cfg, self.module, self.model, self.graph, self.ctx,
                                  self.num_global, self.stats, last, outputs, source,
                                  x=self.input_rows())

    def batch_edges(self, batch: Data) -> int:
        """Sampled edges of a batch (the record's ``sampled_edges``)."""
        return sum(batch.num_sampled_edges)

    def logits(self, module: nn.Module, batch: Data) -> tuple[Tensor, Tensor]:
        """The seeds' logits and labels (call under :func:`autocast`)."""
        x = None if self.embedding is None else self.embedding(
            batch.n_id, batch.get("num_owned_nodes"), batch.num_sampled_nodes)
        return (forward_batch(module, batch, self.precision, x),
                batch.y[: batch.batch_size])

    def loss(self, ddp: nn.Module, batch: Data) -> tuple[Tensor, Tensor, int, int]:
        """A batch's summed loss, correct predictions, items and items of all ranks.

        The cross-entropy of the seeds' logits, summed; the step divides it by the
        global item count (``global_batch_size``) times the world size DDP divides by.
        """
        logits, y = self.logits(ddp, batch)
        loss = F.cross_entropy(logits, y, reduction="sum")
        return loss, (logits.argmax(-1) == y).sum(), y.numel(), batch.global_batch_size

    @torch.no_grad()
    def evaluate(self) -> dict[str, Any]:
        """Validation and test accuracy on sampled neighbourhoods (collective).

        Returns:
            ``{"val_acc", "test_acc"}`` over all ranks' nodes; ``nan`` for an empty split.
        """
        self.module.eval()
        dev = self.ctx.device
        splits = SPLITS[1:]
        counts = torch.zeros(2 * len(splits), dtype=torch.float64, device=dev)
        for i, split in enumerate(splits):
            loader = self.eval_loaders.get(split)
            if loader is None:
                continue
            loader.set_epoch(0)  # the same sampled neighbourhoods at every evaluation
            for batch in loader:
                batch = batch.to(dev)
                with autocast(dev, self.precision):
                    logits, y = self.logits(self.module, batch)
                counts[2 * i] += (logits.argmax(-1) == y).sum()
                counts[2 * i + 1] += y.numel()
        counts = all_reduce_sum(self.ctx, counts).cpu()
        return {f"{s}_acc": float(counts[2 * i] / counts[2 * i + 1])
                if counts[2 * i + 1] else float("nan") for i, s in enumerate(splits)}

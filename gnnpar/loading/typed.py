"""``DistHeteroNeighborLoader``: PyG ``HeteroData`` minibatches of a typed partition.

The typed counterpart of :class:`~gnnpar.loading.node.DistNeighborLoader` (same seeds, steps,
shuffle, prefetch and checkpointable position; seeds are nodes of the target type): each
batch is sampled by :class:`~gnnpar.sampling.typed.DistHeteroNeighborSampler` and laid
out like the output of PyG's ``NeighborLoader`` on a ``HeteroData``:

- ``batch[t].n_id`` — the global ids of the batch's nodes of type ``t``, seeds first for
  the target type, then hop by hop (within a hop, this rank's own first);
  ``batch[t].x`` their features (types with features); ``batch[t].num_sampled_nodes`` —
  how many each hop added, ``batch[t].num_owned_nodes`` — how many of those this rank
  owns;
- ``batch[src, rel, dst].edge_index`` — type-local edges, hop by hop, destinations
  ascending within a hop; ``batch[src, rel, dst].num_sampled_edges`` per hop;
- ``batch[target].batch_size``, ``.y`` (the seeds' labels), ``.input_id``, and the
  batch's ``global_batch_size``;

so ``batch.x_dict``, ``batch.edge_index_dict``, ``batch.num_sampled_nodes_dict`` and
``batch.num_sampled_edges_dict`` feed ``to_hetero`` models, ``HGTConv``, ``RGCNConv`` (on
``batch.to_homogeneous()``) and PyG's ``trim_to_layer``.  Featureless types carry only
their ids; a :class:`~gnnpar.storage.embedding.DistEmbedding` gives them rows in the step.

Features are gathered per featured type from one
:class:`~gnnpar.storage.features.DistFeatureStore` each (``types=(t,)``), their requests all
sent before any rows are awaited, own rows copied run by run as in a homogeneous batch;
typing a batch reads nothing on the host (the sampler reads the node counts per type and
the edge counts per relation with each hop's sizes).
"""

from __future__ import annotations

import time
from itertools import accumulate
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import HeteroData

from gnnpar.comm import CommStats
from gnnpar.distributed import DistContext
from gnnpar.errors import ConfigError
from gnnpar.keys import mix_int
from gnnpar.loading.node import DistNeighborLoader
from gnnpar.ops import count
from gnnpar.sampling.neighbor import SamplerOutput
from gnnpar.sampling.typed import DistHeteroNeighborSampler, RelationFanouts
from gnnpar.storage.features import DistFeatureStore
from gnnpar.storage.graph import DistGraph


def host_syncs(hops: int, featured_types: int) -> int:
    """Host reads of one typed batch (the suite's budget): two per hop, one per featured type.

    The sampler reads the per-type and per-relation counts with each hop's sizes, and
    each featured type's gather reads its exchanged counts.
    """
    return 2 * hops + featured_types


HOST_SYNCS = 7
"""The typed loader's budget per 2-hop batch (up to three featured node types)."""


def typed_feature_stores(graph: DistGraph, ctx: DistContext, stats: CommStats | None = None,
                         cache_bytes: int = 0) -> dict[int, DistFeatureStore]:
    """One feature store per node type with features (``x``: its ``feat_{t}`` rows).

    ``cache_bytes`` is shared out equally: each store caches the rows of its type's most
    referenced halo nodes in its share.
    """
    book = graph.meta.types
    if book is None:
        raise ConfigError("the partition is of a homogeneous graph.", field="graph",
                          fix="use DistFeatureStore, or partition a typed graph.")
    featured = [t for t, width in enumerate(book.layout.feat_dims) if width]
    share = cache_bytes // max(len(featured), 1)
    return {t: DistFeatureStore(graph, ctx, cache_bytes=share, stats=stats,
                                arrays={"x": graph.type_features(t)}, types=(t,))
            for t in featured}


class DistHeteroNeighborLoader(DistNeighborLoader):
    """Iterate over typed minibatches (``HeteroData``), in lockstep on every rank.

    Args:
        graph: This rank's part of a typed partition.
        features: The store of the labels (``y`` over the owned nodes; serves
            ``seed_attrs``); its context and counters serve the sampler too.
        type_features: Per featured node type, its store (:func:`typed_feature_stores`).
        fanouts: Per hop for every relation, or per relation (:data:`RelationFanouts`).
        seeds, batch_size, shuffle, drop_last, seed, replace, prefetch, seed_attrs,
            seed_split: As :class:`~gnnpar.loading.node.DistNeighborLoader`'s (seeds are
            nodes of the target type).

    Example::

        loader = DistHeteroNeighborLoader(graph, labels, typed_feature_stores(graph, ctx),
                                          [10, 5], "train", batch_size=512)
        for batch in loader:
            out = model(batch.x_dict, batch.edge_index_dict)
    """

    def __init__(self, graph: DistGraph, features: DistFeatureStore,
                 type_features: dict[int, DistFeatureStore], fanouts: RelationFanouts,
                 seeds: str | Tensor = "train", batch_size: int = 1024, shuffle: bool = True,
                 drop_last: bool = False, seed: int = 0, replace: bool = False,
                 prefetch: bool = False, seed_attrs: tuple[str, ...] = ("y",),
                 seed_split: str = "even") -> None:
        self.type_features = dict(sorted(type_features.items()))
        super().__init__(graph, features, fanouts, seeds, batch_size, shuffle, drop_last,
                         seed, replace, prefetch, (), seed_attrs, seed_split, False)
        assert isinstance(self.sampler, DistHeteroNeighborSampler)
        self.layout = self.sampler.layout

    def _build_sampler(self, graph: DistGraph, ctx: DistContext, fanouts: Any, replace: bool,
                       seed: int, stats: CommStats | None,
                       with_edges: bool) -> DistHeteroNeighborSampler:
        """The typed sampler (validates the fan-outs per relation)."""
        return DistHeteroNeighborSampler(graph, ctx, fanouts, replace, seed, stats)

    def _start(self, epoch: int, step: int) -> tuple[Any, ...]:
        """Sample batch ``step``, type its nodes and send every type's feature requests."""
        t0 = time.perf_counter()
        idx, n_own = self._batch_index(epoch, step)
        out = self.sampler.sample(self.seed_gids.index_select(0, idx), mix_int(epoch, step),
                                  num_owned_seeds=n_own)
        typed = _TypedBatch(out, len(self.layout.node_types), len(self.layout.edge_types))
        t1 = time.perf_counter()
        gathers = {t: store.start_gather(
            typed.gids[t], ("x",), typed.owned_counts[t] if typed.owned_counts else None,
            typed.node_counts[t]) for t, store in self.type_features.items()}
        self.seconds["sample"] += t1 - t0
        self.seconds["fetch"] += time.perf_counter() - t1
        return idx, n_own, out, typed, gathers

    def _finish(self, step: int, started: tuple[Any, ...]) -> HeteroData:
        """Wait for batch ``step``'s feature rows; the ``HeteroData`` batch."""
        t0 = time.perf_counter()
        idx, n_own, out, typed, gathers = started
        lay = self.layout
        data = HeteroData()
        for t, name in enumerate(lay.node_types):
            store = data[name]
            store.n_id = typed.gids[t]
            store.num_sampled_nodes = typed.node_counts[t]
            if typed.owned_counts is not None:
                store.num_owned_nodes = typed.owned_counts[t]
            if t in gathers:
                store.x = gathers[t].finish()["x"]
        seeds = out.node[: out.batch_size]
        target = data[lay.target]
        for n in self.seed_attrs:
            target[n] = self._seed_rows(n, idx, n_own, seeds)
        target.batch_size = out.batch_size
        target.input_id = idx
        for r, rel in enumerate(lay.edge_types):
            data[rel].edge_index = typed.edge_index[r]
            data[rel].num_sampled_edges = typed.edge_counts[r]
        data.global_batch_size = self.global_batch_size(step)
        self.seconds["fetch"] += time.perf_counter() - t0
        return data


def _prefix(sizes: list[int]) -> list[int]:
    """Start of each block of consecutive blocks of these sizes."""
    return list(accumulate(sizes[:-1], initial=0))


class _TypedBatch:
    """A sampled batch split by type: ids per node type, type-local edges per relation.

    Built on the device from the sampler's per-type and per-relation counts (read with
    each hop's sizes), with no host read of its own.

    Attributes:
        gids: Per node type, its nodes' global ids in batch order.
        node_counts: ``[T][L + 1]`` nodes of each type added by each hop.
        owned_counts: ``[T][L + 1]`` how many of them, at the start of each hop's run,
            this rank owns (``None`` when the sampler does not know).
        edge_index: Per relation, ``[2, E_r]`` type-local edges in batch order.
        edge_counts: ``[R][L]`` edges of each relation sampled at each hop.
    """

    def __init__(self, out: SamplerOutput, num_types: int, num_relations: int) -> None:
        assert out.edge_type is not None and out.node_group is not None
        assert out.group_counts is not None and out.group_owned is not None
        assert out.relation_counts is not None
        node, ntype = out.node, out.node_group
        hops = len(out.num_sampled_edges)
        self.node_counts = [[out.group_counts[h][t] for h in range(hops + 1)]
                            for t in range(num_types)]
        self.owned_counts = ([[out.group_owned[h][t] for h in range(hops + 1)]
                              for t in range(num_types)]
                             if out.num_owned_nodes is not None else None)
        self.edge_counts = [[out.relation_counts[h][r] for h in range(hops)]
                            for r in range(num_relations)]
        # Each type's nodes in batch order; a node's type-local id is its rank among them.
        # Within a hop this rank's own nodes come first (the sampler's order), so they do
        # within each type too: per type and hop, its own nodes are a leading run.
        order = torch.argsort(ntype, stable=True)
        sizes = [sum(c) for c in self.node_counts]
        per_type = count(ntype, num_types)
        starts = torch.cumsum(per_type, 0) - per_type
        within = torch.empty_like(order).index_copy_(
            0, order, torch.arange(node.numel(), device=node.device)
            - starts.index_select(0, ntype.index_select(0, order)))
        self.gids = [node.index_select(0, order[a:a + n]) for a, n in zip(_prefix(sizes), sizes,
                                                                          strict=True)]
        e_order = torch.argsort(out.edge_type, stable=True)  # each relation's, in order
        e_sizes = [sum(c) for c in self.edge_counts]
        src = within.index_select(0, out.row.index_select(0, e_order))
        dst = within.index_select(0, out.col.index_select(0, e_order))
        self.edge_index = list(torch.split(torch.stack([src, dst]), e_sizes, dim=1))

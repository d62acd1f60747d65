"""``DistTypedNeighborLoader``: PyG ``HeteroData`` minibatches of a typed partition.

The typed counterpart of :class:`~gnnpar.loading.node.DistNeighborLoader` (the same seeds,
steps, shuffle, prefetch and checkpointable position: it holds a
:class:`~gnnpar.loading.node.NodeSeeds` and a :class:`~gnnpar.loading.schedule.SeedSchedule`;
seeds are nodes of the target type): each batch is sampled by the
:class:`~gnnpar.sampling.typed.DistTypedNeighborSampler` it is given, which splits it by
type (:class:`~gnnpar.sampling.typed.TypedSamplerOutput`), and laid out like the output of
PyG's ``NeighborLoader`` on a ``HeteroData``:

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

Features of every featured type come from one
:class:`~gnnpar.storage.typed.TypedFeatureStore`, keyed by type: one exchange and one cache
for all types per batch, own rows copied run by run as in a homogeneous batch; typing a
batch reads nothing on the host (the sampler reads the node counts per type and the edge
counts per relation with each hop's sizes).
"""

from __future__ import annotations

import time
from collections import defaultdict

from torch import Tensor
from torch_geometric.data import HeteroData

from gnnpar.keys import mix_int
from gnnpar.loading.node import host_syncs as node_host_syncs
from gnnpar.loading.node import seed_schedule
from gnnpar.loading.schedule import Loader
from gnnpar.sampling.typed import DistTypedNeighborSampler, TypedSamplerOutput
from gnnpar.storage.features import DistFeatureStore
from gnnpar.storage.typed import PendingTypedGather, TypedFeatureStore


def host_syncs(hops: int) -> int:
    """Host reads of one typed batch (the suite's budget): a node batch's.

    The sampler reads the per-type and per-relation counts with each hop's sizes, and the
    one gather of all types reads its exchanged counts.  That holds with the owned rows on
    the device, in mapped pinned memory or on a CPU rank; the ``"pinned-host"`` fallback
    adds a host read to every read of owned rows (as
    :func:`~gnnpar.loading.node.host_syncs` counts them, per featured type).
    """
    return node_host_syncs(hops)


HOST_SYNCS = host_syncs(2)
"""The typed loader's budget per 2-hop batch (5), whatever the number of featured types
(:func:`host_syncs`: the placements but ``"pinned-host"``)."""


TypedStarted = tuple[Tensor, int, TypedSamplerOutput, PendingTypedGather]


class DistTypedNeighborLoader(Loader[TypedStarted, HeteroData]):
    """Iterate over typed minibatches (``HeteroData``), in lockstep on every rank.

    Args:
        sampler: The typed sampler.
        labels: The store of the labels (``y`` over the owned nodes; serves
            ``seed_attrs``); its context is the loader's.
        features: The feature rows of every featured type (:class:`TypedFeatureStore`).
        seeds, batch_size, shuffle, drop_last, prefetch, seed_attrs, seed_split: As
            :class:`~gnnpar.loading.node.DistNeighborLoader`'s (seeds are nodes of the
            target type).

    Example::

        fanouts = Fanouts.for_graph([10, 5], graph, ctx)
        loader = DistTypedNeighborLoader(DistTypedNeighborSampler(graph, ctx, fanouts),
                                          labels, TypedFeatureStore(graph, ctx), "train",
                                          batch_size=512)
        for batch in loader:
            out = model(batch.x_dict, batch.edge_index_dict)
    """

    def __init__(self, sampler: DistTypedNeighborSampler, labels: DistFeatureStore,
                 features: TypedFeatureStore, seeds: str | Tensor = "train",
                 batch_size: int = 1024, shuffle: bool = True, drop_last: bool = False,
                 prefetch: bool = False, seed_attrs: tuple[str, ...] = ("y",),
                 seed_split: str = "even") -> None:
        self.sampler, self.labels, self.features = sampler, labels, features
        self.layout = sampler.layout
        self.prefetch = bool(prefetch)
        self.seed_attrs = tuple(seed_attrs)
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.seeds, self.schedule = seed_schedule(sampler, labels, seeds, batch_size, shuffle,
                                                  drop_last, self.prefetch, self.seed_attrs,
                                                  seed_split)

    def _start(self, epoch: int, step: int) -> TypedStarted:
        """Sample batch ``step`` and send the feature requests of all its types."""
        t0 = time.perf_counter()
        idx, n_own = self.schedule.batch_index(epoch, step)
        out = self.sampler.sample(self.seeds.gids.index_select(0, idx), mix_int(epoch, step),
                                  num_owned_seeds=n_own)
        assert out.owned_counts is not None  # the seeds' owners are known
        t1 = time.perf_counter()
        gather = self.features.start_gather(out.gids, out.owned_counts, out.node_counts)
        self.seconds["sample"] += t1 - t0
        self.seconds["fetch"] += time.perf_counter() - t1
        return idx, n_own, out, gather

    def _finish(self, step: int, started: TypedStarted) -> HeteroData:
        """Wait for batch ``step``'s feature rows; the ``HeteroData`` batch."""
        t0 = time.perf_counter()
        idx, n_own, out, gather = started
        lay = self.layout
        rows = gather.finish()
        data = HeteroData()
        for t, name in enumerate(lay.node_types):
            store = data[name]
            store.n_id = out.gids[t]
            store.num_sampled_nodes = out.node_counts[t]
            if out.owned_counts is not None:
                store.num_owned_nodes = out.owned_counts[t]
            if t in rows:
                store.x = rows[t]
        seeds = out.node[: out.batch_size]
        target = data[lay.target]
        for n in self.seed_attrs:
            target[n] = self.seeds.rows(n, idx, n_own, seeds)
        target.batch_size = out.batch_size
        target.input_id = idx
        for r, rel in enumerate(lay.edge_types):
            data[rel].edge_index = out.edge_index[r]
            data[rel].num_sampled_edges = out.edge_counts[r]
        data.global_batch_size = self.global_batch_size(step)
        self.seconds["fetch"] += time.perf_counter() - t0
        return data

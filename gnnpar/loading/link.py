"""``DistLinkNeighborLoader``: PyG link-prediction minibatches sampled across the parts.

Seeds are edges.  A supervision edge is stored with the part that owns its *source*
(:mod:`gnnpar.partition.format`), so each rank takes the edges of its own part, and all
ranks take the same number of steps per epoch (``max`` over the ranks of ``ceil(m_r / B)``;
``drop_last``: ``min`` of ``floor``), every edge once per epoch, shuffled per epoch by a
pure function of ``(seed, epoch, rank)`` (the loader holds a
:class:`~gnnpar.loading.schedule.SeedSchedule`, as the node loader does).

Per batch: the positives' negatives are drawn
(:class:`~gnnpar.sampling.negative.DistNegativeSampler`, uniform over all nodes of all
ranks, ``binary`` or ``triplet``, optionally strict); the subgraph is sampled from the
union of all endpoints (this rank's nodes first) with the batch's supervision edges --
and, with ``exclude="reverse"``, their reverses -- removed from its message passing
(what DGL's ``exclude="reverse_id"`` hides, matched by endpoints, so a repeated edge is
hidden too; they are dropped from the seeds' sampled in-edges, so a seed that drew one
keeps one neighbour fewer than its fan-out); features come from the feature store. The
batch is laid out as PyG's ``LinkNeighborLoader`` lays it out: ``x``, ``edge_index``,
``n_id``, ``e_id`` (``edge_attr`` with edge features), ``num_sampled_nodes``,
``num_sampled_edges``, ``input_id`` (positions of the positives in
:attr:`DistLinkNeighborLoader.edges`) and

- ``binary``: ``edge_label_index`` ``[2, B (1 + k)]`` (batch-local; positives first) and
  ``edge_label`` (the positives' labels, ones by default, then zeros);
- ``triplet``: ``src_index`` ``[B]``, ``dst_pos_index`` ``[B]``, ``dst_neg_index``
  ``[B, k]`` (batch-local);
- no negatives: ``edge_label_index`` and ``edge_label`` of the positives only.

``global_batch_size`` is the number of positives of all ranks in the step (no
communication), so a loss summed over a rank's pairs and divided by ``global_batch_size
* (1 + k)`` is the global mean.  The position is :meth:`state_dict` (epoch, step): the
negatives and the samples are pure functions of the seed and the batch key, so a resumed
loader gives the same batches.
"""

from __future__ import annotations

import time
from collections import defaultdict

import torch
from torch import Tensor
from torch_geometric.data import Data

from gnnpar.errors import ConfigError
from gnnpar.keys import mix_int
from gnnpar.loading.node import agree, edge_fields, sampler_settings
from gnnpar.loading.node import host_syncs as node_host_syncs
from gnnpar.loading.schedule import Loader, SeedSchedule
from gnnpar.sampling.kernels import edge_keys
from gnnpar.sampling.negative import DistNegativeSampler
from gnnpar.sampling.neighbor import DistNeighborSampler, SamplerOutput
from gnnpar.storage.features import DistFeatureStore, PendingGather
from gnnpar.storage.graph import SPLITS, DistGraph


def host_syncs(hops: int, strict_rounds: int = 0) -> int:
    """Host reads of one link batch of ``hops`` hops (the suite's budget).

    The node loader's, two for the batch's endpoints (their distinct ids, how many are
    this rank's) and one per strict-negative round (its gathered counts); edge features
    add none (they are read on the device).  With the feature store's ``"pinned-host"``
    placement, add :func:`~gnnpar.loading.node.host_syncs`' reads of owned rows.
    """
    return node_host_syncs(hops) + 2 + strict_rounds


HOST_SYNCS = host_syncs(2)
"""Host reads per 2-hop link batch (7; with strict negatives' 3 rounds, 10)."""


NEG_SAMPLING = ("binary", "triplet", "none")
EXCLUDE = ("reverse", "self", "none")
"""Which message-passing edges a batch hides: its targets and their reverses, its
targets, or none."""


def _local_edges(graph: DistGraph, edges: str | Tensor) -> Tensor:
    """``[2, m]`` this rank's supervision edges: a split's, or the given ones it sources."""
    if isinstance(edges, str):
        if edges not in SPLITS:
            raise ConfigError(f"unknown split {edges!r}.", field="edges",
                              fix=f"pass one of {SPLITS} or a [2, M] tensor of global ids.")
        graph.part.edge_ids()  # a version-2 partition has no supervision: say how to fix
        pairs = torch.from_numpy(getattr(graph.part, f"{edges}_edges").astype("int64"))
        return pairs.t().contiguous()
    n = graph.meta.num_nodes
    if (not isinstance(edges, Tensor) or edges.dim() != 2 or edges.shape[0] != 2
            or edges.is_floating_point()):
        raise ConfigError("edges must be a split name or a [2, M] integer tensor of global "
                          "ids.", field="edges", fix="pass e.g. edges='train'.")
    e = edges.cpu().to(torch.int64)
    if e.numel() and (int(e.min()) < 0 or int(e.max()) >= n):
        raise ConfigError(f"edge endpoints must be in [0, {n}).", field="edges",
                          fix="pass global node ids of the partitioned graph.")
    return e[:, graph.is_owned(e[0])]


LinkStarted = tuple[Tensor, SamplerOutput, dict[str, Tensor], PendingGather]


class DistLinkNeighborLoader(Loader[LinkStarted, Data]):
    """Iterate over link-prediction minibatches, in lockstep on every rank.

    Constructing the loader is collective (one ``all_gather`` of edge counts and
    settings); so is every epoch.

    Args:
        sampler: The neighbour sampler, ``with_edges`` (a format version 3 partition: edge
            ids); its seed also seeds the shuffle and the negatives.
        features: The feature store; its context and counters serve the negatives too.
        edges: A split name (``"train"``, ``"val"``, ``"test"``: the partition's
            supervision edges) or ``[2, M]`` global ids (each rank keeps those whose source
            it owns).
        edge_label: ``[M]`` labels of tensor ``edges`` (default ones).
        batch_size: Most positives per batch.
        neg_sampling: ``"binary"``, ``"triplet"`` or ``"none"``.
        num_neg: Negatives per positive ``k``.
        strict: Reject negatives that are stored edges (collective rounds; see
            :class:`~gnnpar.sampling.negative.DistNegativeSampler`).
        exclude: ``"reverse"`` (targets and their reverses, for undirected graphs),
            ``"self"`` (targets) or ``"none"``.
        shuffle: Shuffle each rank's edges every epoch.
        drop_last: Only full batches.
        prefetch: Prepare the next batch before handing out this one (same thread).
        node_attrs: Feature-store arrays every batch carries, one row per node.

    Attributes:
        edges: ``[2, m]`` this rank's positives (global ids); ``input_id`` indexes it.
        edge_label: ``[m]`` their labels.
        schedule: The :class:`~gnnpar.loading.schedule.SeedSchedule` of the edges.
        sampler: The neighbour sampler; ``negatives``: the negative sampler.
        seconds: Seconds spent drawing negatives and sampling (``sample``) and gathering
            features (``fetch``) since the last :meth:`set_epoch`.

    Example::

        sampler = DistNeighborSampler(graph, ctx, Fanouts.for_graph([10, 5], graph, ctx),
                                      with_edges=True)
        loader = DistLinkNeighborLoader(sampler, features, "train", batch_size=512,
                                        neg_sampling="binary", num_neg=1)
        for batch in loader:
            h = model(batch.x, batch.edge_index)
            src, dst = batch.edge_label_index
            loss = F.binary_cross_entropy_with_logits((h[src] * h[dst]).sum(-1),
                                                      batch.edge_label)
    """

    def __init__(
        self,
        sampler: DistNeighborSampler,
        features: DistFeatureStore,
        edges: str | Tensor = "train",
        edge_label: Tensor | None = None,
        batch_size: int = 512,
        neg_sampling: str = "binary",
        num_neg: int = 1,
        strict: bool = False,
        exclude: str = "reverse",
        shuffle: bool = True,
        drop_last: bool = False,
        prefetch: bool = False,
        node_attrs: tuple[str, ...] = ("x",),
    ) -> None:
        if not sampler.with_edges:
            raise ConfigError("a link loader's sampler must return edge ids.",
                              field="sampler", fix="build it with with_edges=True.")
        for name, value, allowed in (("neg_sampling", neg_sampling, NEG_SAMPLING),
                                     ("exclude", exclude, EXCLUDE)):
            if value not in allowed:
                raise ConfigError(f"unknown {name} {value!r}.", field=name,
                                  fix=f"pass one of {', '.join(allowed)}.")
        for key, number in (("batch_size", batch_size), ("num_neg", num_neg)):
            if isinstance(number, bool) or not isinstance(number, int) or number < 1:
                raise ConfigError(f"got {number!r}; need an int >= 1.", field=key,
                                  fix=f"pass e.g. {key}=1.")
        ctx, graph = features.ctx, sampler.graph
        self.graph, self.features, self.sampler = graph, features, sampler
        self.prefetch = bool(prefetch)
        self.neg_sampling, self.num_neg, self.exclude = neg_sampling, num_neg, exclude
        self.node_attrs = tuple(node_attrs)
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.negatives = DistNegativeSampler(graph, ctx, sampler.seed, strict, features.stats)
        label = None
        if edge_label is not None:
            if not isinstance(edges, Tensor) or edge_label.shape != (edges.shape[1],):
                raise ConfigError("edge_label needs a [2, M] edges tensor and one label per "
                                  "edge.", field="edge_label", fix="pass [M] labels.")
            label = edge_label.cpu().float()[graph.is_owned(edges[0].cpu().long())]
        self.edges = _local_edges(graph, edges).to(features.device)
        self.edge_label = (label if label is not None
                           else torch.ones(self.edges.shape[1])).to(features.device)
        settings = {
            "batch_size": batch_size, "shuffle": int(shuffle), "drop_last": int(drop_last),
            "prefetch": int(self.prefetch), "strict": int(strict), "num_neg": num_neg,
            "neg_sampling": NEG_SAMPLING.index(neg_sampling),
            "exclude": EXCLUDE.index(exclude), **sampler_settings(sampler),
        }
        m = self.edges.shape[1]
        counts = agree(ctx, graph, m, settings)
        self.schedule = SeedSchedule(counts, m, batch_size, shuffle, drop_last, sampler.seed,
                                     ctx.rank, features.device)

    def _pairs(self, pos: Tensor, label: Tensor, key: int) -> dict[str, Tensor]:
        """The batch's labelled pairs in global ids (collective with ``strict``)."""
        if self.neg_sampling == "binary":
            index, labels = self.negatives.binary(pos, self.num_neg, key)
            labels[: pos.shape[1]] = label
            return {"edge_label_index": index, "edge_label": labels}
        if self.neg_sampling == "triplet":
            neg = self.negatives.triplet(pos[0], pos[1], self.num_neg, key)
            return {"src_index": pos[0], "dst_pos_index": pos[1], "dst_neg_index": neg}
        return {"edge_label_index": pos, "edge_label": label}

    def _start(self, epoch: int, step: int) -> LinkStarted:
        """Draw batch ``step``'s negatives, sample it, send its feature requests."""
        t0 = time.perf_counter()
        idx, _ = self.schedule.batch_index(epoch, step)
        key = mix_int(epoch, step)
        pos = self.edges.index_select(1, idx)
        pairs = self._pairs(pos, self.edge_label.index_select(0, idx), key)
        ids = torch.cat([v.reshape(-1) for v in pairs.values()
                         if v.dtype == torch.int64])
        uniq, inverse = torch.unique(ids, return_inverse=True)
        own = self.graph.is_owned(uniq)
        order = torch.argsort((~own).to(torch.int8), stable=True)  # own nodes first
        place = torch.empty_like(order).index_copy_(0, order, torch.arange(
            order.numel(), device=order.device))
        local = place.index_select(0, inverse)
        n = self.graph.meta.num_nodes
        excl = (None if self.exclude == "none" else
                edge_keys(pos[0], pos[1], n, reverse=self.exclude == "reverse"))
        out = self.sampler.sample(uniq.index_select(0, order), key,
                                  num_owned_seeds=int(own.sum()), exclude=excl)
        t2 = time.perf_counter()
        gather = self.features.start_gather(out.node, self.node_attrs, out.num_owned_nodes,
                                            out.num_sampled_nodes)
        batch_pairs, at = {}, 0
        for name, v in pairs.items():  # the id tensors, now batch-local
            if v.dtype == torch.int64:
                batch_pairs[name] = local[at:at + v.numel()].view_as(v)
                at += v.numel()
            else:
                batch_pairs[name] = v
        self.seconds["sample"] += t2 - t0  # negatives included
        self.seconds["fetch"] += time.perf_counter() - t2
        return idx, out, batch_pairs, gather

    def _finish(self, step: int, started: LinkStarted) -> Data:
        """Wait for batch ``step``'s remote rows; the batch."""
        t0 = time.perf_counter()
        idx, out, pairs, gather = started
        rows = gather.finish()
        self.seconds["fetch"] += time.perf_counter() - t0
        return Data(
            edge_index=out.edge_index, n_id=out.node, num_sampled_nodes=out.num_sampled_nodes,
            num_sampled_edges=out.num_sampled_edges, input_id=idx,
            global_batch_size=self.global_batch_size(step), **rows, **edge_fields(out),
            **pairs,
        )

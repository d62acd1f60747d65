"""``DistNeighborLoader``: PyG ``Data`` minibatches sampled across the parts of a graph.

The loader only composes: it takes a :class:`~gnnpar.sampling.neighbor.DistNeighborSampler`
and a :class:`~gnnpar.storage.features.DistFeatureStore`, holds this rank's seeds
(:class:`NodeSeeds`) and their :class:`~gnnpar.loading.schedule.SeedSchedule` (the order of
each epoch, the position), asks the sampler for the computation graph of each batch and
the store for its features and labels, and wraps them in a ``torch_geometric.data.Data``
(:class:`NodeBatch`) laid out like PyG's ``NeighborLoader`` output (``x``, ``edge_index``,
``y``, ``batch_size``, ``n_id``, ``num_sampled_nodes``, ``num_sampled_edges``,
``input_id``), so any PyG model trains on it unchanged, ``trim_to_layer`` included.
Each batch also carries ``global_batch_size``, the number of seeds of all ranks in that step, and
``loss_weight = world_size / global_batch_size``, so that a loss summed over the rank's
seeds times it is, after DDP's averaging, the global mean — also on a rank whose batch
is empty; ``batch.loss(out)`` is that loss::

    for batch in loader:
        out = model(batch.x, batch.edge_index)
        batch.loss(out).backward()      # cross-entropy of the seeds, weighted for DDP

Seeds and steps. With ``seed_split="even"`` (the default; DistDGL's ``node_split`` splits
evenly too) a rank that owns more than its share of the seeds (beyond a 5 % slack,
:func:`even_split`) hands the excess to ranks with fewer, once, when the loader is built,
with their labels; every rank trains on its own seeds plus any it was handed, so no
rank's batches are much larger than the others' for the same steps. A partition whose
seeds are balanced already moves none. With ``seed_split="owned"`` every rank takes
exactly the seeds it owns (no seed leaves its rank, but an unbalanced partition gives
some ranks smaller batches for the same steps). Each batch holds this rank's own seeds
first. All ranks take the same number of steps per epoch, because every step is
collective:

* without ``drop_last``: ``num_steps = max over ranks of ceil(n_r / batch_size)``, and each
  rank splits its shuffled seeds into ``num_steps`` near-equal batches (sizes differ by
  at most one, never above ``batch_size``).  Every seed is used exactly once per epoch;
  a rank with fewer seeds than steps ends with empty batches
  (``batch_size == 0``, no nodes), which still take part in the collectives — a trainer
  should weight losses by the global number of seeds, not average per rank;
* with ``drop_last``: ``num_steps = min over ranks of floor(n_r / batch_size)``, every batch
  holds exactly ``batch_size`` seeds, and each rank leaves out its remaining shuffled seeds
  (different ones each epoch).

Randomness (shuffle and sampling) is a pure function of the sampler's ``seed``, epoch,
step and rank,
so the loader's position — :meth:`state_dict` holds the epoch and the step — is all a
checkpoint needs to continue mid-epoch with the same batches.

Overlap, NCCL-safe by construction.  One thread issues every collective of a rank, in
the same order on every rank — NCCL's rule, and what makes sharing one process group
with DDP safe.  On a GPU, batches are sampled and gathered on a side stream
(:class:`~gnnpar.device.BatchStream`): the host reads a batch needs (the exchanged counts,
the hop sizes) wait for the side stream only, never for the training queued on the
compute stream, so batch ``i + 1`` is prepared while batch ``i`` trains; handing a batch
out makes the compute stream wait for the side stream and records its tensors as used
there.  With ``prefetch=True`` the loader also prepares batch ``i + 1`` before it hands
out batch ``i``: it samples it and sends its feature requests, and the remote rows then
travel (on gloo's threads, or NCCL's stream) while batch ``i`` trains on this thread;
taking the next batch only waits for them and puts them in place.  No second thread, no
second communicator.

Host reads per batch (what a CUDA host waits for; :func:`host_syncs`): two per hop (the
exchanged request counts and the hop's sizes) and one for the feature exchange's counts
— 5 for two hops (:data:`HOST_SYNCS`) — with the owned rows on the device, in mapped
pinned memory or on a CPU rank; the ``"pinned-host"`` fallback (pinned rows the device
cannot map) adds a host read of the indices to every read of owned rows.  A training
step reads nothing.

Labels (``seed_attrs``) are read for the seeds only, locally: from the feature store for
this rank's own seeds, from the copy received at construction for the others.  Each
batch also counts where its time went: :attr:`DistNeighborLoader.seconds` accumulates
``sample`` and ``fetch`` seconds.
"""

from __future__ import annotations

import time
import zlib
from collections import defaultdict
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Data

from gnnpar.comm import all_gather_ints, all_to_all_v
from gnnpar.distributed import DistContext
from gnnpar.errors import ConfigError
from gnnpar.keys import mix_int
from gnnpar.loading.schedule import Loader, SeedSchedule
from gnnpar.sampling.neighbor import DistNeighborSampler, SamplerOutput
from gnnpar.sampling.typed import DistTypedNeighborSampler
from gnnpar.storage.features import DistFeatureStore, PendingGather
from gnnpar.storage.graph import SPLITS, DistGraph


class NodeBatch(Data):  # type: ignore[misc]
    """A :class:`DistNeighborLoader` batch: PyG ``NeighborLoader``'s layout, plus a loss weight.

    ``loss_weight`` is ``world_size / global_batch_size``: a loss summed over this rank's
    seeds times it, averaged by DDP over the ranks, is the mean over all ranks' seeds in
    the step -- also when this rank's batch is small or empty (no ``nan``).
    """

    def loss(self, out: Tensor, loss_fn: Any = F.cross_entropy) -> Tensor:
        """The step's loss to call ``backward()`` on, correctly weighted across ranks.

        Args:
            out: The model's output rows, seeds first (``model(batch.x,
                batch.edge_index)``, or only its first ``batch_size`` rows).
            loss_fn: A loss taking ``(input, target, reduction="sum")`` (PyTorch's
                functional losses do).

        Returns:
            ``loss_fn(out[:batch_size], y[:batch_size], reduction="sum") * loss_weight``.
        """
        n = self.batch_size
        summed: Tensor = loss_fn(out[:n], self.y[:n], reduction="sum")
        weighted: Tensor = summed * self.loss_weight
        return weighted


def host_syncs(hops: int, placement: str = "device", node_attrs: int = 1,
               seed_attrs: int = 1) -> int:
    """Host reads of one node-classification batch of ``hops`` hops, at most (the budget).

    Two per hop (the exchanged request counts, the hop's sizes) and one for the feature
    exchange's counts.  The ``"pinned-host"`` placement of the feature store (pinned rows
    the device cannot map, :class:`~gnnpar.storage.placement.PinnedHostRows`) reads the
    indices of every read of owned rows on the host: per array of ``node_attrs``, the
    rows served to peers and the own rows of each of the ``hops + 1`` blocks, and per
    array of ``seed_attrs``, the seeds' rows.
    """
    base = 2 * hops + 1
    if placement != "pinned-host":
        return base
    return base + node_attrs * (hops + 2) + seed_attrs


HOST_SYNCS = host_syncs(2)
"""The node loader's host reads per 2-hop batch on every placement but ``"pinned-host"``
(:func:`host_syncs`): held by the device-shadow tests."""


def _local_seeds(graph: DistGraph, seeds: str | Tensor) -> Tensor:
    """Global ids of the seeds this rank owns, in ascending order."""
    if isinstance(seeds, str):
        if seeds not in SPLITS:
            raise ConfigError(f"unknown split {seeds!r}.", field="seeds",
                              fix=f"pass one of {SPLITS} or a tensor of global node ids.")
        local = torch.from_numpy(getattr(graph.part, f"{seeds}_idx").astype("int64"))
        return torch.sort(local).values + graph.first_gid
    if not isinstance(seeds, Tensor) or seeds.dim() != 1 or seeds.is_floating_point():
        raise ConfigError("seeds must be a split name or a 1-D integer tensor of global ids.",
                          field="seeds", fix="pass e.g. seeds='train'.")
    gids = seeds.cpu().to(torch.int64)
    n = graph.meta.num_nodes
    if gids.numel() and (int(gids.min()) < 0 or int(gids.max()) >= n):
        raise ConfigError(f"seed ids must be in [0, {n}).", field="seeds",
                          fix="pass global node ids of the partitioned graph.")
    if torch.unique(gids).numel() != gids.numel():
        raise ConfigError("seeds hold a node id twice.", field="seeds",
                          fix="deduplicate the seeds (torch.unique).")
    mine: Tensor = torch.sort(gids[graph.is_owned(gids)]).values
    return mine


SEED_SPLITS = ("even", "owned")
"""How seeds are shared among ranks (see the module docstring)."""


SEED_SLACK = 0.05
"""How far above the mean a rank's share may stay before seeds move (``"even"``): above
the 1.045 to which gnnpar's partitioner holds training nodes, because it balances the
rows the seeds' batches compute (``"work"``) and gives a part of heavier seeds fewer of
them; evening out their count would undo that."""


def even_split(counts: list[int], slack: float = SEED_SLACK) -> list[list[int]]:
    """Seeds each rank keeps and hands to each other rank for near-equal shares.

    Local first: no rank trains on more than ``cap = max(ceil(S / W), floor((1 + slack)
    S / W))`` of the ``S`` seeds on ``W`` ranks — what sets the epoch's steps and the
    slowest rank's batches — and each keeps ``min(own, cap)`` of its own.  The ranks with
    more hand the rest to ranks with room below ``cap``, in rank order: the fewest seeds
    that can move.  A partition already balanced within ``slack`` moves none, and its
    batches need no exchange for their seeds.

    Args:
        counts: Seeds each rank owns.
        slack: Relative excess over the mean share that is left in place.

    Returns:
        ``moves[s][d]``: seeds of rank ``s`` that rank ``d`` trains on (``moves[s][s]``:
        those ``s`` keeps).
    """
    world, total = len(counts), sum(counts)
    cap = max(-(-total // world), int(total / world * (1 + slack)))
    moves = [[0] * world for _ in range(world)]
    extra = [max(0, n - cap) for n in counts]
    room = [max(0, cap - n) for n in counts]
    for t in range(world):
        moves[t][t] = min(counts[t], cap)
    giver = taker = 0
    while giver < world and taker < world:
        amount = min(extra[giver], room[taker])
        moves[giver][taker] += amount
        extra[giver] -= amount
        room[taker] -= amount
        if extra[giver] == 0:
            giver += 1
        if room[taker] == 0:
            taker += 1
    return moves


def agree(ctx: DistContext, graph: DistGraph, num_owned: int,
          settings: dict[str, int]) -> list[int]:
    """Check that the ranks agree on ``settings``; the seeds each rank owns (collective).

    One all-gather of every rank's seed count and settings.

    Raises:
        ConfigError: On every rank, naming a setting the ranks disagree on, or when no
            rank has a seed.
    """
    table = all_gather_ints(ctx, [num_owned, *settings.values()])
    for col, name in enumerate(settings, start=1):
        values = table[:, col]
        if bool((values != values[0]).any()):
            raise ConfigError(f"ranks disagree on {name}: {values.tolist()} (rank order).",
                              field=name, fix="pass the same loader arguments on every rank.")
    counts: list[int] = table[:, 0].tolist()
    if sum(counts) == 0:
        raise ConfigError("no rank owns any seed.", field="seeds",
                          fix="pass a non-empty split or seed set.")
    return counts


def sampler_settings(sampler: DistNeighborSampler | DistTypedNeighborSampler
                     ) -> dict[str, int]:
    """What the ranks' samplers must agree on (checked with the loader's settings)."""
    return {"sampler_seed": sampler.seed, "replace": int(sampler.replace),
            "fanouts": zlib.crc32(repr(sampler.fanouts).encode()),
            "num_nodes": sampler.graph.meta.num_nodes}


class NodeSeeds:
    """This rank's seed nodes and their ``seed_attrs`` rows (collective to build).

    The seeds this rank owns, then, with ``seed_split="even"``, any taken from ranks
    with more than their share (module docstring), whose ``seed_attrs`` rows come with
    them, once; the rows of own seeds are read from the feature store per batch.

    Args:
        graph: This rank's part.
        features: The store of the ``seed_attrs`` arrays; its context carries the
            exchanges.
        seeds: A split name or ``[S]`` global ids (:class:`DistNeighborLoader`).
        seed_attrs: Arrays read for the seeds only.
        seed_split: ``"even"`` or ``"owned"``.
        settings: The loader's settings, checked equal on every rank (:func:`agree`).

    Attributes:
        gids: ``[n]`` this rank's seeds (global ids): its own ascending, then any taken
            from other ranks; ``input_id`` indexes it.
        num_own: How many of :attr:`gids`, at its start, this rank owns.
        counts: Number of seeds of each rank, in rank order.
    """

    def __init__(self, graph: DistGraph, features: DistFeatureStore, seeds: str | Tensor,
                 seed_attrs: tuple[str, ...], seed_split: str,
                 settings: dict[str, int]) -> None:
        ctx = features.ctx
        self.features = features
        own = _local_seeds(graph, seeds).to(features.device)
        owned_counts = agree(ctx, graph, own.numel(), settings)
        self.gids, self.num_own, self.counts = own, own.numel(), owned_counts
        self._foreign_rows: dict[str, Tensor] = {}  # seed_attrs rows of others' seeds
        if seed_split == "even" and ctx.world_size > 1:
            self._take_even_share(own, owned_counts, seed_attrs)

    def _take_even_share(self, own: Tensor, owned_counts: list[int],
                         seed_attrs: tuple[str, ...]) -> None:
        """Swap seeds (and their ``seed_attrs`` rows) for an even share (collective).

        One exchange per array, once: a rank with more than its share hands its last
        own seeds to ranks with fewer (:func:`even_split`); nothing when none moves.
        """
        ctx = self.features.ctx
        moves = even_split(owned_counts)
        rank, world = ctx.rank, ctx.world_size
        if all(moves[t][t] == n for t, n in enumerate(owned_counts)):
            return  # balanced within the slack: every rank keeps its own (no exchange)
        send = moves[rank]
        recv = [moves[t][rank] for t in range(world)]
        keep, before = send[rank], sum(send[:rank])
        self.counts = [sum(moves[s][t] for s in range(world)) for t in range(world)]
        lo = sum(recv[:rank])  # rows from this rank itself: the kept seeds

        def exchange(rows: Tensor) -> tuple[Tensor, Tensor]:
            # Own rows are [kept, given to lower ranks, given to higher]: send them grouped
            # by destination in rank order.
            grouped = torch.cat([rows[keep:keep + before], rows[:keep], rows[keep + before:]])
            got, _ = all_to_all_v(ctx, grouped, send, recv)
            return got[lo:lo + keep], torch.cat([got[:lo], got[lo + keep:]])

        kept, foreign = exchange(own)
        self.gids = torch.cat([kept, foreign])
        self._foreign_rows = {name: exchange(self.features.owned_rows(name, own))[1]
                              for name in seed_attrs}
        self.num_own = keep

    def schedule(self, batch_size: int, shuffle: bool, drop_last: bool,
                 seed: int) -> SeedSchedule:
        """The seed schedule of these seeds."""
        return SeedSchedule(self.counts, self.num_own, batch_size, shuffle, drop_last, seed,
                            self.features.ctx.rank, self.gids.device)

    def rows(self, name: str, idx: Tensor, n_own: int, seeds: Tensor) -> Tensor:
        """Array ``name``'s rows of a batch's seeds (own ones first), read locally."""
        rows = self.features.owned_rows(name, seeds[:n_own])
        if n_own == idx.numel():
            return rows
        others = self._foreign_rows[name].index_select(0, idx[n_own:] - self.num_own)
        return torch.cat([rows, others])


def check_loader_args(batch_size: int, seed_split: str) -> None:
    """Raise :class:`ConfigError` on a bad ``batch_size`` or ``seed_split``."""
    if seed_split not in SEED_SPLITS:
        raise ConfigError(f"unknown seed_split {seed_split!r}.", field="seed_split",
                          fix=f"pass one of {', '.join(SEED_SPLITS)}.")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"got {batch_size!r}; need an int >= 1.", field="batch_size",
                          fix="pass e.g. batch_size=1024.")


NodeStarted = tuple[Tensor, int, SamplerOutput, PendingGather | None]


def seed_schedule(sampler: DistNeighborSampler | DistTypedNeighborSampler,
                  store: DistFeatureStore, seeds: str | Tensor, batch_size: int,
                  shuffle: bool, drop_last: bool, prefetch: bool,
                  seed_attrs: tuple[str, ...], seed_split: str
                  ) -> tuple[NodeSeeds, SeedSchedule]:
    """A node-seeded loader's seeds and their schedule, its settings checked on every rank.

    ``sampler`` is a node or typed sampler (its ``graph``, ``seed`` and settings); the seeds'
    rows (``seed_attrs``) come from ``store``.
    """
    check_loader_args(batch_size, seed_split)
    settings = {
        "batch_size": batch_size, "shuffle": int(shuffle), "drop_last": int(drop_last),
        "prefetch": int(prefetch), "seed_split": SEED_SPLITS.index(seed_split),
        "seed_attrs": zlib.crc32(repr(seed_attrs).encode()),
        **sampler_settings(sampler),
    }
    found = NodeSeeds(sampler.graph, store, seeds, seed_attrs, seed_split, settings)
    return found, found.schedule(batch_size, shuffle, drop_last, sampler.seed)


class DistNeighborLoader(Loader[NodeStarted, NodeBatch]):
    """Iterate over minibatches of sampled subgraphs, in lockstep on every rank.

    Constructing the loader is collective (one ``all_gather`` of seed counts and
    settings, after every argument has been validated locally): every rank constructs
    it, and a setting that differs between ranks raises on every rank.  Each epoch
    (``for batch in loader``) is collective too.

    Args:
        sampler: The batches' sampler; its context and counters are the store's.
        features: The feature store.
        seeds: A split name (``"train"``, ``"val"``, ``"test"``) or ``[S]`` distinct global
            ids; each rank passes the same, or at least all of those it owns (it keeps
            those).
        batch_size: Most seeds per batch (``>= 1``).
        shuffle: Shuffle each rank's seeds every epoch (by the sampler's seed).
        drop_last: Only full batches (see the module docstring for how steps are set).
        prefetch: Prepare the next batch before handing out this one, so that its remote
            feature rows travel while this one trains (same thread; module docstring).
        node_attrs: Feature-store arrays every batch carries, one row per batch node.
        seed_attrs: Feature-store arrays read for the seeds only (no exchange per
            batch), e.g. the labels.
        seed_split: ``"even"`` (near-equal shares: :func:`even_split`) or ``"owned"``
            (each rank its own seeds).

    Batches carry ``e_id`` and ``edge_attr`` (as PyG's loaders do) when the sampler
    returns them (``with_edges``).

    Attributes:
        sampler: The :class:`DistNeighborSampler` used.
        seeds: This rank's seeds (:class:`NodeSeeds`).
        schedule: Their :class:`~gnnpar.loading.schedule.SeedSchedule`.
        seconds: Seconds spent sampling (``"sample"``) and gathering features
            (``"fetch"``) since the last :meth:`set_epoch`.

    Example::

        fanouts = gnnpar.Fanouts.for_graph([15, 10], graph, ctx)
        sampler = gnnpar.DistNeighborSampler(graph, ctx, fanouts, seed=0)
        loader = gnnpar.DistNeighborLoader(sampler, features, "train", batch_size=1024)
        for epoch in range(10):
            loader.set_epoch(epoch)
            for batch in loader:                 # the same number of steps on every rank
                out = model(batch.x, batch.edge_index)[: batch.batch_size]
    """

    def __init__(
        self,
        sampler: DistNeighborSampler,
        features: DistFeatureStore,
        seeds: str | Tensor = "train",
        batch_size: int = 1024,
        shuffle: bool = True,
        drop_last: bool = False,
        prefetch: bool = False,
        node_attrs: tuple[str, ...] = ("x",),
        seed_attrs: tuple[str, ...] = ("y",),
        seed_split: str = "even",
    ) -> None:
        self.sampler, self.features = sampler, features
        self.prefetch = bool(prefetch)
        self.node_attrs = tuple(node_attrs)
        self.seed_attrs = tuple(seed_attrs)
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.seeds, self.schedule = seed_schedule(sampler, features, seeds, batch_size, shuffle,
                                                  drop_last, self.prefetch, self.seed_attrs,
                                                  seed_split)

    def _start(self, epoch: int, step: int) -> NodeStarted:
        """Sample batch ``step`` and send its feature requests (collective).

        Without ``node_attrs`` no rows are gathered (no exchange).
        """
        t0 = time.perf_counter()
        idx, n_own = self.schedule.batch_index(epoch, step)
        out = self.sampler.sample(self.seeds.gids.index_select(0, idx), mix_int(epoch, step),
                                  num_owned_seeds=n_own)
        t1 = time.perf_counter()
        gather = self.features.start_gather(
            out.node, self.node_attrs, out.num_owned_nodes,
            out.num_sampled_nodes) if self.node_attrs else None
        self.seconds["sample"] += t1 - t0
        self.seconds["fetch"] += time.perf_counter() - t1
        return idx, n_own, out, gather

    def _finish(self, step: int, started: NodeStarted) -> NodeBatch:
        """Wait for batch ``step``'s remote rows; the batch."""
        t0 = time.perf_counter()
        idx, n_own, out, gather = started
        rows = gather.finish() if gather is not None else {}
        seeds = out.node[: out.batch_size]
        rows.update({n: self.seeds.rows(n, idx, n_own, seeds) for n in self.seed_attrs})
        self.seconds["fetch"] += time.perf_counter() - t0
        total = self.global_batch_size(step)
        return NodeBatch(
            edge_index=out.edge_index, n_id=out.node, batch_size=out.batch_size,
            num_sampled_nodes=out.num_sampled_nodes, num_sampled_edges=out.num_sampled_edges,
            num_owned_nodes=out.num_owned_nodes, input_id=idx, global_batch_size=total,
            loss_weight=len(self.seeds.counts) / total, **rows, **edge_fields(out),
        )


def edge_fields(out: SamplerOutput) -> dict[str, Tensor]:
    """A batch's ``e_id`` and ``edge_attr``, those the sampler returned."""
    fields = {"e_id": out.e_id, "edge_attr": out.edge_attr}
    return {k: v for k, v in fields.items() if v is not None}

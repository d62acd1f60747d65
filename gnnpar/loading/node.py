"""``DistNeighborLoader``: PyG ``Data`` minibatches sampled across the parts of a graph.

The loader only composes: it splits the seed set by owner, orders each rank's seeds per
epoch, asks :class:`~gnnpar.sampling.neighbor.DistNeighborSampler` for the computation graph of
each batch and :class:`~gnnpar.storage.features.DistFeatureStore` for its features and
labels, and wraps them in a ``torch_geometric.data.Data`` (:class:`NodeBatch`) laid out
like PyG's ``NeighborLoader`` output (``x``, ``edge_index``, ``y``, ``batch_size``,
``n_id``, ``num_sampled_nodes``, ``num_sampled_edges``, ``input_id``), so any PyG model
trains on it unchanged, ``trim_to_layer`` included.  Each batch also carries
``global_batch_size``, the number of seeds of all ranks in that step, and
``loss_weight = world_size / global_batch_size``, so that a loss summed over the rank's
seeds times it is, after DDP's averaging, the global mean — also on a rank whose batch
is empty; ``batch.loss(out)`` is that loss::

    for batch in loader:
        out = model(batch.x, batch.edge_index)
        batch.loss(out).backward()      # cross-entropy of the seeds, weighted for DDP

Seeds and steps. With ``seed_split="even"`` (the default; DistDGL's ``node_split`` splits
evenly too) a rank that owns more than its share of the seeds (beyond a 2 % slack,
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

Randomness (shuffle and sampling) is a pure function of ``seed``, epoch, step and rank,
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

Host reads per batch (what a CUDA host waits for; :data:`HOST_SYNCS`): two per hop (the
exchanged request counts and the hop's sizes) and one for the feature exchange's counts
— 5 for two hops — whatever the feature placement; a training step reads nothing.

Labels (``seed_attrs``) are read for the seeds only, locally: from the feature store for
this rank's own seeds, from the copy received at construction for the others.  Each
batch also counts where its time went: :attr:`DistNeighborLoader.seconds` accumulates
``sample`` and ``fetch`` seconds.
"""

from __future__ import annotations

import time
import zlib
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric import EdgeIndex
from torch_geometric.data import Data

from gnnpar.comm import CommStats, all_gather_ints, all_to_all_v
from gnnpar.device import BatchStream, upload
from gnnpar.distributed import DistContext
from gnnpar.errors import ConfigError
from gnnpar.keys import mix_int
from gnnpar.sampling.neighbor import DistNeighborSampler, SamplerOutput, check_fanouts
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


def host_syncs(hops: int) -> int:
    """Host reads of one node-classification batch of ``hops`` hops (the suite's budget)."""
    return 2 * hops + 1


HOST_SYNCS = host_syncs(2)
"""The node loader's host reads per 2-hop batch: held by the device-shadow tests."""


def batch_tensors(batch: Any) -> list[Tensor]:
    """Every tensor a ``Data`` / ``HeteroData`` batch holds (what a hand-over covers).

    An ``EdgeIndex`` counts by the plain tensor it wraps (what kernels read).
    """
    return [v.as_tensor() if isinstance(v, EdgeIndex) else v
            for store in batch.stores for v in store.values() if isinstance(v, Tensor)]


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


SEED_SLACK = 0.02
"""How far above the mean a rank's share may stay before seeds move (``"even"``)."""


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


def agree(ctx: DistContext, graph: DistGraph, sampler: DistNeighborSampler, num_owned: int,
          settings: dict[str, int]) -> list[int]:
    """Check that the ranks agree on ``settings``; the seeds each rank owns (collective).

    One all-gather of every rank's seed count, largest owned in-degree and settings;
    caps the sampler's fan-outs at the graph's largest in-degree
    (:meth:`DistNeighborSampler.cap_fanouts`).

    Raises:
        ConfigError: On every rank, naming a setting the ranks disagree on, or when no
            rank has a seed.
    """
    max_degree = int(graph.in_degree[: graph.num_owned].max()) if graph.num_owned else 0
    table = all_gather_ints(ctx, [num_owned, max_degree, *settings.values()])
    sampler.cap_fanouts(int(table[:, 1].max()))
    for col, name in enumerate(settings, start=2):
        values = table[:, col]
        if bool((values != values[0]).any()):
            raise ConfigError(f"ranks disagree on {name}: {values.tolist()} (rank order).",
                              field=name, fix="pass the same loader arguments on every rank.")
    counts: list[int] = table[:, 0].tolist()
    if sum(counts) == 0:
        raise ConfigError("no rank owns any seed.", field="seeds",
                          fix="pass a non-empty split or seed set.")
    return counts


class SeedSchedule:
    """Which seeds each step of each epoch takes: steps, order and position.

    What :class:`DistNeighborLoader` and :class:`~gnnpar.link.DistLinkNeighborLoader` share.

    A subclass sets the attributes below in its constructor (then calls
    :meth:`_init_schedule`) and provides ``_start(epoch, step)`` (sample a batch and send
    its requests) and ``_finish(step, started)`` (the batch); iterating yields the rest of
    the current epoch, the same number of steps on every rank (module docstring).

    Attributes:
        batch_size, shuffle, drop_last, seed, prefetch: As the loader was given them.
        seed_counts: Number of seeds of each rank, in rank order.
        num_seeds: This rank's seeds.
        num_own_seeds: How many of them, at the start of the seed set, this rank owns.
        rank: This rank.
        device: Where the batch positions go.
        seconds: Seconds by phase since the last :meth:`set_epoch`.
    """

    batch_size: int
    shuffle: bool
    drop_last: bool
    seed: int
    prefetch: bool
    seed_counts: list[int]
    num_seeds: int
    num_own_seeds: int
    rank: int
    device: torch.device
    seconds: defaultdict[str, float]

    def _init_schedule(self) -> None:
        """Count the steps and start at epoch 0, step 0."""
        self._stream = BatchStream(self.device)
        self.num_steps = self._count_steps()
        self._epoch = 0
        self._step = 0
        self._perm: tuple[int, Tensor, list[int]] | None = None

    def _count_steps(self) -> int:
        """Steps per epoch from every rank's seed count (see the module docstring)."""
        counts = torch.tensor(self.seed_counts)
        if self.drop_last:
            steps = int((counts // self.batch_size).min())
            if steps == 0:
                raise ConfigError(
                    f"with drop_last every rank needs >= batch_size={self.batch_size} seeds, "
                    f"but the ranks have {counts.tolist()}.", field="batch_size",
                    fix="lower batch_size or pass drop_last=False.")
            return steps
        return int(((counts + self.batch_size - 1) // self.batch_size).max())

    def __len__(self) -> int:
        """Steps per epoch (the same on every rank)."""
        return self.num_steps

    def global_batch_size(self, step: int) -> int:
        """Seeds of all ranks together in batch ``step`` (no communication).

        Rank ``r`` with ``n_r`` seeds holds ``n_r // num_steps + (step < n_r % num_steps)``
        of them at ``step`` (the split of ``torch.tensor_split``), or ``batch_size`` with
        ``drop_last``.  Without ``drop_last`` the sum is never 0.

        Args:
            step: Step within an epoch, in ``[0, num_steps)``.
        """
        if not 0 <= step < self.num_steps:
            raise ConfigError(f"step {step} is outside [0, {self.num_steps}).", field="step",
                              fix="pass a step of the epoch.")
        if self.drop_last:
            return self.batch_size * len(self.seed_counts)
        s = self.num_steps
        return sum(n // s + (step < n % s) for n in self.seed_counts)

    def _position(self) -> tuple[int, int]:
        """``(epoch, step)`` of the next batch; the end of an epoch is the next's start."""
        if self._step >= self.num_steps:
            return self._epoch + 1, 0
        return self._epoch, self._step

    @property
    def epoch(self) -> int:
        """Epoch that the next batch belongs to."""
        return self._position()[0]

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` from its first batch at the next iteration."""
        self._epoch, self._step = int(epoch), 0
        self.seconds.clear()

    def state_dict(self) -> dict[str, int]:
        """The loader's position: the next batch is step ``step`` of epoch ``epoch``."""
        epoch, step = self._position()
        return {"epoch": epoch, "step": step, "num_steps": self.num_steps, "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a position saved by :meth:`state_dict` of an equal loader."""
        for key in ("num_steps", "seed"):
            if int(state.get(key, -1)) != getattr(self, key):
                raise ConfigError(
                    f"the saved loader had {key}={state.get(key)!r}, this one has "
                    f"{getattr(self, key)}; its batches would differ.", field=key,
                    fix="resume with the same seeds, batch size, seed and world size.")
        step = int(state["step"])
        if not 0 <= step < self.num_steps:
            raise ConfigError(f"step {step} is outside [0, {self.num_steps}).", field="step",
                              fix="pass a state_dict saved by this loader.")
        self._epoch, self._step = int(state["epoch"]), step

    def _epoch_order(self, epoch: int) -> tuple[int, Tensor, list[int]]:
        """Epoch ``epoch``'s order of seed positions, own seeds first per batch.

        Computed on the host once per epoch (no device read) and moved to the device
        without waiting; also returns how many own seeds each batch starts with.
        """
        n, k, steps = self.num_seeds, self.num_own_seeds, self.num_steps
        if self.shuffle:
            gen = torch.Generator().manual_seed(
                mix_int(self.seed, epoch, self.rank) & ((1 << 63) - 1))
            perm = torch.randperm(n, generator=gen)
        else:
            perm = torch.arange(n)
        if self.drop_last:
            step_of = torch.arange(n) // self.batch_size  # the tail gets steps and more
        else:
            sizes = [n // steps + (i < n % steps) for i in range(steps)]
            step_of = torch.repeat_interleave(torch.arange(steps), torch.tensor(sizes))
        foreign = perm >= k
        if k < n:  # stable: each batch keeps its seeds, own ones first
            perm = perm[torch.argsort(step_of * 2 + foreign, stable=True)]
        own = torch.bincount(step_of[perm < k], minlength=steps + 1)[:steps].tolist()
        return epoch, upload(perm, self.device), own

    def _batch_index(self, epoch: int, step: int) -> tuple[Tensor, int]:
        """Positions in the seed set of batch ``step``'s seeds, and how many are own."""
        if self._perm is None or self._perm[0] != epoch:
            self._perm = self._epoch_order(epoch)
        _, perm, own = self._perm
        if self.drop_last:
            return perm[step * self.batch_size:(step + 1) * self.batch_size], own[step]
        # torch.tensor_split's batch, without making every step's view (O(steps) each).
        size, extra = divmod(perm.numel(), self.num_steps)
        start = step * size + min(step, extra)
        return perm[start:start + size + (step < extra)], own[step]

    def _start(self, epoch: int, step: int) -> Any:
        raise NotImplementedError

    def _finish(self, step: int, started: Any) -> Data:
        raise NotImplementedError

    def __iter__(self) -> Iterator[Data]:
        """Yield the remaining batches of the current epoch (collective)."""
        self._epoch, self._step = self._position()
        epoch, first = self._epoch, self._step
        started = None
        stream = self._stream
        for step in range(first, self.num_steps):
            with stream:  # on a GPU: a side stream, so host reads do not wait for training
                batch = self._finish(step, started or self._start(epoch, step))
            stream.hand_over(batch_tensors(batch))
            with stream:  # the next batch's rows travel while this one trains
                started = (self._start(epoch, step + 1)
                           if self.prefetch and step + 1 < self.num_steps else None)
            self._step = step + 1
            yield batch
        self._epoch, self._step = epoch + 1, 0


class DistNeighborLoader(SeedSchedule):
    """Iterate over minibatches of sampled subgraphs, in lockstep on every rank.

    Constructing the loader is collective (one ``all_gather`` of seed counts and
    settings, after every argument has been validated locally): every rank constructs
    it, and a setting that differs between ranks raises on every rank.  Each epoch
    (``for batch in loader``) is collective too.

    Args:
        graph: This rank's part.
        features: The feature store; its context and counters serve the sampler too.
        fanouts: Neighbours sampled per hop, e.g. ``[15, 10]``.
        seeds: A split name (``"train"``, ``"val"``, ``"test"``) or ``[S]`` distinct global
            ids; each rank passes the same, or at least all of those it owns (it keeps
            those).
        batch_size: Most seeds per batch (``>= 1``).
        shuffle: Shuffle each rank's seeds every epoch.
        drop_last: Only full batches (see the module docstring for how steps are set).
        seed: Seed of the shuffle and of the sampler.
        replace: Sample neighbours with replacement.
        prefetch: Prepare the next batch before handing out this one, so that its remote
            feature rows travel while this one trains (same thread; module docstring).
        node_attrs: Feature-store arrays every batch carries, one row per batch node.
        seed_attrs: Feature-store arrays read for the seeds only (no exchange per
            batch), e.g. the labels.
        seed_split: ``"even"`` (near-equal shares: :func:`even_split`) or ``"owned"``
            (each rank its own seeds).
        with_edges: Batches carry ``e_id`` (each edge's dataset id) and, when the graph
            has edge features, ``edge_attr`` (as PyG's loaders do); default: when the
            partition has edge features.

    Attributes:
        seed_gids: ``[n]`` this rank's seeds (global ids): its own ascending, then
            any taken from other ranks; ``input_id`` indexes it.
        num_own_seeds: How many of :attr:`seed_gids`, at its start, this rank owns.
        num_steps: Steps per epoch, equal on every rank.
        seed_counts: Number of seeds of each rank, in rank order.
        sampler: The :class:`DistNeighborSampler` used.
        seconds: Seconds spent sampling (``"sample"``) and gathering features
            (``"fetch"``) since the last :meth:`set_epoch`.

    Example::

        loader = gnnpar.DistNeighborLoader(graph, features, [15, 10], "train", batch_size=1024)
        for epoch in range(10):
            loader.set_epoch(epoch)
            for batch in loader:                 # the same number of steps on every rank
                out = model(batch.x, batch.edge_index)[: batch.batch_size]
    """

    def __init__(
        self,
        graph: DistGraph,
        features: DistFeatureStore,
        fanouts: Any,
        seeds: str | Tensor = "train",
        batch_size: int = 1024,
        shuffle: bool = True,
        drop_last: bool = False,
        seed: int = 0,
        replace: bool = False,
        prefetch: bool = False,
        node_attrs: tuple[str, ...] = ("x",),
        seed_attrs: tuple[str, ...] = ("y",),
        seed_split: str = "even",
        with_edges: bool | None = None,
    ) -> None:
        if seed_split not in SEED_SPLITS:
            raise ConfigError(f"unknown seed_split {seed_split!r}.", field="seed_split",
                              fix=f"pass one of {', '.join(SEED_SPLITS)}.")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"got {batch_size!r}; need an int >= 1.", field="batch_size",
                              fix="pass e.g. batch_size=1024.")
        ctx = features.ctx
        self.graph = graph
        self.features = features
        self.batch_size = batch_size
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.seed = int(seed)
        self.prefetch = bool(prefetch)
        self.node_attrs = tuple(node_attrs)
        self.seed_attrs = tuple(seed_attrs)
        self.seconds: defaultdict[str, float] = defaultdict(float)
        if with_edges is None:
            with_edges = graph.meta.edge_dim > 0
        self.sampler = self._build_sampler(graph, ctx, fanouts, replace, seed, features.stats,
                                           with_edges)
        own = _local_seeds(graph, seeds).to(features.device)
        owned_counts = self._agree(own.numel(), fanouts, replace, seed_split)
        self.seed_gids, self.num_own_seeds, self.seed_counts = own, own.numel(), owned_counts
        self._foreign_rows: dict[str, Tensor] = {}  # seed_attrs rows of others' seeds
        if seed_split == "even" and ctx.world_size > 1:
            self._take_even_share(own, owned_counts)
        self.num_seeds, self.rank, self.device = (self.seed_gids.numel(), ctx.rank,
                                                  self.seed_gids.device)
        self._init_schedule()

    def _build_sampler(self, graph: DistGraph, ctx: DistContext, fanouts: Any, replace: bool,
                       seed: int, stats: CommStats | None,
                       with_edges: bool) -> DistNeighborSampler:
        """The batches' sampler (validates ``fanouts``)."""
        return DistNeighborSampler(graph, ctx, check_fanouts(fanouts), replace, seed, stats,
                                   with_edges=with_edges)

    def _agree(self, num_owned: int, fanouts: Any, replace: bool,
               seed_split: str) -> list[int]:
        """Check that the ranks agree on the settings; the seeds each rank owns.

        Also caps the sampler's fan-outs at the graph's largest in-degree
        (:meth:`DistNeighborSampler.cap_fanouts`).
        """
        ctx = self.features.ctx
        settings = {
            "batch_size": self.batch_size, "shuffle": int(self.shuffle),
            "drop_last": int(self.drop_last), "seed": self.seed, "replace": int(replace),
            "prefetch": int(self.prefetch), "seed_split": SEED_SPLITS.index(seed_split),
            "fanouts": zlib.crc32(repr(fanouts).encode()),
            "seed_attrs": zlib.crc32(repr(self.seed_attrs).encode()),
            "num_nodes": self.graph.meta.num_nodes,
        }
        return agree(ctx, self.graph, self.sampler, num_owned, settings)

    def _take_even_share(self, own: Tensor, owned_counts: list[int]) -> None:
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
        self.seed_counts = [sum(moves[s][t] for s in range(world)) for t in range(world)]
        lo = sum(recv[:rank])  # rows from this rank itself: the kept seeds

        def exchange(rows: Tensor) -> tuple[Tensor, Tensor]:
            # Own rows are [kept, given to lower ranks, given to higher]: send them grouped
            # by destination in rank order.
            grouped = torch.cat([rows[keep:keep + before], rows[:keep], rows[keep + before:]])
            got, _ = all_to_all_v(ctx, grouped, send, recv)
            return got[lo:lo + keep], torch.cat([got[:lo], got[lo + keep:]])

        kept, foreign = exchange(own)
        self.seed_gids = torch.cat([kept, foreign])
        self._foreign_rows = {name: exchange(self.features.owned_rows(name, own))[1]
                              for name in self.seed_attrs}
        self.num_own_seeds = keep

    def _start(self, epoch: int, step: int
               ) -> tuple[Tensor, int, SamplerOutput, PendingGather | None]:
        """Sample batch ``step`` and send its feature requests (collective).

        Without ``node_attrs`` no rows are gathered (no exchange).
        """
        t0 = time.perf_counter()
        idx, n_own = self._batch_index(epoch, step)
        out = self.sampler.sample(self.seed_gids.index_select(0, idx), mix_int(epoch, step),
                                  num_owned_seeds=n_own)
        t1 = time.perf_counter()
        gather = self.features.start_gather(
            out.node, self.node_attrs, out.num_owned_nodes,
            out.num_sampled_nodes) if self.node_attrs else None
        self.seconds["sample"] += t1 - t0
        self.seconds["fetch"] += time.perf_counter() - t1
        return idx, n_own, out, gather

    def _seed_rows(self, name: str, idx: Tensor, n_own: int, seeds: Tensor) -> Tensor:
        """Array ``name``'s rows of a batch's seeds (own ones first), read locally."""
        rows = self.features.owned_rows(name, seeds[:n_own])
        if n_own == idx.numel():
            return rows
        others = self._foreign_rows[name].index_select(0, idx[n_own:] - self.num_own_seeds)
        return torch.cat([rows, others])

    def _finish(self, step: int,
                started: tuple[Tensor, int, SamplerOutput, PendingGather | None]) -> Data:
        """Wait for batch ``step``'s remote rows; the batch."""
        t0 = time.perf_counter()
        idx, n_own, out, gather = started
        rows = gather.finish() if gather is not None else {}
        seeds = out.node[: out.batch_size]
        rows.update({n: self._seed_rows(n, idx, n_own, seeds) for n in self.seed_attrs})
        self.seconds["fetch"] += time.perf_counter() - t0
        total = self.global_batch_size(step)
        return NodeBatch(
            edge_index=out.edge_index, n_id=out.node, batch_size=out.batch_size,
            num_sampled_nodes=out.num_sampled_nodes, num_sampled_edges=out.num_sampled_edges,
            num_owned_nodes=out.num_owned_nodes, input_id=idx, global_batch_size=total,
            loss_weight=len(self.seed_counts) / total, **rows, **edge_fields(out),
        )


def edge_fields(out: SamplerOutput) -> dict[str, Tensor]:
    """A batch's ``e_id`` and ``edge_attr``, those the sampler returned."""
    fields = {"e_id": out.e_id, "edge_attr": out.edge_attr}
    return {k: v for k, v in fields.items() if v is not None}

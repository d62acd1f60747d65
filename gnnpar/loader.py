"""``DistNeighborLoader``: PyG ``Data`` minibatches sampled across the parts of a graph.

The loader only composes: it splits the seed set by owner, orders each rank's seeds per
epoch, asks :class:`~gnnpar.sampler.DistNeighborSampler` for the computation graph of
each batch and :class:`~gnnpar.feature_store.DistFeatureStore` for its features and
labels, and wraps them in a ``torch_geometric.data.Data`` laid out like PyG's
``NeighborLoader`` output (``x``, ``edge_index``, ``y``, ``batch_size``, ``n_id``,
``num_sampled_nodes``, ``num_sampled_edges``, ``input_id``), so any PyG model trains on
it unchanged, ``trim_to_layer`` included.  Each batch also carries ``global_batch_size``,
the number of seeds of all ranks in that step, so that a loss summed over the rank's
seeds and divided by it is the global mean — also on a rank whose batch is empty::

    for batch in loader:
        out = model(batch.x, batch.edge_index)[: batch.batch_size]
        loss = F.cross_entropy(out, batch.y[: batch.batch_size], reduction="sum")
        (loss * world_size / batch.global_batch_size).backward()  # DDP averages

Seeds and steps.  Every rank takes the seeds it owns.  All ranks take the same number of
steps per epoch, because every step is collective:

* without ``drop_last``: ``num_steps = max over ranks of ceil(n_r / batch_size)``, and each
  rank splits its shuffled seeds into ``num_steps`` near-equal batches (sizes differ by
  at most one, never above ``batch_size``).  Every seed of every rank is used exactly
  once per epoch; a rank with fewer seeds than steps ends with empty batches
  (``batch_size == 0``, no nodes), which still take part in the collectives — a trainer
  should weight losses by the global number of seeds, not average per rank;
* with ``drop_last``: ``num_steps = min over ranks of floor(n_r / batch_size)``, every batch
  holds exactly ``batch_size`` seeds, and each rank leaves out its remaining shuffled seeds
  (different ones each epoch).

Randomness (shuffle and sampling) is a pure function of ``seed``, epoch, step and rank,
so the loader's position — :meth:`state_dict` holds the epoch and the step — is all a
checkpoint needs to continue mid-epoch with the same batches.

Prefetch.  With ``prefetch=True`` a background thread builds batch ``i + 1`` while
batch ``i`` trains.  Building a batch is collective, and collectives on one process
group must be issued in the same order on every rank, which two threads sharing a group
(the trainer's DDP all-reduce and the loader's exchanges) cannot guarantee.  Prefetch
therefore requires the feature store to talk on a group of its own — build it with
``gnnpar.distributed.new_group(ctx)`` — or a world of one rank; otherwise it is refused.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data

from gnnpar.comm import all_gather_ints
from gnnpar.errors import ConfigError
from gnnpar.feature_store import DistFeatureStore
from gnnpar.graph import SPLITS, DistGraph
from gnnpar.sampler import DistNeighborSampler, check_fanouts, mix_int


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


class DistNeighborLoader:
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
            ids; each rank keeps those it owns.
        batch_size: Most seeds per batch (``>= 1``).
        shuffle: Shuffle each rank's seeds every epoch.
        drop_last: Only full batches (see the module docstring for how steps are set).
        seed: Seed of the shuffle and of the sampler.
        replace: Sample neighbours with replacement.
        prefetch: Build the next batch in a background thread (needs a feature store on
            its own process group, see the module docstring).
        node_attrs: Feature-store arrays every batch carries, one row per batch node.

    Attributes:
        seed_gids: ``[n]`` this rank's seeds (global ids, ascending); ``input_id``
            indexes it.
        num_steps: Steps per epoch, equal on every rank.
        seed_counts: Number of seeds of each rank, in rank order.
        sampler: The :class:`DistNeighborSampler` used.

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
        fanouts: list[int],
        seeds: str | Tensor = "train",
        batch_size: int = 1024,
        shuffle: bool = True,
        drop_last: bool = False,
        seed: int = 0,
        replace: bool = False,
        prefetch: bool = False,
        node_attrs: tuple[str, ...] = ("x", "y"),
    ) -> None:
        fanouts = check_fanouts(fanouts)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"got {batch_size!r}; need an int >= 1.", field="batch_size",
                              fix="pass e.g. batch_size=1024.")
        ctx = features.ctx
        if prefetch and ctx.world_size > 1 and ctx.group is None:
            raise ConfigError(
                "prefetch builds batches in a background thread, whose collectives must not "
                "share the default process group with the trainer's.", field="prefetch",
                fix="build the feature store with ctx=gnnpar.distributed.new_group(ctx), or "
                "pass prefetch=False.")
        self.graph = graph
        self.features = features
        self.batch_size = batch_size
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.seed = int(seed)
        self.prefetch = bool(prefetch)
        self.node_attrs = tuple(node_attrs)
        self.seed_gids = _local_seeds(graph, seeds)
        self.sampler = DistNeighborSampler(graph, ctx, fanouts, replace, seed, features.stats)
        self.seed_counts: list[int] = []
        self.num_steps = self._agree_on_steps(fanouts, replace)
        self._epoch = 0
        self._step = 0
        self._perm: tuple[int, Tensor] | None = None

    def _agree_on_steps(self, fanouts: list[int], replace: bool) -> int:
        """Check that the ranks agree on the settings; keep their seed counts; count steps."""
        ctx = self.features.ctx
        settings = {
            "batch_size": self.batch_size, "shuffle": int(self.shuffle),
            "drop_last": int(self.drop_last), "seed": self.seed, "replace": int(replace),
            "prefetch": int(self.prefetch),
            "fanouts": zlib.crc32(repr(fanouts).encode()),
            "num_nodes": self.graph.meta.num_nodes,
        }
        table = all_gather_ints(ctx, [self.seed_gids.numel(), *settings.values()])
        for col, name in enumerate(settings, start=1):
            values = table[:, col]
            if bool((values != values[0]).any()):
                raise ConfigError(
                    f"ranks disagree on {name}: {values.tolist()} (rank order).",
                    field=name, fix="pass the same loader arguments on every rank.")
        counts = table[:, 0]
        self.seed_counts = counts.tolist()
        if int(counts.sum()) == 0:
            raise ConfigError("no rank owns any seed.", field="seeds",
                              fix="pass a non-empty split or seed set.")
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

    def _batch_index(self, epoch: int, step: int) -> Tensor:
        """Positions in :attr:`seed_gids` of the seeds of batch ``step``."""
        if self._perm is None or self._perm[0] != epoch:
            n = self.seed_gids.numel()
            if self.shuffle:
                gen = torch.Generator().manual_seed(
                    mix_int(self.seed, epoch, self.features.ctx.rank) & ((1 << 63) - 1))
                perm = torch.randperm(n, generator=gen)
            else:
                perm = torch.arange(n)
            self._perm = (epoch, perm)
        perm = self._perm[1]
        if self.drop_last:
            return perm[step * self.batch_size:(step + 1) * self.batch_size]
        return torch.tensor_split(perm, self.num_steps)[step]

    def _make_batch(self, epoch: int, step: int) -> Data:
        idx = self._batch_index(epoch, step)
        out = self.sampler.sample(self.seed_gids[idx], mix_int(epoch, step))
        rows = self.features.gather_many(out.node, self.node_attrs)
        return Data(
            edge_index=out.edge_index, n_id=out.node, batch_size=out.batch_size,
            num_sampled_nodes=out.num_sampled_nodes, num_sampled_edges=out.num_sampled_edges,
            input_id=idx, global_batch_size=self.global_batch_size(step), **rows,
        )

    def __iter__(self) -> Iterator[Data]:
        """Yield the remaining batches of the current epoch (collective)."""
        self._epoch, self._step = self._position()
        epoch = self._epoch
        if not self.prefetch:
            for step in range(self._step, self.num_steps):
                batch = self._make_batch(epoch, step)
                self._step = step + 1
                yield batch
        else:
            with ThreadPoolExecutor(1, thread_name_prefix="gnnpar-prefetch") as pool:
                nxt: Future[Data] = pool.submit(self._make_batch, epoch, self._step)
                for step in range(self._step, self.num_steps):
                    batch = nxt.result()
                    if step + 1 < self.num_steps:
                        nxt = pool.submit(self._make_batch, epoch, step + 1)
                    self._step = step + 1
                    yield batch
        self._epoch, self._step = epoch + 1, 0

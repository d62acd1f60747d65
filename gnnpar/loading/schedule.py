"""Seed schedules: which seeds each step of each epoch takes, and where a loader stands.

:class:`SeedSchedule` is the part every loader holds: from each rank's seed count it sets
the steps per epoch (equal on every rank, since every step is collective), orders each
rank's seeds per epoch (a pure function of ``seed``, epoch and rank) and keeps the
position ``(epoch, step)`` that a checkpoint saves.  :class:`Loader` is what a loader
built on one shares: iteration (:meth:`SeedSchedule.batches`, batch ``i + 1`` prepared
on a side stream while batch ``i`` trains), ``len``, ``set_epoch`` and the position.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

import torch
from torch import Tensor
from torch_geometric import EdgeIndex

from gnnpar.device import BatchStream, upload
from gnnpar.errors import ConfigError
from gnnpar.keys import mix_int

Started = TypeVar("Started")
Batch = TypeVar("Batch")


def batch_tensors(batch: Any) -> list[Tensor]:
    """Every tensor a ``Data`` / ``HeteroData`` batch holds (what a hand-over covers).

    An ``EdgeIndex`` counts by the plain tensor it wraps (what kernels read).
    """
    return [v.as_tensor() if isinstance(v, EdgeIndex) else v
            for store in batch.stores for v in store.values() if isinstance(v, Tensor)]


class SeedSchedule:
    """Which seeds each step of each epoch takes: steps, order and position.

    Args:
        seed_counts: Number of seeds of each rank, in rank order.
        num_own_seeds: How many of this rank's seeds, at the start of its seed set, it
            owns (each batch takes its own seeds first).
        batch_size: Most seeds per batch.
        shuffle: Shuffle this rank's seeds every epoch.
        drop_last: Only full batches.
        seed: Seed of the shuffle.
        rank: This rank.
        device: Where the batch positions go.

    Attributes:
        num_seeds: This rank's seeds.
        num_steps: Steps per epoch, equal on every rank.
    """

    def __init__(self, seed_counts: list[int], num_own_seeds: int, batch_size: int,
                 shuffle: bool, drop_last: bool, seed: int, rank: int,
                 device: torch.device) -> None:
        self.seed_counts = list(seed_counts)
        self.num_seeds, self.num_own_seeds = self.seed_counts[rank], num_own_seeds
        self.batch_size, self.shuffle, self.drop_last = batch_size, bool(shuffle), drop_last
        self.seed, self.rank, self.device = int(seed), rank, device
        self.stream = BatchStream(device)
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
        """The position: the next batch is step ``step`` of epoch ``epoch``."""
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

    def batch_index(self, epoch: int, step: int) -> tuple[Tensor, int]:
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

    def batches(self, start: Callable[[int, int], Started],
                finish: Callable[[int, Started], Batch], prefetch: bool) -> Iterator[Batch]:
        """Yield the remaining batches of the current epoch (collective).

        ``start(epoch, step)`` samples a batch and sends its requests, ``finish(step,
        started)`` waits for them and returns the batch; with ``prefetch`` the next batch
        is started before this one is handed out.
        """
        self._epoch, self._step = self._position()
        epoch, first = self._epoch, self._step
        started: Started | None = None
        stream = self.stream
        for step in range(first, self.num_steps):
            with stream:  # on a GPU: a side stream, so host reads do not wait for training
                batch = finish(step, started if started is not None else start(epoch, step))
            stream.hand_over(batch_tensors(batch))
            with stream:  # the next batch's rows travel while this one trains
                started = (start(epoch, step + 1)
                           if prefetch and step + 1 < self.num_steps else None)
            self._step = step + 1
            yield batch
        self._epoch, self._step = epoch + 1, 0


class Loader(ABC, Generic[Started, Batch]):
    """A loader: a sampler, a feature store and a :class:`SeedSchedule` it holds.

    A loader sets :attr:`schedule`, :attr:`prefetch` and :attr:`seconds` and provides
    ``_start(epoch, step)`` and ``_finish(step, started)``
    (:meth:`SeedSchedule.batches`); iterating yields the rest of the current epoch, the
    same number of steps on every rank.

    Attributes:
        schedule: The seed schedule (its position is the loader's).
        prefetch: Prepare the next batch before handing out this one.
        seconds: Seconds by phase (``sample``, ``fetch``) since the last :meth:`set_epoch`.
    """

    schedule: SeedSchedule
    prefetch: bool
    seconds: defaultdict[str, float]

    @abstractmethod
    def _start(self, epoch: int, step: int) -> Started:
        """Sample batch ``step`` of ``epoch`` and send its requests (collective)."""

    @abstractmethod
    def _finish(self, step: int, started: Started) -> Batch:
        """Wait for batch ``step``'s requests; the batch."""

    def __iter__(self) -> Iterator[Batch]:
        """Yield the remaining batches of the current epoch (collective)."""
        return self.schedule.batches(self._start, self._finish, self.prefetch)

    def __len__(self) -> int:
        """Steps per epoch (the same on every rank)."""
        return self.schedule.num_steps

    @property
    def num_steps(self) -> int:
        """Steps per epoch (the same on every rank)."""
        return self.schedule.num_steps

    @property
    def epoch(self) -> int:
        """Epoch that the next batch belongs to."""
        return self.schedule.epoch

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` from its first batch at the next iteration."""
        self.schedule.set_epoch(epoch)
        self.seconds.clear()

    def state_dict(self) -> dict[str, int]:
        """The loader's position: the next batch is step ``step`` of epoch ``epoch``."""
        return self.schedule.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a position saved by :meth:`state_dict` of an equal loader."""
        self.schedule.load_state_dict(state)

    def global_batch_size(self, step: int) -> int:
        """Seeds of all ranks together in batch ``step`` (no communication)."""
        return self.schedule.global_batch_size(step)

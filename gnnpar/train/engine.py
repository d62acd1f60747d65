"""What a training mode provides to the trainer's loop, and what the loop lends it.

The trainer (:mod:`gnnpar.train.trainer`) runs every mode through :class:`Engine`:
minibatches of sampled neighbourhoods (:class:`~gnnpar.train.minibatch.MinibatchEngine`
and its link and typed variants), or one exact step on the whole graph per epoch
(:class:`WholeGraphEngine`: the 1D halo exchange and the 3D grid).  The loop never asks
which: an engine says what it is through the attributes below.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import Tensor, nn

from gnnpar.train.metrics import StepLog
from gnnpar.train.sync import LocalSGD

if TYPE_CHECKING:
    from torch_geometric.data import Data

    from gnnpar.nn.halo import HaloPlan

StepHook = Callable[[int, int, "Data | None"], None]
"""Called as ``hook(epoch, step, batch)`` after each optimizer step (and its checkpoint);
``batch`` is the minibatch (``None`` in full-graph mode)."""
PHASES = ("sample", "fetch", "forward", "backward", "optimizer", "wait")
"""Where a step's time goes (the run record's ``step_time_s``); ``wait`` is the part of
``sample`` and ``fetch`` spent blocked in exchanges."""
SUMS = ("loss", "correct", "seeds", "edges", "time", *(f"t_{p}" for p in PHASES))
"""What an engine's ``train_epoch`` sums on each rank (the trainer all-reduces them)."""


@dataclass
class EpochLoop:
    """What the trainer lends an engine's epoch.

    Attributes:
        seed_step: Re-seeds dropout for ``(epoch, step)``.
        save: Checkpoints mid-epoch with this rank's sums so far (collective).
        hook: Called after every step (tests and custom loops), or ``None``.
        progress: Show a progress bar (rank 0).
        log: Rank 0's lines and per-step scalars.
    """

    seed_step: Callable[[int, int], None]
    save: Callable[[dict[str, float]], None]
    hook: StepHook | None = None
    progress: bool = False
    log: StepLog | None = None


class Engine(Protocol):
    """A training mode, as the trainer's loop sees it.

    Attributes:
        module: The model that DDP wraps (``replicated``), or the sharded model the
            optimizer steps.
        replicated: Whether every rank holds the whole model (DDP all-reduces the
            gradients); ``False``: the layers shard the weights and synchronise them.
        sampled: Whether steps sample neighbourhoods (the record counts sampled edges).
        steps_per_epoch: Steps per epoch, the same on every rank.
        sync: When the steps synchronise (local SGD; whole-graph modes: every step).
        halo_plan: The halo routing the exact inference can reuse, or ``None``.
    """

    module: nn.Module
    replicated: bool
    sampled: bool
    steps_per_epoch: int
    sync: LocalSGD
    halo_plan: HaloPlan | None

    def start_epoch(self, epoch: int) -> None:
        """Prepare ``epoch`` from its first step (not called when resuming mid-epoch)."""

    def train_epoch(self, ddp: nn.Module, optimizer: torch.optim.Optimizer, epoch: int,
                    partial: dict[str, float], loop: EpochLoop) -> dict[str, float]:
        """Train the rest of ``epoch`` (collective); ``partial``: this rank's sums so far.

        Returns:
            This rank's sums (:data:`SUMS`).
        """

    def evaluate(self) -> dict[str, Any]:
        """The mode's own validation and test figures each epoch (collective)."""

    def exact_accuracy(self) -> dict[str, float] | None:
        """Every split's exact accuracy, when the mode computes it itself (collective).

        ``None``: the trainer runs layer-wise inference of the model instead.
        """

    def input_rows(self) -> Tensor | None:
        """Learnt input rows of a graph without features, or ``None``."""

    def position(self, next_epoch: int) -> dict[str, int]:
        """``{"epoch", "step"}`` of the next step; ``next_epoch``: epochs finished."""

    def extra_state(self) -> dict[str, Any]:
        """Engine state for a checkpoint beside the model's (collective)."""

    def restore(self, position: dict[str, int], extra: dict[str, Any]) -> None:
        """Continue from a checkpoint's position and :meth:`extra_state`."""


class WholeGraphEngine:
    """Base of the modes whose epoch is one exact gradient step on the whole graph.

    Subclasses set :attr:`module` and implement :meth:`forward_loss` and :meth:`evaluate`.
    """

    module: nn.Module
    replicated = True
    sampled = False
    steps_per_epoch = 1
    sync = LocalSGD()  # one exact step per epoch: synchronous
    halo_plan: HaloPlan | None = None

    def forward_loss(self, ddp: nn.Module, epoch: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The train nodes' summed loss, the objective, their logits and their labels.

        The objective is what the backward differentiates: the loss scaled so that the
        update is that of the mean loss over all ranks' train nodes.
        """
        raise NotImplementedError

    def evaluate(self) -> dict[str, Any]:
        """Exact validation and test accuracy (collective)."""
        raise NotImplementedError

    def exact_accuracy(self) -> dict[str, float] | None:
        """``None``: layer-wise inference of the model (see :class:`Engine`)."""
        return None

    def train_epoch(self, ddp: nn.Module, optimizer: torch.optim.Optimizer, epoch: int,
                    partial: dict[str, float], loop: EpochLoop) -> dict[str, float]:
        """The epoch's gradient step (collective; ``partial`` is empty: one step).

        Returns:
            This rank's sums: ``loss``, ``correct``, ``seeds``, ``edges`` (0), ``time``
            and the phases.
        """
        loop.seed_step(epoch, 0)
        t0 = time.perf_counter()
        ddp.train()
        optimizer.zero_grad(set_to_none=True)
        loss, objective, out, y = self.forward_loss(ddp, epoch)
        t1 = time.perf_counter()
        objective.backward()  # type: ignore[no-untyped-call]
        t2 = time.perf_counter()
        optimizer.step()
        t3 = time.perf_counter()
        correct = (out.argmax(-1) == y).sum()
        weight = self.counted_share()
        sums = {**dict.fromkeys(SUMS, 0.0), "loss": weight * float(loss.detach()),
                "correct": weight * float(correct), "seeds": weight * y.numel(),
                "time": time.perf_counter() - t0, "t_forward": t1 - t0, "t_backward": t2 - t1,
                "t_optimizer": t3 - t2}
        if loop.hook is not None:
            loop.hook(epoch, 0, None)
        return sums

    def counted_share(self) -> float:
        """How much of this rank's train rows the epoch's sums count (1: all)."""
        return 1.0

    def start_epoch(self, epoch: int) -> None:
        """Nothing to prepare: the step is the epoch."""

    def input_rows(self) -> Tensor | None:
        """Graphs without features train in sample mode only: none."""
        return None

    def position(self, next_epoch: int) -> dict[str, int]:
        """The next epoch's only step."""
        return {"epoch": next_epoch, "step": 0}

    def extra_state(self) -> dict[str, Any]:
        """Nothing beside the model."""
        return {}

    def restore(self, position: dict[str, int], extra: dict[str, Any]) -> None:
        """Nothing to restore: the trainer counts the epochs."""

"""What a training mode provides to the trainer's loop, and what the loop lends it.

The trainer (:mod:`gnnpar.train.trainer`) runs every mode through :class:`Engine`:
minibatches of sampled neighbourhoods (:class:`~gnnpar.train.minibatch.MinibatchEngine`
and its link and typed variants), or one exact step on the whole graph per epoch
(:class:`WholeGraphEngine`: the 1D halo exchange and the 3D grid).  The loop never asks
which: an engine says what it is through the attributes below, and gives the run's final
figures itself (:meth:`Engine.final_metrics`).  :mod:`gnnpar.train.engines` picks the
engine of a run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from torch import Tensor, nn

if TYPE_CHECKING:
    from pathlib import Path

    from torch_geometric.data import Data

    from gnnpar.distributed import DistContext
    from gnnpar.parallel_dims import ParallelDims

StepHook = Callable[[int, int, "Data | None"], None]
"""Called as ``hook(epoch, step, batch)`` after each optimizer step (and its checkpoint);
``batch`` is the minibatch (``None`` in full-graph mode)."""
PHASES = ("sample", "fetch", "forward", "backward", "optimizer", "wait")
"""Where a step's time goes (the run record's ``step_time_s``); ``wait`` is the part of
``sample`` and ``fetch`` spent blocked in exchanges."""
SUMS = ("loss", "correct", "seeds", "edges", "time", *(f"t_{p}" for p in PHASES))
"""What the trainer sums over an epoch's steps on each rank, then all ranks together."""
LINK_FIELDS = ("val_mrr", "test_mrr", "val_hits", "test_hits")
"""Link prediction's figures (``hits``: ``{"hits@K": value}``)."""
EVAL_FIELDS = ("val_acc", "test_acc", *LINK_FIELDS)
"""What an engine's ``evaluate`` may return (each epoch's record holds them all)."""
FINAL_FIELDS = ("train_acc", *EVAL_FIELDS)
"""What an engine's ``final_metrics`` returns (the summary holds them all)."""


@dataclass
class Step:
    """What an engine's :meth:`Engine.step` returns: one batch's forward pass.

    Attributes:
        loss: The batch's loss summed over its counted items (on the device).
        objective: What the backward differentiates: ``loss`` scaled so that, after DDP
            averages the ranks' gradients, the update is that of the mean over all ranks'
            items.
        correct: Correct predictions among the counted items (on the device).
        items: Counted items (seeds, or labelled pairs in link prediction).
        edges: Sampled edges of the batch (0: the whole graph).
    """

    loss: Tensor
    objective: Tensor
    correct: Tensor
    items: float
    edges: int = 0


class Engine(Protocol):
    """A training mode, as the trainer's loop sees it.

    Attributes:
        module: The model that DDP wraps (``replicated``), or the sharded model the
            optimizer steps.
        replicated: Whether every rank holds the whole model (DDP all-reduces the
            gradients); ``False``: the layers shard the weights and synchronise them.
        steps_per_epoch: Steps per epoch, the same on every rank.
    """

    module: nn.Module
    replicated: bool
    steps_per_epoch: int

    def start_epoch(self, epoch: int) -> None:
        """Prepare ``epoch`` from its first step (not called when resuming mid-epoch)."""

    def batches(self, epoch: int) -> Iterator[tuple[int, Any]]:
        """The rest of ``epoch``'s ``(step, batch)`` pairs from the position.

        Batches are on the run's device: the loaders sample and gather them there (on a
        GPU, on a side stream); the whole-graph modes have one step, batch ``None``.
        """

    def step(self, ddp: nn.Module, batch: Any, epoch: int) -> Step:
        """The forward pass and loss of ``batch`` (on the device) through ``ddp``."""

    def after_step(self) -> None:
        """Work after the optimizer's step (the embeddings' sparse update; collective)."""

    def io_seconds(self) -> dict[str, float]:
        """Seconds of this epoch's steps so far in ``sample``, ``fetch`` and ``wait``."""

    def evaluate(self) -> dict[str, Any]:
        """The mode's own validation and test figures each epoch (collective)."""

    def final_metrics(self, last: dict[str, Any], outputs: Path | None,
                      source: dict[str, Any]) -> dict[str, Any]:
        """The run's final figures as ``--eval`` asks (collective).

        Args:
            last: The last epoch's record entry (``{}``: none).
            outputs: Where ``--save-predictions`` / ``--save-embeddings`` write the
                trained model's rows (``OUT/predictions``), or ``None``.
            source: What the outputs' index records of their origin.

        Returns:
            Every field of :data:`FINAL_FIELDS`, ``None`` where not measured.
        """

    def position(self, next_epoch: int) -> dict[str, int]:
        """``{"epoch", "step"}`` of the next step; ``next_epoch``: epochs finished."""

    def extra_state(self) -> dict[str, Any]:
        """Engine state for a checkpoint beside the model's (collective)."""

    def restore(self, position: dict[str, int], extra: dict[str, Any]) -> None:
        """Continue from a checkpoint's position and :meth:`extra_state`."""


def recorded_final(eval_: str, last: dict[str, Any],
                   fields: tuple[str, ...] = ("val_acc", "test_acc")) -> dict[str, Any]:
    """Final figures without inference: the last evaluation's ``fields`` (``none``: none)."""
    final: dict[str, Any] = dict.fromkeys(FINAL_FIELDS)
    return final if eval_ == "none" else {**final, **{k: last.get(k) for k in fields}}


class WholeGraphEngine:
    """Base of the modes whose epoch is one exact gradient step on the whole graph.

    Subclasses set :attr:`module` and :attr:`dims` and implement :meth:`forward_loss`,
    :meth:`evaluate` and :meth:`final_metrics`.
    """

    module: nn.Module
    replicated = True
    steps_per_epoch = 1
    dims: ParallelDims

    @property
    def ctx(self) -> DistContext:
        """The run's distributed context (the ``data`` group's)."""
        return self.dims.ctx

    def forward_loss(self, ddp: nn.Module, epoch: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The train nodes' summed loss, the objective, their logits and their labels.

        The objective is what the backward differentiates: the loss scaled so that the
        update is that of the mean loss over all ranks' train nodes.
        """
        raise NotImplementedError

    def evaluate(self) -> dict[str, Any]:
        """Exact validation and test accuracy (collective)."""
        raise NotImplementedError

    def batches(self, epoch: int) -> Iterator[tuple[int, Any]]:
        """The epoch's one step, on the whole graph (no batch)."""
        return iter([(0, None)])

    def step(self, ddp: nn.Module, batch: Any, epoch: int) -> Step:
        """The whole graph's forward pass and loss; the rows this rank counts."""
        loss, objective, out, y = self.forward_loss(ddp, epoch)
        share = self.counted_share()
        return Step(loss.detach() * share, objective, (out.argmax(-1) == y).sum() * share,
                    y.numel() * share)

    def after_step(self) -> None:
        """Nothing after the step."""

    def io_seconds(self) -> dict[str, float]:
        """No sampling, no feature exchange: zeros."""
        return dict.fromkeys(("sample", "fetch", "wait"), 0.0)

    def counted_share(self) -> float:
        """How much of this rank's train rows the epoch's sums count (1: all)."""
        return 1.0

    def start_epoch(self, epoch: int) -> None:
        """Nothing to prepare: the step is the epoch."""

    def position(self, next_epoch: int) -> dict[str, int]:
        """The next epoch's only step."""
        return {"epoch": next_epoch, "step": 0}

    def extra_state(self) -> dict[str, Any]:
        """Nothing beside the model."""
        return {}

    def restore(self, position: dict[str, int], extra: dict[str, Any]) -> None:
        """Nothing to restore: the trainer counts the epochs."""

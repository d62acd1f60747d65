"""When a run checkpoints: every N epochs, every N steps, every S seconds of training.

Three cadences decide together (``--checkpoint-every`` epochs, ``--checkpoint-steps``
steps of an epoch in sample mode, ``--checkpoint-every-s`` seconds), the same on every
rank: a checkpoint is collective, so every rank must take it after the same step.

Seconds differ from rank to rank, so the ranks agree on them without a collective per
step: they compare their clocks (one all-gather of one integer, the slowest rank's
seconds win) only after steps that the step count alone fixes — 1, 2, 4, ... steps after
the last checkpoint, doubling until the pace measured so far puts the end of the interval
nearer, then at that step.  A checkpoint thus lands within a step or so of every ``S``
seconds after O(log(S / step time)) small exchanges per interval, and a failure loses at
most about ``S`` seconds of training (plus the restart: ``docs/restarts.md``).

Where a checkpoint cannot be taken mid-epoch (full mode: one step per epoch; local SGD,
whose mid-epoch checkpoint would average the replicas at a moment set by the clock and
so change the result), a due time cadence waits for the epoch's end.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from gnnpar.comm import all_gather_ints
from gnnpar.distributed import DistContext

DEFAULT_ELASTIC_S = 600.0
"""``--checkpoint-every-s`` of a run that is restarted on failure and sets none: a lost
rank then costs at most about ten minutes of training."""


def timed_seconds(given: float | None, elastic: bool) -> float:
    """The seconds between timed checkpoints.

    ``given`` (``--checkpoint-every-s``), else :data:`DEFAULT_ELASTIC_S` for a run
    restarted on failure, else 0 (not by time).
    """
    if given is not None:
        return float(given)
    return DEFAULT_ELASTIC_S if elastic else 0.0


@dataclass
class CheckpointCadence:
    """Decides after each step and each epoch whether to checkpoint (collective when timed).

    Args:
        ctx: Distributed context (the clocks are compared over its ranks).
        epochs: Checkpoint every this many epochs (and after the last).
        steps: Checkpoint every this many steps of an epoch (0: not by steps).
        seconds: Checkpoint every this many seconds of training (0: not by time).
        mid_epoch: Whether a timed checkpoint may be taken inside an epoch.
    """

    ctx: DistContext
    epochs: int
    steps: int = 0
    seconds: float = 0.0
    mid_epoch: bool = True
    _since: float = field(default=0.0, init=False)
    _done: int = field(default=0, init=False)
    _probe_at: int = field(default=1, init=False)
    _pending: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.saved()

    def saved(self) -> None:
        """A checkpoint was just taken (or training starts): the interval starts now."""
        self._since = time.monotonic()
        self._done, self._probe_at, self._pending = 0, 1, False

    def after_step(self, step: int, steps_per_epoch: int) -> bool:
        """Whether to checkpoint after step ``step`` of the epoch, mid-epoch (collective).

        Every rank calls it after every step.  A timed checkpoint that falls due after an
        epoch's last step, or where :attr:`mid_epoch` is off, is left for
        :meth:`after_epoch`.
        """
        self._done += 1
        last = step + 1 == steps_per_epoch
        if self.seconds and not self._pending and self._done >= self._probe_at:
            self._pending = self._timed_out()
        due = bool(self.steps) and (step + 1) % self.steps == 0
        return not last and (due or (self._pending and self.mid_epoch))

    def after_epoch(self, epoch: int, epochs: int) -> bool:
        """Whether to checkpoint after epoch ``epoch`` of ``epochs`` (the last one: always)."""
        return (epoch + 1) % self.epochs == 0 or epoch + 1 == epochs or self._pending

    def _timed_out(self) -> bool:
        """Compare clocks: whether the slowest rank's interval has reached :attr:`seconds`.

        Otherwise sets the next comparison: twice as many steps in, or sooner where the
        pace so far puts the end of the interval.
        """
        mine = int((time.monotonic() - self._since) * 1000)
        elapsed = int(all_gather_ints(self.ctx, [mine]).max()) / 1000
        if elapsed >= self.seconds:
            return True
        left = math.ceil((self.seconds - elapsed) * self._done / max(elapsed, 1e-6))
        self._probe_at = self._done + max(1, min(left, self._done))
        return False

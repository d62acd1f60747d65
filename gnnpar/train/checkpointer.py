"""The trainer's checkpoints: when to take one, what it holds, and continuing from it.

torchtitan's ``CheckpointManager`` shape: the loop asks :class:`Checkpointer` after each
step and each epoch, and it decides (:class:`~gnnpar.train.cadence.CheckpointCadence`:
every ``--checkpoint-every`` epochs, ``--checkpoint-steps`` steps, ``--checkpoint-every-s``
seconds) and saves ``OUT/checkpoint`` (:mod:`gnnpar.train.checkpoint`): the model, the
optimizer, the engine's position and state, every rank's sums of an unfinished epoch and
the record's epochs, so that ``--resume`` continues with the same batches as an
uninterrupted run (:meth:`Checkpointer.restore`).  The best evaluation's weights go to
``OUT/best`` (:meth:`Checkpointer.save_best`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gnnpar.artifacts.kinds import BEST_DIR, CHECKPOINT_DIR
from gnnpar.comm import CommStats, all_reduce_sum
from gnnpar.distributed import DistContext
from gnnpar.errors import ConfigError
from gnnpar.faults import agreed
from gnnpar.train.cadence import CheckpointCadence, timed_seconds
from gnnpar.train.checkpoint import load_checkpoint, read_state, save_checkpoint
from gnnpar.train.config import Config
from gnnpar.train.elastic import RestartNotes, max_restarts
from gnnpar.train.engine import SUMS, Engine
from gnnpar.train.rundir import check_resume, commit_replacement
from gnnpar.train.sync import LocalSGD, average_model

log = logging.getLogger("gnnpar")


class Checkpointer:
    """Checkpoint cadence, saving and restoring of one run (collective).

    Args:
        cfg: The run's configuration (``run``: the cadences, ``resume``).
        out: The run directory.
        part_dir: The partition directory (a resume checks it is the same).
        partition_digest: The partition's content digest (checkpoints bind to it).
        ctx: Distributed context.
        trained: What the optimizer steps (the model, or the sharded one).
        optimizer: Its optimizer.
        engine: The run's engine (its position and state).
        sync: Local SGD's schedule (a mid-epoch checkpoint averages the replicas first).
        notes: The run's restart notes (told of every checkpoint).
        stats: Byte counters of the averages.
    """

    def __init__(self, cfg: Config, out: Path, part_dir: str, partition_digest: str,
                 ctx: DistContext, trained: nn.Module, optimizer: torch.optim.Optimizer,
                 engine: Engine, sync: LocalSGD, notes: RestartNotes, stats: CommStats
                 ) -> None:
        self.cfg, self.out, self.part_dir, self.digest = cfg, out, part_dir, partition_digest
        self.ctx, self.trained, self.optimizer, self.engine = ctx, trained, optimizer, engine
        self.sync, self.notes, self.stats = sync, notes, stats
        run = cfg.run
        self.cadence = CheckpointCadence(
            ctx, run.checkpoint_every, run.checkpoint_steps,
            timed_seconds(run.checkpoint_every_s, max_restarts() > 0),
            mid_epoch=sync.synchronous)

    @property
    def dir(self) -> Path:
        """Where checkpoints go: ``OUT/checkpoint``."""
        return self.out / CHECKPOINT_DIR

    def after_step(self, step: int, next_epoch: int, epochs: list[dict[str, Any]],
                   partial: Callable[[], dict[str, float]]) -> None:
        """Checkpoint after ``step`` of the epoch when the cadence says (collective).

        ``partial``: this rank's sums of the epoch so far (read only when saving).
        """
        if self.cadence.after_step(step, self.engine.steps_per_epoch):
            self.save(next_epoch, epochs, partial())

    def after_epoch(self, epoch: int, epochs: list[dict[str, Any]], stop: bool) -> None:
        """Checkpoint after ``epoch`` when the cadence says, or the run stops (collective)."""
        if self.cadence.after_epoch(epoch, self.cfg.train.epochs) or stop:
            self.save(epoch + 1, epochs, {})

    def start(self) -> None:
        """Training starts: the time cadence's interval starts now."""
        self.cadence.saved()

    def save(self, next_epoch: int, epochs: list[dict[str, Any]],
             partial: dict[str, float]) -> None:
        """Checkpoint (collective); ``partial``: this rank's sums of the unfinished epoch."""
        ctx = self.ctx
        per_rank: list[dict[str, float]] = []
        if partial and not self.sync.synchronous:  # local SGD, mid-epoch
            average_model(self.engine.module, self.optimizer, ctx, self.stats)
        if partial:  # every rank's sums, so that each resumes with its own
            rows = torch.zeros(ctx.world_size, len(SUMS), dtype=torch.float64,
                               device=ctx.device)
            rows[ctx.rank] = torch.tensor([partial[k] for k in SUMS], dtype=torch.float64)
            per_rank = [dict(zip(SUMS, r, strict=True))
                        for r in all_reduce_sum(ctx, rows).cpu().tolist()]
        engine = self.engine.extra_state()
        position, now = self.engine.position(next_epoch), time.time()
        save_checkpoint(self.dir, ctx, self.trained, self.optimizer, extra={
            "position": position, "partial": per_rank, "epochs": epochs,
            "config": self.cfg.to_dict(), "engine": engine,
            "partition_digest": self.digest, "saved_at": now})
        self.notes.saved(position, now)
        if ctx.is_main:  # the run that --overwrite replaced is no longer needed
            commit_replacement(self.out)
        self.cadence.saved()

    def save_best(self, entry: dict[str, Any]) -> None:
        """Keep the weights of the best-valid evaluation in ``OUT/best`` (collective)."""
        save_checkpoint(self.out / BEST_DIR, self.ctx, self.trained, extra={
            "epoch": entry["epoch"], "config": self.cfg.to_dict(),
            "partition_digest": self.digest})

    def restore(self) -> tuple[int, list[dict[str, Any]], dict[str, float]]:
        """Continue from the newest checkpoint, when ``--resume`` asks (collective).

        Returns:
            The epochs finished, their record entries and this rank's sums of the
            unfinished epoch (``{}``: none); ``(0, [], {})`` without ``--resume``.

        Raises:
            ConfigError: The checkpoint does not fit this run (other settings, partition
                or number of ranks), on every rank.
        """
        if not self.cfg.run.resume:
            return 0, [], {}

        def check() -> None:
            check_resume(self.out, self.cfg, self.part_dir)
            saved = read_state(self.dir)["world_size"]
            if saved != self.ctx.world_size:
                raise ConfigError(f"the checkpoint was written by {saved} ranks, this run has "
                                  f"{self.ctx.world_size}.", path=self.dir,
                                  field="world_size",
                                  fix=f"resume with {saved} processes (--nproc {saved}).")

        agreed(self.ctx, check)
        extra = load_checkpoint(self.dir, self.ctx, self.trained, self.optimizer)
        pos = extra["position"]
        self.engine.restore(pos, extra.get("engine", {}))
        self.notes.resumed(pos, extra.get("saved_at"))
        if self.ctx.is_main:
            log.info("resumed from %s at epoch %d, step %d", self.dir, pos["epoch"] + 1,
                     pos["step"])
        partial: list[dict[str, float]] = extra["partial"]
        return int(pos["epoch"]), list(extra["epochs"]), (partial[self.ctx.rank] if partial
                                                          else {})

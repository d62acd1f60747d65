"""Elastic training: a lost rank or machine costs one checkpoint interval, not the run.

When a worker dies or hangs, its launcher restarts every worker —
``gnnpar-train --max-restarts N`` (:mod:`gnnpar.train.launch`), or
``torchrun --max-restarts N`` (its elastic agent, which also lets a machine that left
rejoin through c10d rendezvous) — and the restarted workers continue the run from the
newest complete checkpoint of its directory with no flag to retype: the ``--resume``
path (the same partition, the same settings, mid-epoch exact); a run that failed before
its first checkpoint starts over.  (No checkpoint is taken before the first step:
gathering an optimizer's state before its first step initialises it, an Adam step of
zero gradients, which would change the run.)

This module holds what passes from one start of a run to the next:

* the **failure notes**: each rank whose training failed posts in the launcher's store
  (which outlives the workers) what it knows — the rank it blames, why, when, and how
  many steps it had finished — and ``gnnpar-train``'s launcher posts its own verdict
  (the exit code or the stale heartbeat it saw).  The restarted rank 0 reads the notes of
  the start before (:func:`failure_story`) and adds the run record's ``restarts`` entry
  (:func:`restart_entry`, fields :data:`~gnnpar.train.record.RESTART_FIELDS`);
* and, at start-up (:func:`gnnpar.train.prepare.check_rejoined`, beside the other
  checks before any work), that a restarted run still has a rank for every part: a
  machine that did not come back is named, with the command that partitions the graph
  for the ranks that remain.
"""

from __future__ import annotations

import calendar
import contextlib
import json
import os
import time
from typing import Any

from torch.distributed import Store  # type: ignore[attr-defined]

from gnnpar.comm import all_gather_ints
from gnnpar.distributed import DistContext
from gnnpar.errors import GnnparError
from gnnpar.train.record import RunRecord

NOTE_KEY = "gnnpar/failure/{start}/{who}"
"""A failure note in the launcher's store: ``who`` is ``launcher`` or ``rank-R``."""
REASON_CHARS = 500


def max_restarts() -> int:
    """How many times this worker's launcher restarts the workers (0: not elastic).

    ``TORCHELASTIC_MAX_RESTARTS``, which torchrun and ``gnnpar-train``'s launcher set.
    """
    with contextlib.suppress(ValueError):
        return max(0, int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0")))
    return 0


def restart_number(ctx: DistContext) -> int:
    """How many times the launcher has restarted this run's workers (collective).

    The most any rank knows: its start in the launcher's store (:func:`gnnpar.distributed.init`)
    or its agent's restart count (``TORCHELASTIC_RESTART_COUNT``).  Neither alone is
    enough: a store made anew for every start counts no starts, and a machine whose
    agent joined later counts fewer restarts than the others.
    """
    count = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    mine = max(ctx.start - 1, int(count) if count.isdigit() else 0)
    return int(all_gather_ints(ctx, [mine]).max())


def launcher_store() -> Store | None:
    """A client of the launcher's store (``MASTER_ADDR:MASTER_PORT``), when there is one."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or \
            "MASTER_PORT" not in os.environ:
        return None
    from datetime import timedelta

    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    with contextlib.suppress(Exception):
        return TCPStore(os.environ.get("MASTER_ADDR", "127.0.0.1"),
                        int(os.environ["MASTER_PORT"]), is_master=False,
                        timeout=timedelta(seconds=30))
    return None


def utc(seconds: float) -> str:
    """``seconds`` since the epoch as ISO 8601 UTC (``2026-12-04T12:00:00Z``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def post_note(store: Store | None, start: int, who: str, rank: int | None, reason: str,
              reached: int | None = None, at: float | None = None) -> None:
    """Post a failure of start ``start`` (best effort: the store may be gone too).

    Args:
        store: The launcher's store.
        start: The start that failed (:attr:`~gnnpar.distributed.DistContext.start`).
        who: ``"launcher"`` or ``"rank-R"``.
        rank: The rank blamed (``None``: unknown).
        reason: Why, in a line.
        reached: Training steps the poster had finished (epochs times steps per epoch,
            plus steps), when it knows.
        at: When the failure was seen (default: now).
    """
    if store is None:
        return
    line = reason.splitlines()[0].split(" Fix: ")[0] if reason else ""
    note = {"time": time.time() if at is None else at, "rank": rank,
            "reason": line[:REASON_CHARS],
            "reached": reached}
    with contextlib.suppress(Exception):
        store.set(NOTE_KEY.format(start=start, who=who), json.dumps(note))


def failure_story(store: Store | None, start: int, world_size: int) -> dict[str, Any]:
    """What the notes of start ``start`` tell: ``{"time", "rank", "reason", "reached"}``.

    The launcher's verdict wins where it has one; otherwise the earliest rank note's (a
    rank's own error, or a survivor naming the rank its collective lost).  ``reached`` is
    the most steps any rank reported.  Unknown fields are ``None``.
    """
    notes: dict[str, dict[str, Any]] = {}
    if store is not None:
        for who in ["launcher", *(f"rank-{r}" for r in range(world_size))]:
            key = NOTE_KEY.format(start=start, who=who)
            with contextlib.suppress(Exception):
                if store.check([key]):
                    notes[who] = json.loads(store.get(key).decode())
    ranks = sorted((n for w, n in notes.items() if w != "launcher"), key=lambda n: n["time"])
    verdict = notes.get("launcher") or (ranks[0] if ranks else None)
    reached = [n["reached"] for n in ranks if isinstance(n.get("reached"), int)]
    if verdict is None:
        return {"time": None, "rank": None, "reached": None,
                "reason": "no rank reported why (every rank was stopped or lost at once)"}
    return {"time": verdict["time"], "rank": verdict["rank"], "reason": verdict["reason"],
            "reached": max(reached) if reached else None}


def restart_entry(story: dict[str, Any], restart: int | None,
                  resumed: dict[str, Any] | None, steps_per_epoch: int,
                  now: float | None) -> dict[str, Any]:
    """The run record's entry of a restart (:data:`~gnnpar.train.record.RESTART_FIELDS`).

    Args:
        story: :func:`failure_story` of the start that failed (or rank 0's own).
        restart: 1 for the first restart; ``None``: not restarted (yet).
        resumed: ``{"epoch", "step", "saved_at"}`` of the checkpoint resumed from, or
            ``None`` (there was none: the run started over).
        steps_per_epoch: Steps per epoch (full mode: 1).
        now: When the restarted run's training starts (``None``: not yet).
    """
    failed = story["time"]
    start = 0 if resumed is None else resumed["epoch"] * steps_per_epoch + resumed["step"]
    reached = story["reached"]
    saved = None if resumed is None else resumed.get("saved_at")
    return {
        "restart": restart,
        "failed_at": None if failed is None else utc(failed),
        "rank": story["rank"],
        "reason": story["reason"],
        "resumed_from": None if resumed is None else {"epoch": resumed["epoch"],
                                                      "step": resumed["step"]},
        "steps_redone": None if reached is None else max(0, reached - start),
        "lost_s": None if failed is None or not isinstance(saved, int | float)
        else round(max(0.0, failed - saved), 3),
        "restart_s": None if failed is None or now is None else round(max(0.0, now - failed),
                                                                        3),
    }


def complete_entry(entry: dict[str, Any], restart: int, now: float) -> dict[str, Any]:
    """Rank 0's entry of the failure (``restart`` null), completed by the restart."""
    failed = entry.get("failed_at")
    at = None if not isinstance(failed, str) else calendar.timegm(
        time.strptime(failed, "%Y-%m-%dT%H:%M:%SZ"))
    return {**entry, "restart": restart,
            "restart_s": None if at is None else round(max(0.0, now - at), 3)}


class RestartNotes:
    """A Trainer's part in its run's restarts: what it passes to the next start.

    The Trainer tells it where training is (:meth:`saved`, :meth:`resumed`,
    :attr:`reached`); on a failure every rank posts its note in the launcher's store and
    rank 0 adds its own view to the record (:meth:`failed`: under torchrun across
    machines the store dies with the start, the record does not); a restarted rank 0
    turns the notes into the record's entry (:meth:`restarted`).  Inert unless the
    launcher restarts the workers (:func:`max_restarts`).

    Args:
        ctx: Distributed context.
        store: The failure board's store (``None``: a client of the launcher's is opened
            when needed).
        steps_per_epoch: Steps per epoch (full mode: 1).

    Attributes:
        reached: Training steps finished, over the epochs.
    """

    def __init__(self, ctx: DistContext, store: Store | None, steps_per_epoch: int) -> None:
        self.ctx, self._store, self.steps_per_epoch = ctx, store, steps_per_epoch
        self.reached = 0
        self._saved: dict[str, Any] | None = None

    def saved(self, position: dict[str, int], at: float | None) -> None:
        """A checkpoint of ``position`` (``{"epoch", "step"}``) is complete."""
        self._saved = {"epoch": int(position["epoch"]), "step": int(position["step"]),
                       "saved_at": at}

    def resumed(self, position: dict[str, int], at: float | None) -> None:
        """Training continues from the checkpoint of ``position``, saved ``at``."""
        self.saved(position, at)
        self.reached = int(position["epoch"]) * self.steps_per_epoch + int(position["step"])

    def _blamed(self, exc: BaseException) -> int:
        """The rank that ``exc`` (explained by the failure board) names as the cause."""
        cause = exc.cause_rank if isinstance(exc, GnnparError) else None
        return self.ctx.rank if cause is None else cause

    def failed(self, exc: BaseException, record: RunRecord | None) -> None:
        """Note the failure ``exc`` for the restart: in the store, and in ``record`` on rank 0.

        ``record``: the run's record, when this run has written it (rank 0 writes it next).
        """
        if not max_restarts() or not isinstance(exc, Exception):
            return
        rank, reason = self._blamed(exc), str(exc).splitlines()[0].split(" Fix: ")[0]
        post_note(self._store or launcher_store(), self.ctx.start, f"rank-{self.ctx.rank}",
                  rank, reason, self.reached)
        if record is not None and self.ctx.is_main:
            story = {"time": time.time(), "rank": rank, "reason": reason,
                     "reached": self.reached}
            record.restarts.append(restart_entry(story, None, self._saved,
                                                 self.steps_per_epoch, None))

    def restarted(self, record: RunRecord, resumed: bool) -> dict[str, Any] | None:
        """Rank 0 of a restarted run: the restart's entry, added to ``record``.

        From the store's notes of the start before; else (a store of its own per start)
        rank 0's entry in the record completed; ``None`` on the other ranks.
        """
        if not self.ctx.is_main:
            return None
        story = failure_story(self._store or launcher_store(), self.ctx.start - 1,
                              self.ctx.world_size)
        pending = [r for r in record.restarts if r.get("restart") is None]
        done = [r for r in record.restarts if r.get("restart") is not None]
        now, number = time.time(), len(done) + 1
        if story["time"] is None and pending and resumed:
            entry = complete_entry(pending[-1], number, now)
        else:
            entry = restart_entry(story, number, self._saved if resumed else None,
                                  self.steps_per_epoch, now)
        record.restarts = [*done, entry]
        return entry

"""The checkpoint cadence: steps, epochs and seconds, decided the same way on every rank.

One rank, a simulated clock (a step advances it; no test waits on the machine's
clock): the step and epoch cadences land exactly where counted by hand; the timed one no
earlier than its seconds and within two steps after, comparing clocks only O(log) times
per interval; where it may not checkpoint mid-epoch
(full mode's single step, local SGD) it waits for the epoch's end.  Agreement between
ranks is the 2-rank runs' business (tests/reliability/test_restarts.py).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from gnnpar.distributed import DistContext
from gnnpar.train import cadence as cadence_module
from gnnpar.train.cadence import CheckpointCadence, timed_seconds

CTX = DistContext(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"),
                  backend="gloo")


class Clock:
    """The cadence's ``time.monotonic``, advanced by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """A simulated clock in place of the cadence module's ``time``."""
    fake = Clock()
    monkeypatch.setattr(cadence_module, "time", SimpleNamespace(monotonic=fake.monotonic))
    return fake


def _walk(c: CheckpointCadence, epochs: int, steps: int, clock: Clock | None = None,
          step_s: float = 0.0) -> list[tuple[int, int]]:
    """Run the cadence over ``epochs`` of ``steps``; the positions it checkpoints at."""
    saved = []
    for epoch in range(epochs):
        for step in range(steps):
            if clock is not None:
                clock.now += step_s
            if c.after_step(step, steps):
                saved.append((epoch, step + 1))
                c.saved()
        if c.after_epoch(epoch, epochs):
            saved.append((epoch + 1, 0))
            c.saved()
    return saved


def test_steps_and_epochs_land_where_counted() -> None:
    c = CheckpointCadence(CTX, epochs=2, steps=3)
    assert _walk(c, 3, 7) == [(0, 3), (0, 6), (1, 3), (1, 6), (2, 0), (2, 3), (2, 6),
                              (3, 0)]


def test_seconds_land_within_two_steps_of_the_interval(monkeypatch: pytest.MonkeyPatch,
                                                       clock: Clock) -> None:
    compared = []
    real = cadence_module.all_gather_ints
    monkeypatch.setattr(cadence_module, "all_gather_ints",
                        lambda ctx, v: compared.append(v) or real(ctx, v))
    c = CheckpointCadence(CTX, epochs=100, seconds=0.2)
    since, ends, saves, step = clock.now, [], 0, 0
    while saves < 3 and step < 1000:  # whole intervals only: 3 of about 20 steps each
        step += 1
        clock.now += 0.01 + 0.002 * (step % 3)  # steps of uneven length
        ends.append(clock.now - since)
        if c.after_step(step - 1, 1000):
            assert ends[-1] >= 0.2  # never early
            assert len(ends) < 3 or ends[-3] < 0.2, ends  # at most two steps late
            since, ends, saves = clock.now, [], saves + 1
            c.saved()
    assert saves >= 2
    assert len(compared) / saves <= 8, (len(compared), saves)  # log2(20 steps) + 2


def test_a_timed_checkpoint_waits_for_the_epoch_end_where_it_must(clock: Clock) -> None:
    for c in (CheckpointCadence(CTX, epochs=100, seconds=0.05),  # full mode: one step
              CheckpointCadence(CTX, epochs=100, seconds=0.05, mid_epoch=False)):
        steps = 1 if c.mid_epoch else 10
        saved = _walk(c, 3, steps, clock, step_s=0.02)
        assert saved and all(step == 0 for _, step in saved), saved


def test_the_default_seconds() -> None:
    assert timed_seconds(None, elastic=False) == 0.0
    assert timed_seconds(None, elastic=True) == cadence_module.DEFAULT_ELASTIC_S
    assert timed_seconds(30.0, elastic=False) == 30.0

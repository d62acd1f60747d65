"""Start-up: verifying a part may outlast the collective timeout, within the start-up one.

Every rank loads and verifies its part before the first collective and agrees on the
outcome through the store (:meth:`gnnpar.faults.FailureBoard.settle`).  Here rank 1's
"verification" sleeps past the collective timeout (3 s): the run goes on; past the
start-up timeout instead, every rank raises naming rank 1; a rank that raises or dies
while the others wait ends every rank with one error naming it.  Plain :func:`agreed`
(an ``all_gather``) would have timed out on the first case.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

import pytest
import torch

from gnnpar.comm import all_reduce_sum
from gnnpar.distributed import init
from gnnpar.errors import GnnparError, PartitionError
from gnnpar.faults import FailureBoard
from gnnpar.testing import run_multiproc, scaled

COLLECTIVE_S = 3.0


def starting(mode: str, delay_s: float, startup_s: float) -> str:
    """Settle a start-up step in which rank 1 is slow, raises or dies; then one collective."""
    ctx = init(timeout=timedelta(seconds=scaled(COLLECTIVE_S)))
    board = FailureBoard.connect(ctx)

    def step() -> int:
        if ctx.rank == 1:
            if mode == "raise":
                raise PartitionError("sha256 differs from meta.json.", path="part-1/feat.npy",
                                     fix="re-create the partition.")
            if mode == "die":
                os._exit(3)
            time.sleep(scaled(delay_s))
        return ctx.rank

    try:
        with board.guard():
            mine = board.settle(step, scaled(startup_s), "load and verify its part")
            total = all_reduce_sum(ctx, torch.tensor([mine + 1]))
        return f"ok {int(total)}"
    except GnnparError as exc:
        return f"{type(exc).__name__}: {exc}"


def test_a_start_up_step_may_outlast_the_collective_timeout() -> None:
    assert run_multiproc(starting, 2, "slow", 2 * COLLECTIVE_S, 60.0, timeout=120) == [
        "ok 3", "ok 3"]


@pytest.mark.slow
def test_past_the_start_up_timeout_every_rank_names_the_slow_one() -> None:
    out = run_multiproc(starting, 2, "slow", 8.0, 2.0, timeout=120)
    assert out[0].startswith("DistributedError: rank 1 of 2 did not load and verify its part "
                             "within the start-up timeout"), out
    assert "--startup-timeout-s" in out[0]
    assert out[1].startswith("DistributedError: rank 1 of 2 did not load"), out


@pytest.mark.parametrize("mode", [pytest.param("raise", marks=pytest.mark.slow), "die"])
def test_a_failed_start_up_step_ends_every_rank(mode: str) -> None:
    outcomes = run_multiproc(starting, 2, mode, 0.0, 60.0, timeout=120, expect_failure=True)
    assert outcomes[0] is not None and outcomes[0][0], outcomes
    text = outcomes[0][1]
    if mode == "raise":
        assert text.startswith("PartitionError: part-1/feat.npy: rank 1 of 2 failed: sha256 "
                               "differs"), text
        assert outcomes[1] == (True, "PartitionError: part-1/feat.npy: sha256 differs from "
                               "meta.json. Fix: re-create the partition.")
    else:
        assert text.startswith("DistributedError: rank 1 of 2 stopped sending heartbeats "
                               "before it could load and verify its part"), text
        assert outcomes[1] == (False, "rank 1 exited with code 3")

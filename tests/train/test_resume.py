"""Resuming from a checkpoint continues with the same batches and reaches the same weights.

The shared 2-rank run (``conftest.two_ranks``) trains one configuration three times:
uninterrupted; stopped after an un-checkpointed step in the middle of epoch 1 (the newest
checkpoint is mid-epoch, after step 3) and resumed; stopped after the first step of
epoch 1 (the newest checkpoint is the end of epoch 0) and resumed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest


@pytest.mark.parametrize("name,stop,first", [("mid_epoch", (1, 4), (1, 4)),
                                             ("epoch_boundary", (1, 0), (1, 0))])
def test_resume_same_batches_and_weights(two_ranks: list[dict[str, Any]], name: str,
                                         stop: tuple[int, int], first: tuple[int, int]) -> None:
    for rank in two_ranks:
        full, run = rank["resume"]["full"], rank["resume"][name]
        trace = full["trace"]
        assert full["steps"] >= 6 and len(trace) == 2 * full["steps"]
        at = [t[:2] for t in trace]
        # Until it stopped, the interrupted run took the uninterrupted run's batches ...
        assert run["before"] == trace[:at.index(stop) + 1]
        # ... and the resumed one continued from the newest checkpoint with the same ones.
        assert run["after"] == trace[at.index(first):]
        for key, value in full["params"].items():
            assert np.array_equal(run["params"][key], value), key
        assert [e["epoch"] for e in run["record"]["epochs"]] == [0, 1]


def test_checkpoint_and_record_written(two_ranks: list[dict[str, Any]]) -> None:
    record = two_ranks[0]["resume"]["full"]["record"]
    out = Path(record["summary"]["record"]).parent
    assert (out / "checkpoint" / "state.json").is_file()
    assert (out / "record.json").is_file()
    assert record["config"]["run"]["checkpoint_steps"] == 2
    assert record["status"] == "complete"

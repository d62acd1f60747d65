"""Resuming from a checkpoint continues with the same batches and reaches the same weights.

One 2-rank run holds three trainings of the same configuration: uninterrupted; stopped
after an un-checkpointed step in the middle of epoch 1 (the newest checkpoint is
mid-epoch) and resumed; stopped after the first step of epoch 1 (the newest checkpoint is
the end of epoch 0) and resumed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import _workers
from gnnpar.testing import run_multiproc


@pytest.fixture(scope="module")
def runs(small_parts: dict[int, str], tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    out = tmp_path_factory.mktemp("resume")
    return run_multiproc(_workers.resume, 2, small_parts[2], str(out), timeout=300)


@pytest.mark.parametrize("name,first", [("mid_epoch", (1, 4)), ("epoch_boundary", (1, 0))])
def test_resume_same_batches_and_weights(runs: list[Any], name: str,
                                         first: tuple[int, int]) -> None:
    for rank in runs:
        full, run = rank["full"], rank[name]
        assert full["steps"] >= 6
        trace = full["trace"]
        assert len(trace) == 2 * full["steps"]
        stop = trace.index(next(t for t in trace if t[:2] == first)) if name == "epoch_boundary" \
            else next(i for i, t in enumerate(trace) if t[:2] == (1, 4))
        # Until the stop, the interrupted run took the uninterrupted run's batches ...
        assert run["before"] == trace[:stop + 1]
        # ... and the resumed run continues from the newest checkpoint with the same ones.
        start = next(i for i, t in enumerate(trace) if t[:2] == first)
        assert run["after"] == trace[start:]
        assert run["after"][0][:2] == first
        for key, value in full["params"].items():
            assert torch.equal(run["params"][key], value), key
        assert [e["epoch"] for e in run["record"]["epochs"]] == [0, 1]


def test_checkpoints_written(runs: list[Any], tmp_path_factory: pytest.TempPathFactory) -> None:
    record = runs[0]["full"]["record"]
    out = Path(record["summary"]["record"]).parent
    assert (out / "checkpoint" / "state.json").is_file()
    assert (out / "record.json").is_file()

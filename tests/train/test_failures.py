"""Failures: a rank that raises or dies, and bad input — one clear error on every rank.

Bad input is checked in the shared 2-rank run (``conftest.two_ranks``, which stays
healthy); a failing rank needs a run of its own, with a short collective timeout (20 s)
and a parent-side timeout well above it: a rank that hangs would come back as ``None``
(killed), which the tests reject, so passing proves that no rank hung.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gnnpar.testing import run_multiproc
from tests.helpers import workers as _workers


def test_rank_raises_mid_epoch(small_parts: dict[int, str], tmp_path: Path) -> None:
    outcomes = run_multiproc(_workers.failing, 2, small_parts[2], str(tmp_path), "raise", 1, 2,
                             timeout=150, expect_failure=True)
    assert all(o is not None for o in outcomes), outcomes  # nobody hung
    ok, text = outcomes[1]
    assert not ok and "ValueError: injected failure on rank 1" in text
    ok, text = outcomes[0]
    assert ok and text.startswith("DistributedError: rank 1 of 2 failed"), text
    assert "injected failure on rank 1" in text


def test_rank_dies_mid_epoch_4_ranks(small_parts: dict[int, str], tmp_path: Path) -> None:
    outcomes = run_multiproc(_workers.failing, 4, small_parts[4], str(tmp_path), "exit", 2, 1,
                             timeout=150, expect_failure=True)
    assert all(o is not None for o in outcomes), outcomes
    assert outcomes[2] == (False, "rank 2 exited with code 3")
    for rank in (0, 1, 3):
        ok, text = outcomes[rank]
        assert ok and text.startswith("DistributedError: rank 2 of 4 died without "
                                      "reporting an error"), (rank, text)


def test_bad_input_one_error_on_every_rank(two_ranks: list[dict[str, Any]]) -> None:
    for rank, res in enumerate(two_ranks):
        got = res["bad_inputs"]
        assert got["world_mismatch"].startswith("ConfigError: ")
        assert "4 parts but 2 processes" in got["world_mismatch"]
        assert "--nproc 4" in got["world_mismatch"]
        assert got["fanout_zero"].startswith("ConfigError: sample.fanouts")
        assert got["fanout_negative"].startswith("ConfigError: sample.fanouts")
        assert "(10, 0)" in got["fanout_zero"] and "--fanouts" in got["fanout_zero"]
        assert got["batch_size_zero"].startswith("ConfigError: sample.batch_size")
        assert "--batch-size" in got["batch_size_zero"]
        assert got["missing_dir"].startswith("PartitionError: ")
        assert "does not exist" in got["missing_dir"]
        bad = got["corrupted_part"]
        assert bad.startswith("PartitionError: ") and "sha256 differs" in bad
        assert "part-1/feat.npy" in bad
        assert ("rank 1 of 2 failed" in bad) == (rank == 0)

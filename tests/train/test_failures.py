"""Failures: a rank that raises or dies, and bad input — one clear error on every rank.

Every run has a short collective timeout (``GNNPAR_TIMEOUT_S``) and a parent-side
timeout well above it: a rank that hangs would come back as ``None`` (killed), which the
tests reject, so passing proves that no rank hung.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

import _workers
from gnnpar.testing import run_multiproc

ENV = {"GNNPAR_TIMEOUT_S": "20"}


def test_rank_raises_mid_epoch(small_parts: dict[int, str], tmp_path: Path) -> None:
    outcomes = run_multiproc(_workers.failing, 2, small_parts[2], str(tmp_path), "raise", 1, 2,
                             env=ENV, timeout=150, expect_failure=True)
    assert all(o is not None for o in outcomes), outcomes  # nobody hung
    ok, text = outcomes[1]
    assert not ok and "ValueError: injected failure on rank 1" in text
    ok, text = outcomes[0]
    assert ok and text.startswith("DistributedError: rank 1 of 2 failed"), text
    assert "injected failure on rank 1" in text


def test_rank_dies_mid_epoch_4_ranks(small_parts: dict[int, str], tmp_path: Path) -> None:
    outcomes = run_multiproc(_workers.failing, 4, small_parts[4], str(tmp_path), "exit", 2, 1,
                             env=ENV, timeout=150, expect_failure=True)
    assert all(o is not None for o in outcomes), outcomes
    assert outcomes[2] == (False, "rank 2 exited with code 3")
    for rank in (0, 1, 3):
        ok, text = outcomes[rank]
        assert ok and text.startswith("DistributedError: rank 2 of 4 stopped without "
                                      "reporting an error"), (rank, text)


def _corrupt(src: str, dst: Path) -> str:
    shutil.copytree(src, dst)
    feat = dst / "part-1" / "feat.npy"
    data = bytearray(feat.read_bytes())
    data[-1] ^= 0xFF
    feat.write_bytes(bytes(data))
    return str(dst)


def test_bad_input_one_error_on_every_rank(small_parts: dict[int, str], tmp_path: Path) -> None:
    cfg = _workers.small_config(str(tmp_path / "run"))
    t = cfg.train
    cases: dict[str, Any] = {
        "world_mismatch": (small_parts[4], cfg),
        "corrupted_part": (_corrupt(small_parts[2], tmp_path / "bad"), cfg),
        "fanout_zero": (small_parts[2], replace(cfg, train=replace(t, fanouts=(10, 0)))),
        "fanout_negative": (small_parts[2], replace(cfg, train=replace(t, fanouts=(-1, 5)))),
        "batch_size_zero": (small_parts[2], replace(cfg, train=replace(t, batch_size=0))),
        "missing_dir": (str(tmp_path / "nowhere"), cfg),
    }
    outcomes = run_multiproc(_workers.bad_inputs, 2, cases, env=ENV, timeout=150)
    for rank, got in enumerate(outcomes):
        assert got["world_mismatch"].startswith("ConfigError: ")
        assert "4 parts but 2 processes" in got["world_mismatch"]
        assert "--nproc 4" in got["world_mismatch"]
        assert got["fanout_zero"].startswith("ConfigError: train.fanouts")
        assert got["fanout_negative"].startswith("ConfigError: train.fanouts")
        assert "(10, 0)" in got["fanout_zero"] and "--fanouts" in got["fanout_zero"]
        assert got["batch_size_zero"].startswith("ConfigError: train.batch_size")
        assert "--batch-size" in got["batch_size_zero"]
        assert got["missing_dir"].startswith("PartitionError: ")
        assert "does not exist" in got["missing_dir"]
        bad = got["corrupted_part"]
        assert bad.startswith("PartitionError: ") and "sha256 differs" in bad
        assert "part-1/feat.npy" in bad
        if rank == 0:
            assert "rank 1 of 2 failed" in bad
    assert np.all([o["corrupted_part"] for o in outcomes])

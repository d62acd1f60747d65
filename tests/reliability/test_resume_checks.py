"""Resume checks after the digests: what a checkpoint says must fit the run it resumes.

Each case edits a finished (or stopped) run the way a tool, a bad disk or a mistaken
user would, *with the digests recomputed*, so that only the semantic checks stand
between it and silent training: a NaN weight, a position past the run, ``--epochs``
below a mid-epoch checkpoint, another partition written at the checkpointed path.  Each
must end in one error line naming the file and the field, the run directory untouched.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

import pytest
from torch_geometric.data import Data

from gnnpar.artifacts.files import write_digested_json
from gnnpar.distributed import init, shutdown
from gnnpar.partition.cli import main as partition_main
from gnnpar.train.cli import main as train_main
from gnnpar.train.cli import parse
from gnnpar.train.trainer import Trainer

SPEC = "synthetic:sbm?nodes=600&avg_degree=6&classes=3&feat_dim=4&seed=0"
SAMPLE = ["--mode", "sample", "--fanouts", "4,4", "--batch-size", "16", "--hidden", "8",
          "--no-progress"]


def _partition(out: Path, seed: int = 0) -> Path:
    assert partition_main([SPEC, "--num-parts", "1", "--out", str(out), "--no-progress",
                           "--partition-seed", str(seed), *(["--overwrite"] * out.exists())]
                          ) == 0
    return out


def _train(*args: str) -> int:
    try:
        return train_main([*args])
    finally:
        shutdown(wait=False)


def _edit_state(run: Path, change: Any) -> None:
    """Change ``checkpoint/state.json`` (and maybe tensors.bin), all digests recomputed."""
    ckpt = run / "checkpoint"
    doc = json.loads((ckpt / "state.json").read_text())
    del doc["digest"]
    change(doc, ckpt / "tensors.bin")
    doc["sha256"]["tensors.bin"] = hashlib.sha256((ckpt / "tensors.bin").read_bytes()
                                                  ).hexdigest()
    write_digested_json(ckpt / "state.json", doc)


def _one_error(capsys: pytest.CaptureFixture[str], *parts: str) -> None:
    """One ``error:`` line holding ``parts`` (beside the log lines), no traceback."""
    text = capsys.readouterr().err
    err = [ln for ln in text.splitlines() if "error:" in ln]
    assert "Traceback" not in text and len(err) == 1, text
    assert all(p in err[0] for p in parts), err


@pytest.fixture
def finished(tmp_path: Path) -> tuple[Path, Path]:
    parts = _partition(tmp_path / "parts")
    run = tmp_path / "run"
    assert _train(str(parts), *SAMPLE, "--epochs", "2", "--out", str(run)) == 0
    return parts, run


def _snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_a_nan_weight_with_digests_updated_is_refused(
        finished: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    parts, run = finished

    def poison(doc: dict[str, Any], tensors: Path) -> None:
        key, entry = next((k, m) for k, m in doc["tensors"].items()
                          if m["dtype"] == "float32" and k.startswith("state/model/"))
        data = bytearray(tensors.read_bytes())
        data[entry["offset"]:entry["offset"] + 4] = struct.pack("<f", float("nan"))
        tensors.write_bytes(bytes(data))
        poison.key = key  # type: ignore[attr-defined]

    _edit_state(run, poison)
    before = _snapshot(run)
    capsys.readouterr()
    assert _train(str(parts), *SAMPLE, "--epochs", "3", "--out", str(run), "--resume") == 1
    _one_error(capsys, str(run / "checkpoint" / "tensors.bin"), poison.key,  # type: ignore[attr-defined]
               "NaN or infinite")
    assert _snapshot(run) == before


def test_a_position_past_the_run_is_refused(finished: tuple[Path, Path],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    parts, run = finished
    _edit_state(run, lambda doc, _: doc["state"]["extra"]["position"].update(epoch=100))
    capsys.readouterr()
    assert _train(str(parts), *SAMPLE, "--epochs", "200", "--out", str(run), "--resume") == 1
    _one_error(capsys, "state.json: position:", "does not fit the run",
               "2 finished epochs recorded of 2")


def test_another_partition_at_the_same_path_is_refused(
        finished: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    parts, run = finished
    _partition(parts, seed=7)  # same path, same settings but the seed: other content
    capsys.readouterr()
    assert _train(str(parts), *SAMPLE, "--epochs", "3", "--out", str(run), "--resume") == 1
    _one_error(capsys, "partition_digest", "now holds another")


class _Stop(Exception):
    pass


def test_epochs_below_a_mid_epoch_checkpoint_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parts = _partition(tmp_path / "parts")
    run = tmp_path / "run"
    cfg = parse([str(parts), *SAMPLE, "--epochs", "3", "--checkpoint-steps", "2", "--out",
                 str(run)])

    def stop(epoch: int, step: int, batch: Data) -> None:
        if (epoch, step) == (1, 2):  # after the checkpoint at step 2 of epoch 2
            raise _Stop

    try:
        with pytest.raises(_Stop):
            Trainer(cfg, str(parts), init()).fit(stop)
    finally:
        shutdown(wait=False)
    state = json.loads((run / "checkpoint" / "state.json").read_text())
    position = state["state"]["extra"]["position"]
    assert (position["epoch"], position["step"]) == (1, 2)
    before = _snapshot(run)
    capsys.readouterr()
    assert _train(str(parts), *SAMPLE, "--epochs", "1", "--checkpoint-steps", "2", "--out",
                  str(run), "--resume") == 1
    _one_error(capsys, "train.epochs", "is at step 2 of epoch 2, so --epochs 1 is below its "
               "position", "--epochs above 1")
    assert _snapshot(run) == before
    # --epochs 2 finishes the epoch it stopped in.
    assert _train(str(parts), *SAMPLE, "--epochs", "2", "--checkpoint-steps", "2", "--out",
                  str(run), "--resume") == 0
    assert [e["epoch"] for e in json.loads((run / "record.json").read_text())["epochs"]] == [
        0, 1]

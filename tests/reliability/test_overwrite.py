"""``--overwrite`` replaces only what gnnpar wrote, and a failed replacement loses nothing.

The two data-loss reproductions of the campaign: ``gnnpar-partition --overwrite`` onto a
dataset folder that happens to hold a ``meta.json`` (an OGB-style layout), or onto a real
partition with a file of the user's inside, deleted both; ``gnnpar-train --overwrite``
deleted the old run before the new one had written anything, so a failing new run lost
both.  Now the first two are refused naming the foreign file, and the old run is moved
aside until the new run's first checkpoint, and put back when it fails first.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gnnpar.artifacts.kinds import PREVIOUS_RUN
from gnnpar.distributed import shutdown
from gnnpar.errors import ConfigError
from gnnpar.partition.cli import main as partition_main
from gnnpar.train.cli import main as train_main
from gnnpar.train.rundir import prepare_run_dir

SPEC = "synthetic:sbm?nodes=600&avg_degree=6&classes=3&feat_dim=4&seed=0"


def _snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _partition(out: Path, *flags: str) -> int:
    return partition_main([SPEC, "--num-parts", "2", "--out", str(out), "--no-progress",
                           *flags])


def test_partition_overwrite_refuses_a_dataset_folder_with_a_meta_json(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    victim = tmp_path / "ogbn_thing"
    (victim / "raw").mkdir(parents=True)
    (victim / "meta.json").write_text(json.dumps({"num tasks": 1, "task type": "multiclass"}))
    (victim / "raw" / "edge.csv.gz").write_bytes(b"\x1f\x8b years of downloads")
    before = _snapshot(victim)
    assert _partition(victim, "--overwrite") == 1
    err = [ln for ln in capsys.readouterr().err.splitlines() if "error:" in ln]
    assert len(err) == 1 and str(victim / "meta.json") in err[0], err
    assert "lists its files" in err[0] and "Fix:" in err[0]
    assert _snapshot(victim) == before


def test_partition_overwrite_refuses_a_users_file_inside_a_partition(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "parts"
    assert _partition(out) == 0
    (out / "part-1" / "my-notes.txt").write_text("keep me")
    before = _snapshot(out)
    assert _partition(out, "--overwrite", "--partition-seed", "3") == 1
    err = [ln for ln in capsys.readouterr().err.splitlines() if "error:" in ln]
    assert len(err) == 1 and str(out / "part-1" / "my-notes.txt") in err[0], err
    assert "does not list it" in err[0]
    assert _snapshot(out) == before
    (out / "part-1" / "my-notes.txt").unlink()  # only gnnpar's files: replaced
    assert _partition(out, "--overwrite", "--partition-seed", "3") == 0
    assert json.loads((out / "meta.json").read_text())["partitioner"]["seed"] == 3


def _train(*args: str) -> int:
    try:
        return train_main([*args, "--no-progress", "--hidden", "8"])
    finally:
        shutdown(wait=False)


@pytest.fixture
def old_run(tmp_path: Path) -> tuple[Path, Path, dict[str, bytes]]:
    one = tmp_path / "parts-1"
    assert partition_main([SPEC, "--num-parts", "1", "--out", str(one), "--no-progress"]) == 0
    run = tmp_path / "run"
    assert _train(str(one), "--mode", "full", "--epochs", "2", "--out", str(run)) == 0
    return one, run, _snapshot(run)


def test_train_overwrite_puts_the_old_run_back_when_the_new_one_fails(
        old_run: tuple[Path, Path, dict[str, bytes]], tmp_path: Path,
        capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    one, run, before = old_run
    bad = tmp_path / "bad"
    shutil.copytree(one, bad)
    feat = bad / "part-0" / "feat.npy"
    feat.write_bytes(feat.read_bytes()[:-1] + b"\x01")  # fails at load: before a checkpoint
    capsys.readouterr()
    assert _train(str(bad), "--mode", "full", "--epochs", "3", "--out", str(run),
                  "--overwrite") == 1
    err = capsys.readouterr().err
    assert "sha256 differs" in err, err
    assert any("is back in place" in r.getMessage() for r in caplog.records), caplog.text
    assert _snapshot(run) == before  # the old record, config and checkpoint, byte for byte


def test_train_overwrite_killed_before_its_first_checkpoint_loses_nothing(
        old_run: tuple[Path, Path, dict[str, bytes]]) -> None:
    _, run, before = old_run
    prepare_run_dir(str(run), name="x", overwrite=True)  # what a new run does first ...
    (run / "record.json").write_text('{"format": "gnnpar-run", "format_version": 2}')
    # ... then SIGKILL: the next command on that --out finds the old run in place.
    with pytest.raises(ConfigError, match=r"already holds a run \(2 epochs, status complete"):
        prepare_run_dir(str(run), name="x")
    assert _snapshot(run) == before


def test_train_overwrite_deletes_the_old_run_at_the_first_checkpoint(
        old_run: tuple[Path, Path, dict[str, bytes]]) -> None:
    one, run, _ = old_run
    assert _train(str(one), "--mode", "full", "--epochs", "1", "--out", str(run),
                  "--overwrite") == 0
    assert not (run / PREVIOUS_RUN).exists()
    record = json.loads((run / "record.json").read_text())
    assert record["status"] == "complete" and len(record["epochs"]) == 1

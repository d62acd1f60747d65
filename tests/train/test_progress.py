"""What a run shows without a terminal, the scalars it writes, and what a refused run leaves."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gnnpar.train.cli import main
from gnnpar.train.metrics import read_csv_metrics

TINY = "synthetic:sbm?nodes=1500&feat_dim=16&classes=4&seed=2&homophily=0.8"


def test_lines_per_interval_start_up_phases_and_csv_scalars(tmp_path: Path) -> None:
    """stdout and stderr are pipes (no terminal), as under nohup, Slurm or CI."""
    run = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "gnnpar.train", TINY, "--epochs", "2", "--batch-size", "64",
         "--log-every", "5", "--metrics", "csv", "--out", str(run), "--root",
         str(tmp_path / "data")], capture_output=True, text=True, timeout=600, cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads((run / "record.json").read_text())
    steps = record["summary"]["steps_per_epoch"]
    assert steps >= 10
    for epoch in (1, 2):  # a line every 5 steps: the loss, the throughput, the time left
        lines = re.findall(rf"epoch {epoch}/2 step (\d+)/{steps}: loss \d\.\d+, [\d.]+ "
                           r"steps/s.*; ETA epoch (\d+) s, run (\d+) s\n", proc.stderr)
        assert [int(s) for s, _, _ in lines] == list(range(5, steps + 1, 5)), proc.stderr
        assert all(int(run) >= int(left) for _, left, run in lines)
    assert re.search(r"epoch 1/2: loss .*; ETA run \d+ s\n", proc.stderr)  # and the epochs'
    assert "it/s" not in proc.stderr and "assign (" not in proc.stderr  # no bars in logs
    # Start-up phases are announced, timed, and counted in the total wall time.
    assert re.search(r"loading .+ \.\.\.", proc.stderr)
    assert re.search(r"partitioned in [\d.]+ s", proc.stderr)
    phases = record["summary"]["startup_s"]
    assert {"import", "check", "load", "partition", "spawn", "setup"} <= set(phases)
    assert record["summary"]["wall_time_s"] >= sum(phases.values())
    assert re.search(r"total wall time: +[\d.]+ s \(start-up [\d.]+ s: import [\d.]+ s, check",
                     proc.stdout)
    # The scalars, read back: every step's loss, every epoch's figures.
    scalars = read_csv_metrics(run)
    assert [s for s, _ in scalars["train/step_loss"]] == list(range(1, 2 * steps + 1))
    assert [s for s, _ in scalars["val/acc"]] == [steps, 2 * steps]
    assert [v for _, v in scalars["train/loss"]] == pytest.approx(
        [e["train_loss"] for e in record["epochs"]])
    # And the final full-neighbour figures (the epochs' are on sampled neighbourhoods),
    # in the scalars and in gnnpar-plot's picture: a star at the last epoch.
    summary = record["summary"]
    for key in ("train_acc", "val_acc", "test_acc"):
        assert scalars[f"final/{key}"] == [(2 * steps, pytest.approx(summary[key]))]
    import gnnpar.plot as plot

    figures: list[Any] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plot, "_save", lambda fig, out, ow: figures.append(fig) or Path(out))
        assert plot.main([str(run), "--out", str(tmp_path / "run.png")]) == 0
    stars = [(float(line.get_xdata()[0]), float(line.get_ydata()[0]))
             for line in figures[0].axes[0].lines if line.get_marker() == "*"]
    assert stars == [(2.0, pytest.approx(summary["val_acc"])),
                     (2.0, pytest.approx(summary["test_acc"]))]
    assert "final full-neighbour test" in [t.get_text() for t in
                                            figures[0].axes[0].get_legend().get_texts()]


def test_tensorboard_scalars_read_back(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    assert main([TINY, "--epochs", "2", "--batch-size", "256", "--metrics", "tensorboard",
                 "--no-progress", "--out", str(run), "--root", str(tmp_path / "data")]) == 0
    record = json.loads((run / "record.json").read_text())
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    steps = record["summary"]["steps_per_epoch"]
    assert [e.step for e in events.Scalars("train/step_loss")] == list(range(1, 2 * steps + 1))
    assert [e.value for e in events.Scalars("test/acc")] == pytest.approx(
        [e["test_acc"] for e in record["epochs"]])
    final = events.Scalars("final/test_acc")
    assert [(e.step, e.value) for e in final] == [
        (2 * steps, pytest.approx(record["summary"]["test_acc"]))]


def test_a_refused_run_leaves_no_directory(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    # Refused once the data is read (a graph with features learns no input rows).
    assert main([TINY, "--embed-dim", "8", "--nproc", "2"]) == 1
    assert "Fix:" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
    assert main([TINY, "--embed-dim", "8", "--out", str(tmp_path / "mine" / "run")]) == 1
    assert not (tmp_path / "mine").exists()
    # An --out that cannot be made is refused before anything is read.
    (tmp_path / "file").write_text("")
    assert main([TINY, "--out", str(tmp_path / "file" / "run")]) == 1
    assert "file is not a directory" in capsys.readouterr().err

"""The command with its defaults trains to the converged reference, per mode.

``gnnpar-train GRAPH --mode full`` with nothing else given, on a smaller graph of the main
job's kind (the embedded SBM's homophily, noise and classes; 4,000 nodes), against
single-process full-batch PyG GraphSAGE of the same width trained on the whole graph until
it has converged (its best validation epoch).  The old defaults (10 epochs at the
sampled mode's learning rate: 10 gradient steps) sit far below the bar, so the test
fails for a default that under-trains.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

import gnnpar
from gnnpar.distributed import shutdown
from gnnpar.testing import reference as _reference
from gnnpar.train.cli import main

GRAPH = "synthetic:sbm?nodes=4000"
HIDDEN = 128  # --hidden's default


def test_full_mode_defaults_reach_the_converged_full_batch_reference(tmp_path: Path) -> None:
    run = tmp_path / "run"
    threads = torch.get_num_threads()
    try:  # a world of one, in this process: the command as typed, every default kept
        assert main([GRAPH, "--mode", "full", "--root", str(tmp_path / "data"), "--out",
                     str(run), "--no-progress"]) == 0
    finally:
        shutdown()
        torch.set_num_threads(threads)
    record = json.loads((run / "record.json").read_text())
    assert record["config"]["train"]["epochs"] == 100 and record["config"]["train"]["lr"] == 0.01
    ds = gnnpar.load_dataset(GRAPH)
    converged = _reference.best_valid(_reference.full_batch_curve(ds, HIDDEN, 100, 0.01))
    ten_steps = _reference.full_batch_curve(ds, HIDDEN, 10, 0.005)[-1]  # the old defaults
    got = record["summary"]["test_acc"]
    print(f"gnnpar --mode full defaults {got:.4f}; full-batch PyG converged "
          f"{converged['test_acc']:.4f}, after the old defaults {ten_steps['test_acc']:.4f}")
    assert got >= converged["test_acc"] - 0.02
    assert ten_steps["test_acc"] < converged["test_acc"] - 0.05  # the bar tells them apart

"""What the command's times count: the whole command, and refusals before any heavy import.

The printed ``total wall time`` must be the command's own, as a user's clock sees it: from
the process's start (the interpreter, its imports) to the last worker's exit, measured
here from outside around the real ``gnnpar-train --nproc 2``.  A refusal of the settings
(a flag, a value, the world size against a partition, a run directory that holds a run,
a GPU that is not there) must come before torch is imported, which alone takes a second
or more: each is run in a fresh interpreter that reports whether torch was loaded.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gnnpar.testing import scaled
from gnnpar.train.cli import parse
from gnnpar.train.prepare import resolve_partition
from gnnpar.train.record import RunRecord

TINY = "synthetic:sbm?nodes=1500&feat_dim=16&classes=4&seed=2&homophily=0.8"


def test_total_wall_time_is_the_whole_command(tmp_path: Path) -> None:
    run = tmp_path / "run"
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "gnnpar.train", TINY, "--nproc", "2",
                           "--epochs", "1", "--eval", "none", "--hidden", "16",
                           "--no-progress", "--out", str(run)],
                          capture_output=True, text=True, timeout=scaled(300), cwd=tmp_path)
    measured = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = re.search(r"total wall time: +([\d.]+) s \(start-up [\d.]+ s: import ([\d.]+) s, "
                     r".*; teardown ([\d.]+) s\)", proc.stdout)
    assert line, proc.stdout
    printed, imported, teardown = map(float, line.groups())
    summary = RunRecord.load(run / "record.json").summary
    assert round(summary["wall_time_s"], 1) == printed  # the record says the same
    assert summary["startup_s"]["import"] > 0 and summary["teardown_s"] >= 0
    # What is left out: this process starting the command, the launcher's own exit.
    print(f"printed {printed:.1f} s (import {imported:.1f} s, teardown {teardown:.1f} s), "
          f"measured from outside {measured:.1f} s")
    assert printed <= measured + 0.05
    assert measured - printed <= scaled(1.5)


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return resolve_partition(parse([TINY, "--root", str(tmp_path_factory.mktemp("data"))]), 2)


def test_refusals_come_before_torch_is_imported(parts: Path, tmp_path: Path) -> None:
    held = tmp_path / "held"
    held.mkdir()
    RunRecord(config={}, status="complete").write(held / "record.json")
    refusals = {
        "a misspelt flag": ["--nproc", "2", "--learning-rate", "0.1"],
        "a bad value": ["--nproc", "2", "--lr", "-1"],
        "fan-outs for other layers": ["--nproc", "2", "--fanouts", "10,10,10"],
        "the world size": [str(parts), "--nproc", "3"],
        "a run directory that holds a run": [str(parts), "--nproc", "2", "--out", str(held)],
        "no GPU": [str(parts), "--nproc", "2", "--device", "cuda"],
    }
    if torch_has_cuda():
        del refusals["no GPU"]  # a CUDA build must import torch to count its GPUs
    code = ("import sys\nfrom gnnpar.train.cli import main\ntry:\n"
            "    code = main(sys.argv[1:])\nexcept SystemExit as exc:  # argparse's\n"
            "    code = exc.code\nprint('torch imported:', 'torch' in sys.modules)\n"
            "sys.exit(code)")
    for what, argv in refusals.items():
        proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True,
                              text=True, timeout=scaled(120), cwd=tmp_path)
        assert proc.returncode in (1, 2), (what, proc.stderr)
        assert "error:" in proc.stderr and "Fix:" in proc.stderr, (what, proc.stderr)
        assert "torch imported: False" in proc.stdout, (what, proc.stderr)
    assert not (tmp_path / "runs").exists()  # nothing was written


def torch_has_cuda() -> bool:
    """Whether the installed torch is a CUDA build (its version has no ``+cpu``)."""
    from importlib.metadata import version

    return not version("torch").endswith("+cpu")

"""Every mode through the ``gnnpar-train`` command on 1, 2 and 4 ranks: one record schema.

Each run is the command a user types: 1 rank in this process (``main([...])``, a world
of one), 2 and 4 ranks as ``gnnpar-train --nproc N`` subprocesses.  The 2-rank minibatch
run trains on a user's own graph — an edge list in CSV with features, labels and a random
``--split`` — so that path is covered end to end.  Every record must hold exactly the
documented fields, and ``gnnpar-plot`` draws all six runs in one picture.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.image import imread

from gnnpar.datasets.synthetic import sbm
from gnnpar.distributed import shutdown
from gnnpar.plot import main as plot_main
from gnnpar.train.cli import main
from gnnpar.train.record import EPOCH_FIELDS, SUMMARY_FIELDS, TOP_FIELDS

TINY = "synthetic:sbm?nodes=1500&feat_dim=16&classes=4&seed=2&homophily=0.8"
COMMON = ["--hidden", "16", "--no-progress", "--timeout-s", "60"]
SAMPLE = ["--mode", "sample", "--epochs", "3", "--lr", "0.01", "--batch-size", "64",
          "--fanouts", "5,5", "--eval-batch-size", "512"]
FULL = ["--mode", "full", "--epochs", "30", "--model", "gcn", "--lr", "0.02"]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("gnnpar-train")
    cmd = [exe] if exe else [sys.executable, "-m", "gnnpar.train"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=600, cwd=cwd)


def _user_graph(d: Path) -> list[str]:
    """An edge list in CSV, features in .npy, labels in CSV: the flags that read them."""
    ds = sbm(num_nodes=1500, avg_degree=8, num_classes=4, feat_dim=16, seed=2, homophily=0.8)
    pairs = zip(ds.src.tolist(), ds.dst.tolist(), strict=True)
    (d / "edges.csv").write_text("src,dst\n" + "".join(f"{s},{t}\n" for s, t in pairs))
    np.save(d / "x.npy", np.asarray(ds.x))
    (d / "y.csv").write_text("".join(f"{v}\n" for v in np.asarray(ds.y)))
    return [str(d / "edges.csv"), "--features", str(d / "x.npy"), "--labels",
            str(d / "y.csv"), "--split", "0.6,0.2,0.2", "--split-seed", "1"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("modes")
    root = ["--root", str(work / "data")]
    out: dict[str, Any] = {}
    for mode, flags in (("sample", SAMPLE), ("full", FULL)):  # 1 rank: this process
        run = work / f"{mode}-1"
        try:
            assert main([TINY, *flags, *COMMON, *root, "--out", str(run)]) == 0
        finally:
            shutdown()
        out[f"{mode}-1"] = {"dir": run}
    user = _user_graph(work)
    for name, args in (("sample-2", [*user, *SAMPLE]), ("full-2", [TINY, *FULL]),
                       ("sample-4", [TINY, *SAMPLE]), ("full-4", [TINY, *FULL])):
        run = work / name
        proc = _cli(*args, *COMMON, *root, "--nproc", name[-1], "--out", str(run), cwd=work)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[name] = {"dir": run, "stdout": proc.stdout, "stderr": proc.stderr}
    for r in out.values():
        r["record"] = json.loads((r["dir"] / "record.json").read_text())
    out["work"] = work
    return out


NAMES = ("sample-1", "sample-2", "sample-4", "full-1", "full-2", "full-4")


@pytest.mark.parametrize("name", NAMES)
def test_one_record_schema_for_every_mode(runs: dict[str, Any], name: str) -> None:
    record = runs[name]["record"]
    mode, world = name.split("-")
    assert set(record) == set(TOP_FIELDS) and record["status"] == "complete"
    assert set(record["summary"]) == set(SUMMARY_FIELDS)
    assert [set(e) for e in record["epochs"]] == [set(EPOCH_FIELDS)] * (
        3 if mode == "sample" else 30)
    assert record["summary"]["mode"] == mode and record["env"]["world_size"] == int(world)
    assert record["partition"]["num_parts"] == int(world)
    s = record["summary"]
    assert 0.4 < s["test_acc"] <= 1.0  # 4 classes: well above chance (0.25)
    if mode == "sample":
        assert 0.4 < s["test_acc_sampled"] <= 1 and s["sampled_edges_per_s"] > 0
    else:
        assert s["test_acc_sampled"] is None and s["sampled_edges_per_s"] is None
        assert s["steps_per_epoch"] == 1
    kinds = set(s["comm_per_epoch"])
    if world != "1":  # sampled: the ranks share this machine and read each other's parts
        assert kinds == {"grad"} if mode == "sample" else kinds >= {"halo", "halo_grad", "grad"}
    # config.json repeats the run.
    config = json.loads((runs[name]["dir"] / "config.json").read_text())
    assert config["train"]["mode"] == mode and config["run"]["out"] == str(runs[name]["dir"])
    assert (runs[name]["dir"] / "checkpoint" / "state.json").is_file()


def test_user_graph_from_csv_with_features_labels_and_split(runs: dict[str, Any]) -> None:
    r = runs["sample-2"]
    part = r["record"]["partition"]
    assert part["name"] == "edges" and part["num_nodes"] == 1500 and part["feat_dim"] == 16
    assert "random split 0.6,0.2,0.2 (seed 1" in r["stderr"]
    assert "train 900, val 300, test 300" in r["stderr"]  # floor(0.6 * 1500), ...
    for text in ("test accuracy:", "sampled", "full-neighbour", "epoch time:",
                 "sampled edges/s:", "communicated per epoch", "2 parts (metis), 2 workers"):
        assert text in r["stdout"], (text, r["stdout"])


def test_summary_of_a_full_graph_run(runs: dict[str, Any]) -> None:
    out = runs["full-4"]["stdout"]
    assert "full mode, gcn 2x16, full graph" in out and "halo" in out
    assert "sampled edges/s" not in out


def test_gnnpar_plot_draws_every_run(runs: dict[str, Any], capsys: pytest.CaptureFixture[str]
                                     ) -> None:
    png = runs["work"] / "runs.png"
    assert plot_main([str(runs[n]["dir"]) for n in NAMES] + ["--out", str(png)]) == 0
    image = imread(png)
    assert image.shape[0] >= 400 and image.shape[1] >= 600
    ink = (image[..., :3] < 0.9).any(axis=-1).mean()
    assert ink > 0.03
    # The first two runs' colours (matplotlib's default cycle) are both drawn.
    for colour in ((0x1F, 0x77, 0xB4), (0xFF, 0x7F, 0x0E)):
        near = np.abs(image[..., :3] * 255 - np.array(colour)).max(axis=-1) < 8
        assert near.sum() > 100, colour

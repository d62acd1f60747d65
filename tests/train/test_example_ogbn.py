"""``examples/train_ogbn.py`` under torchrun, on a small dataset in OGB's on-disk layout."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from gnnpar.datasets.synthetic import sbm
from gnnpar.train.cli import parse
from gnnpar.train.prepare import partition_cache_dir

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_ogbn.py"


def _csv_gz(path: Path, rows: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        for row in rows.reshape(len(rows), -1):
            f.write(",".join(str(v) for v in row.tolist()) + "\n")


def write_ogb_layout(d: Path) -> Path:
    """A directed SBM sample in ogbn-arxiv's layout, and its meta_dict JSON."""
    ds = sbm(num_nodes=1200, avg_degree=8.0, num_classes=4, feat_dim=8, seed=5, feature_noise=1.0)
    keep = ds.src < ds.dst  # one direction: the example makes it undirected again
    _csv_gz(d / "raw" / "edge.csv.gz", np.stack([ds.src[keep], ds.dst[keep]], 1))
    _csv_gz(d / "raw" / "num-node-list.csv.gz", np.array([ds.num_nodes]))
    _csv_gz(d / "raw" / "num-edge-list.csv.gz", np.array([int(keep.sum())]))
    _csv_gz(d / "raw" / "node-feat.csv.gz", np.round(np.asarray(ds.x), 4))
    _csv_gz(d / "raw" / "node-label.csv.gz", np.asarray(ds.y))
    for name, idx in (("train", ds.train_idx), ("valid", ds.val_idx), ("test", ds.test_idx)):
        _csv_gz(d / "split" / "random" / f"{name}.csv.gz", np.asarray(idx))
    meta = {"dir_path": str(d), "split": "random", "num tasks": "1", "num classes": "4",
            "add_inverse_edge": "False", "binary": "False", "is hetero": "False"}
    path = d / "ogbn_tiny.json"
    path.write_text(json.dumps(meta))
    return path


def test_train_ogbn_example_under_torchrun(tmp_path: Path) -> None:
    meta = write_ogb_layout(tmp_path / "ogbn_tiny")
    run = tmp_path / "run"
    # Under torchrun the partition is made first, where the refusal's command writes it:
    # for the run's own fan-outs and batch size (the work balance's).
    parts = partition_cache_dir(parse([str(meta), "--root", str(tmp_path / "data"),
                                       "--undirected", "--batch-size", "128",
                                       "--fanouts", "5,5"]), 2)
    made = subprocess.run(
        [sys.executable, "-m", "gnnpar.partition", str(meta), "--root", str(tmp_path / "data"),
         "--undirected", "--work-fanouts", "5,5", "--work-batch-size", "128", "--num-parts",
         "2", "--out", str(parts), "--no-progress"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
         "2", str(EXAMPLE), str(meta), "--root", str(tmp_path / "data"), "--epochs", "2",
         "--batch-size", "128", "--fanouts", "5,5", "--hidden", "16", "--out", str(run),
         "--no-progress", "--timeout-s", "60"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "test accuracy:" in proc.stdout and "full-neighbour" in proc.stdout
    record = json.loads((run / "record.json").read_text())
    assert record["env"]["world_size"] == 2 and len(record["epochs"]) == 2
    assert record["config"]["data"]["undirected"]  # the example's own default
    part_meta = json.loads((parts / "meta.json").read_text())
    assert part_meta["num_nodes"] == 1200 and part_meta["num_parts"] == 2
    assert record["partition"]["dir"] == str(parts)
    assert record["summary"]["test_acc"] > 0.5

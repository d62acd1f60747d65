"""The example scripts, run as their docstrings say (under torchrun), on small graphs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from gnnpar.datasets.synthetic import sbm, typed
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.writer import partition_graph

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _torchrun(script: str, *args: str, cwd: Path, nproc: int = 2
              ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
         str(nproc), str(EXAMPLES / script), *args],
        capture_output=True, text=True, timeout=600, cwd=cwd)


def test_custom_loop_is_safe_when_a_rank_has_no_training_nodes(tmp_path: Path) -> None:
    ds = sbm(num_nodes=2000, avg_degree=10, num_classes=4, feat_dim=16, seed=0,
             homophily=0.8)
    # Every training node in the first half: the second part gets empty batches only.
    ds = replace(ds, train_idx=ds.train_idx[ds.train_idx < 1000])
    partition_graph(ds, tmp_path / "parts", PartitionConfig(num_parts=2, partitioner="contiguous"))
    proc = _torchrun("custom_loop.py", str(tmp_path / "parts"), "--epochs", "3",
                     "--lr", "0.01", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = re.findall(r"epoch (\d): loss ([\d.na]+), test accuracy ([\d.]+)", proc.stdout)
    assert [int(e) for e, _, _ in lines] == [1, 2, 3], proc.stdout
    losses = [float(loss) for _, loss, _ in lines]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert float(lines[-1][2]) > 0.5  # 4 classes; an empty batch did not poison DDP
    assert "Warning" not in proc.stderr, proc.stderr  # e.g. float() of a loss with a graph


def test_link_prediction_example(tmp_path: Path) -> None:
    partition_graph(sbm(num_nodes=2000, seed=0, task="link"), tmp_path / "parts",
                    PartitionConfig(num_parts=2))
    proc = _torchrun("link_prediction.py", str(tmp_path / "parts"), "--epochs", "3",
                     "--decoder", "mlp", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = re.findall(r"epoch (\d): loss ([\d.]+), test MRR ([\d.]+)", proc.stdout)
    assert [int(e) for e, _, _ in lines] == [1, 2, 3], proc.stdout
    assert float(lines[-1][1]) < float(lines[0][1])
    assert float(lines[-1][2]) > 0.15  # 100 random candidates: ~0.05 by chance


def test_full_graph_example(tmp_path: Path) -> None:
    ds = sbm(num_nodes=1500, avg_degree=8, num_classes=4, feat_dim=16, seed=1, homophily=0.8)
    partition_graph(ds, tmp_path / "parts", PartitionConfig(num_parts=2))
    proc = _torchrun("train_fullgraph.py", str(tmp_path / "parts"), "--model", "gcn",
                     "--epochs", "30", "--no-progress", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "full mode, gcn" in proc.stdout
    record = json.loads(next((tmp_path / "runs").glob("parts-full*/record.json")).read_text())
    assert record["config"]["train"]["lr"] == 0.01  # the example's default
    assert len(record["epochs"]) == 30 and record["summary"]["test_acc"] > 0.8


def test_dnn_hybrid_parallel_example_writes_the_run_record(tmp_path: Path) -> None:
    proc = _torchrun("dnn_hybrid_parallel.py", "--tp", "2", "--steps", "3", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads((tmp_path / "runs" / "dnn-transformer" / "record.json").read_text())
    assert record["format_version"] == 4 and record["config"]["parallel"]["tp"] == 2
    losses = [e["train_loss"] for e in record["epochs"]]
    assert len(losses) == 3 and losses[-1] < losses[0]
    assert record["epochs"][1]["comm"]  # tensor parallelism communicates every step


def test_typed_example_on_an_ogb_typed_layout_with_nproc(tmp_path: Path) -> None:
    # An ogbn-mag-like dataset in OGB's typed layout that stores its reverse relations
    # (rev_writes, and published_in's reverse under another name: found by its
    # endpoints), trained with default flags through the example's own --nproc.
    from tests.helpers.ogb_files import write_typed_layout

    ds = typed(num_papers=1000, num_authors=500, num_venues=20, seed=3)
    stored_edges = {(et[0], "has_paper" if et[1] == "rev_published_in" else et[1], et[2]): v
                    for et, v in ds.edges.items()}
    assert len(stored_edges) == 5
    write_typed_layout(tmp_path / "tinymag", replace(ds, edges=stored_edges))
    meta = {"dir_path": str(tmp_path / "tinymag"), "split": "time", "num tasks": "1",
            "num classes": str(ds.num_classes), "add_inverse_edge": "False",
            "binary": "False", "is hetero": "True", "name": "tinymag"}
    (tmp_path / "tinymag.json").write_text(json.dumps(meta))
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "train_typed.py"), str(tmp_path / "tinymag.json"),
         "--nproc", "2", "--epochs", "3", "--no-progress", "--root", str(tmp_path / "data"),
         "--out", str(tmp_path / "run")], capture_output=True, text=True, timeout=600,
        cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads((tmp_path / "run" / "record.json").read_text())
    summary = record["summary"]
    assert summary["eval"] == "sampled" and summary["test_acc"] > 0.5  # 6 classes
    assert summary["comm_per_epoch"]["embedding_grad"]["bytes"] > 0
    assert sorted(record["partition"]["node_types"]) == ["author", "paper", "venue"]
    assert "already exists" not in proc.stderr

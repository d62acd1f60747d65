"""What a run leaves: predictions, embeddings, an exported PyG model, gnnpar-predict.

The references are independent of gnnpar's inference: single-process PyG on the whole
graph with the exported weights, and a fresh Python process that cannot import gnnpar.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch_geometric.nn.models import GraphSAGE

import gnnpar
from gnnpar.datasets.spec import load_dataset
from gnnpar.errors import ConfigError
from gnnpar.testing.reference import exported_logits
from gnnpar.train.cli import main
from gnnpar.train.export import main as export_main
from gnnpar.train.predict import main as predict_main

TINY = "synthetic:sbm?nodes=1500&feat_dim=16&classes=4&seed=2&homophily=0.8"
OTHER = "synthetic:sbm?nodes=900&feat_dim=16&classes=4&seed=9&homophily=0.8"
RELOAD = """
import sys
sys.modules["gnnpar"] = None  # this process must not need gnnpar
import json, numpy as np, torch, torch_geometric.nn.models as models
spec = json.load(open(sys.argv[1]))
model = getattr(models, spec["class"])(**spec["kwargs"])
model.load_state_dict(torch.load(sys.argv[2], weights_only=True))
model.eval()
g = np.load(sys.argv[3])
with torch.no_grad():
    out = model(torch.from_numpy(g["x"]), torch.from_numpy(g["edge_index"]))
test = g["test_idx"]
print(float((out.argmax(-1).numpy()[test] == g["y"][test]).mean()))
"""


def _reference(model_file: Path, spec_file: Path, spec: str) -> np.ndarray:
    """PyG's logits of every node of the dataset ``spec`` (one process, whole graph)."""
    return exported_logits(model_file, spec_file, load_dataset(spec))


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("outputs")
    run = root / "run"
    assert main([TINY, "--nproc", "2", "--epochs", "2", "--batch-size", "128", "--hidden",
                 "32", "--save-predictions", "--save-embeddings", "--no-progress",
                 "--out", str(run), "--root", str(root / "data")]) == 0
    record = json.loads((run / "record.json").read_text())
    assert export_main([str(run), "--out", str(root / "export" / "model.pt")]) == 0
    return {"root": root, "run": run, "summary": record["summary"]}


def test_predictions_equal_the_printed_accuracy_and_pyg(trained: dict[str, Any]) -> None:
    s = trained["summary"]
    p = gnnpar.load_predictions(trained["run"])
    ds = load_dataset(TINY)
    assert p.pred is not None and p.logits is not None and p.embeddings is not None
    assert p.pred.shape == (ds.num_nodes,) and p.embeddings.shape == (ds.num_nodes, 32)
    assert p.layer == 1 and s["predictions"] == str(trained["run"] / "predictions")
    for split in ("val", "test"):
        idx = getattr(ds, f"{split}_idx")
        assert float((p.pred[idx] == ds.y[idx]).mean()) == pytest.approx(s[f"{split}_acc"])
    export = trained["root"] / "export"
    ref = _reference(export / "model.pt", export / "model.json", TINY)
    assert np.allclose(p.logits, ref, atol=1e-4)  # dataset order, every node


def test_export_reloads_without_gnnpar(trained: dict[str, Any]) -> None:
    export = trained["root"] / "export"
    ds = load_dataset(TINY)
    graph = export / "graph.npz"
    np.savez(graph, x=np.asarray(ds.x), edge_index=np.stack([ds.src, ds.dst]), y=ds.y,
             test_idx=ds.test_idx)
    proc = subprocess.run([sys.executable, "-c", RELOAD, str(export / "model.json"),
                           str(export / "model.pt"), str(graph)], capture_output=True,
                          text=True, timeout=300, cwd=export)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert float(proc.stdout) == pytest.approx(trained["summary"]["test_acc"])


def test_predict_on_a_second_graph(trained: dict[str, Any],
                                   capsys: pytest.CaptureFixture[str]) -> None:
    root = trained["root"]
    out = root / "preds"
    assert predict_main([str(trained["run"]), OTHER, "--nproc", "2", "--out", str(out),
                         "--root", str(root / "data")]) == 0
    assert "logits [900 x 4]" in capsys.readouterr().out
    p = gnnpar.load_predictions(out)
    export = root / "export"
    assert np.allclose(p.logits, _reference(export / "model.pt", export / "model.json", OTHER),
                       atol=1e-4)
    # Another feature width is refused before any worker starts.
    wide = "synthetic:sbm?nodes=300&feat_dim=8&classes=4"
    assert predict_main([str(trained["run"]), wide, "--out", str(root / "bad"),
                         "--root", str(root / "data")]) == 1
    err = capsys.readouterr().err
    assert "8 features" in err and "reads 16 features" in err and not (root / "bad").exists()


def test_incomplete_predictions_are_refused(tmp_path: Path) -> None:
    (tmp_path / "predictions" / "rank-0").mkdir(parents=True)
    with pytest.raises(ConfigError, match="incomplete"):
        gnnpar.load_predictions(tmp_path)
    with pytest.raises(ConfigError, match="--save-predictions"):
        gnnpar.load_predictions(tmp_path / "predictions" / "rank-0")


def test_link_embeddings_from_a_citation2_named_npz(tmp_path: Path) -> None:
    """An .npz in ogbl-citation2's names trains; its embeddings are the PyG encoder's."""
    ds = load_dataset("synthetic:sbm?nodes=800&feat_dim=8&task=link&seed=1")
    np.savez(tmp_path / "cite.npz", x=ds.x, edge_index=np.stack([ds.src, ds.dst]),
             **{f"{s}_{k}": v for s, pos, neg in (
                 ("train", ds.train_edges, None), ("valid", ds.val_edges, ds.val_neg),
                 ("test", ds.test_edges, ds.test_neg))
                for k, v in (("source_node", pos[:, 0]), ("target_node", pos[:, 1]),
                             ("target_node_neg", neg)) if v is not None})
    run = tmp_path / "run"
    assert main([str(tmp_path / "cite.npz"), "--task", "link", "--epochs", "1", "--hidden",
                 "16", "--save-embeddings", "--no-progress", "--out", str(run), "--root",
                 str(tmp_path / "data")]) == 0
    assert json.loads((run / "record.json").read_text())["summary"]["test_mrr"] > 0
    p = gnnpar.load_predictions(run)
    assert p.task == "link" and p.logits is None and p.layer == 2
    assert export_main([str(run), "--out", str(tmp_path / "enc.pt")]) == 0
    spec = json.loads((tmp_path / "enc.json").read_text())
    assert spec["task"] == "link" and spec["decoder"] == "dot"
    model = GraphSAGE(**spec["kwargs"])
    model.load_state_dict(torch.load(tmp_path / "enc.pt", weights_only=True))
    model.eval()
    with torch.no_grad():
        ref = model(torch.from_numpy(np.asarray(ds.x)), torch.from_numpy(np.stack([ds.src,
                                                                                  ds.dst])))
    assert np.allclose(p.embeddings, ref.numpy(), atol=1e-4)

"""Every kind of graph the front door accepts trains with the command a user types.

``gnnpar-train GRAPH --nproc 2`` and nothing else (bar ``--epochs`` for time): a typed
graph in OGB's layout (``--eval auto`` takes the sampled evaluation, ``--reverse auto``
says what it added and merged, ``--save-embeddings`` writes the target type's rows,
checked against PyG's ``SAGEConv`` on the whole graph with the trained weights), and
edge lists with labels or a link task but no split of their own (``--split``'s default
is a random one, stated).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch_geometric.nn import SAGEConv

import gnnpar
from gnnpar.datasets.synthetic import sbm, typed
from gnnpar.train.checkpoint import read_model_state
from gnnpar.train.cli import build_parser, main
from gnnpar.train.predict import main as predict_main
from tests.helpers.ogb_files import write_typed_layout

WIDTH = 4  # every node type's features: the reference needs no learnt rows


def _tiny_mag(root: Path) -> tuple[Path, dict[tuple[str, str, str], np.ndarray]]:
    """A typed graph in OGB's layout that stores one reverse (writes) and a directed
    same-type relation (cites); returns its meta_dict and the relations that
    ``--reverse auto`` makes of it, built here with numpy (the reference's graph)."""
    ds = typed(num_papers=240, num_authors=120, num_venues=12, feat_dim=WIDTH, seed=3)
    rng = np.random.default_rng(0)
    x = {t: np.asarray(ds.x[t]) if t in ds.x else
         rng.standard_normal((n, WIDTH)).astype(np.float32) for t, n in ds.num_nodes.items()}
    src, dst = ds.edges["paper", "cites", "paper"]
    one_way = src < dst
    stored = {("author", "writes", "paper"): ds.edges["author", "writes", "paper"],
              ("paper", "rev_writes", "author"): ds.edges["paper", "rev_writes", "author"],
              ("paper", "published_in", "venue"): ds.edges["paper", "published_in", "venue"],
              ("paper", "cites", "paper"): (src[one_way], dst[one_way])}
    write_typed_layout(root / "tinymag", replace(ds, x=x, edges=stored))
    meta = {"dir_path": str(root / "tinymag"), "split": "time", "num tasks": "1",
            "num classes": str(ds.num_classes), "add_inverse_edge": "False",
            "binary": "False", "is hetero": "True", "name": "tinymag"}
    (root / "tinymag.json").write_text(json.dumps(meta))
    pairs = {et: np.stack([np.asarray(s), np.asarray(d)]) for et, (s, d) in stored.items()}
    cites = pairs["paper", "cites", "paper"]
    pairs["paper", "cites", "paper"] = np.unique(np.concatenate([cites, cites[::-1]], 1), axis=1)
    pairs["venue", "rev_published_in", "paper"] = pairs["paper", "published_in", "venue"][::-1]
    np.savez(root / "x.npz", **x)
    return root / "tinymag.json", pairs


def _reference(run: Path, root: Path, graph: dict[tuple[str, str, str], np.ndarray]
               ) -> tuple[np.ndarray, np.ndarray]:
    """Layer 1's paper rows and the paper logits: PyG's mean ``SAGEConv`` per relation,
    summed per destination type, on the whole graph, with the checkpoint's weights."""
    state = read_model_state(run / "checkpoint")
    x = {t: torch.from_numpy(v) for t, v in np.load(root / "x.npz").items()}
    h: dict[str, torch.Tensor] = x
    outs = []
    for layer in range(2):
        out: dict[str, torch.Tensor] = {}
        for (s, r, d), edges in graph.items():
            prefix = f"convs.{layer}.{s}__{r}__{d}."
            weights = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
            if not weights:
                continue  # a relation the layer does not compute
            conv = SAGEConv((h[s].shape[1], h[d].shape[1]), weights["lin_l.weight"].shape[0],
                            aggr="mean")
            conv.load_state_dict(weights)
            with torch.no_grad():
                rows = conv((h[s], h[d]), torch.from_numpy(np.ascontiguousarray(edges)))
            out[d] = out[d] + rows if d in out else rows
        h = {t: v.relu() for t, v in out.items()} if layer == 0 else out
        outs.append(h["paper"].numpy())
    return outs[0], outs[1]


def test_typed_graph_trains_with_default_flags(tmp_path: Path,
                                               capfd: pytest.CaptureFixture[str]) -> None:
    meta, graph = _tiny_mag(tmp_path)
    run = tmp_path / "run"
    assert main([str(meta), "--nproc", "2", "--epochs", "2", "--save-predictions",
                 "--save-embeddings", "--out", str(run), "--root", str(tmp_path / "data")]) == 0
    out, err = capfd.readouterr()
    # --eval auto: the sampled evaluation, recorded as what the run took; the headline is
    # the best sampled validation accuracy's epoch (the last one's alone when it is that).
    assert re.search(r"test accuracy: +0\.\d+ (sampled \(val 0\.\d+; the last epoch's|at the "
                     r"best validation accuracy \(epoch 1 of 2: val 0\.\d+, on sampled)", out), out
    record = json.loads((run / "record.json").read_text())
    assert record["summary"]["eval"] == record["config"]["train"]["eval"] == "sampled"
    assert json.loads((run / "config.json").read_text())["train"]["eval"] == "sampled"
    # --reverse auto: what it added and merged, per relation, with the edge counts.
    cites = len(graph["paper", "cites", "paper"][0])
    stored = len(graph["author", "writes", "paper"][0]) * 2 + 240 + cites // 2
    assert f"--reverse auto: {stored:,} edges as stored, {stored + 240 + cites // 2:,} now" in err
    assert f"paper__cites__paper: symmetrised, {cites // 2:,} -> {cites:,} edges" in err
    assert ("venue__rev_published_in__paper: added, the reverse of paper__published_in__venue "
            "(240 edges)") in err
    assert "author__writes__paper: kept as stored, its reverse is paper__rev_writes__author" \
        in err
    assert record["partition"]["num_edges"] == sum(len(e[0]) for e in graph.values())
    # --save-embeddings: the target type's layer-1 rows, beside its logits.
    p = gnnpar.load_predictions(run)
    assert p.index["node_type"] == "paper" and p.layer == 1
    assert p.embeddings is not None and p.logits is not None and p.pred is not None
    hidden, logits = _reference(run, tmp_path, graph)
    assert p.embeddings.shape == hidden.shape == (240, 128)
    np.testing.assert_allclose(p.embeddings, hidden, atol=1e-4)
    np.testing.assert_allclose(p.logits, logits, atol=1e-4)
    assert np.array_equal(p.pred, logits.argmax(1))
    # gnnpar-predict cannot run its model, and says where its outputs already are.
    assert predict_main([str(run), str(meta), "--out", str(tmp_path / "preds")]) == 1
    err = capfd.readouterr().err
    assert "is a typed run" in err and f"gnnpar.load_predictions({str(run)!r})" in err


def test_help_shows_the_auto_defaults() -> None:
    text = " ".join(build_parser().format_help().split())
    assert "auto (full, but sampled on a typed graph" in text
    assert "(default: auto)" in text


def _edge_list(root: Path, task: str) -> list[str]:
    """An SBM as files: 3 classes for the node task, 30 for links (a pair is likelier the
    fewer nodes share its class: chance stays ~0.05, what a model can reach rises)."""
    ds = sbm(num_nodes=600, avg_degree=8, num_classes=3 if task == "node" else 30,
             feat_dim=8, homophily=0.9, feature_noise=2.0, seed=4)
    (root / "edges.csv").write_text("src,dst\n" + "".join(
        f"{s},{d}\n" for s, d in zip(ds.src, ds.dst, strict=True)))
    np.save(root / "x.npy", np.asarray(ds.x))
    np.save(root / "y.npy", np.asarray(ds.y))
    return [str(root / "edges.csv"), "--features", str(root / "x.npy"),
            *(["--labels", str(root / "y.npy")] if task == "node" else ["--task", "link"])]


@pytest.mark.parametrize("task,said,figure", [
    ("node", "it has no split, so a random split 0.6,0.2,0.2 of its 600 labelled nodes "
     "(seed 0; --split chooses another): train 360, val 120, test 120.", "test_acc"),
    ("link", "it has no supervision edges, so a random link split 0.85,0.05,0.1 of the edges",
     "test_mrr")])
def test_edge_list_without_a_split_trains(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                          task: str, said: str, figure: str) -> None:
    run = tmp_path / "run"
    assert main([*_edge_list(tmp_path, task), "--epochs", "3", "--out", str(run), "--root",
                 str(tmp_path / "data")]) == 0
    assert said in capfd.readouterr().err
    summary: dict[str, Any] = json.loads((run / "record.json").read_text())["summary"]
    chance = {"test_acc": 1 / 3, "test_mrr": 0.05}[figure]  # 3 classes; 100 candidates
    print(f"{task}: {figure} {summary[figure]:.4f}, chance {chance:.4f}")
    assert summary[figure] > 2.5 * chance, summary

"""Best-valid model selection and ``--early-stop`` (``gnnpar.train.best``, the trainer).

The selection rule is checked on hand-written curves; a real run is checked against PyG:
full mode evaluates exactly every epoch, so the best epoch's validation and test accuracy
must be what single-process PyG computes on the whole graph with the weights
``gnnpar-export --best`` writes, and the last epoch's what the newest checkpoint gives.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gnnpar.datasets.spec import load_dataset
from gnnpar.distributed import shutdown
from gnnpar.errors import ConfigError
from gnnpar.testing.reference import exported_logits
from gnnpar.train.best import BestValid, selection_metric
from gnnpar.train.cli import main
from gnnpar.train.export import main as export_main
from gnnpar.train.trained import read_run

TINY = "synthetic:sbm?nodes=1500&feat_dim=16&classes=4&seed=2&homophily=0.8"
FULL = ["--mode", "full", "--model", "gcn", "--lr", "0.05", "--hidden", "16",
        "--no-progress", "--timeout-s", "60"]


def _entry(epoch: int, val: float | None, **more: Any) -> dict[str, Any]:
    return {"epoch": epoch, "val_acc": val, "test_acc": None if val is None else val / 2,
            "val_mrr": None, "test_mrr": None, "val_hits": None, "test_hits": None, **more}


def test_the_earliest_best_validation_wins_and_patience_counts_evaluations() -> None:
    curve = [0.5, None, 0.7, 0.7, None, 0.6, 0.8, 0.8, 0.79]  # None: not evaluated
    best = BestValid("node", patience=3)
    stops = []
    for epoch, val in enumerate(curve):
        best.update(_entry(epoch, val))
        stops.append(best.exhausted)
    assert best.entry is not None and best.entry["epoch"] == 6 and best.value == 0.8
    assert best.since == 2 and stops == [False] * 9  # 0.8 (epoch 7) ties: no gain
    summary = best.summary("OUT/best")
    assert summary is not None and summary["test_acc"] == 0.4 and summary["metric"] == "val_acc"
    assert summary["evaluations_after"] == 2 and summary["checkpoint"] == "OUT/best"
    best.update(_entry(9, 0.1))
    assert best.exhausted  # 3 evaluations since epoch 6
    again = BestValid.replay([_entry(e, v) for e, v in enumerate(curve)], "node", 3)
    assert again.entry is not None and (again.entry["epoch"], again.since) == (6, 2)
    assert not BestValid("node", patience=0).exhausted
    assert BestValid("node").summary(None) is None


def test_min_epochs_hold_off_the_early_stop() -> None:
    best = BestValid("node", patience=1, min_epochs=4)
    for epoch, val in enumerate([0.5, 0.4, 0.3]):  # the dip after the first evaluation
        best.update(_entry(epoch, val))
    assert best.since == 2 and not best.exhausted
    best.update(_entry(3, None))  # not evaluated: a run stops only after an evaluation
    assert not best.exhausted
    best.update(_entry(4, 0.45))
    assert best.exhausted and best.entry is not None and best.entry["epoch"] == 0


def test_link_runs_select_by_mrr_or_hits_at_50_with_shared_negatives() -> None:
    assert selection_metric(_entry(0, None, val_mrr=0.3), "link") == ("val_mrr", 0.3)
    hits = {"hits@10": 0.2, "hits@50": 0.4}
    assert selection_metric(_entry(0, None, val_hits=hits), "link") == ("val_hits@50", 0.4)
    assert selection_metric(_entry(0, 0.9), "link") is None  # a link run has no accuracy
    assert selection_metric(_entry(0, 0.9), "node") == ("val_acc", 0.9)


def _pyg_accuracy(run: Path, tmp: Path, best: bool) -> dict[str, float]:
    """Validation and test accuracy of the exported model, by PyG on the whole graph."""
    out = tmp / ("best.pt" if best else "last.pt")
    assert export_main([str(run), "--out", str(out), *(["--best"] if best else [])]) == 0
    ds = load_dataset(TINY)
    pred = exported_logits(out, out.with_suffix(".json"), ds).argmax(-1)
    return {f"{s}_acc": float((pred[idx] == ds.y[idx]).mean())
            for s, idx in (("val", ds.val_idx), ("test", ds.test_idx))}


def _train(*args: str) -> dict[str, Any]:
    try:
        assert main([TINY, *FULL, *args]) == 0
    finally:
        shutdown()
    return dict(json.loads((Path(args[args.index("--out") + 1]) / "record.json").read_text()))


def test_early_stop_keeps_the_best_epoch_as_pyg_scores_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run, root = tmp_path / "run", ["--root", str(tmp_path / "data")]
    record = _train("--epochs", "40", "--early-stop", "2", "--out", str(run), *root)
    epochs, s = record["epochs"], record["summary"]
    vals = [e["val_acc"] for e in epochs]
    top = vals.index(max(vals))  # the earliest of the best
    assert s["stopped_early"] and len(epochs) == top + 3 < 40, vals
    assert s["best"]["epoch"] == top and s["best"]["val_acc"] == vals[top]
    assert s["best"]["checkpoint"] == str(run / "best") and "best" in record["files"]
    out = capsys.readouterr().out
    assert f"at the best validation accuracy (epoch {top + 1} of {top + 3}" in out
    assert "stopped early, 2 evaluations without a gain" in out and "last epoch:" in out
    best = _pyg_accuracy(run, tmp_path, best=True)
    assert best == pytest.approx({"val_acc": vals[top], "test_acc": epochs[top]["test_acc"]})
    last = _pyg_accuracy(run, tmp_path, best=False)
    assert last == pytest.approx({"val_acc": vals[-1], "test_acc": epochs[-1]["test_acc"]})
    # Resumed without early stopping: the selection continues over the whole record.
    more = _train("--epochs", str(len(epochs) + 3), "--early-stop", "0", "--out", str(run),
                  "--resume", *root)
    vals = [e["val_acc"] for e in more["epochs"]]
    assert len(vals) == len(epochs) + 3 and not more["summary"]["stopped_early"]
    assert more["summary"]["best"]["epoch"] == vals.index(max(vals))
    assert read_run(run, best=True).weights == run / "best"


def test_no_best_model_without_save_best(tmp_path: Path) -> None:
    run = tmp_path / "run"
    record = _train("--epochs", "2", "--no-save-best", "--out", str(run),
                    "--root", str(tmp_path / "data"))
    assert record["summary"]["best"]["checkpoint"] is None and "best" not in record["files"]
    assert not (run / "best").exists()
    with pytest.raises(ConfigError, match="no best-valid model") as exc:
        read_run(run, best=True)
    assert exc.value.fix == "drop --best to use the newest checkpoint."

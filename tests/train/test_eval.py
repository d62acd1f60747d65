"""``--eval``: what a run ends with, and the summary saying which (shared 2-rank run).

The same training (1 epoch, the same batches) ends four ways: exact full-neighbour
inference with the default budget and in 1 KiB chunks (the same figures), the last
sampled evaluation as final, and no final evaluation.
"""

from __future__ import annotations

from typing import Any

from gnnpar.train.cli import format_summary


def _runs(two_ranks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    runs: dict[str, dict[str, Any]] = two_ranks[0]["eval"]
    return runs


def test_training_is_the_same_whatever_the_evaluation(two_ranks: list[dict[str, Any]]) -> None:
    losses = {name: [e["train_loss"] for e in r["epochs"]] for name, r in _runs(two_ranks).items()}
    assert len(set(map(tuple, losses.values()))) == 1, losses


def test_full_neighbour_inference_in_chunks_gives_the_same_figures(
        two_ranks: list[dict[str, Any]]) -> None:
    runs = _runs(two_ranks)
    full, chunked = runs["full"]["summary"], runs["full_chunked"]["summary"]
    assert full["eval"] == chunked["eval"] == "full"
    for key in ("train_acc", "val_acc", "test_acc"):
        assert full[key] == chunked[key] and 0.2 < full[key] <= 1.0, key
    assert full["eval_comm"]["halo"] == chunked["eval_comm"]["halo"]  # one exchange a layer
    assert "full-neighbour" in format_summary(runs["full"])


def test_sampled_reports_the_last_sampled_evaluation(two_ranks: list[dict[str, Any]]) -> None:
    record = _runs(two_ranks)["sampled"]
    s, last = record["summary"], record["epochs"][-1]
    assert s["eval"] == "sampled" and s["train_acc"] is None and s["eval_comm"] == {}
    assert s["test_acc"] == s["test_acc_sampled"] == last["test_acc"]
    assert s["val_acc"] == s["val_acc_sampled"] == last["val_acc"]
    assert "on sampled neighbourhoods" in format_summary(record)


def test_none_skips_the_final_evaluation(two_ranks: list[dict[str, Any]]) -> None:
    record = _runs(two_ranks)["none"]
    s = record["summary"]
    assert s["eval"] == "none" and s["eval_comm"] == {}
    assert s["train_acc"] is s["val_acc"] is s["test_acc"] is None
    assert s["test_acc_sampled"] is not None  # the epochs' own evaluation still runs
    text = format_summary(record)
    assert "--eval none" in text and "full-neighbour inference" not in text

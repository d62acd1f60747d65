"""Distributed training reaches the accuracy of single-process PyG training.

On an SBM where a 2-layer GraphSAGE clearly beats a features-only MLP, the same PyG
model with the same hyper-parameters is trained three ways: gnnpar with 1 part (in the
test's process, a world of one), gnnpar with 2 METIS parts (2 processes), and in one
process through the reference sampler of ``_reference`` (independent of gnnpar's
sampler, loader and trainer).  All three test accuracies — gnnpar's exact
full-neighbour inference, the reference's whole-graph forward — agree within one point,
and gnnpar's sampled test accuracies too.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from gnnpar.distributed import shutdown
from gnnpar.models.node import build_model
from gnnpar.testing import reference as _reference
from gnnpar.train.config import ModelConfig
from tests.helpers import workers as _workers


@pytest.fixture(scope="module")
def results(two_ranks: list[dict[str, Any]], accuracy_parts: dict[int, str],
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("accuracy-1")
    cfg = _workers.small_config(str(out), **_workers.ACCURACY)
    ds = _reference.accuracy_graph()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # like each rank; more threads than cores only slow it down
    try:
        # One part needs one process: this one (a world of one, no launcher environment).
        one = [_workers.train(accuracy_parts[1], cfg)]
        torch.manual_seed(0)
        model = build_model(ModelConfig(hidden=cfg.model.hidden), ds.feat_dim, ds.num_classes)
        ref = _reference.train_reference(ds, model, list(cfg.sample.fanouts),
                                         cfg.sample.batch_size, cfg.train.epochs, cfg.train.lr,
                                         seed=0)
        mlp = _reference.mlp_accuracy(ds, cfg.model.hidden)
    finally:
        shutdown()
        torch.set_num_threads(threads)
    return {1: one, 2: [r["accuracy"] for r in two_ranks], "reference": ref, "mlp": mlp}


def test_gnn_beats_mlp(results: dict[str, Any]) -> None:
    assert results["reference"]["test_acc"] > results["mlp"] + 0.2


def test_one_and_two_parts_match_reference(results: dict[str, Any]) -> None:
    ref = results["reference"]["test_acc"]
    s1 = results[1][0]["summary"]
    s2 = results[2][0]["summary"]
    for s in (s1, s2):
        assert abs(s["test_acc"] - ref) <= 0.01, (s["test_acc"], ref)
        assert abs(s["test_acc_sampled"] - ref) <= 0.01, (s["test_acc_sampled"], ref)
    assert abs(s1["test_acc"] - s2["test_acc"]) <= 0.01
    assert abs(s1["test_acc_sampled"] - s2["test_acc_sampled"]) <= 0.01


def test_every_rank_reports_the_same_summary(results: dict[str, Any]) -> None:
    ranks = results[2]
    assert [r["rank"] for r in ranks] == [0, 1]
    for key in ("test_acc", "val_acc", "test_acc_sampled", "val_acc_sampled"):
        assert ranks[0]["summary"][key] == ranks[1]["summary"][key]
    for name, value in ranks[0]["params"].items():  # DDP kept the replicas equal
        assert np.array_equal(value, ranks[1]["params"][name]), name


def test_record_has_comm_by_kind(results: dict[str, Any]) -> None:
    s = results[2][0]["summary"]
    comm = s["comm_per_epoch"]
    # Both ranks on this machine read each other's parts: only the gradients travel.
    assert set(comm) == {"grad"} and comm["grad"]["bytes"] > 0
    assert s["eval_comm"]["halo"]["rows"] > 0
    assert s["sampled_edges_per_s"] > 0 and s["epoch_time_s"] > 0
    one = results[1][0]["summary"]
    assert all(c["bytes"] == 0 for c in one["comm_per_epoch"].values())

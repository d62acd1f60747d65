"""Full-graph training (``--mode full``) with the communication reducers, and its resume."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gnnpar.artifacts.files import json_digest
from tests.helpers.nn_cases import RESUME_EPOCHS

WORLD2 = pytest.mark.parametrize("nn_run", [2], indirect=True, ids=["world2"])


@WORLD2
def test_exact_training_learns_the_sbm(nn_run: dict[str, Any]) -> None:
    exact = nn_run["ranks"][0]["train"]["exact"]
    assert exact["losses"][-1] < 0.3 * exact["losses"][0]
    assert exact["acc"]["test_acc"] >= 0.85


@WORLD2
def test_boundary_sampling_p01_converges_with_a_tenth_of_the_bytes(
        nn_run: dict[str, Any]) -> None:
    train = nn_run["ranks"][0]["train"]
    exact, bns = train["exact"], train["bns_p0.1"]
    assert bns["acc"]["test_acc"] >= max(0.85, exact["acc"]["test_acc"] - 0.05)
    assert 0.05 <= bns["halo_bytes"] / exact["halo_bytes"] <= 0.2


@WORLD2
def test_stale_halos_start_exact_and_converge(nn_run: dict[str, Any]) -> None:
    train = nn_run["ranks"][0]["train"]
    exact, stale = train["exact"], train["stale"]
    assert stale["losses"][0] == exact["losses"][0]
    assert stale["losses"][1] != exact["losses"][1]
    assert stale["acc"]["test_acc"] >= max(0.85, exact["acc"]["test_acc"] - 0.05)
    assert stale["halo_bytes"] == exact["halo_bytes"]


@WORLD2
def test_every_rank_reports_the_same_all_reduced_figures(nn_run: dict[str, Any]) -> None:
    r0, r1 = (r["train"] for r in nn_run["ranks"])
    for name in r0:
        assert r0[name]["losses"] == r1[name]["losses"]
        assert r0[name]["acc"] == r1[name]["acc"]


@WORLD2
def test_full_graph_run_records_checkpoints_and_resumes_exactly(nn_run: dict[str, Any]) -> None:
    res = nn_run["ranks"][0]["resume"]
    full, resumed = res["full"], res["resumed"]
    assert full["config"]["train"]["mode"] == "full" and full["env"]["world_size"] == 2
    assert [e["epoch"] for e in full["epochs"]] == list(range(RESUME_EPOCHS))
    for e in full["epochs"]:
        assert e["comm"]["halo"]["bytes"] > 0 and e["comm"]["grad"]["bytes"] > 0
        assert e["sampled_edges"] is None and 0 <= e["val_acc"] <= 1
    root = nn_run["root"]
    assert (root / "resume" / "parts" / "checkpoint" / "state.json").is_file()
    on_disk = json.loads((root / "resume" / "full" / "record.json").read_text())
    assert on_disk.pop("digest") == json_digest(on_disk) and on_disk == full
    for a, b in zip(full["epochs"], resumed["epochs"], strict=True):
        assert abs(a["train_loss"] - b["train_loss"]) <= 1e-6
        assert a["val_acc"] == b["val_acc"]
    assert resumed["summary"]["test_acc"] == full["summary"]["test_acc"]

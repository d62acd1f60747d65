"""Every mode's bytes by kind, training and evaluation apart, against an independent count.

The expected figures come from the partition files (each part's halo ids and id range),
the model's shapes (parameter counts written out by hand) and, for sampled minibatches,
the batches themselves (which nodes are remote, at which hop) —
never from gnnpar's counters.  A run of 3 epochs evaluates after epochs 2 and 3 only, so
an evaluation that leaked into the training figures (or the reverse) would show.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gnnpar.artifacts.files import json_digest

F, H, C, W = 16, 32, 8, 2  # small_graph: 16 features, 8 classes; hidden 32; 2 ranks


@pytest.fixture(scope="module")
def runs(two_ranks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``_workers.byte_runs`` on each rank (of the shared 2-rank run)."""
    return [rank["bytes"] for rank in two_ranks]


def _halo_rows(part_dir: str) -> int:
    """Halo rows every layer exchanges: the halo nodes of all parts."""
    return sum(len(np.load(Path(part_dir) / f"part-{k}" / "halo_gids.npy")) for k in range(W))


def _ring(params: int) -> int:
    """Bytes all ranks send in the ring all-reduce of ``params`` float32 gradients."""
    return W * round(2 * (W - 1) / W * 4 * params)


def _bytes(comm: dict[str, dict[str, int]]) -> dict[str, int]:
    return {k: v["bytes"] for k, v in comm.items()}


def test_full_graph_bytes_by_kind(runs: list[dict[str, Any]],
                                  small_parts: dict[int, str]) -> None:
    record = runs[0]["full"]["record"]
    halo = _halo_rows(small_parts[2])
    gcn_params = F * H + H + H * C + C  # GCNConv: lin weight (no bias) + bias, twice
    # GCN exchanges lin(x): H numbers per halo row in layer 1, C in layer 2.
    forward = {"halo": halo * (H + C) * 4}
    steady = {**forward, "halo_grad": halo * (H + C) * 4, "grad": _ring(gcn_params)}
    first = {**steady, "halo_setup": halo * 4}  # the halo nodes' degrees, float32, once
    epochs = record["epochs"]
    assert _bytes(epochs[0]["comm"]) == first
    for e in epochs[1:]:
        assert _bytes(e["comm"]) == steady
    assert [e["eval_comm"] != {} for e in epochs] == [False, True, True]
    for e in epochs[1:]:
        assert _bytes(e["eval_comm"]) == forward  # exact forward only: no gradients
    # The final inference, layer by layer, fetches the halo nodes' degrees once more.
    assert _bytes(record["summary"]["eval_comm"]) == {**forward, "halo_setup": halo * 4}
    for e in epochs:
        assert e["comm"]["halo"]["rows"] == 2 * halo


def test_minibatch_bytes_by_kind(runs: list[dict[str, Any]],
                                 small_parts: dict[int, str]) -> None:
    record = runs[0]["sample"]["record"]
    sage_params = 2 * F * H + H + 2 * H * C + C  # SAGEConv: lin_l (bias) + lin_r, twice
    row = F * 4  # x float32 (labels are the seeds' own, read locally)
    for epoch, entry in enumerate(record["epochs"]):
        per_rank = [r["sample"]["counts"][epoch] for r in runs]
        steps = per_rank[0]["steps"]
        assert all(c["steps"] == steps for c in per_rank)
        rows = sum(c["feature_rows"] for c in per_rank)
        want = {"feature": rows * row, "feature_ids": rows * 8,
                "sample": sum(c["sample_bytes"] for c in per_rank),
                "grad": steps * _ring(sage_params)}
        assert _bytes(entry["comm"]) == want, epoch
        assert entry["comm"]["feature"]["rows"] == rows
    assert [e["eval_comm"] != {} for e in record["epochs"]] == [False, True, True]
    for e in record["epochs"][1:]:  # sampled evaluation: gathers and sampling, no grads
        assert set(e["eval_comm"]) == {"feature", "feature_ids", "sample"}
        assert e["eval_comm"]["feature"]["bytes"] > 0
    # Final full-neighbour inference: SAGE exchanges its input, F per halo row, but a layer
    # narrower than half its input (the last: 2 C < H) its two linear maps, 2 C per halo
    # row; after the halo plan's one exchange of halo ids.
    halo = _halo_rows(small_parts[2])
    assert 2 * C < H
    assert _bytes(record["summary"]["eval_comm"]) == {"halo": halo * (F + 2 * C) * 4,
                                                      "halo_setup": halo * 8}


def test_colocated_ranks_read_in_place_and_train_the_same_model(
        runs: list[dict[str, Any]]) -> None:
    """The ranks share this machine: with peer reads nothing but the gradients travel, and
    the batches, hence every update, are those of the exchanging run."""
    exchanged, local = runs[0]["sample"], runs[0]["sample-peers"]
    assert [set(e["comm"]) for e in local["record"]["epochs"]] == [{"grad"}] * 3
    assert [e["comm"]["grad"] for e in local["record"]["epochs"]] == [
        e["comm"]["grad"] for e in exchanged["record"]["epochs"]]
    assert local["counts"] == exchanged["counts"]  # the same batches, step by step
    for name, value in exchanged["params"].items():
        np.testing.assert_array_equal(local["params"][name], value, err_msg=name)


def test_record_on_disk_is_the_returned_one(runs: list[dict[str, Any]]) -> None:
    for mode in ("sample", "full"):
        record = runs[0][mode]["record"]
        on_disk = json.loads(Path(record["summary"]["record"]).read_text())
        assert on_disk.pop("digest") == json_digest(on_disk)  # the file's own digest
        assert on_disk == record and on_disk["status"] == "complete"
        assert runs[1][mode]["record"]["epochs"] == record["epochs"]  # all-reduced

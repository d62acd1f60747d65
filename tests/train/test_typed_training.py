"""``Trainer`` on a typed partition: accuracy against PyG and 1 rank, resume, embeddings.

The synthetic typed graph (papers labelled through their venue and authors) is trained
by gnnpar on 1 and 2 gloo ranks (sampled minibatches, relation-wise GraphSAGE, sharded
embeddings for the featureless author and venue nodes) and by single-process PyG on the
whole graph (``to_hetero`` GraphSAGE, full batch, ``nn.Embedding`` + ``SparseAdam``, the
same hidden width and learning rates): the test accuracies agree within one point, and
beat homogeneous GraphSAGE on the homogeneous view by far.  The ranks are those of
``conftest.typed_runs`` (shared with ``test_typed_runtime``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gnnpar.datasets.graph import GraphDataset
from gnnpar.datasets.typed import TypedGraphDataset
from gnnpar.testing import typed_reference as R


@pytest.fixture(scope="module")
def graph(training_graph: TypedGraphDataset) -> TypedGraphDataset:
    return training_graph


@pytest.fixture(scope="module")
def featureless(featureless_graph: GraphDataset) -> GraphDataset:
    """A homogeneous graph without features (its nodes learn their input rows)."""
    return featureless_graph


@pytest.fixture(scope="module")
def runs(typed_runs: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """``one``: the 1-rank training; ``two``, ``resume``, ``featureless``: each rank's."""
    two = typed_runs[2]["ranks"]
    return {"one": typed_runs[1]["ranks"][0]["one"],
            **{job: [r[job] for r in two] for job in ("two", "resume", "featureless")}}


def test_two_ranks_match_one_rank_and_pyg(graph: TypedGraphDataset, runs: Any) -> None:
    t = R.TYPED
    pyg = R.typed_accuracy(graph, hidden=t["hidden"], epochs=100, lr=t["lr"],
                           sparse_lr=t["sparse_lr"])
    homogeneous = R.homogeneous_accuracy(graph, hidden=t["hidden"], epochs=100, lr=t["lr"])
    one = runs["one"]["summary"]["test_acc"]
    two = runs["two"][0]["summary"]["test_acc"]
    print(f"gnnpar 1 rank {one:.4f}, 2 ranks {two:.4f}; PyG to_hetero {pyg:.4f}, "
          f"homogeneous {homogeneous:.4f}")
    assert abs(two - one) <= 0.01
    assert abs(two - pyg) <= 0.01
    assert two > homogeneous + 0.1


def test_record_counts_embedding_bytes(runs: Any) -> None:
    summary = runs["two"][0]["summary"]
    comm = summary["comm_per_epoch"]
    for kind in ("sample", "feature", "embedding", "embedding_grad", "grad"):
        assert comm[kind]["bytes"] > 0, kind


def test_resume_restores_model_and_embeddings(runs: Any) -> None:
    for rank in runs["resume"]:
        full, resumed = rank["full"], rank["resumed"]
        assert rank["steps"] >= 4
        assert np.array_equal(full["embedding_ids"], resumed["embedding_ids"])
        for key, value in full.items():
            assert np.array_equal(resumed[key], value), key


def test_featureless_graph_learns_embeddings(featureless: GraphDataset, runs: Any) -> None:
    """A homogeneous graph without features: a sharded learnable row per node, as PyG's
    GraphSAGE on ``nn.Embedding`` rows (full batch, SparseAdam) learns them."""
    ds, ranks = featureless, runs["featureless"]
    summary = ranks[0]["summary"]
    pyg = R.featureless_accuracy(ds, hidden=R.TYPED["hidden"], lr=R.TYPED["lr"],
                                 sparse_lr=R.TYPED["sparse_lr"])
    print(f"gnnpar 2 ranks {summary['test_acc']:.4f} (full-neighbour), PyG {pyg:.4f}")
    assert summary["eval"] == "full" and summary["test_acc"] >= pyg - 0.01
    assert sum(r["rows"] for r in ranks) == ds.num_nodes  # each row held by one rank
    assert "feature" not in summary["comm_per_epoch"]  # no feature rows to gather

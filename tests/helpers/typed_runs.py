"""Session fixtures of the typed tests: one spawned run per world size (1, 2, 4).

Starting ranks costs more than the typed batches and trainings, so the sampling and
embedding checks of ``test_typed_runtime`` (on its small typed graph, 1, 2 and 4 ranks)
and the trainings of ``test_typed_training`` (on its own typed graph and a featureless
one, 1 and 2 ranks) are jobs of the same spawned ranks: :func:`typed_runs`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from gnnpar.datasets.graph import GraphDataset
from gnnpar.datasets.synthetic import sbm, typed
from gnnpar.datasets.typed import TypedGraphDataset
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.writer import partition_graph
from gnnpar.testing import run_multiproc
from tests.helpers import typed_train as T
from tests.helpers import typed_workers as W

RUNTIME_WORLDS = (1, 2, 4)
"""World sizes of the sampling and embedding checks."""


@pytest.fixture(scope="session")
def runtime_graph() -> TypedGraphDataset:
    """The typed graph of ``test_typed_runtime``."""
    return typed(num_papers=400, num_authors=200, num_venues=12, feat_dim=6, seed=2)


@pytest.fixture(scope="session")
def runtime_steps(runtime_graph: TypedGraphDataset) -> list[tuple[np.ndarray, np.ndarray]]:
    """Embedding batches: author ids (homogeneous, with repeats) and upstream gradients."""
    rng = np.random.default_rng(0)
    layout = runtime_graph.layout()
    start = layout.node_offsets[layout.type_index("author")]
    return [(start + rng.integers(0, 40, 24), rng.standard_normal((24, W.EMBED_DIM))
             .astype(np.float32)) for _ in range(3)]


@pytest.fixture(scope="session")
def training_graph() -> TypedGraphDataset:
    """The typed graph of ``test_typed_training``."""
    return typed(venue_homophily=0.98, author_homophily=0.95, seed=1)


@pytest.fixture(scope="session")
def featureless_graph() -> GraphDataset:
    """A homogeneous graph without features (its nodes learn their input rows)."""
    return replace(sbm(num_nodes=4000, avg_degree=8, num_classes=4, feat_dim=4,
                       homophily=0.7, seed=0), x=None)


@pytest.fixture(scope="session")
def typed_runs(runtime_graph: TypedGraphDataset,
               runtime_steps: list[tuple[np.ndarray, np.ndarray]],
               training_graph: TypedGraphDataset, featureless_graph: GraphDataset,
               tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, Any]]:
    """Per world size: ``runtime``, the runtime graph's partition directory, and ``ranks``,
    every rank's ``{job: result}``: ``runtime`` (``typed_workers.sample_and_embed``) at
    every size; ``one`` (``train_typed``) at 1 rank; ``two``, ``resume`` and
    ``featureless`` (``train_typed``, ``resume_typed``, ``train_featureless``) at 2."""
    root = tmp_path_factory.mktemp("typed")
    for k in (1, 2):
        partition_graph(training_graph, root / f"train-k{k}", PartitionConfig(num_parts=k))
    partition_graph(featureless_graph, root / "featureless", PartitionConfig(num_parts=2))
    todo: dict[int, dict[str, tuple[str, tuple[Any, ...]]]] = {
        1: {"one": ("train_typed", (str(root / "train-k1"), str(root / "one")))},
        2: {"two": ("train_typed", (str(root / "train-k2"), str(root / "two"))),
            "resume": ("resume_typed", (str(root / "train-k2"), str(root / "resume"))),
            "featureless": ("train_featureless", (str(root / "featureless"),
                                                  str(root / "featureless-run")))},
        4: {}}
    out = {}
    for k in RUNTIME_WORLDS:
        runtime = root / f"runtime-k{k}"
        partition_graph(runtime_graph, runtime, PartitionConfig(num_parts=k))
        jobs = {"runtime": ("sample_and_embed", (str(runtime), runtime_steps)), **todo[k]}
        out[k] = {"runtime": str(runtime), "ranks": run_multiproc(T.jobs, k, jobs)}
    return out

"""Fixtures of the trainer tests: test graphs and their partitions."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from gnnpar.datasets.graph import GraphDataset  # noqa: E402
from gnnpar.datasets.synthetic import sbm  # noqa: E402
from gnnpar.partition import partition_graph  # noqa: E402


@pytest.fixture(scope="session")
def small_graph() -> GraphDataset:
    """2,000 nodes, 8 classes: a few steps per epoch at batch 64."""
    return sbm(num_nodes=2000, avg_degree=10.0, num_classes=8, feat_dim=16, seed=3)


@pytest.fixture(scope="session")
def small_parts(small_graph: GraphDataset, tmp_path_factory: pytest.TempPathFactory) -> dict[int, str]:
    """METIS partitions of ``small_graph`` into 2 and 4 parts: ``{K: directory}``."""
    root = tmp_path_factory.mktemp("small-parts")
    out = {}
    for k in (2, 4):
        partition_graph(small_graph, k, root / f"k{k}")
        out[k] = str(root / f"k{k}")
    return out

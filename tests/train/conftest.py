"""Fixtures of the trainer tests: test graphs, their partitions, and one grouped 2-rank run.

Starting ranks costs more than the trainings themselves, so the 2-rank checks that leave
the process group healthy (accuracy, resume, bad input, ``--eval``, local SGD, bytes by
kind) share one spawned run,
:func:`two_ranks`; failure tests and the 1-rank and 4-rank runs have their own.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from gnnpar.datasets.graph import GraphDataset
from gnnpar.datasets.synthetic import sbm
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.writer import partition_graph
from gnnpar.testing import reference as _reference
from gnnpar.testing import run_multiproc
from tests.helpers import workers as _workers


@pytest.fixture(scope="session")
def small_graph() -> GraphDataset:
    """2,000 nodes, 8 classes: a few steps per epoch at batch 64."""
    return sbm(num_nodes=2000, avg_degree=10.0, num_classes=8, feat_dim=16, seed=3)


@pytest.fixture(scope="session")
def small_parts(small_graph: GraphDataset,
                tmp_path_factory: pytest.TempPathFactory) -> dict[int, str]:
    """METIS partitions of ``small_graph`` into 2 and 4 parts: ``{K: directory}``."""
    root = tmp_path_factory.mktemp("small-parts")
    for k in (2, 4):
        partition_graph(small_graph, root / f"k{k}", PartitionConfig(num_parts=k))
    return {k: str(root / f"k{k}") for k in (2, 4)}


@pytest.fixture(scope="session")
def accuracy_parts(tmp_path_factory: pytest.TempPathFactory) -> dict[int, str]:
    """Partitions of the accuracy graph into 1 and 2 parts."""
    root = tmp_path_factory.mktemp("accuracy-parts")
    ds = _reference.accuracy_graph()
    for k in (1, 2):
        partition_graph(ds, root / f"k{k}", PartitionConfig(num_parts=k))
    return {k: str(root / f"k{k}") for k in (1, 2)}


def corrupt_copy(src: str, dst: Path) -> str:
    """A copy of a partition whose ``part-1/feat.npy`` has one byte flipped."""
    shutil.copytree(src, dst)
    feat = dst / "part-1" / "feat.npy"
    data = bytearray(feat.read_bytes())
    data[-1] ^= 0xFF
    feat.write_bytes(bytes(data))
    return str(dst)


@pytest.fixture(scope="session")
def two_ranks(small_parts: dict[int, str], accuracy_parts: dict[int, str],
              tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """One 2-rank run: the accuracy training, the resume scenarios, the bad inputs, the
    ``--eval`` settings, local SGD, and the byte counts of both modes."""
    root = tmp_path_factory.mktemp("two-ranks")
    cfg = _workers.small_config(str(root / "bad-run"))
    bad: dict[str, Any] = {
        "world_mismatch": (small_parts[4], cfg),
        "corrupted_part": (corrupt_copy(small_parts[2], root / "corrupted"), cfg),
        "fanout_zero": (small_parts[2], _workers.configure(cfg, fanouts=(10, 0))),
        "fanout_negative": (small_parts[2], _workers.configure(cfg, fanouts=(-1, 5))),
        "batch_size_zero": (small_parts[2], _workers.configure(cfg, batch_size=0)),
        "missing_dir": (str(root / "nowhere"), cfg),
    }
    todo = {
        "accuracy": ("train", (accuracy_parts[2],
                               _workers.small_config(str(root / "accuracy"), **_workers.ACCURACY))),
        "resume": ("resume", (small_parts[2], str(root / "resume"))),
        "bad_inputs": ("bad_inputs", (bad,)),
        "eval": ("eval_runs", (small_parts[2], str(root / "eval"))),
        "local_sgd": ("local_sgd_runs", (small_parts[2], str(root / "local-sgd"))),
        "local_sgd_resume": ("local_sgd_resume", (small_parts[2],
                                                  str(root / "local-sgd-resume"))),
        "bytes": ("byte_runs", (small_parts[2], str(root / "bytes"))),
    }
    return run_multiproc(_workers.jobs, 2, todo, timeout=600)

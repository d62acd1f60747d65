"""Session fixtures of the gnnpar.nn tests: one spawned run per world size (1, 2, 4).

Process start-up (importing torch and PyG) costs seconds per rank on a loaded 2-core
machine, so each world size runs once and the tests read its results: exactness on two
partitioned graphs at every size, of the layers and of layer-wise inference; at 2 ranks
also training with the communication reducers and resuming full-graph training, both
through the Trainer; at 2 and 4 ranks the 3D-parallel layers against PyG (``test_grid``,
on a graph of its own), and at 4 ranks the Trainer's 3D-parallel runs.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch.distributed as dist

import gnnpar.distributed as gdist
from gnnpar.datasets.synthetic import sbm
from gnnpar.partition.config import PartitionConfig
from gnnpar.partition.writer import partition_graph
from gnnpar.testing import run_multiproc
from tests.helpers import grid_cases as gc
from tests.helpers import nn_cases as cases

TRAIN_EPOCHS = cases.TRAIN_EPOCHS
TRAIN_CONFIGS, RESUME_EPOCHS = cases.TRAIN_CONFIGS, cases.RESUME_EPOCHS


@pytest.fixture(scope="session")
def nn_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, Any]]:
    """:func:`nn_run` of every world size (1, 2, 4): one grouped run each."""
    return {world: _grouped_run(world, tmp_path_factory) for world in (1, 2, 4)}


@pytest.fixture(scope="session", params=[1, 2, 4], ids=lambda w: f"world{w}")
def nn_run(request: pytest.FixtureRequest, nn_runs: dict[int, dict[str, Any]]
           ) -> dict[str, Any]:
    """Partitions into ``world`` parts, and every rank's results of the grouped run."""
    return nn_runs[request.param]


def _grouped_run(world: int, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp(f"nn-world{world}")
    directed = cases.directed_graph()
    feedforward, assignment = cases.feedforward_graph(world)
    partition_graph(directed, root / "directed",
                    PartitionConfig(num_parts=world, partitioner="random", seed=0))
    partition_graph(feedforward, root / "feedforward", PartitionConfig(num_parts=world),
                    assignment=assignment)
    datasets = {"directed": directed, "feedforward": feedforward}
    weights = {k: cases.loss_weights(d.num_nodes) for k, d in datasets.items()}
    dirs = {k: str(root / k) for k in datasets}
    tasks: dict[str, tuple[str, tuple[Any, ...]]] = {
        "exact": ("exact", (dirs, weights)), "inference": ("inference", (dirs,))}
    if world == 2:
        # Features alone: ~59% test accuracy (2-layer MLP); exact 2-layer GCN: ~95%.
        graph = sbm(num_nodes=2000, avg_degree=10, num_classes=4, feat_dim=16, seed=0,
                    homophily=0.7, feature_noise=3.0)
        partition_graph(graph, root / "sbm-random",
                        PartitionConfig(num_parts=2, partitioner="random", seed=0))
        partition_graph(graph, root / "sbm-metis",
                        PartitionConfig(num_parts=2, partitioner="metis", seed=0))
        tasks["train"] = ("train", (str(root / "sbm-random"), str(root / "runs"), TRAIN_EPOCHS,
                                    TRAIN_CONFIGS))
        tasks["resume"] = ("resume", (str(root / "sbm-metis"), str(root / "resume"),
                                      RESUME_EPOCHS))
    grid_graph = None
    if world in gc.GRIDS:  # test_grid's graph: 53 nodes, 3 classes, every split uneven
        grid_graph = cases.directed_graph(num_nodes=gc.NUM_NODES)
        partition_graph(grid_graph, root / "grid",
                        PartitionConfig(num_parts=world, partitioner="random", seed=0))
        tasks["grid_errors"] = ("grid_errors", (str(root / "grid"), grid_graph,
                                                gc.GRIDS[world]))
        if world == 4:
            tasks["grid_train"] = ("grid_train", (str(root / "grid"), str(root / "grid-runs"),
                                                  gc.TRAIN_GRID, gc.EPOCHS))
    if world == 1:  # a one-process gloo group needs no spawn
        started = not dist.is_initialized()
        ranks = [cases.worker(tasks)]
        if started:
            gdist.shutdown()
    else:
        ranks = run_multiproc(cases.worker, world, tasks, timeout=600)
    return {"world": world, "root": root, "datasets": datasets, "weights": weights,
            "dirs": dirs, "ranks": ranks, "grid_dataset": grid_graph}

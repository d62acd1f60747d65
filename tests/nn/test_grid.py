"""3D-parallel full-graph layers (``--grid X,Y,Z``) against single-process PyG, on gloo.

Every rank checks its own blocks against PyG's ``GCN`` / ``GraphSAGE`` on the whole graph
(3 layers, so all three rotations of the grid run): the features and labels it holds,
its logits, and the whole gradient of every weight.  The grids of 2 ranks run on 2
processes, those of 4 on 4.  The Trainer's run at 2,1,2 is compared, weight for weight,
with full-batch Adam training of the PyG model in this process, and its resumed run with
the uninterrupted one.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gnnpar.errors import ConfigError
from gnnpar.models.node import build_model
from gnnpar.nn.grid import chunk_sizes, parse_grid
from gnnpar.parallel_dims import check_grid
from gnnpar.train.config import (
    Config,
    FullConfig,
    ModelConfig,
    RunConfig,
    TrainConfig,
)
from tests.helpers import grid_cases as gc

GRIDS, EPOCHS = gc.GRIDS, gc.EPOCHS


@pytest.fixture(scope="module")
def grid_runs(nn_runs: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Each world size's ranks' results; the Trainer runs at 4 ranks.

    They are jobs of the grouped runs of ``conftest.nn_runs`` (one spawn per world size),
    on a graph of 53 nodes, 3 classes, hidden 8 (``grid_cases``): every split uneven;
    self-loops, a doubled one and isolated nodes (``cases.directed_graph``).
    """
    runs = {}
    for world in GRIDS:
        run = nn_runs[world]
        ranks = [{"errors": rank["grid_errors"],
                  **({"train": rank["grid_train"]} if world == 4 else {})}
                 for rank in run["ranks"]]
        runs[world] = {"dataset": run["grid_dataset"], "ranks": ranks}
    return runs


@pytest.mark.parametrize("world", sorted(GRIDS))
def test_blocks_logits_and_gradients_equal_pyg(grid_runs: dict[int, dict[str, Any]],
                                               world: int) -> None:
    grid_run = grid_runs[world]
    worst: dict[str, float] = {}
    for rank in grid_run["ranks"]:
        for key, value in rank["errors"].items():
            worst[key] = max(worst.get(key, 0.0), value)
    for dims in GRIDS[world]:
        for kind in ("gcn", "sage"):
            name = f"{kind}-{'x'.join(map(str, dims))}"
            assert worst[f"{name}-x"] == 0.0 and worst[f"{name}-y"] == 0.0, name
            assert worst[f"{name}-names"] == 0.0 and worst[f"{name}-weights"] == 0.0, name
            assert worst[f"{name}-logits"] <= 1e-5, (name, worst[f"{name}-logits"])
            # One communicator per grid axis, shared by the three layer rotations.
            assert worst[f"{name}-groups-made"] <= 3, (name, worst[f"{name}-groups-made"])
            assert worst[f"{name}-groups-used"] == 3, name
            grads = {k: v for k, v in worst.items() if k.startswith(f"{name}-grad-")}
            assert len(grads) == (2 if kind == "gcn" else 3) * gc.LAYERS, name
            assert max(grads.values()) <= 1e-5, (name, grads)


def _pyg_training(dataset: Any) -> dict[str, np.ndarray]:
    """Full-batch Adam training of the PyG model in one process (the trainer's settings)."""
    cfg = Config(train=TrainConfig(mode="full", epochs=EPOCHS, lr=0.05, weight_decay=1e-4))
    torch.manual_seed(cfg.train.seed)
    model = build_model(ModelConfig(name="sage", hidden=gc.HIDDEN, layers=gc.LAYERS,
                                    dropout=0.0), dataset.x.shape[1], dataset.num_classes)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.train.lr,
                           weight_decay=cfg.train.weight_decay)
    x, y = torch.from_numpy(dataset.x), torch.from_numpy(dataset.y)
    edge_index = torch.from_numpy(np.stack([dataset.src, dataset.dst]))
    train = torch.from_numpy(dataset.train_idx)
    for _ in range(EPOCHS):
        opt.zero_grad()
        F.cross_entropy(model(x, edge_index)[train], y[train]).backward()
        opt.step()
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


def test_trainer_equals_pyg_training_and_resumes(grid_runs: dict[int, dict[str, Any]]
                                                 ) -> None:
    grid_run = grid_runs[4]
    ref = _pyg_training(grid_run["dataset"])
    for rank in grid_run["ranks"]:
        run = rank["train"]
        assert run["groups_made"] <= 3  # the run's only groups: one per grid axis
        assert sorted(run["params"]) == sorted(ref)
        for k, v in ref.items():
            err = np.abs(run["params"][k] - v).max() / np.abs(v).max()
            assert err <= 1e-5, (k, err)
            np.testing.assert_array_equal(run["resumed"]["params"][k], run["params"][k])
    record = grid_run["ranks"][0]["train"]["record"]
    summary = record["summary"]
    assert summary["mode"] == "full" and summary["epochs"] == EPOCHS
    assert record["config"]["full"]["grid"] == "2,1,2"
    assert {"grid", "grid_grad"} <= set(summary["comm_per_epoch"])
    assert summary["comm_per_epoch"]["grid"]["bytes"] > 0
    resumed = grid_run["ranks"][0]["train"]["resumed"]["record"]
    assert [e["epoch"] for e in resumed["epochs"]] == list(range(EPOCHS))
    assert resumed["summary"]["test_acc"] == summary["test_acc"]


def test_chunks_follow_torch_chunk() -> None:
    for n in range(0, 12):
        for k in range(1, 6):
            want = [c.numel() for c in torch.arange(n).chunk(k)]
            got = chunk_sizes(n, k)
            assert got[: len(want)] == want and sum(got) == n and len(got) == k


def test_grid_errors_name_the_fix() -> None:
    assert parse_grid("2,1,2") == (2, 1, 2) and parse_grid("2x2x1") == (2, 2, 1)
    for bad in ("2,2", "0,1,4", "a,b,c"):
        with pytest.raises(ConfigError, match="--grid X,Y,Z"):
            parse_grid(bad)
    with pytest.raises(ConfigError, match=r"X\*Y\*Z = 4: one of .*2,1,2"):
        check_grid((2, 2, 2), 4)
    with pytest.raises(ConfigError, match="--stale"):
        Config(train=TrainConfig(mode="full"), full=FullConfig(grid="2,1,1", stale=True)
               ).validate()
    with pytest.raises(ConfigError, match="--mode full"):
        Config(train=TrainConfig(mode="sample"), full=FullConfig(grid="2,1,1")).validate()
    with pytest.raises(ConfigError, match=r"X\*Y\*Z = 2: one of 1,1,2 1,2,1 2,1,1"):
        Config(train=TrainConfig(mode="full"), full=FullConfig(grid="2,2,1"),
               run=RunConfig(nproc=2)).validate()
    with pytest.raises(ConfigError, match="--model gcn or --model sage"):
        Config(model=ModelConfig(name="gat"), train=TrainConfig(mode="full"),
               full=FullConfig(grid="2,1,1")).validate()
    with pytest.raises(ConfigError, match="fp32"):
        Config(train=TrainConfig(mode="full", precision="bf16"),
               full=FullConfig(grid="2,1,1")).validate()

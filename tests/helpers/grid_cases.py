"""Workers of the 3D-parallel layer tests: each rank compares with single-process PyG.

The reference is PyG's own model (``GCN`` / ``GraphSAGE`` with the same initial weights)
on the whole graph in one process; every rank checks its own blocks against it.  The
workers run as tasks of ``nn_cases.worker``, in the grouped runs of ``nn_runs``
(``tests/nn/conftest.py``).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.distributed_c10d import _world

from gnnpar.datasets.graph import GraphDataset
from gnnpar.models.node import build_model
from gnnpar.partition.format import load_partition
from gnnpar.train.config import ModelConfig

SEED = 5
HIDDEN = 8
LAYERS = 3  # all three rotations of the grid
GRIDS = {2: [(2, 1, 1), (1, 2, 1), (1, 1, 2)], 4: [(2, 2, 1), (2, 1, 2), (1, 2, 2), (4, 1, 1)]}
"""The grids checked at each world size."""
TRAIN_GRID = "2,1,2"
"""The grid of the Trainer's runs (at 4 ranks)."""
EPOCHS = 6
"""Epochs of the Trainer's runs."""
NUM_NODES = 53
"""Nodes of the grid tests' graph (``nn_cases.directed_graph``): every split uneven."""


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-12))


def reference(dataset: GraphDataset, kind: str) -> dict[str, Any]:
    """The PyG model on the whole graph: logits, the loss's gradients, initial weights."""
    torch.manual_seed(SEED)
    model = build_model(ModelConfig(name=kind, hidden=HIDDEN, layers=LAYERS, dropout=0.0),
                        dataset.x.shape[1], dataset.num_classes)
    init = copy.deepcopy(model)
    edge_index = torch.from_numpy(np.stack([dataset.src, dataset.dst]))
    logits = model(torch.from_numpy(dataset.x), edge_index)
    train = torch.from_numpy(dataset.train_idx)
    y = torch.from_numpy(dataset.y)
    (F.cross_entropy(logits[train], y[train], reduction="sum") / train.numel()).backward()
    grads = {k: p.grad.detach().clone() for k, p in model.named_parameters()}
    return {"model": init, "logits": logits.detach(), "grads": grads}


def grid_errors(part_dir: str, dataset: GraphDataset, grids: list[tuple[int, int, int]]
                ) -> dict[str, float]:
    """Largest relative error of each grid and model against :func:`reference`."""
    from gnnpar.distributed import init
    from gnnpar.nn.grid import ROLES, ProcessGrid
    from gnnpar.nn.grid_gnn import GridGNN, GridGraph, model_kind
    from gnnpar.parallel_dims import ParallelDims
    from gnnpar.storage.graph import DistGraph

    ctx = init()
    graph = DistGraph.load(part_dir, ctx)
    orig = np.concatenate([np.asarray(load_partition(part_dir, r).orig_ids)
                           for r in range(ctx.world_size)])
    x_all, y_all = torch.from_numpy(dataset.x), torch.from_numpy(dataset.y)
    n_train = len(dataset.train_idx)
    errors: dict[str, float] = {}
    for dims in grids:
        for kind in ("gcn", "sage"):
            ref = reference(dataset, kind)
            model = ref["model"]
            made = len(_world.pg_map)
            grid = ProcessGrid.build(ParallelDims(ctx, grid=dims), LAYERS)
            made = len(_world.pg_map) - made
            widths = (x_all.shape[1], HIDDEN, HIDDEN, dataset.num_classes)
            layout = GridGraph.build(graph, ctx, grid, model_kind(model), widths)
            name = f"{kind}-{'x'.join(map(str, dims))}"
            # Communicators: the groups created, and those the layers' meshes use.
            errors[f"{name}-groups-made"] = made
            errors[f"{name}-groups-used"] = len({
                grid.group(layer, role).group_name for layer in range(LAYERS) for role in ROLES})
            lo, hi = layout.shape.rows(0, grid.coords)
            c0, c1 = layout.shape.cols(0, grid.coords)
            errors[f"{name}-x"] = float((layout.x - x_all[orig[lo:hi], c0:c1]).abs().max()) \
                if hi > lo and c1 > c0 else 0.0
            lo, hi = layout.shape.rows(LAYERS - 1, grid.coords, output=True)
            ids = torch.from_numpy(orig[lo:hi])
            in_train = torch.from_numpy(np.isin(orig[lo:hi], dataset.train_idx))
            errors[f"{name}-y"] = float((layout.y != y_all[ids]).sum()) + float(
                ((layout.split == 1) != in_train).sum())
            gnn = GridGNN(model, layout)
            out = gnn(layout.x)
            errors[f"{name}-logits"] = _rel(out, ref["logits"][ids]) if hi > lo else 0.0
            train = torch.nonzero(layout.split == 1).flatten()
            loss = F.cross_entropy(out[train], layout.y[train], reduction="sum") / n_train
            loss.backward()
            for k, p in gnn.named_parameters():
                errors[f"{name}-grad-{k}"] = _rel(p.grad.full_tensor(), ref["grads"][k])
            full = get_model_state_dict(gnn, options=StateDictOptions(full_state_dict=True))
            init_sd = model.state_dict()
            errors[f"{name}-names"] = float(sorted(full) != sorted(init_sd))
            errors[f"{name}-weights"] = max(_rel(v, init_sd[k]) for k, v in full.items())
    return errors


def _full_params(trainer: Any) -> dict[str, np.ndarray]:
    full = get_model_state_dict(trainer.trained, options=StateDictOptions(full_state_dict=True))
    return {k: v.detach().cpu().numpy().copy() for k, v in full.items()}


def trainer_runs(part_dir: str, out: str, grid: str, epochs: int) -> dict[str, Any]:
    """``gnnpar-train``'s Trainer at ``grid``: uninterrupted, and stopped then resumed."""
    from gnnpar.distributed import init
    from gnnpar.train.config import Config, FullConfig, ModelConfig, RunConfig, TrainConfig
    from gnnpar.train.trainer import Trainer

    ctx = init()

    def config(name: str, resume: bool = False) -> Config:
        return Config(model=ModelConfig(name="sage", hidden=HIDDEN, layers=LAYERS, dropout=0.0),
                      train=TrainConfig(mode="full", epochs=epochs, lr=0.05, weight_decay=1e-4),
                      full=FullConfig(grid=grid),
                      run=RunConfig(out=f"{out}/{name}", progress=False, resume=resume))

    made = len(_world.pg_map)
    full = Trainer(config("full"), part_dir, ctx)
    summary = full.fit()
    res: dict[str, Any] = {"summary": summary, "params": _full_params(full),
                           "record": full.record.to_dict(),
                           "groups_made": len(_world.pg_map) - made}  # by the whole run

    class Stop(Exception):
        pass

    def stop(epoch: int, step: int, batch: Any) -> None:
        if epoch == epochs // 2:
            raise Stop

    try:
        Trainer(config("stopped"), part_dir, ctx).fit(stop)
    except Stop:
        pass
    resumed = Trainer(config("stopped", resume=True), part_dir, ctx)
    resumed.fit()
    res["resumed"] = {"params": _full_params(resumed), "record": resumed.record.to_dict()}
    return res

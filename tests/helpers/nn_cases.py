"""Graphs, models and multi-process workers shared by the gnnpar.nn tests.

Workers are module-level functions (spawned processes import them by name); each one
groups many checks into one run, because process start-up costs seconds.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn
from torch_geometric.nn import GATConv, GCNConv, SAGEConv
from torch_geometric.nn.models import GAT, GCN, GIN, GraphSAGE
from torch_geometric.nn.models.basic_gnn import BasicGNN

from gnnpar.datasets.graph import GraphDataset

FEAT = 6
HIDDEN = 8
CLASSES = 3
KINDS = ("gcn", "gcn_noloops", "sage", "gat", "pyg_gcn")
DTYPES = {"float64": torch.float64, "float32": torch.float32}
TOL = {"float64": 1e-9, "float32": 1e-5}

GNNS = ("sage", "sage_max", "gcn", "gcn_improved", "gcn_noloops", "gat", "gin")
"""PyG models of the layer-wise inference checks: every path of gnnpar.nn.inference."""
LAYERS = 3
"""Layers of every :func:`make_gnn` model."""
BUDGETS = (1, 2000, 10**9)
"""Chunk budgets in bytes: one row per chunk, a few rows, the whole part at once."""

TRAIN_EPOCHS = 40
TRAIN_CONFIGS = {"exact": {}, "bns_p0.1": {"boundary_p": 0.1, "seed": 1},
                 "stale": {"stale": True}}
RESUME_EPOCHS = 4


def _dataset(num_nodes: int, src: np.ndarray, dst: np.ndarray, seed: int,
             name: str) -> GraphDataset:
    rng = np.random.default_rng(seed)
    perm = rng.permutation(num_nodes)
    third = num_nodes // 3
    return GraphDataset(
        num_nodes=num_nodes, src=src.astype(np.int64), dst=dst.astype(np.int64),
        x=rng.standard_normal((num_nodes, FEAT)).astype(np.float32),
        y=rng.integers(0, CLASSES, num_nodes).astype(np.int64),
        train_idx=np.sort(perm[:third]), val_idx=np.sort(perm[third:2 * third]),
        test_idx=np.sort(perm[2 * third:]), name=name, num_classes=CLASSES)


def directed_graph(num_nodes: int = 48, seed: int = 0) -> GraphDataset:
    """Random directed multigraph with self-loops (one doubled) and 6 isolated nodes."""
    rng = np.random.default_rng(seed)
    live = num_nodes - 6
    src = rng.integers(0, live, 4 * num_nodes)
    dst = rng.integers(0, live, 4 * num_nodes)
    src = np.concatenate([src, [5, 5, 7, 11, 11]])
    dst = np.concatenate([dst, [5, 5, 7, 11, 11]])
    return _dataset(num_nodes, src, dst, seed, "directed")


def feedforward_graph(num_parts: int, per_part: int = 12,
                      seed: int = 1) -> tuple[GraphDataset, np.ndarray]:
    """Edges within a part or from a lower part to a higher one: part 0 has no halo.

    Returns:
        The graph and its node -> part assignment.
    """
    rng = np.random.default_rng(seed)
    n = num_parts * per_part
    part = np.arange(n) // per_part
    src = rng.integers(0, n, 6 * n)
    dst = rng.integers(0, n, 6 * n)
    keep = part[src] <= part[dst]
    return _dataset(n, src[keep], dst[keep], seed, "feedforward"), part


class TwoLayer(nn.Module):
    """conv2(relu(conv1(x)))."""

    def __init__(self, layer1: nn.Module, layer2: nn.Module) -> None:
        super().__init__()
        self.layer1 = layer1
        self.layer2 = layer2

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.layer2(self.layer1(x, edge_index).relu(), edge_index)


def make_model(kind: str, dtype: torch.dtype, seed: int = 0) -> nn.Module:
    """A 2-layer model of ``kind``, initialised from ``seed``."""
    torch.manual_seed(seed)
    if kind == "gcn":
        model: nn.Module = TwoLayer(GCNConv(FEAT, HIDDEN), GCNConv(HIDDEN, CLASSES))
    elif kind == "gcn_noloops":
        model = TwoLayer(GCNConv(FEAT, HIDDEN, add_self_loops=False),
                         GCNConv(HIDDEN, CLASSES, add_self_loops=False))
    elif kind == "sage":
        model = TwoLayer(SAGEConv(FEAT, HIDDEN), SAGEConv(HIDDEN, CLASSES))
    elif kind == "gat":
        model = TwoLayer(GATConv(FEAT, HIDDEN // 2, heads=2), GATConv(HIDDEN, CLASSES))
    else:
        model = GCN(FEAT, HIDDEN, 2, CLASSES)
    return model.to(dtype)


def make_gnn(kind: str, seed: int = 0) -> BasicGNN:
    """A :data:`LAYERS`-layer float64 PyG model of ``kind`` (:data:`GNNS`), from ``seed``."""
    torch.manual_seed(seed)
    n = LAYERS
    models = {
        "sage": lambda: GraphSAGE(FEAT, HIDDEN, n, CLASSES),
        "sage_max": lambda: GraphSAGE(FEAT, HIDDEN, n, CLASSES, aggr="max"),
        "gcn": lambda: GCN(FEAT, HIDDEN, n, CLASSES),
        "gcn_improved": lambda: GCN(FEAT, HIDDEN, n, CLASSES, improved=True),
        "gcn_noloops": lambda: GCN(FEAT, HIDDEN, n, CLASSES, add_self_loops=False),
        "gat": lambda: GAT(FEAT, HIDDEN, n, CLASSES, heads=2),
        "gin": lambda: GIN(FEAT, HIDDEN, n, CLASSES),
    }
    return models[kind]().double().eval()


def gnn_reference(dataset: GraphDataset, kind: str) -> torch.Tensor:
    """``make_gnn(kind)`` on the whole graph in one process (PyG's own forward)."""
    x = torch.from_numpy(dataset.x).double()
    edge_index = torch.from_numpy(np.stack([dataset.src, dataset.dst]))
    with torch.no_grad():
        out: torch.Tensor = make_gnn(kind)(x, edge_index)
    return out


def plain_name(name: str) -> str:
    """Parameter name without the DistConv wrapper's ``.conv``."""
    return name.replace(".conv.", ".")


def loss_weights(num_nodes: int, seed: int = 5) -> np.ndarray:
    """Fixed random ``[N, C]`` weights: the test loss is ``sum(out * R[orig_id])``."""
    return np.random.default_rng(seed).standard_normal((num_nodes, CLASSES))


def reference(dataset: GraphDataset, kind: str, dtype: str,
              weights: np.ndarray) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Single-process PyG on the whole graph: output and weight gradients."""
    dt = DTYPES[dtype]
    model = make_model(kind, dt)
    x = torch.from_numpy(dataset.x).to(dt)
    edge_index = torch.from_numpy(np.stack([dataset.src, dataset.dst]))
    out = model(x, edge_index)
    (out * torch.from_numpy(weights).to(dt)).sum().backward()
    return out.detach(), {n: p.grad for n, p in model.named_parameters()}


def to_numpy(obj: Any) -> Any:
    """Tensors -> numpy arrays, recursively (tensors would cross the result queue as shared
    memory that vanishes when the worker exits)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().numpy()
    if isinstance(obj, dict):
        return {k: to_numpy(v) for k, v in obj.items()}
    return obj


def _distributed_pass(graph: Any, model: nn.Module, x: torch.Tensor, orig: np.ndarray,
                      weights: np.ndarray, ctx: Any) -> dict[str, Any]:
    """Forward and weight gradients of the distributed model, replicated by DDP.

    DDP starts every rank from rank 0's weights and averages the gradients; the loss is
    scaled by the world size so that the average is the sum over the ranks' nodes.
    """
    from torch.nn.parallel import DistributedDataParallel

    from gnnpar.nn.dist_conv import distribute_convs

    model = distribute_convs(model, graph)
    ddp = DistributedDataParallel(model)
    out = ddp(x, graph.edge_index)
    (out * torch.from_numpy(weights[orig]).to(x.dtype)).sum().mul(ctx.world_size).backward()
    return {"out": out.detach(),
            "grads": {plain_name(n): p.grad for n, p in model.named_parameters()}}


def worker(tasks: dict[str, tuple[str, tuple[Any, ...]]]) -> dict[str, Any]:
    """Run named tasks (``exact``, ``inference``, ``train``, ``resume``, and the 3D-parallel
    ``grid_errors`` and ``grid_train`` of :mod:`grid_cases`) in one process group."""
    import gnnpar.distributed as gdist
    from tests.helpers import grid_cases as _grid_cases

    ctx = gdist.init()
    funcs = {"exact": _exact, "inference": _inference, "train": _train, "resume": _resume,
             "grid_errors": lambda _, *a: _grid_cases.grid_errors(*a),
             "grid_train": lambda _, *a: _grid_cases.trainer_runs(*a)}
    return {name: to_numpy(funcs[task](ctx, *args)) for name, (task, args) in tasks.items()}


def _exact(ctx: Any, part_dirs: dict[str, str],
           weights: dict[str, np.ndarray]) -> dict[str, Any]:
    """Every model x dtype on every partition; BNS p=1."""
    from gnnpar.comm import CommStats
    from gnnpar.nn.dist_conv import HaloGraph
    from gnnpar.storage.graph import DistGraph

    result: dict[str, Any] = {}
    for name, part_dir in part_dirs.items():
        g = DistGraph.load(part_dir, ctx)
        orig = np.array(g.part.orig_ids)
        x32 = torch.from_numpy(np.array(g.part.feat))
        runs: dict[str, Any] = {}
        for kind in KINDS:
            for dtype, dt in DTYPES.items():
                stats = CommStats()
                graph = HaloGraph.build(g, ctx, stats=stats)
                stats.reset()
                run = _distributed_pass(graph, make_model(kind, dt, seed=ctx.rank),
                                        x32.to(dt), orig, weights[name], ctx)
                run["stats"] = stats.as_dict()
                runs[f"{kind}/{dtype}"] = run
            bns = HaloGraph.build(g, ctx, boundary_p=1.0, seed=3)
            bns.set_epoch(7)
            runs[f"{kind}/bns_p1"] = _distributed_pass(
                bns, make_model(kind, torch.float64), x32.double(), orig, weights[name], ctx)
        result[name] = {"orig_ids": orig, "runs": runs}
    return result


def _inference(ctx: Any, part_dirs: dict[str, str]) -> dict[str, Any]:
    """Layer-wise inference of every :data:`GNNS` model under every :data:`BUDGETS`."""
    from gnnpar.comm import CommStats
    from gnnpar.nn.inference import layerwise_inference
    from gnnpar.storage.graph import DistGraph

    result: dict[str, Any] = {}
    for name, part_dir in part_dirs.items():
        g = DistGraph.load(part_dir, ctx)
        x = torch.from_numpy(np.array(g.part.feat)).double()
        runs: dict[str, Any] = {}
        for kind in GNNS:
            for budget in BUDGETS:
                stats = CommStats()
                out = layerwise_inference(make_gnn(kind), g, ctx, x, budget, stats)
                runs[f"{kind}/{budget}"] = {"out": out, "stats": stats.as_dict()}
        result[name] = {"orig_ids": np.array(g.part.orig_ids), "runs": runs}
    return result


def _full_config(part_dir: str, out: str, epochs: int, **settings: Any) -> Any:
    """``gnnpar-train --mode full`` with a 2-layer GCN (hidden 32, no dropout, lr 0.02)."""
    from gnnpar.train.config import (
        Config,
        DataConfig,
        FullConfig,
        ModelConfig,
        RunConfig,
        TrainConfig,
    )

    seed = settings.pop("seed", 0)
    return Config(data=DataConfig(dataset=part_dir),
                  model=ModelConfig(name="gcn", hidden=32, dropout=0.0),
                  train=TrainConfig(mode="full", epochs=epochs, lr=0.02, seed=seed),
                  full=FullConfig(**settings),
                  run=RunConfig(out=out, progress=False))


def _train(ctx: Any, part_dir: str, out: str, epochs: int,
           configs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Train under each halo configuration through the Trainer; losses and accuracies."""
    from gnnpar.train.trainer import Trainer

    res: dict[str, Any] = {}
    for name, settings in configs.items():
        trainer = Trainer(_full_config(part_dir, f"{out}/{name}", epochs, **settings),
                          part_dir, ctx)
        summary = trainer.fit()
        epochs_ = trainer.record.epochs
        res[name] = {"losses": [e["train_loss"] for e in epochs_],
                     "acc": {k: summary[k] for k in ("train_acc", "val_acc", "test_acc")},
                     "halo_bytes": sum(e["comm"]["halo"]["bytes"] for e in epochs_) / epochs}
    return res


def _resume(ctx: Any, part_dir: str, out: str, epochs: int) -> dict[str, Any]:
    """Full-graph training uninterrupted, and stopped after 2 epochs then resumed."""
    from dataclasses import replace

    from gnnpar.train.trainer import Trainer

    full = Trainer(_full_config(part_dir, f"{out}/full", epochs), part_dir, ctx)
    full.fit()
    first = _full_config(part_dir, f"{out}/parts", 2)
    Trainer(first, part_dir, ctx).fit()
    resumed_cfg = replace(first, train=replace(first.train, epochs=epochs),
                          run=replace(first.run, resume=True))
    resumed = Trainer(resumed_cfg, part_dir, ctx)
    resumed.fit()
    return {"full": full.record.to_dict(), "resumed": resumed.record.to_dict()}

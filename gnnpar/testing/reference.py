"""Single-process references for the trainer tests, independent of gnnpar's runtime.

:func:`reference_batches` is a plain numpy neighbour sampler (uniform without replacement
over in-edges, ``rng.choice`` per node) that lays batches out the way PyG's
``NeighborLoader`` does: seeds first, then each hop's new nodes, edges hop by hop.
:func:`train_reference` trains the same PyG model as ``gnnpar.models.node.build_model`` on it,
in one process, and evaluates on the whole graph; :func:`mlp_accuracy` is the
features-only baseline that a GNN must beat on the test graph.  :func:`train_link_reference`
is full-batch link prediction as PyG users write it (issue 27's protocol), with a GraphSAGE
or a features-only MLP encoder, ranked by ``ogb.linkproppred.Evaluator``; the benchmark
``benchmarks/bench_link_accuracy.py`` uses it too.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
import torch_geometric.nn.models as pyg_models
from torch_geometric.data import Data
from torch_geometric.nn.models import MLP, GraphSAGE
from torch_geometric.utils import negative_sampling, to_torch_csr_tensor

from gnnpar.datasets.graph import GraphDataset
from gnnpar.datasets.synthetic import sbm


def accuracy_graph() -> GraphDataset:
    """An SBM on which a 2-layer GNN clearly beats a features-only MLP."""
    return sbm(num_nodes=4000, avg_degree=12.0, num_classes=8, feat_dim=32, seed=1,
               homophily=0.8, feature_noise=3.0)


def reference_batches(indptr: np.ndarray, indices: np.ndarray, seeds: np.ndarray,
                      fanouts: list[int], batch_size: int,
                      rng: np.random.Generator) -> Iterator[Data]:
    """Shuffled minibatches of ``seeds`` with sampled in-neighbourhoods (PyG layout)."""
    order = rng.permutation(seeds)
    for start in range(0, len(order), batch_size):
        batch = [int(v) for v in order[start:start + batch_size]]
        n_id = list(batch)
        pos = {v: i for i, v in enumerate(n_id)}
        rows: list[int] = []
        cols: list[int] = []
        nodes, edges = [len(n_id)], []
        lo, hi = 0, len(n_id)
        for k in fanouts:
            n_edges = 0
            for local in range(lo, hi):
                nbrs = indices[indptr[n_id[local]]:indptr[n_id[local] + 1]]
                pick = nbrs if len(nbrs) <= k else rng.choice(nbrs, k, replace=False)
                for u in pick.tolist():
                    if u not in pos:
                        pos[u] = len(n_id)
                        n_id.append(u)
                    rows.append(pos[u])
                    cols.append(local)
                    n_edges += 1
            edges.append(n_edges)
            nodes.append(len(n_id) - hi)
            lo, hi = hi, len(n_id)
        yield Data(n_id=torch.tensor(n_id), edge_index=torch.tensor([rows, cols]),
                   batch_size=len(batch), num_sampled_nodes=nodes, num_sampled_edges=edges)


def exported_logits(model_file: Path, spec_file: Path, ds: GraphDataset) -> np.ndarray:
    """PyG's outputs of every node of ``ds`` (one process, whole graph).

    The model is the one ``gnnpar-export`` wrote: its class rebuilt from ``spec_file``, its
    weights loaded from ``model_file``.
    """
    meta = json.loads(spec_file.read_text())
    model = getattr(pyg_models, meta["class"])(**meta["kwargs"])
    model.load_state_dict(torch.load(model_file, weights_only=True))
    model.eval()
    with torch.no_grad():
        out = model(torch.from_numpy(np.asarray(ds.x)),
                    torch.from_numpy(np.stack([ds.src, ds.dst])))
    return np.asarray(out.numpy())


def train_reference(ds: GraphDataset, model: torch.nn.Module, fanouts: list[int],
                    batch_size: int, epochs: int, lr: float, seed: int) -> dict[str, float]:
    """Minibatch training in one process; whole-graph accuracy of each split at the end."""
    indptr, indices = ds.csc()
    x = torch.from_numpy(np.asarray(ds.x, dtype=np.float32))
    y = torch.from_numpy(np.asarray(ds.y, dtype=np.int64))
    rng = np.random.default_rng(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(epochs):
        model.train()
        for b in reference_batches(indptr, indices, np.asarray(ds.train_idx), fanouts,
                                   batch_size, rng):
            out = model(x[b.n_id], b.edge_index, num_sampled_nodes_per_hop=b.num_sampled_nodes,
                        num_sampled_edges_per_hop=b.num_sampled_edges)[:b.batch_size]
            loss = F.cross_entropy(out, y[b.n_id[:b.batch_size]])
            opt.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
    model.eval()
    with torch.no_grad():
        edge_index = torch.from_numpy(np.stack([ds.src, ds.dst]).astype(np.int64))
        pred = model(x, edge_index).argmax(-1)
    return {f"{s}_acc": float((pred[idx] == y[idx]).float().mean())
            for s, idx in (("train", ds.train_idx), ("val", ds.val_idx), ("test", ds.test_idx))}


def full_batch_curve(ds: GraphDataset, hidden: int, epochs: int, lr: float,
                     dropout: float = 0.5, seed: int = 0) -> list[dict[str, float]]:
    """Full-batch single-process PyG GraphSAGE (2 layers, mean), Adam: each epoch's figures.

    Each epoch is one step on the whole graph's training nodes, then the whole graph's
    validation and test accuracy (``[{"val_acc", "test_acc"}]``, one per epoch).
    """
    torch.manual_seed(seed)
    x = torch.from_numpy(np.asarray(ds.x, dtype=np.float32))
    y = torch.from_numpy(np.asarray(ds.y, dtype=np.int64))
    n = x.shape[0]
    adj_t = to_torch_csr_tensor(torch.from_numpy(np.stack([ds.dst, ds.src]).astype(np.int64)),
                                size=(n, n))  # PyG's fused mean over in-edges
    idx = {s: torch.from_numpy(np.asarray(getattr(ds, f"{s}_idx")))
           for s in ("train", "val", "test")}
    model = GraphSAGE(x.shape[1], hidden, 2, int(y.max()) + 1, dropout=dropout)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    curve = []
    for _ in range(epochs):
        model.train()
        loss = F.cross_entropy(model(x, adj_t)[idx["train"]], y[idx["train"]])
        opt.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        model.eval()
        with torch.no_grad():
            pred = model(x, adj_t).argmax(-1)
        curve.append({f"{s}_acc": float((pred[idx[s]] == y[idx[s]]).float().mean())
                      for s in ("val", "test")})
    return curve


def best_valid(curve: list[dict[str, float]]) -> dict[str, float]:
    """The epoch of ``curve`` with the best validation accuracy (the first of equals)."""
    return max(curve, key=lambda e: e["val_acc"])


def mlp_accuracy(ds: GraphDataset, hidden: int, epochs: int = 200, seed: int = 0) -> float:
    """Test accuracy of a 2-layer MLP on the features alone (full batch, Adam)."""
    torch.manual_seed(seed)
    x = torch.from_numpy(np.asarray(ds.x, dtype=np.float32))
    y = torch.from_numpy(np.asarray(ds.y, dtype=np.int64))
    train, test = torch.from_numpy(ds.train_idx), torch.from_numpy(ds.test_idx)
    mlp = MLP([x.shape[1], hidden, int(y.max()) + 1], dropout=0.5)
    opt = torch.optim.Adam(mlp.parameters(), lr=0.01)
    for _ in range(epochs):
        mlp.train()
        loss = F.cross_entropy(mlp(x[train]), y[train])
        opt.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
    mlp.eval()
    with torch.no_grad():
        return float((mlp(x[test]).argmax(-1) == y[test]).float().mean())


LINK_KS = (1, 10)
"""Hits@K of the link references."""


def link_ranking(h: torch.Tensor, pos: np.ndarray, neg: np.ndarray) -> dict[str, float]:
    """MRR and Hits@K (OGB's ``ogbl-citation2`` evaluator) of dot-product scores.

    Args:
        h: ``[N, C]`` node embeddings.
        pos: ``[M, 2]`` positive (source, destination) pairs.
        neg: ``[M, K]`` candidate destinations of each positive.
    """
    from ogb.linkproppred import Evaluator

    p, q = torch.from_numpy(np.asarray(pos, dtype=np.int64)), torch.from_numpy(
        np.asarray(neg, dtype=np.int64))
    src = h[p[:, 0]]
    res = Evaluator("ogbl-citation2").eval({"y_pred_pos": (src * h[p[:, 1]]).sum(-1),
                                            "y_pred_neg": (src[:, None] * h[q]).sum(-1)})
    return {"mrr": float(res["mrr_list"].mean()),
            **{f"hits@{k}": float(res[f"hits@{k}_list"].mean()) for k in LINK_KS}}


def link_reference_steps(ds: GraphDataset, hidden: int = 128, lr: float = 0.005,
                         encoder: str = "sage", seed: int = 0,
                         negative_seed: int | None = None
                         ) -> Iterator[tuple[float, Callable[[], dict[str, float]]]]:
    """Full-batch single-process link prediction: issue 27's protocol, in plain PyG.

    A 2-layer encoder of width ``hidden`` (``GraphSAGE``, mean, built right after
    ``torch.manual_seed(seed)`` as gnnpar's trainer builds it, or a features-only ``MLP``),
    no dropout, dot-product decoder, Adam; each epoch one step on every training edge and
    as many negatives from ``negative_sampling`` (fresh each epoch), binary cross-entropy;
    message passing over the stored graph (the training edges, both directions).

    Args:
        ds: A link dataset (``neg_kind="per_edge"``).
        hidden: Width of both layers.
        lr: Adam's learning rate.
        encoder: ``"sage"`` or ``"mlp"``.
        seed: Seed of the initial weights (and of the negatives, unless ``negative_seed``).
        negative_seed: Reseed before the first negative draw (same weights, other negatives).

    Yields:
        Per epoch, without end: ``(loss, evaluate)``; ``evaluate()`` ranks the validation
        and test edges with the current weights: ``{"val_mrr", "val_hits@K", "test_mrr",
        ...}``.
    """
    n = ds.num_nodes
    x = torch.from_numpy(np.asarray(ds.x, dtype=np.float32))
    edge_index = torch.from_numpy(np.stack([ds.src, ds.dst]).astype(np.int64))
    adj_t = to_torch_csr_tensor(edge_index.flip(0), size=(n, n))  # PyG's fused mean
    train = torch.from_numpy(np.asarray(ds.train_edges, dtype=np.int64)).t()
    torch.manual_seed(seed)
    model: torch.nn.Module = (GraphSAGE(x.shape[1], hidden, 2, hidden, dropout=0.0)
                              if encoder == "sage" else
                              MLP([x.shape[1], hidden, hidden], norm=None, dropout=0.0))
    # PyG's negative_sampling draws from Python's random (not torch's): seeded too, so the
    # reference is the same in every session whatever ran before it.
    random.seed(seed)
    if negative_seed is not None:
        torch.manual_seed(negative_seed)
        random.seed(negative_seed)

    def embed() -> torch.Tensor:
        out: torch.Tensor = model(x, adj_t) if encoder == "sage" else model(x)
        return out

    def evaluate() -> dict[str, float]:
        model.eval()
        with torch.no_grad():
            h = embed()
        row: dict[str, float] = {}
        for split in ("val", "test"):
            ranks = link_ranking(h, getattr(ds, f"{split}_edges"), getattr(ds, f"{split}_neg"))
            row.update({f"{split}_{k}": v for k, v in ranks.items()})
        return row

    opt = torch.optim.Adam(model.parameters(), lr=lr)
    while True:
        model.train()
        h = embed()
        neg = negative_sampling(edge_index, n, train.shape[1])
        pairs = torch.cat([train, neg], 1)
        label = torch.cat([torch.ones(train.shape[1]), torch.zeros(neg.shape[1])])
        loss = F.binary_cross_entropy_with_logits((h[pairs[0]] * h[pairs[1]]).sum(-1), label)
        opt.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        yield float(loss.detach()), evaluate


def train_link_reference(ds: GraphDataset, epochs: int, hidden: int = 128, lr: float = 0.005,
                         encoder: str = "sage", seed: int = 0,
                         negative_seed: int | None = None, every: int = 0) -> dict[str, Any]:
    """:func:`link_reference_steps` for ``epochs`` epochs.

    Args:
        ds: A link dataset (``neg_kind="per_edge"``).
        epochs: Gradient steps.
        hidden: Width of both layers.
        lr: Adam's learning rate.
        encoder: ``"sage"`` or ``"mlp"``.
        seed: Seed of the initial weights (and of the negatives, unless ``negative_seed``).
        negative_seed: Reseed before the first negative draw.
        every: Also evaluate every this many epochs (0: after the last only).

    Returns:
        ``{"losses": [loss of each epoch], "evals": [{"epoch", "loss", "val_mrr",
        "val_hits@K", "test_mrr", ...}]}``.
    """
    losses: list[float] = []
    evals: list[dict[str, float]] = []
    steps = link_reference_steps(ds, hidden, lr, encoder, seed, negative_seed)
    for epoch, (loss, evaluate) in zip(range(1, epochs + 1), steps, strict=False):
        losses.append(loss)
        if epoch == epochs or (every and epoch % every == 0):
            evals.append({"epoch": epoch, "loss": loss, **evaluate()})
    return {"losses": losses, "evals": evals}


def converge_link_reference(ds: GraphDataset, encoder: str = "sage", lr: float = 0.005,
                            seed: int = 0, every: int = 10, patience: int = 10,
                            epochs: tuple[int, int] = (200, 100_000),
                            budget_s: float = float("inf")) -> dict[str, Any]:
    """:func:`link_reference_steps` trained as long as validation MRR improves.

    Evaluated every ``every`` epochs; stops after ``patience`` evaluations in a row
    without a higher validation MRR once past ``epochs[0]`` epochs (converged: the
    minimum keeps the plateau at the start of training, where MRR first falls below
    chance, from passing for convergence), at ``epochs[1]``, or at the first evaluation
    past ``budget_s`` wall seconds (the budget, not convergence, ended it).
    The model is selected as OGB's protocol does: the evaluation of the best validation
    MRR (the earliest of equals).

    Returns:
        ``{"evals": [every evaluation], "best": the best-valid evaluation, "stop":
        "converged" | "budget" | "epochs", "epochs", "seconds", "cpu_seconds",
        "last_gain": {"epochs": the last patience x every epochs (fewer when the run is
        shorter), "val_mrr" and "test_mrr": the best-valid figures' rise over them}}``.
    """
    t0, cpu0 = time.perf_counter(), time.process_time()
    evals: list[dict[str, float]] = []
    best: dict[str, float] | None = None
    since, stop, epoch = 0, "epochs", 0
    steps = link_reference_steps(ds, lr=lr, encoder=encoder, seed=seed)
    for epoch, (loss, evaluate) in zip(range(1, epochs[1] + 1), steps, strict=False):
        if epoch % every and epoch != epochs[1]:
            continue
        row = {"epoch": epoch, "loss": loss, **evaluate()}
        evals.append(row)
        if best is None or row["val_mrr"] > best["val_mrr"]:
            best, since = row, 0
        else:
            since += 1
        if since >= patience and epoch >= epochs[0]:
            stop = "converged"
            break
        if time.perf_counter() - t0 > budget_s:
            stop = "budget"
            break
    assert best is not None
    window = patience * every
    before = [r for r in evals if r["epoch"] <= epoch - window]
    earlier = max(before, key=lambda r: r["val_mrr"]) if before else evals[0]
    return {"evals": evals, "best": best, "stop": stop, "epochs": epoch,
            "seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - cpu0,
            "last_gain": {"epochs": min(window, epoch - evals[0]["epoch"]),
                          "val_mrr": best["val_mrr"] - earlier["val_mrr"],
                          "test_mrr": best["test_mrr"] - earlier["test_mrr"]}}

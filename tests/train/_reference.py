"""Single-process references for the trainer tests, independent of gnnpar's runtime.

:func:`reference_batches` is a plain numpy neighbour sampler (uniform without replacement
over in-edges, ``rng.choice`` per node) that lays batches out the way PyG's
``NeighborLoader`` does: seeds first, then each hop's new nodes, edges hop by hop.
:func:`train_reference` trains the same PyG model as ``gnnpar.train.models.build_model`` on it,
in one process, and evaluates on the whole graph; :func:`mlp_accuracy` is the
features-only baseline that a GNN must beat on the test graph.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.nn.models import MLP

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
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        edge_index = torch.from_numpy(np.stack([ds.src, ds.dst]).astype(np.int64))
        pred = model(x, edge_index).argmax(-1)
    return {f"{s}_acc": float((pred[idx] == y[idx]).float().mean())
            for s, idx in (("train", ds.train_idx), ("val", ds.val_idx), ("test", ds.test_idx))}


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
        loss.backward()
        opt.step()
    mlp.eval()
    with torch.no_grad():
        return float((mlp(x[test]).argmax(-1) == y[test]).float().mean())

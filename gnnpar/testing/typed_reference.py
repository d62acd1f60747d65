"""Single-process PyG references on a whole typed graph: full batch, no gnnpar code.

:func:`typed_accuracy` trains ``to_hetero`` GraphSAGE (``aggr="sum"``) on
``TypedGraphDataset.to_pyg()``; featureless node types get learnable
``torch.nn.Embedding(sparse=True)`` rows (``torch.optim.SparseAdam``) or zeros.
:func:`homogeneous_accuracy` trains GraphSAGE on ``to_homogeneous()``, the featureless
nodes' features all zero; :func:`featureless_accuracy` GraphSAGE on a learnable row per
node of a graph without features.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch_geometric.nn import SAGEConv, to_hetero

from gnnpar.datasets.graph import GraphDataset
from gnnpar.datasets.typed import TypedGraphDataset

TYPED = {"epochs": 8, "batch_size": 128, "fanouts": (10, 5), "lr": 0.01, "hidden": 32,
         "eval": "sampled", "sparse_lr": 0.05}
"""Hyper-parameters of the typed accuracy comparison: gnnpar's runs and these references."""


class SAGE(torch.nn.Module):
    """Two lazy mean ``SAGEConv`` layers with a ReLU between (``to_hetero``-able)."""

    def __init__(self, hidden: int, out: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.conv1 = SAGEConv((-1, -1), hidden)
        self.conv2 = SAGEConv((-1, -1), out)
        self.dropout = torch.nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        """Logits of every node of ``x`` (``[N, out]``)."""
        h = self.dropout(F.relu(self.conv1(x, edge_index)))
        out: torch.Tensor = self.conv2(h, edge_index)
        return out


def fit(params: list[torch.nn.Parameter], forward: Callable[[], torch.Tensor],
        y: torch.Tensor, masks: tuple[torch.Tensor, ...], epochs: int, lr: float,
        sparse: list[torch.Tensor] | None = None, sparse_lr: float = 0.01) -> float:
    """Full-batch Adam (and SparseAdam on ``sparse``) for ``epochs``; test accuracy."""
    opts: list[torch.optim.Optimizer] = [torch.optim.Adam(params, lr=lr)]
    if sparse:
        opts.append(torch.optim.SparseAdam(sparse, lr=sparse_lr))
    for _ in range(epochs):
        for opt in opts:
            opt.zero_grad()
        F.cross_entropy(forward()[masks[0]], y[masks[0]]).backward()  # type: ignore[no-untyped-call]
        for opt in opts:
            opt.step()
    with torch.no_grad():
        pred = forward(train=False).argmax(-1)  # type: ignore[call-arg]
    return float((pred[masks[2]] == y[masks[2]]).float().mean())


def typed_accuracy(ds: TypedGraphDataset, hidden: int = 32, epochs: int = 80,
                   lr: float = 0.01, embed: bool = True, sparse_lr: float = 0.05,
                   dropout: float = 0.0, seed: int = 0) -> float:
    """Test accuracy of full-batch ``to_hetero`` GraphSAGE on the whole typed graph."""
    torch.manual_seed(seed)
    data = ds.to_pyg()
    f = max(ds.feat_dims.values())
    tables = {t: torch.nn.Embedding(n, hidden if embed else f, sparse=True)
              for t, n in ds.num_nodes.items() if t not in ds.x}
    if not embed:
        for table in tables.values():
            torch.nn.init.zeros_(table.weight)
    model = to_hetero(SAGE(hidden, int(ds.num_classes or 0), dropout), data.metadata(), aggr="sum")

    def forward(train: bool = True) -> torch.Tensor:
        model.train(train)
        x = {t: data[t].x if t in ds.x else tables[t](torch.arange(n))
             for t, n in ds.num_nodes.items()}
        out: torch.Tensor = model(x, data.edge_index_dict)[ds.target]
        return out

    with torch.no_grad():
        forward()  # initialise the lazy layers
    p = data[ds.target]
    return fit(list(model.parameters()), forward, p.y, (p.train_mask, p.val_mask, p.test_mask),
               epochs, lr, [t.weight for t in tables.values()] if embed else None, sparse_lr)


def homogeneous_accuracy(ds: TypedGraphDataset, hidden: int = 32, epochs: int = 80,
                         lr: float = 0.01, seed: int = 0) -> float:
    """Test accuracy of full-batch GraphSAGE on the homogeneous view (zero features)."""
    torch.manual_seed(seed)
    homo = ds.to_homogeneous().to_pyg()
    lay = ds.layout()
    x = torch.zeros(homo.num_nodes, max(ds.feat_dims.values()))
    for t, name in enumerate(lay.node_types):
        if name in ds.x:
            x[lay.node_offsets[t]:lay.node_offsets[t + 1], : ds.x[name].shape[1]] = \
                torch.from_numpy(ds.x[name][:])
    model = SAGE(hidden, int(ds.num_classes or 0))

    def forward(train: bool = True) -> torch.Tensor:
        model.train(train)
        out: torch.Tensor = model(x, homo.edge_index)
        return out

    with torch.no_grad():
        forward()
    return fit(list(model.parameters()), forward, homo.y,
               (homo.train_mask, homo.val_mask, homo.test_mask), epochs, lr)


def featureless_accuracy(ds: GraphDataset, hidden: int = 32, epochs: int = 100,
                         lr: float = 0.01, sparse_lr: float = 0.05, seed: int = 0) -> float:
    """Test accuracy of full-batch GraphSAGE on learnable ``nn.Embedding`` rows per node."""
    torch.manual_seed(seed)
    data = ds.to_pyg()
    table = torch.nn.Embedding(ds.num_nodes, hidden, sparse=True)
    model = SAGE(hidden, int(ds.num_classes or 0))
    every = torch.arange(ds.num_nodes)

    def forward(train: bool = True) -> torch.Tensor:
        model.train(train)
        out: torch.Tensor = model(table(every), data.edge_index)
        return out

    with torch.no_grad():
        forward()
    return fit(list(model.parameters()), forward, data.y,
               (data.train_mask, data.val_mask, data.test_mask), epochs, lr, [table.weight],
               sparse_lr)

"""Synthetic generators: sizes, structure, determinism, and a GNN beating a features-only MLP."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn import GCNConv

from gnnpar.datasets.graph import GraphDataset
from gnnpar.datasets.synthetic import rmat, sbm
from gnnpar.errors import DatasetError

GENERATORS = [sbm, rmat]


def edge_set(ds: GraphDataset) -> set[tuple[int, int]]:
    return set(zip(ds.src.tolist(), ds.dst.tolist(), strict=True))


@pytest.mark.parametrize("gen", GENERATORS)
@pytest.mark.parametrize(("n", "deg", "classes", "feat"), [(1000, 6.0, 5, 8), (4096, 10.5, 16, 3)])
def test_sizes_and_structure(gen: Callable[..., GraphDataset], n: int, deg: float,
                             classes: int, feat: int) -> None:
    ds = gen(num_nodes=n, avg_degree=deg, num_classes=classes, feat_dim=feat, seed=3)
    ds.validate()
    assert ds.num_nodes == n and ds.num_edges == 2 * int(n * deg // 2)
    assert ds.x.shape == (n, feat) and ds.x.dtype == np.float32
    assert ds.y.dtype == np.int64 and ds.num_classes == classes
    assert set(np.unique(ds.y).tolist()) == set(range(classes))
    # Brute force: undirected (every reverse edge present), simple (no loops, no duplicates).
    edges = edge_set(ds)
    assert len(edges) == ds.num_edges
    assert all((d, s) in edges for s, d in edges)
    assert all(s != d for s, d in edges)
    splits = [ds.train_idx, ds.val_idx, ds.test_idx]
    assert [len(s) for s in splits] == [n // 2, n // 4, n // 4]
    assert len(np.unique(np.concatenate(splits))) == sum(len(s) for s in splits)


@pytest.mark.parametrize("gen", GENERATORS)
def test_deterministic_per_seed(gen: Callable[..., GraphDataset]) -> None:
    kw = dict(num_nodes=2000, avg_degree=8.0, num_classes=4, feat_dim=4)
    a, b, c = gen(seed=1, **kw), gen(seed=1, **kw), gen(seed=2, **kw)
    for fld in ("src", "dst", "x", "y", "train_idx", "val_idx", "test_idx"):
        np.testing.assert_array_equal(getattr(a, fld), getattr(b, fld))
    assert not np.array_equal(a.y, c.y)


@pytest.mark.parametrize(("gen", "homophily"), [(sbm, 0.3), (sbm, 0.8), (rmat, 0.5)])
def test_homophily_is_the_fraction_of_intra_class_edges(gen: Callable[..., GraphDataset],
                                                        homophily: float) -> None:
    ds = gen(num_nodes=8192, avg_degree=10.0, num_classes=8, feat_dim=2, homophily=homophily)
    measured = float(np.mean(ds.y[ds.src] == ds.y[ds.dst]))
    assert abs(measured - homophily) < 0.03


def test_rmat_degrees_are_skewed_and_sbm_are_not() -> None:
    kw = dict(num_nodes=8192, avg_degree=10.0, num_classes=8, feat_dim=2)
    deg_r = rmat(**kw).in_degree()
    deg_s = sbm(**kw).in_degree()
    assert deg_r.max() > 20 * deg_r.mean()
    assert deg_s.max() < 4 * deg_s.mean()


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"num_nodes": 1}, "num_nodes"),
    ({"avg_degree": 0}, "avg_degree"),
    ({"num_nodes": 10, "avg_degree": 10}, "avg_degree"),
    ({"num_classes": 0}, "num_classes"),
    ({"feat_dim": 0}, "feat_dim"),
    ({"homophily": 1.5}, "homophily"),
    ({"split": (0.8, 0.3, 0.1)}, "split"),
])
def test_bad_arguments(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(DatasetError) as exc:
        sbm(**kwargs)  # type: ignore[arg-type]
    assert exc.value.field == field


def test_bad_rmat_probabilities() -> None:
    with pytest.raises(DatasetError) as exc:
        rmat(num_nodes=100, a=0.6, b=0.3, c=0.3)
    assert exc.value.field == "a, b, c"


# ---------------------------------------------------------------------- GNN vs MLP
class _TwoLayer(torch.nn.Module):
    def __init__(self, in_dim: int, hidden: int, out_dim: int, graph: bool) -> None:
        super().__init__()
        self.graph = graph
        if graph:
            self.l1 = GCNConv(in_dim, hidden, cached=True)
            self.l2 = GCNConv(hidden, out_dim, cached=True)
        else:
            self.l1, self.l2 = torch.nn.Linear(in_dim, hidden), torch.nn.Linear(hidden, out_dim)

    def layer(self, lin: torch.nn.Module, x: torch.Tensor, ei: torch.Tensor) -> torch.Tensor:
        return lin(x, ei) if self.graph else lin(x)

    def forward(self, x: torch.Tensor, ei: torch.Tensor) -> torch.Tensor:
        x = F.dropout(x, 0.5, self.training)
        x = F.relu(self.layer(self.l1, x, ei))
        x = F.dropout(x, 0.5, self.training)
        return self.layer(self.l2, x, ei)


def test_accuracy(ds: GraphDataset, graph: bool, epochs: int = 100) -> float:
    """Full-batch PyG training; test accuracy at the best validation epoch."""
    torch.manual_seed(0)
    data = ds.to_pyg()
    model = _TwoLayer(ds.feat_dim, 64, ds.num_classes, graph)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    best_val, best_test = -1.0, 0.0
    for _ in range(epochs):
        model.train()
        opt.zero_grad()
        out = model(data.x, data.edge_index)
        F.cross_entropy(out[data.train_mask], data.y[data.train_mask]).backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            pred = model(data.x, data.edge_index).argmax(1)
        acc = [(pred[m] == data.y[m]).float().mean().item() for m in (data.val_mask,
                                                                     data.test_mask)]
        if acc[0] > best_val:
            best_val, best_test = acc
    return best_test


test_accuracy.__test__ = False  # type: ignore[attr-defined]


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Full-batch training on a shared 2-core machine: one intra-op thread avoids spinning."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("gen", GENERATORS)
def test_gnn_beats_features_only_mlp(gen: Callable[..., GraphDataset]) -> None:
    ds = gen(num_nodes=2000, seed=0)  # default homophily, noise, degree, classes, features
    mlp, gcn = test_accuracy(ds, graph=False), test_accuracy(ds, graph=True)
    assert 0.4 < mlp < 0.75, mlp  # the features alone carry real but partial signal
    assert gcn > mlp + 0.08, (mlp, gcn)

"""``SampledGNN`` against PyG: ``trim_to_layer`` outputs, and GCN with the graph's degrees.

The batch comes from the test's reference sampler.  With ``gcn_norm="sampled"`` the
reference is the same PyG model called the PyG way (``num_sampled_nodes_per_hop`` /
``num_sampled_edges_per_hop``): outputs and gradients must match for each model kind.
With ``gcn_norm="global"`` the reference is PyG's ``GCNConv`` on the *whole* graph: equal
where every in-edge was sampled, and equal on average over many samples elsewhere.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.nn import GCNConv

from gnnpar.datasets.synthetic import sbm
from gnnpar.models.node import SampledGNN, build_model, forward_batch, global_gcn
from gnnpar.testing import reference as _reference
from gnnpar.train.config import ModelConfig


@pytest.mark.parametrize("name", ["sage", "gcn", "gat"])
@pytest.mark.parametrize("fanouts", [[5, 3], [4, 3, 2]])
def test_sampled_forward_matches_pyg_trim(name: str, fanouts: list[int]) -> None:
    ds = sbm(num_nodes=300, avg_degree=6.0, num_classes=3, feat_dim=8, seed=4)
    indptr, indices = ds.csc()
    rng = np.random.default_rng(0)
    batch = next(_reference.reference_batches(indptr, indices, np.arange(40), fanouts, 16,
                                              rng))
    batch.x = torch.from_numpy(np.asarray(ds.x))[batch.n_id]
    torch.manual_seed(0)
    model = build_model(ModelConfig(name=name, hidden=8, layers=len(fanouts), dropout=0.0,
                                    heads=2), 8, 3)
    want = model(batch.x, batch.edge_index, num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                 num_sampled_edges_per_hop=batch.num_sampled_edges)[:batch.batch_size]
    want.square().sum().backward()
    want_grads = {k: p.grad.clone() for k, p in model.named_parameters()}
    model.zero_grad()
    got = forward_batch(SampledGNN(model, gcn_norm="sampled"), batch)
    got.square().sum().backward()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for k, p in model.named_parameters():
        torch.testing.assert_close(p.grad, want_grads[k], rtol=1e-4, atol=1e-6, msg=k)


def _degrees(ds, n_id: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """In-degree and self-loop count of each batch node, counted on the whole graph."""
    src, dst = np.asarray(ds.src), np.asarray(ds.dst)
    indeg = np.bincount(dst, minlength=ds.num_nodes)
    loops = np.bincount(dst[src == dst], minlength=ds.num_nodes)
    return torch.from_numpy(indeg[n_id.numpy()]), torch.from_numpy(loops[n_id.numpy()])


def _loopy_graph():
    ds = sbm(num_nodes=200, avg_degree=5.0, num_classes=3, feat_dim=6, seed=2)
    # Self-loops (one doubled), which PyG's normalisation replaces by one of weight 1.
    ds.src = np.concatenate([ds.src, [3, 3, 8]])
    ds.dst = np.concatenate([ds.dst, [3, 3, 8]])
    return ds


def test_global_gcn_equals_whole_graph_gcn_where_every_edge_is_sampled() -> None:
    ds = _loopy_graph()
    indptr, indices = ds.csc()
    batch = next(_reference.reference_batches(indptr, indices, np.arange(20), [10_000], 20,
                                              np.random.default_rng(0)))
    x = torch.from_numpy(np.asarray(ds.x))
    torch.manual_seed(0)
    conv = GCNConv(6, 4)
    whole = conv(x, torch.from_numpy(np.stack([ds.src, ds.dst])))
    indeg, loops = _degrees(ds, batch.n_id)
    got = global_gcn(conv, x[batch.n_id], batch.edge_index, 20, indeg, loops)
    torch.testing.assert_close(got, whole[batch.n_id[:20]], rtol=1e-5, atol=1e-6)


def test_global_gcn_is_unbiased_under_sampling() -> None:
    ds = _loopy_graph()
    indptr, indices = ds.csc()
    seeds = np.arange(30)
    x = torch.from_numpy(np.asarray(ds.x))
    torch.manual_seed(0)
    conv = GCNConv(6, 4)
    whole = conv(x, torch.from_numpy(np.stack([ds.src, ds.dst])))[: len(seeds)]
    rng = np.random.default_rng(1)
    total, squares = torch.zeros_like(whole), torch.zeros_like(whole)
    draws = 2000
    with torch.no_grad():
        for _ in range(draws):
            b = next(_reference.reference_batches(indptr, indices, seeds, [2], len(seeds),
                                                  rng))
            indeg, loops = _degrees(ds, b.n_id)
            order = torch.argsort(b.n_id[: len(seeds)])  # the reference shuffles the seeds
            out = global_gcn(conv, x[b.n_id], b.edge_index, len(seeds), indeg, loops)[order]
            total += out
            squares += out.square()
    deg = np.bincount(np.asarray(ds.dst), minlength=ds.num_nodes)[seeds]
    assert (deg > 2).sum() >= 10  # most seeds are sampled, not taken whole
    mean = total / draws
    stderr = ((squares / draws - mean.square()).clamp(min=0) / draws).sqrt()
    # Within 5 standard errors everywhere (exact, zero spread, where deg <= 2).
    assert bool(((mean - whole.detach()).abs() <= 5 * stderr + 1e-5).all())

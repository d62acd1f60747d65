"""``SampledGNN`` computes what PyG's own ``BasicGNN.forward`` with ``trim_to_layer`` does.

The batch comes from the test's reference sampler; the reference is the same PyG model
called the PyG way (``num_sampled_nodes_per_hop`` / ``num_sampled_edges_per_hop``).
Outputs and gradients must match for each model kind.
"""

from __future__ import annotations

import _reference
import numpy as np
import pytest
import torch

from gnnpar.config import ModelConfig
from gnnpar.datasets.synthetic import sbm
from gnnpar.models import SampledGNN, build_model, forward_batch


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
    got = forward_batch(SampledGNN(model), batch)
    got.square().sum().backward()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for k, p in model.named_parameters():
        torch.testing.assert_close(p.grad, want_grads[k], rtol=1e-4, atol=1e-6, msg=k)

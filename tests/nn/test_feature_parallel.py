"""The feature-parallel first layer equals the unsplit ``nn.Linear`` (outputs and grads)."""

from __future__ import annotations

from typing import Any

import _nn_cases as cases
import numpy as np
import torch
from _nn_cases import FP_SEED
from torch import nn

from gnnpar.nn.feature_parallel import column_ranges
from gnnpar.partition.format import load_partition


def test_column_ranges_are_balanced_and_cover_every_column() -> None:
    assert column_ranges(10, 4) == [(0, 2), (2, 5), (5, 7), (7, 10)]
    assert column_ranges(3, 4) == [(0, 0), (0, 1), (1, 2), (2, 3)]
    assert column_ranges(7, 1) == [(0, 7)]


def test_feature_parallel_linear_equals_unsplit_layer(nn_run: dict[str, Any]) -> None:
    world, part_dir = nn_run["world"], nn_run["dirs"]["directed"]
    ds = nn_run["datasets"]["directed"]
    # Features in the partition's node order (new global id -> original id).
    order = np.concatenate([load_partition(part_dir, k).orig_ids for k in range(world)])
    x = torch.from_numpy(ds.x[order]).double()
    torch.manual_seed(FP_SEED)
    lin = nn.Linear(cases.FEAT, cases.HIDDEN).double()
    q = torch.from_numpy(cases.fp_weights(ds.num_nodes, cases.HIDDEN, FP_SEED))
    total = 0
    for rank, res in enumerate(nn_run["ranks"]):
        fp = res["exact"]["feature_parallel"]
        ids = torch.from_numpy(fp["ids"])
        assert np.array_equal(fp["ids"], cases.fp_ids(rank, ds.num_nodes, FP_SEED))
        a, b = column_ranges(cases.FEAT, world)[rank]
        assert fp["x_cols_shape"] == (ds.num_nodes, b - a)
        ref = lin(x[ids])
        assert fp["out"].shape == tuple(ref.shape)
        assert np.abs(fp["out"] - ref.detach().numpy()).max(initial=0.0) <= 1e-12
        total = total + (ref * q[ids]).sum()
        # Bytes of the partial products arriving here: one [M, H] block per peer.
        partial = fp["stats"].get("fp_partial", {"bytes_recv": 0})
        assert partial["bytes_recv"] == (world - 1) * len(ids) * cases.HIDDEN * 8
    total.backward()
    for res in nn_run["ranks"]:
        grads = res["exact"]["feature_parallel"]["grads"]
        assert np.abs(grads["weight"] - lin.weight.grad.numpy()).max() <= 1e-12
        assert np.abs(grads["bias"] - lin.bias.grad.numpy()).max() <= 1e-12

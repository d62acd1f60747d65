"""``fuse_aggregation`` against PyG's own gather and scatter on a layered batch.

The batch is laid out like gnnpar's (seeds, then each hop's new nodes; edges hop by hop,
destinations ascending) and carried as a destination-sorted ``EdgeIndex`` with its
sizes.  The reference is the same PyG model, unfused, on the plain edge tensor: outputs,
parameter gradients and the input's gradient must agree, with and without
``trim_to_layer``.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch_geometric import EdgeIndex
from torch_geometric.nn import GCN, GIN, GraphSAGE

from gnnpar.nn.fused import fuse_aggregation


def _layered_batch(nodes: list[int], fanout: int, seed: int) -> tuple[torch.Tensor, list[int]]:
    """Edges into each hop's nodes from the nodes up to the next hop, dst ascending."""
    gen = torch.Generator().manual_seed(seed)
    src, dst, edges = [], [], []
    lo = 0
    for h in range(len(nodes) - 1):
        hi, reach = lo + nodes[h], sum(nodes[: h + 2])
        deg = torch.randint(0, fanout + 1, (nodes[h],), generator=gen)  # some without any
        dst.append(torch.repeat_interleave(torch.arange(lo, hi), deg))
        src.append(torch.randint(0, reach, (int(deg.sum()),), generator=gen))
        edges.append(int(deg.sum()))
        lo = hi
    return torch.stack([torch.cat(src), torch.cat(dst)]), edges


@pytest.mark.parametrize("model_cls", [GraphSAGE, GIN])
@pytest.mark.parametrize("trim", [False, True])
def test_fused_layers_equal_pyg(model_cls: type, trim: bool) -> None:
    nodes = [6, 15, 30]
    edge_index, edges = _layered_batch(nodes, 4, seed=1)
    n = sum(nodes)
    torch.manual_seed(0)
    ref = model_cls(5, 8, num_layers=2, out_channels=3)
    fused = fuse_aggregation(copy.deepcopy(ref))
    kwargs = ({"num_sampled_nodes_per_hop": nodes, "num_sampled_edges_per_hop": edges}
              if trim else {})
    sorted_edges = EdgeIndex(edge_index, sparse_size=(n, n), sort_order="col")
    x = torch.randn(n, 5)
    results = []
    for model, ei in ((ref, edge_index), (fused, sorted_edges)):
        xg = x.clone().requires_grad_()
        out = model(xg, ei, **kwargs)[: nodes[0]]
        out.square().sum().backward()
        results.append((out, xg.grad, {k: p.grad for k, p in model.named_parameters()}))
    (want, want_x, want_p), (got, got_x, got_p) = results
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_x, want_x, rtol=1e-5, atol=1e-6)
    for k in want_p:
        torch.testing.assert_close(got_p[k], want_p[k], rtol=1e-5, atol=1e-6, msg=k)


def test_other_inputs_and_layers_keep_pyg_paths() -> None:
    nodes = [4, 9, 12]
    edge_index, _ = _layered_batch(nodes, 3, seed=2)
    x = torch.randn(sum(nodes), 5)
    torch.manual_seed(0)
    sage = GraphSAGE(5, 8, num_layers=2, out_channels=3)
    want = sage(x, edge_index)
    fused = fuse_aggregation(copy.deepcopy(sage))
    torch.testing.assert_close(fused(x, edge_index), want)  # a plain tensor: PyG's path
    gcn = GCN(5, 8, num_layers=2, out_channels=3)
    before = gcn.convs[0].message_and_aggregate
    fuse_aggregation(gcn)
    assert gcn.convs[0].message_and_aggregate == before  # GCN's weights: left alone

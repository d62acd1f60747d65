"""The hidden layers' elementwise work: gnnpar's dropout, its fusion with ReLU, and the
one sparse product that makes both inputs of a mean ``SAGEConv``'s linear maps.

References: the dropout's distribution against its definition (binomial bounds on a
million elements, kept values exactly ``x / (1 - p)``), the fused ReLU + dropout against
``torch.relu`` followed by the unfused dropout on the same random draws (with the torch
kernels and with the compiled ones, :mod:`gnnpar.jit`), and the SAGE product against a
dense matrix built entry by entry from the edge list.
"""

from __future__ import annotations

import math

import pytest
import torch

from gnnpar.jit import AVAILABLE
from gnnpar.nn.dropout import Dropout, act_dropout, dropout, relu_dropout
from gnnpar.nn.sage import sage_adjacency


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_dropout_keeps_with_probability_1_minus_p_and_scales_exactly(p: float) -> None:
    torch.manual_seed(0)
    x = torch.rand(1000, 1000) + 0.5  # no zeros: a zero output means dropped
    out = dropout(x, p)
    kept = out != 0
    n = x.numel()
    sd = math.sqrt(n * p * (1 - p))
    assert abs(int(kept.sum()) - n * (1 - p)) < 6 * sd + n * 2**-16
    torch.testing.assert_close(out[kept], x[kept] / (1 - p), rtol=1e-6, atol=0)


def test_dropout_gradient_is_the_mask_times_the_scale() -> None:
    torch.manual_seed(1)
    x = (torch.rand(300, 50) + 0.5).requires_grad_()
    out = dropout(x, 0.3)
    g = torch.randn_like(out)
    out.backward(g)
    expected = torch.where(out != 0, g / 0.7, torch.zeros(()))
    assert x.grad is not None
    torch.testing.assert_close(x.grad, expected, rtol=1e-6, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("p", [0.0, 0.25, 0.5, 0.3])
def test_relu_dropout_equals_relu_then_dropout(dtype: torch.dtype, p: float,
                                               kernel: str) -> None:
    x = torch.randn(517, 33, dtype=dtype)
    x[0, :5] = 0.0  # ReLU's gradient at 0 is 0
    g = torch.randn_like(x)
    results = []
    for fused in (False, True):
        torch.manual_seed(7)
        xi = x.clone().requires_grad_()
        out = relu_dropout(xi, p) if fused else dropout(torch.relu(xi), p)
        out.backward(g)
        results.append((out.detach(), xi.grad))
    (ref, ref_grad), (got, got_grad) = results
    assert torch.equal(got, ref) and torch.equal(got_grad, ref_grad)


@pytest.mark.skipif(not AVAILABLE, reason="numba not installed")
def test_relu_dropout_special_values_compiled_equals_torch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """nan, inf, -inf and -0 come out of both kernels alike, and so do their gradients."""
    x = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 2.0, -3.0] * 40)
    g = torch.arange(x.numel(), dtype=torch.float32)
    results = []
    for name in ("compiled", "torch"):
        monkeypatch.setenv("GNNPAR_KERNELS", name)
        torch.manual_seed(5)
        xi = x.clone().requires_grad_()
        out = relu_dropout(xi, 0.5)
        out.backward(g)
        results.append((out.detach(), xi.grad))
    (got, got_grad), (ref, ref_grad) = results
    torch.testing.assert_close(got, ref, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(got_grad, ref_grad, rtol=0, atol=0, equal_nan=True)
    assert torch.isnan(got[::7]).all() and (got[5::7] != 0).any() and (got[5::7] == 0).any()


def test_act_dropout_fuses_relu_only_and_is_relu_in_eval() -> None:
    x = torch.randn(64, 16)
    drop = Dropout(0.5)
    torch.manual_seed(3)
    fused = act_dropout(torch.nn.ReLU(), drop, x)
    torch.manual_seed(3)
    assert torch.equal(fused, drop(torch.relu(x)))
    torch.manual_seed(3)
    elu = act_dropout(torch.nn.ELU(), drop, x)
    torch.manual_seed(3)
    assert torch.equal(elu, drop(torch.nn.functional.elu(x)))
    drop.eval()
    assert torch.equal(act_dropout(torch.nn.ReLU(), drop, x), torch.relu(x))
    assert torch.equal(act_dropout(None, drop, x), x)


def _dense_sage(src: list[int], dst: list[int], num_dst: int, num_src: int,
                root_start: int) -> torch.Tensor:
    """``[2 num_dst, num_src]``: row 2d the mean over d's in-edges, row 2d+1 = e_(start+d)."""
    dense = torch.zeros(2 * num_dst, num_src, dtype=torch.float64)
    degree = [dst.count(d) for d in range(num_dst)]
    for s, d in zip(src, dst, strict=True):
        dense[2 * d, s] += 1.0 / degree[d]
    for d in range(num_dst):
        dense[2 * d + 1, root_start + d] = 1.0
    return dense


@pytest.mark.parametrize("root_start", [0, 5])
def test_sage_adjacency_against_a_dense_matrix(root_start: int) -> None:
    gen = torch.Generator().manual_seed(0)
    num_dst, num_src = 12, 40
    degree = torch.randint(0, 6, (num_dst,), generator=gen)
    degree[3] = 0  # a destination without in-edges: its mean row is zero
    dst = torch.repeat_interleave(torch.arange(num_dst), degree)
    src = torch.randint(0, num_src, (dst.numel(),), generator=gen)
    src[:2] = src[0]  # a repeated edge counts twice
    adj = sage_adjacency(torch.stack([src, dst]), num_dst, num_src, torch.float64, root_start)
    dense = _dense_sage(src.tolist(), dst.tolist(), num_dst, num_src, root_start)
    assert torch.equal(adj.a.to_dense(), dense)
    x = torch.randn(num_src, 7, dtype=torch.float64, requires_grad=True)
    out = (adj @ x).view(num_dst, 14)  # [mean | own row] per destination
    g = torch.randn_like(out)
    (grad,) = torch.autograd.grad(out, x, g)
    torch.testing.assert_close(out, (dense @ x).view(num_dst, 14))
    torch.testing.assert_close(grad, dense.T @ g.view(2 * num_dst, 7))

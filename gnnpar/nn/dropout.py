"""Dropout whose mask costs a quarter of torch's: 16 random bits per element (8 for p = 0.5).

``torch.nn.Dropout`` draws one Bernoulli sample per element from the generator (on one
CPU thread 29 ms for a ``[10500, 256]`` hidden layer, the largest single cost of a
sampled GraphSAGE step).  :class:`Dropout` draws one 64-bit integer per four elements
from the same generator and keeps an element when its 16 bits reach the threshold (8
bits, half the draws, where ``p`` is a multiple of ``1/256``, as the usual 0.5): the
same distribution (keep with probability ``1 - p`` to within ``2^-16``, scale the kept
ones by ``1 / (1 - p)``) in a quarter of the time, on CPU and CUDA alike, reproducible
from ``torch.manual_seed`` like torch's.  :func:`relu_dropout` applies a ReLU and this
dropout together (:func:`act_dropout` picks it for a model's ``act`` and ``dropout``).

On a CPU with numba (:func:`gnnpar.jit.compiled_kernels`) the fused pair is one compiled
pass each way over the same random bits, with the same results: forward, the torch
kernels' six passes over a ``[10k, 256]`` hidden layer (the bits widened to a 0/1 mask,
shifted, clamped, multiplied, clamped, scaled) become one; backward, two become one.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

from gnnpar.jit import compiled_kernels, njit

_SPAN = 1 << 16


class _Masked(torch.autograd.Function):
    """``x * mask``; the backward is ``grad * mask`` (the mask holds 0 or the scale)."""

    @staticmethod
    def forward(fctx: torch.autograd.function.FunctionCtx, x: Tensor, mask: Tensor) -> Tensor:
        fctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(fctx: torch.autograd.function.FunctionCtx,
                 grad: Tensor) -> tuple[Tensor | None, None]:
        (mask,) = fctx.saved_tensors  # type: ignore[attr-defined]
        return grad * mask, None


class _ReluDropped(torch.autograd.Function):
    """``relu(x)`` where ``bits >= threshold``, else 0, times ``scale``.

    Torch kernels: the 0/1 mask made from the bits is overwritten in place and becomes
    the output (one allocation, against ``relu``'s and the product's two).  Compiled
    kernels (:func:`_compiled`): one pass.  Only the output is kept for the backward,
    where an element passes the gradient (times ``scale``) exactly where the output is
    positive.
    """

    @staticmethod
    def forward(fctx: torch.autograd.function.FunctionCtx, x: Tensor, bits: Tensor,
                threshold: int, scale: float) -> Tensor:
        if _compiled(x):
            out = torch.empty_like(x)
            _relu_dropout_forward(x.view(-1).numpy(), bits.reshape(-1).numpy(), threshold,
                                  _scalar(out, scale), out.view(-1).numpy())
        else:
            out = _mask(bits, threshold, x.dtype).mul_(x).clamp_(min=0.0).mul_(scale)
        fctx.save_for_backward(out)
        fctx.scale = scale  # type: ignore[attr-defined]
        return out

    @staticmethod
    def backward(fctx: torch.autograd.function.FunctionCtx,
                 grad: Tensor) -> tuple[Tensor | None, None, None, None]:
        (out,) = fctx.saved_tensors  # type: ignore[attr-defined]
        scale: float = fctx.scale  # type: ignore[attr-defined]
        if _compiled(out) and grad.dtype == out.dtype:
            grad_x = torch.empty_like(out)
            _relu_dropout_backward(grad.contiguous().view(-1).numpy(), out.view(-1).numpy(),
                                   _scalar(out, scale), grad_x.view(-1).numpy())
            return grad_x, None, None, None
        grad_x = torch.ops.aten.threshold_backward(grad, out, 0.0)
        return grad_x.mul_(scale), None, None, None


def _compiled(x: Tensor) -> bool:
    """Whether the compiled kernels run the fused pair on ``x`` (contiguous fp32 / fp64)."""
    return (x.dtype in (torch.float32, torch.float64) and x.is_contiguous()
            and compiled_kernels(x.device))


def _scalar(like: Tensor, value: float) -> np.floating:
    """``value`` as a numpy scalar of ``like``'s dtype (the torch kernels' arithmetic)."""
    return like.numpy().dtype.type(value)  # type: ignore[no-any-return]


@njit
def _relu_dropout_forward(x: np.ndarray, bits: np.ndarray, threshold: int,
                          scale: np.floating, out: np.ndarray) -> None:  # pragma: no cover
    """``clamp(x * kept, min=0) * scale``, ``kept = bits >= threshold``: the torch steps."""
    zero = scale - scale
    for i in range(x.size):
        t = x[i] if bits[i] >= threshold else x[i] * zero  # 0 * nan stays nan, as in torch
        out[i] = (zero if t < zero else t) * scale


@njit
def _relu_dropout_backward(grad: np.ndarray, out: np.ndarray, scale: np.floating,
                           grad_x: np.ndarray) -> None:  # pragma: no cover - compiled
    """``threshold_backward(grad, out, 0) * scale``: 0 where ``out <= 0``."""
    zero = scale - scale
    for i in range(grad.size):
        grad_x[i] = zero if out[i] <= zero else grad[i] * scale


def _bits(x: Tensor, p: float) -> tuple[Tensor, int]:
    """Random integers of ``x``'s shape and the threshold: keep where ``bits >= threshold``.

    8 random bits decide exactly where ``p`` is a multiple of 1/256 (0.5, 0.25, ...):
    half the draws; 16 bits otherwise.  The bits are uniform on ``[-span/2, span/2)``.
    """
    n = x.numel()
    small = (p * 256).is_integer()
    span, kind, per = (256, torch.int8, 8) if small else (_SPAN, torch.int16, 4)
    bits = torch.randint(-(2**63), 2**63 - 1, ((n + per - 1) // per,), dtype=torch.int64,
                         device=x.device).view(kind)[:n].view(x.shape)
    return bits, round(p * span) - span // 2


def _mask(bits: Tensor, threshold: int, dtype: torch.dtype) -> Tensor:
    """A fresh 0/1 tensor of ``dtype``: 1 where ``bits >= threshold``.

    Made by cheap in-place steps (the shifted integers clamped to {0, 1}) in float32,
    where they are exact (a bool mask costs several times more to apply on a CPU).
    """
    return bits.to(torch.float32).sub_(threshold - 1).clamp_(0.0, 1.0).to(dtype)


def _kept(x: Tensor, p: float) -> Tensor:
    """A fresh ``[*x.shape]`` of ``x``'s dtype: 1 with probability ``1 - p``, else 0."""
    return _mask(*_bits(x, p), x.dtype)


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """``x`` with each element zeroed with probability ``p``, the rest scaled by ``1/(1-p)``.

    Args:
        x: A floating-point tensor.
        p: Drop probability, ``0 <= p < 1`` (``p = 1`` zeroes everything).
        training: Apply it (an identity otherwise, as ``torch.nn.functional.dropout``).
    """
    if not training or p == 0.0 or x.numel() == 0:
        return x
    if p >= 1.0:
        return x * 0.0
    mask = _kept(x, p).mul_(1.0 / (1.0 - p))
    out: Tensor = _Masked.apply(x, mask)  # type: ignore[no-untyped-call]
    return out


def relu_dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """``dropout(relu(x), p, training)`` in one pass each way (the same random draws).

    Args:
        x: A floating-point tensor.
        p: Drop probability, ``0 <= p < 1`` (``p = 1`` zeroes everything).
        training: Apply the dropout (``relu(x)`` otherwise).
    """
    if not training or p == 0.0 or x.numel() == 0:
        return torch.relu(x)
    if p >= 1.0:
        return torch.relu(x) * 0.0
    out: Tensor = _ReluDropped.apply(x, *_bits(x, p), 1.0 / (1.0 - p))  # type: ignore[no-untyped-call]
    return out


def act_dropout(act: nn.Module | None, drop: nn.Module, x: Tensor) -> Tensor:
    """``drop(act(x))``, fused (:func:`relu_dropout`) for a ``ReLU`` and a :class:`Dropout`.

    The order of a PyG ``BasicGNN``'s hidden layers (``act`` then ``dropout``); any other
    pair of modules runs as given.
    """
    if isinstance(act, nn.ReLU) and isinstance(drop, Dropout):
        return relu_dropout(x, drop.p, drop.training)
    h = act(x) if act is not None else x
    out: Tensor = drop(h)
    return out


class Dropout(nn.Dropout):
    """``torch.nn.Dropout`` with the cheaper mask of :func:`dropout` (never in place)."""

    def forward(self, x: Tensor) -> Tensor:
        """Drop elements of ``x`` in training mode."""
        return dropout(x, self.p, self.training)

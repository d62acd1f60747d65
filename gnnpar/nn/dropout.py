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
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

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
    """``relu(x) * kept * scale`` for a 0/1 ``kept`` (overwritten: it becomes the output).

    In place on ``kept``: four cheap passes forward, one allocation, against ``relu``'s
    and the product's two; only the output is kept for the backward, where an element
    passes the gradient (times ``scale``) exactly where the output is positive.
    """

    @staticmethod
    def forward(fctx: torch.autograd.function.FunctionCtx, x: Tensor, kept: Tensor,
                scale: float) -> Tensor:
        out = kept.mul_(x).clamp_(min=0.0).mul_(scale)
        fctx.save_for_backward(out)
        fctx.scale = scale  # type: ignore[attr-defined]
        return out

    @staticmethod
    def backward(fctx: torch.autograd.function.FunctionCtx,
                 grad: Tensor) -> tuple[Tensor | None, None, None]:
        (out,) = fctx.saved_tensors  # type: ignore[attr-defined]
        grad_x = torch.ops.aten.threshold_backward(grad, out, 0.0)
        return grad_x.mul_(fctx.scale), None, None  # type: ignore[attr-defined]


def _kept(x: Tensor, p: float) -> Tensor:
    """A fresh ``[*x.shape]`` of ``x``'s dtype: 1 with probability ``1 - p``, else 0."""
    n = x.numel()
    # 8 random bits decide exactly where p is a multiple of 1/256 (0.5, 0.25, ...): half
    # the draws; 16 bits otherwise.
    small = (p * 256).is_integer()
    span, kind, per = (256, torch.int8, 8) if small else (_SPAN, torch.int16, 4)
    bits = torch.randint(-(2**63), 2**63 - 1, ((n + per - 1) // per,), dtype=torch.int64,
                         device=x.device).view(kind)[:n].view(x.shape)
    # The bits are uniform on [-span/2, span/2): keep where bits >= threshold.  The mask
    # is made by cheap in-place steps (the shifted integers clamped to {0, 1}) in
    # float32, where they are exact (a bool mask costs several times more to apply on a
    # CPU).
    threshold = round(p * span) - span // 2
    return bits.to(torch.float32).sub_(threshold - 1).clamp_(0.0, 1.0).to(x.dtype)


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
    out: Tensor = _ReluDropped.apply(x, _kept(x, p), 1.0 / (1.0 - p))  # type: ignore[no-untyped-call]
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

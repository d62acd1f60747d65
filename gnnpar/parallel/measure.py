"""Measure what a parallel layout costs on this rank: bytes held and bytes communicated.

:class:`CollectiveCounter` is a ``TorchDispatchMode`` that sees every collective torch
issues — FSDP2's all-gathers and reduce-scatters, DTensor's all-reduces, DDP's gradient
all-reduce, the pipeline's sends and receives — and adds its wire bytes to a
:class:`gnnpar.comm.CommStats`, one counter per collective kind.  Wire bytes follow the
ring algorithms that gloo and NCCL use, per rank, for a group of ``g`` ranks:

============== ============================== ================================
collective     bytes sent (= bytes received)  ``S`` is
============== ============================== ================================
all-reduce     ``2 (g - 1) / g * S``          the tensor reduced
all-gather     ``(g - 1) / g * S``            the gathered (output) tensor
reduce-scatter ``(g - 1) / g * S``            the reduced (input) tensor
all-to-all     ``(g - 1) / g * S``            the input tensor
broadcast      ``(g - 1) / g * S``            the tensor broadcast
send / recv    ``S`` sent / ``S`` received    the tensor
============== ============================== ================================

Row counts of the :class:`~gnnpar.comm.CommStats` entries stay 0: these are whole-tensor
collectives.  The counter costs a Python call per operator, so time steps without it.

:func:`tensor_bytes` and friends count the bytes a rank *holds*: the local shard of a
DTensor, not its global size.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import (  # type: ignore[attr-defined]
    _resolve_process_group,  # functional collectives name their group; torch has no public map
)
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode

from gnnpar.comm import CommStats, ring_bytes

_KINDS = {
    "allreduce_": "all_reduce",
    "allreduce_coalesced_": "all_reduce",
    "all_reduce": "all_reduce",
    "all_reduce_coalesced": "all_reduce",
    "_allgather_base_": "all_gather",
    "allgather_": "all_gather",
    "allgather_into_tensor_coalesced_": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "all_gather_into_tensor_coalesced": "all_gather",
    "_reduce_scatter_base_": "reduce_scatter",
    "reduce_scatter_": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "alltoall_base_": "all_to_all",
    "all_to_all_single": "all_to_all",
    "broadcast_": "broadcast",
    "broadcast": "broadcast",
    "send": "send",
    "recv_": "recv",
    "recv_any_source_": "recv",
}


def _tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _tensors(o)]
    return []


def _group_size(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.ScriptObject) and "ProcessGroup" in str(a._type()):
            return dist.ProcessGroup.unbox(a).size()
    names = [a for a in (*args, *kwargs.values()) if isinstance(a, str)]
    if names:  # functional collectives name their group last
        return int(_resolve_process_group(names[-1]).size())  # type: ignore[arg-type]
    return None


class CollectiveCounter(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Count the wire bytes of every collective run inside ``with CollectiveCounter(...)``.

    Args:
        stats: Counters to add to (one entry per collective kind).

    Example:
        >>> stats = CommStats()
        >>> with CollectiveCounter(stats):
        ...     loss = model.step(x, y)
        >>> stats.total_bytes()
    """

    def __init__(self, stats: CommStats) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.stats = stats

    def __torch_dispatch__(  # noqa: D105
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        if func.namespace in ("c10d", "_c10d_functional"):
            kind = _KINDS.get(func._schema.name.split("::")[-1])
            if kind is not None:
                self._record(kind, args, kwargs)
        return func(*args, **kwargs)

    def _record(self, kind: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        tensors = _tensors(args) + _tensors(list(kwargs.values()))
        nbytes = [t.numel() * t.element_size() for t in tensors]
        if kind == "send":
            self.stats.record(kind, 0, 0, sum(nbytes), 0)
            return
        if kind == "recv":
            self.stats.record(kind, 0, 0, 0, sum(nbytes))
            return
        g = _group_size(args, kwargs) or 1
        if kind == "all_gather" and len(tensors) == 1:  # functional form: input only
            size = nbytes[0] * g
        elif kind in ("all_gather", "reduce_scatter"):  # the larger of input and output
            size = max(nbytes)
        else:
            size = nbytes[0]
        wire = round(ring_bytes(size, g, kind))
        self.stats.record(kind, 0, 0, wire, wire)


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes of the part of ``t`` this rank holds (the local shard of a DTensor)."""
    local = t.to_local() if isinstance(t, DTensor) else t
    return local.numel() * local.element_size()


def parameter_bytes(params: Iterable[torch.Tensor]) -> int:
    """Bytes of this rank's shards of ``params``."""
    return sum(tensor_bytes(p) for p in params)


def gradient_bytes(params: Iterable[torch.Tensor]) -> int:
    """Bytes of this rank's shards of the gradients of ``params`` (0 where none)."""
    return sum(tensor_bytes(p.grad) for p in params if p.grad is not None)


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of this rank's per-element optimiser state (Adam's two moments, momentum).

    Zero-dimensional entries (step counters) are left out.
    """
    return sum(
        tensor_bytes(v)
        for state in optimizer.state.values()
        for v in state.values()
        if isinstance(v, torch.Tensor) and v.dim() > 0
    )


def is_parameter(t: torch.Tensor) -> bool:
    """Whether ``t`` is a parameter (a leaf that requires grad) or a view of one."""
    base = t._base if t._base is not None else t
    return base.is_leaf and base.requires_grad
